//! Two login nodes as network namespaces, for the network clients' tests: namespaces of
//! the test's own (unique names, made and removed by the test), joined to each other by
//! one veth pair on 192.0.2.0/24 (TEST-NET-1) and to nothing else. No address or link is
//! added to the host's own namespace (whose network may itself be numbered from
//! 192.0.2.0/24). A program is run on a node with `nsenter --net`; Unix sockets (the
//! daemon's, munged's) are files and reached from either node, as on a cluster's shared
//! munged key and state. Needs root, `ip` and `nsenter`.

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// One login node: a namespace and its address on the link.
pub struct Node {
    pub ns: String,
    pub addr: String,
}

/// Two nodes, removed (namespaces, and with them the link) when dropped.
pub struct Nodes {
    pub nodes: Vec<Node>,
}

fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("the ip command");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Nodes {
    /// login1 (192.0.2.201) and login2 (192.0.2.202), linked.
    pub fn two() -> Nodes {
        let tag = format!(
            "{}x{}",
            std::process::id() % 100_000,
            NEXT.fetch_add(1, Ordering::SeqCst)
        );
        let mut nodes = Nodes { nodes: Vec::new() };
        let ifs = [format!("s{tag}a"), format!("s{tag}b")];
        for (k, i) in ifs.iter().enumerate() {
            assert!(i.len() <= 15, "{i}");
            let ns = format!("ssv{tag}n{k}");
            ip(&["netns", "add", &ns]);
            nodes.nodes.push(Node {
                ns,
                addr: format!("192.0.2.{}", 201 + k),
            });
        }
        // Made inside the first namespace, the peer moved to the second: never in the
        // host's.
        let (a, b) = (&nodes.nodes[0], &nodes.nodes[1]);
        ip(&[
            "-n", &a.ns, "link", "add", &ifs[0], "type", "veth", "peer", "name", &ifs[1],
        ]);
        ip(&["-n", &a.ns, "link", "set", &ifs[1], "netns", &b.ns]);
        for (node, i) in nodes.nodes.iter().zip(&ifs) {
            ip(&[
                "-n",
                &node.ns,
                "addr",
                "add",
                &format!("{}/24", node.addr),
                "dev",
                i,
            ]);
            ip(&["-n", &node.ns, "link", "set", i, "up"]);
            ip(&["-n", &node.ns, "link", "set", "lo", "up"]);
        }
        // A veth carries traffic once both ends are up with a carrier.
        let up = |ns: &str, i: &str| {
            let out = Command::new("ip")
                .args(["-n", ns, "-o", "link", "show", "dev", i])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.contains("state UP") && text.contains("LOWER_UP")
        };
        super::wait_for_every(
            "the nodes' link up at both ends",
            std::time::Duration::from_secs(10),
            std::time::Duration::from_millis(20),
            || nodes.nodes.iter().zip(&ifs).all(|(n, i)| up(&n.ns, i)),
        );
        nodes
    }

    /// `nsenter --net=<node k> [runuser -u user --]`: a command prefix that runs a program
    /// on node `k` (as `user`; root: as is). Append the program and its arguments.
    pub fn prefix(&self, k: usize, user: &str) -> Vec<String> {
        let mut p = vec![
            "nsenter".to_string(),
            format!("--net=/run/netns/{}", self.nodes[k].ns),
            "--".to_string(),
        ];
        if user != "root" {
            p.extend(["runuser", "-u", user, "--"].map(String::from));
        }
        p
    }

    /// A command running on node `k` as `user` in `cwd` (append program and arguments).
    pub fn command(&self, k: usize, user: &str, cwd: &std::path::Path) -> Command {
        let p = self.prefix(k, user);
        let mut cmd = Command::new(&p[0]);
        cmd.args(&p[1..]).current_dir(cwd);
        cmd
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for n in &self.nodes {
            let _ = Command::new("ip").args(["netns", "del", &n.ns]).output();
        }
    }
}
