//! The time from a continuing job's TIMEOUT to its next attempt's sbatch (issue 34,
//! docs/continuation.md), as the daemon makes it: the release `slurm-supervisord` against
//! the project's fake Slurm (tests/fake-slurm/fake_slurm.py), which ends the job on demand
//! and logs each sbatch with its time. Real Slurm adds its own accounting delay (sacct
//! shows the ending a second or two after the job stops) and the scheduling of the new job.
//!
//! `cargo bench --bench continuation` measures `CONTINUATION_SAMPLES` (default 6)
//! continuations each with the default poll interval (30 s) and with 5 s, at the default
//! `[continuation] backoff` (0 s). The ending is made at a random moment of the poll cycle,
//! as a real one comes. Run without `--bench` it only says how to run it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("continuation benchmark: run `cargo bench --bench continuation` (a few minutes)");
        return;
    }
    let samples: usize = std::env::var("CONTINUATION_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let Some((daemon, ctl)) = common::binaries() else {
        panic!("slurm-supervisord not found next to the bench: cargo build --release --bins");
    };
    for (poll, secs) in [("30s", 30), ("5s", 5)] {
        let mut times = Vec::new();
        let setup = Setup::new(&daemon, poll);
        for i in 0..samples {
            // A moment of the poll cycle at random (an ending does not wait for the poll).
            let skew = Duration::from_millis(rand::random::<u64>() % (secs * 1000));
            times.push(setup.one_continuation(&ctl, i, skew));
        }
        times.sort();
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        println!(
            "poll_interval {poll:>3}: TIMEOUT -> next sbatch: mean {}, min {}, max {} ({} samples)",
            common::secs(mean),
            common::secs(times[0]),
            common::secs(*times.last().unwrap()),
            times.len()
        );
    }
}

struct Setup {
    dir: PathBuf,
    bin: PathBuf,
    config: PathBuf,
    child: Child,
}

impl Setup {
    fn new(daemon: &Path, poll: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap().keep();
        let bin = dir.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fake-slurm/fake_slurm.py");
        let fake = bin.join("fake_slurm.py");
        std::fs::copy(&src, &fake).unwrap();
        for name in ["sbatch", "squeue", "sacct", "scancel", "sinfo", "scontrol"] {
            std::os::unix::fs::symlink(&fake, bin.join(name)).unwrap();
        }
        let config = dir.join("supervisor.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = {:?}\npoll_interval = {poll:?}\n[slurm]\nbin_dir = {:?}\n\
                 [continuation]\nmin_attempt = \"1s\"\n",
                dir.join("state").display().to_string(),
                bin.display().to_string()
            ),
        )
        .unwrap();
        let child = Command::new(daemon)
            .arg("--config")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        Setup {
            dir,
            bin,
            config,
            child,
        }
    }

    fn sbatch_calls(&self) -> usize {
        std::fs::read_to_string(self.bin.join("sbatch.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Submits a continuing job, ends it with TIMEOUT after `skew`, and times the sbatch of
    /// its continuation.
    fn one_continuation(&self, ctl: &Path, i: usize, skew: Duration) -> Duration {
        let work = self.dir.join(format!("w{i}"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(
            work.join("job.sh"),
            "#!/bin/sh\n#SSV --continue --progress=ckpt\n",
        )
        .unwrap();
        let before = self.sbatch_calls();
        let mut out = None;
        for _ in 0..100 {
            let o = Command::new(ctl)
                .arg("--config")
                .arg(&self.config)
                .args(["submit", "--", "--time=1", "job.sh"])
                .current_dir(&work)
                .output()
                .unwrap();
            if o.status.success() {
                out = Some(o);
                break;
            }
            // The daemon is still starting.
            std::thread::sleep(Duration::from_millis(200));
        }
        let job = String::from_utf8(out.expect("submit").stdout).unwrap();
        std::thread::sleep(skew);
        std::fs::write(work.join("ckpt"), format!("{i}\n")).unwrap();
        // Past the second of the submission (all the daemon knows of the job's start).
        std::fs::File::options()
            .write(true)
            .open(work.join("ckpt"))
            .unwrap()
            .set_modified(std::time::SystemTime::now() + Duration::from_secs(2))
            .unwrap();
        let ended = Instant::now();
        let status = Command::new(self.bin.join("fake_slurm.py"))
            .args(["ctl", "finish", job.trim(), "TIMEOUT", "0:0"])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(120);
        while self.sbatch_calls() < before + 2 {
            assert!(Instant::now() < deadline, "no continuation within 120 s");
            std::thread::sleep(Duration::from_millis(20));
        }
        ended.elapsed()
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
