//! The fake Slurm of tests/fake-slurm/fake_slurm.py, wired to a daemon.

use super::{scratch_root, Daemon};
use serde_json::Value;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Fake {
    pub bin: PathBuf,
}

impl Fake {
    pub fn new(root: &std::path::Path) -> Fake {
        let bin = root.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake-slurm/fake_slurm.py");
        let me = bin.join("fake_slurm.py");
        super::copy_executable(&src, &me);
        for name in ["sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol"] {
            std::os::unix::fs::symlink(&me, bin.join(name)).unwrap();
        }
        Fake { bin }
    }

    pub fn ctl(&self, args: &[&str]) -> String {
        let out = Command::new(self.bin.join("fake_slurm.py"))
            .arg("ctl")
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fake ctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A gate for `SSV_FAKE_SBATCH_GATE`: an sbatch given it waits, once it has logged its
    /// call, until [`Fake::open`] opens it (a fact to wait on, not a sleep).
    pub fn gate(&self, name: &str) -> PathBuf {
        self.bin.join(format!("gate-{name}"))
    }

    /// Opens a gate: the sbatch calls waiting there go on.
    pub fn open(&self, gate: &std::path::Path) {
        std::fs::write(gate, b"").unwrap();
    }

    /// Every sbatch call made, in order (argv and cwd).
    pub fn sbatch_calls(&self) -> Vec<Value> {
        std::fs::read_to_string(self.bin.join("sbatch.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// How many times `cmd` was called (`calls.log`): a count of cycles that asked.
    pub fn calls(&self, cmd: &str) -> usize {
        std::fs::read_to_string(self.bin.join("calls.log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|c| c["cmd"] == cmd)
            .count()
    }

    /// The fake's jobs (id -> record).
    pub fn jobs(&self) -> serde_json::Map<String, Value> {
        let v: Value = serde_json::from_str(&self.ctl(&["dump"])).unwrap();
        v["jobs"].as_object().cloned().unwrap_or_default()
    }
}

/// A daemon wired to a fake Slurm (`extra` is more config, `env` more environment).
/// Its sbatch times out after 10 s and its other Slurm commands after 5 s (what a 12 s
/// lease allows, which the cluster-mode tests use): a test that wants a timeout makes the
/// fake hang, and every other call of the fake (a Python program) finishes well within
/// that, however busy the machine (with 3 s, a fake sbatch given two seconds' work was
/// once killed in a busy CI run).
pub fn start(extra: &str, env: &[(&str, &str)]) -> (Daemon, Fake) {
    let root = tempfile::Builder::new()
        .prefix("ssv-fake-")
        .tempdir_in(scratch_root())
        .unwrap()
        .keep();
    let fake = Fake::new(&root);
    let cfg = format!(
        "[slurm]\nbin_dir = {:?}\ncommand_timeout = \"5s\"\nsbatch_timeout = \"10s\"\n{extra}",
        fake.bin.display().to_string()
    );
    (Daemon::start_with_env(&cfg, env), fake)
}

pub fn wait_until(what: &str, within: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}
