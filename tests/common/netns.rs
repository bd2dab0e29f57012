//! Two login nodes as network namespaces, for the network clients' and cluster mode's
//! tests: namespaces of the test's own (unique names, made and removed by the test), joined
//! to each other by one veth pair on 192.0.2.200/30 (TEST-NET-1, 192.0.2.201 and .202).
//! No address or link is added to the host's own namespace (whose network may itself be
//! numbered from 192.0.2.0/24). A program is run on a node with `nsenter --net`; Unix
//! sockets (the daemon's, munged's) are files and reached from either node, as on a
//! cluster's shared munged key and state. Needs root, `ip` and `nsenter`.
//!
//! [`Nodes::two_with_services`] adds the cluster's services: a third namespace, the
//! services' "switch", linked to each node by a veth pair of its own (192.0.2.208/30:
//! node 1 is .209, the services .210; 192.0.2.212/30: node 2 is .213, the services .214).
//! Each service port of the host (slurmctld's, slurmdbd's, a test's MariaDB) is relayed by
//! `socat`: on each node, 127.0.0.1:PORT (where Slurm's clients look, as on the host) to
//! the services' address; there, to a Unix socket in a folder of the test's; on the host,
//! from that socket to 127.0.0.1:PORT. So every packet a node sends to its services
//! crosses its own link, and [`Nodes::cut`] (the node's links down) cuts the node off from
//! Slurm, the database and the other node while it keeps running. Needs `socat` too.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// One login node: a namespace and its address on the link.
pub struct Node {
    pub ns: String,
    pub addr: String,
}

/// Two nodes, removed (namespaces, and with them the links; relays killed) when dropped.
pub struct Nodes {
    pub nodes: Vec<Node>,
    /// The services' namespace, if any, and each node's interfaces (node-to-node first).
    services: Option<Services>,
    links: Vec<Vec<String>>,
}

/// The services' namespace and the relays.
struct Services {
    ns: String,
    relays: Vec<Relay>,
    _dir: tempfile::TempDir,
}

/// One socat relay: on node `node` (None: the host's or the services' side) for `port`.
struct Relay {
    node: Option<usize>,
    port: u16,
    child: Child,
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
        let mut nodes = Nodes {
            nodes: Vec::new(),
            services: None,
            links: Vec::new(),
        };
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
                &format!("{}/30", node.addr),
                "dev",
                i,
            ]);
            ip(&["-n", &node.ns, "link", "set", i, "up"]);
            ip(&["-n", &node.ns, "link", "set", "lo", "up"]);
        }
        nodes.links = ifs.iter().map(|i| vec![i.clone()]).collect();
        wait_up(
            "the nodes' link up at both ends",
            nodes
                .nodes
                .iter()
                .zip(&ifs)
                .map(|(n, i)| (n.ns.as_str(), i.as_str())),
        );
        nodes
    }

    /// [`Nodes::two`] and the cluster's services (module doc): the host's TCP `ports` on
    /// 127.0.0.1 reached from each node at its own 127.0.0.1 through its link.
    pub fn two_with_services(ports: &[u16]) -> Nodes {
        let mut nodes = Nodes::two();
        let tag = nodes.nodes[0]
            .ns
            .trim_start_matches("ssv")
            .trim_end_matches("n0")
            .to_string();
        let ns = format!("ssv{tag}sv");
        ip(&["netns", "add", &ns]);
        let dir = tempfile::Builder::new()
            .prefix("ssv-relays-")
            .tempdir_in(super::scratch_root())
            .unwrap();
        nodes.services = Some(Services {
            ns: ns.clone(),
            relays: Vec::new(),
            _dir: dir,
        });
        ip(&["-n", &ns, "link", "set", "lo", "up"]);
        let mut ends = Vec::new();
        for k in 0..2 {
            let (node_if, sv_if) = (format!("s{tag}{k}g"), format!("s{tag}g{k}"));
            assert!(
                node_if.len() <= 15 && sv_if.len() <= 15,
                "{node_if} {sv_if}"
            );
            let node_ns = nodes.nodes[k].ns.clone();
            ip(&[
                "-n", &node_ns, "link", "add", &node_if, "type", "veth", "peer", "name", &sv_if,
            ]);
            ip(&["-n", &node_ns, "link", "set", &sv_if, "netns", &ns]);
            let base = 208 + 4 * k;
            ip(&[
                "-n",
                &node_ns,
                "addr",
                "add",
                &format!("192.0.2.{}/30", base + 1),
                "dev",
                &node_if,
            ]);
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("192.0.2.{}/30", base + 2),
                "dev",
                &sv_if,
            ]);
            ip(&["-n", &node_ns, "link", "set", &node_if, "up"]);
            ip(&["-n", &ns, "link", "set", &sv_if, "up"]);
            nodes.links[k].push(node_if.clone());
            ends.push((node_ns, node_if));
            ends.push((ns.clone(), sv_if));
        }
        wait_up(
            "the services' links up at both ends",
            ends.iter().map(|(n, i)| (n.as_str(), i.as_str())),
        );
        for &port in ports {
            let sock = {
                let s = nodes.services.as_ref().unwrap();
                s._dir.path().join(format!("{port}.sock"))
            };
            // Host: the socket to the service.
            nodes.relay(
                None,
                port,
                &[
                    &format!("UNIX-LISTEN:{},fork,mode=600", sock.display()),
                    &format!("TCP:127.0.0.1:{port}"),
                ],
            );
            super::wait_for("the host's relay socket", Duration::from_secs(10), || {
                sock.exists()
            });
            // The services: their addresses to the socket.
            nodes.relay(
                Some((&ns, None)),
                port,
                &[
                    &format!("TCP-LISTEN:{port},fork,reuseaddr"),
                    &format!("UNIX-CONNECT:{}", sock.display()),
                ],
            );
            listening(&ns, port);
            // Each node: its 127.0.0.1 to the services, over its link.
            for k in 0..2 {
                let node_ns = nodes.nodes[k].ns.clone();
                nodes.relay(
                    Some((&node_ns, Some(k))),
                    port,
                    &[
                        &format!("TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr"),
                        &format!("TCP:{}:{port},connect-timeout=5", nodes.services_addr(k)),
                    ],
                );
                listening(&node_ns, port);
            }
        }
        nodes
    }

    /// Where node `k` reaches the services (their end of its link).
    pub fn services_addr(&self, k: usize) -> String {
        format!("192.0.2.{}", 208 + 4 * k + 2)
    }

    /// A socat relay for `port` with `args`, in namespace `ns` (None: the host's; with
    /// the node it is on, if any), killed (with the processes it forked) when the nodes
    /// are dropped.
    fn relay(&mut self, ns: Option<(&str, Option<usize>)>, port: u16, args: &[&str]) {
        let node = ns.and_then(|(_, k)| k);
        let mut cmd = match ns.map(|(ns, _)| ns) {
            Some(ns) => {
                let mut c = Command::new("nsenter");
                c.arg(format!("--net=/run/netns/{ns}"))
                    .arg("--")
                    .arg("socat");
                c
            }
            None => Command::new("socat"),
        };
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0);
        let child = cmd
            .spawn()
            .expect("socat (Debian's socat; scripts/test installs it)");
        self.services
            .as_mut()
            .unwrap()
            .relays
            .push(Relay { node, port, child });
    }

    /// Node `k` stops hearing from `port`'s service, and it from the node, while its link
    /// stays up: the node's relay for it (and every connection through it) is stopped
    /// (SIGSTOP), so what was sent waits, unanswered, as in a partition.
    pub fn pause_port(&self, k: usize, port: u16) {
        self.signal_relay(k, port, nix::sys::signal::Signal::SIGSTOP);
    }

    /// Undoes [`Nodes::pause_port`]: what waited is delivered.
    pub fn resume_port(&self, k: usize, port: u16) {
        self.signal_relay(k, port, nix::sys::signal::Signal::SIGCONT);
    }

    fn signal_relay(&self, k: usize, port: u16, signal: nix::sys::signal::Signal) {
        let s = self.services.as_ref().expect("nodes with services");
        let r = s
            .relays
            .iter()
            .find(|r| r.node == Some(k) && r.port == port)
            .expect("a relay of that node for that port");
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(r.child.id() as i32), signal)
            .expect("signal the relay's process group");
    }

    /// Node `k` cut off: its links down, while everything on it keeps running.
    pub fn cut(&self, k: usize) {
        for i in &self.links[k] {
            ip(&["-n", &self.nodes[k].ns, "link", "set", i, "down"]);
        }
    }

    /// Node `k`'s links up again (waits for the carrier at both ends).
    pub fn restore(&self, k: usize) {
        for i in &self.links[k] {
            ip(&["-n", &self.nodes[k].ns, "link", "set", i, "up"]);
        }
        wait_up(
            "node's links up again",
            self.links[k]
                .iter()
                .map(|i| (self.nodes[k].ns.as_str(), i.as_str())),
        );
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

/// Waits until each (namespace, interface) is up with a carrier: a veth carries traffic
/// once both its ends are.
fn wait_up<'a>(what: &str, ends: impl Iterator<Item = (&'a str, &'a str)>) {
    let ends: Vec<_> = ends.collect();
    let up = |ns: &str, i: &str| {
        let out = Command::new("ip")
            .args(["-n", ns, "-o", "link", "show", "dev", i])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("state UP") && text.contains("LOWER_UP")
    };
    super::wait_for_every(
        what,
        Duration::from_secs(10),
        Duration::from_millis(20),
        || ends.iter().all(|(ns, i)| up(ns, i)),
    );
}

/// Waits until something listens on TCP `port` in namespace `ns`.
fn listening(ns: &str, port: u16) {
    super::wait_for_every(
        &format!("a relay listening on port {port} in {ns}"),
        Duration::from_secs(10),
        Duration::from_millis(20),
        || {
            let out = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{ns}"))
                .args(["--", "ss", "-Hltn", &format!("sport = :{port}")])
                .output()
                .unwrap();
            !out.stdout.is_empty()
        },
    );
}

impl Drop for Nodes {
    fn drop(&mut self) {
        if let Some(s) = &mut self.services {
            for r in &mut s.relays {
                // The relay's process group: it and the processes it forked.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(r.child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                let _ = r.child.wait();
            }
            let _ = Command::new("ip").args(["netns", "del", &s.ns]).output();
        }
        for n in &self.nodes {
            let _ = Command::new("ip").args(["netns", "del", &n.ns]).output();
        }
    }
}
