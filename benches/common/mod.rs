//! What the benches share: the submission they store, where they build the store, the
//! binaries they drive, and how they print a duration.

use slurm_supervisor::store::NewSubmission;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A submission as `supervisorctl submit` records it, with a realistic environment and
/// script (the store keeps both so that a retry can be rebuilt). Its owner is the user
/// who runs the bench, who submits in (6): the submitter's own chains are the ones open,
/// as in issue 32's measurement (the per-user limits read what that user has open).
#[allow(dead_code)] // not continuation
pub fn submission(i: usize) -> NewSubmission {
    let mut env: Vec<(String, String)> = [
        ("HOME", "/home/alice"),
        ("USER", "alice"),
        ("LOGNAME", "alice"),
        ("SHELL", "/bin/bash"),
        ("LANG", "en_US.UTF-8"),
        ("TERM", "xterm-256color"),
        ("PWD", "/home/alice/project"),
        (
            "MODULEPATH",
            "/etc/modulefiles:/usr/share/modulefiles:/opt/modulefiles",
        ),
        ("LOADEDMODULES", "gcc/12.2:openmpi/4.1.5:python/3.11"),
        ("CONDA_PREFIX", "/home/alice/miniconda3/envs/train"),
        ("OMP_NUM_THREADS", "8"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    env.push((
        "PATH".into(),
        "/home/alice/miniconda3/envs/train/bin:/opt/openmpi/4.1.5/bin:/opt/gcc/12.2/bin:/usr/local/bin:/usr/bin:/bin".into(),
    ));
    env.push((
        "LD_LIBRARY_PATH".into(),
        "/opt/openmpi/4.1.5/lib:/opt/gcc/12.2/lib64:/home/alice/miniconda3/envs/train/lib".into(),
    ));
    NewSubmission {
        owner_uid: nix::unistd::getuid().as_raw(),
        user: "alice".into(),
        argv: vec![
            "--job-name".into(),
            format!("train-{i}"),
            "--mem=16G".into(),
            "--time=04:00:00".into(),
            "-p".into(),
            "gpu".into(),
            "--gres=gpu:1".into(),
            "train.sh".into(),
            format!("--seed={i}"),
        ],
        cwd: "/home/alice/project".into(),
        env,
        script_name: Some("train.sh".into()),
        script: Some(
            b"#!/bin/bash\n#SBATCH --output=logs/%x-%j.out\n#SBATCH --error=logs/%x-%j.err\n\
              #SBATCH --cpus-per-task=8\nmodule load gcc/12.2 openmpi/4.1.5\n\
              source activate train\nsrun python train.py --config configs/base.yaml \"$@\"\n"
                .to_vec(),
        ),
        max_retries: 5,
        restartable: false,
        array_tasks: None,
        continuation: None,
    }
}

/// Where a bench builds its store: `var` if set, else tmpfs when there is one, else the
/// temp dir.
#[allow(dead_code)] // not continuation
pub fn build_dir(var: &str) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    let shm = Path::new("/dev/shm");
    let writable = shm.is_dir()
        && tempfile::Builder::new()
            .prefix("ssv-probe")
            .tempfile_in(shm)
            .is_ok();
    if writable {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    }
}

/// The daemon and supervisorctl cargo built next to the bench (`SLURM_SUPERVISORD`,
/// `SUPERVISORCTL` override them).
pub fn binaries() -> Option<(PathBuf, PathBuf)> {
    let dir = std::env::current_exe()
        .ok()?
        .parent()? // deps
        .parent()? // release or debug
        .to_path_buf();
    let find = |var: &str, name: &str| {
        std::env::var_os(var)
            .map(PathBuf::from)
            .or_else(|| Some(dir.join(name)))
            .filter(|p| p.is_file())
    };
    Some((
        find("SLURM_SUPERVISORD", "slurm-supervisord")?,
        find("SUPERVISORCTL", "supervisorctl")?,
    ))
}

pub fn secs(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.2} ms", d.as_secs_f64() * 1e3)
    } else if d < Duration::from_secs(10) {
        format!("{:.0} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// (own, reaped children's) CPU time, user plus system.
#[allow(dead_code)] // burst and controller; not startup
pub fn cpu(pid: u32) -> (Duration, Duration) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<u64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |a: usize, b: usize| {
        Duration::from_secs_f64((f.get(a).unwrap_or(&0) + f.get(b).unwrap_or(&0)) as f64 / hz)
    };
    (ticks(11, 12), ticks(13, 14))
}

/// (VmRSS, VmHWM) in bytes.
#[allow(dead_code)] // burst and controller; not startup
pub fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Waits until `f` holds, looking every `every`; panics naming `what` after `within` (as
/// `tests/common`'s, for `tests/mariadb/mod.rs`, which `benches/burst.rs` includes).
#[allow(dead_code)] // burst only
pub fn wait_for_every(what: &str, within: Duration, every: Duration, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !f() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(every);
    }
}
