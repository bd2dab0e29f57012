//! The daemon binary's body: arguments, logging, signals, then `daemon::run`.

use crate::config::Config;
use crate::daemon::{self, Event};
use crate::slurm::cli::SlurmCli;
use clap::Parser;
use std::path::PathBuf;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

#[derive(Debug, Parser)]
#[command(
    name = "slurm-supervisord",
    version,
    about = "Keeps Slurm batch jobs alive through failures that are not their fault"
)]
pub struct Args {
    /// The TOML config file; default: built-in defaults.
    #[arg(long, env = "SLURM_SUPERVISOR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the config and exit (0 ok, 78 bad).
    #[arg(long)]
    pub validate: bool,
    /// Put the plain-sbatch notes on a tmpfs of their own, unless they already are apart
    /// from the state directory's filesystem, and exit (as root, before the daemon
    /// starts: the package's unit runs it; docs/plain-sbatch.md).
    #[arg(long)]
    pub mount_notes: bool,
    /// Internal: print what a continuing job's progress path looks like, as JSON, and exit
    /// (the daemon runs this as the job's owner; docs/continuation.md).
    #[arg(long, hide = true, value_name = "PATH")]
    pub read_progress: Option<PathBuf>,
}

/// Runs the daemon; returns the exit code.
pub fn main(args: Args) -> i32 {
    if let Some(path) = &args.read_progress {
        // Before the config is read: the job's owner may not be able to read it.
        return crate::daemon::evidence::read_progress_main(path);
    }
    crate::plumbing::logging::init();
    let config = match &args.config {
        Some(p) => match Config::load(p) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("slurm-supervisord: {e}");
                return crate::ctl::EXIT_CONFIG;
            }
        },
        None => Config::defaults(),
    };
    if args.validate {
        println!(
            "{}: ok ({} rules)",
            args.config
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "built-in defaults".into()),
            config.rules.len()
        );
        return 0;
    }
    if args.mount_notes {
        return mount_notes(&config);
    }
    detach_from_terminal();
    // The daemon's loop runs on this (main) thread, on a runtime of its own; the control
    // socket's tasks (and the network's, the metrics', the agent's) run on two worker
    // threads beside it, so reading and answering requests never waits for the loop's
    // work (a poll cycle, a store write). The loop's own runtime drives the pipes and exits
    // of the Slurm commands it starts, so their ends wake this thread itself, not a worker
    // that would then wake it (docs/benchmarks.md, issue 32, session 20). Slurm commands
    // are started from the loop, so PDEATHSIG ties them to the main thread, which lives as
    // long as the process.
    let runtimes = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .and_then(|beside| {
            let own = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            Ok((beside, own))
        });
    let (beside, rt) = match runtimes {
        Ok(r) => r,
        Err(e) => {
            eprintln!("slurm-supervisord: cannot start the runtime: {e}");
            return 70;
        }
    };
    let beside_handle = beside.handle().clone();
    rt.block_on(async move {
        let (tx, rx) = mpsc::channel(8);
        // The handlers are installed here, before the socket exists: `signal` installs
        // one when it is called, while a task spawned on this runtime first runs only when
        // the loop first gives way, after the socket answers and the first cycle ran.
        // Until then a SIGTERM or SIGHUP would have ended the daemon uncleanly (the
        // default action); a signal that comes before the task runs is kept for it.
        // Test: `tests/fake_slurm.rs` `a_sigterm_as_soon_as_the_socket_exists_stops_cleanly`.
        let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::hangup()),
        ) else {
            eprintln!("slurm-supervisord: cannot install the signal handlers");
            return 70;
        };
        let signals = async move {
            loop {
                let ev = tokio::select! {
                    _ = term.recv() => Event::Shutdown,
                    _ = int.recv() => Event::Shutdown,
                    _ = hup.recv() => Event::Reload,
                };
                if tx.send(ev).await.is_err() {
                    return;
                }
            }
        };
        tokio::spawn(signals);
        // Every Slurm command the daemon runs is counted for its metrics.
        let slurm = SlurmCli::new(&config.slurm).observed_by(crate::metrics::slurm_command);
        match daemon::run(config, slurm, rx, beside_handle).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::error!("{e}");
                eprintln!("slurm-supervisord: {e}");
                1
            }
        }
    })
}

/// `--mount-notes`: 0 when the notes are apart from the state directory's filesystem
/// (now or already) or plain sbatch is off, 1 when they could not be put there.
fn mount_notes(config: &Config) -> i32 {
    use crate::daemon::plain::{mount, Spool};
    if !config.plain_sbatch.enabled {
        println!("plain sbatch is off ([plain_sbatch] enabled): no notes folder to mount");
        return 0;
    }
    if !nix::unistd::geteuid().is_root() {
        println!("not root: a per-user daemon's notes are its own user's, on their own filesystem; nothing to mount");
        return 0;
    }
    // The state directory as the daemon makes it (the unit's StateDirectory= makes the
    // package's; one configured elsewhere may not exist yet at the first start).
    if let Err(e) = crate::daemon::prepare_state_dir(config) {
        eprintln!("slurm-supervisord: {e}");
        return 1;
    }
    let spool = Spool::of(config);
    match mount::mount_notes(&spool, &config.state_dir) {
        Ok(mount::Mounted::Apart) => {
            println!(
                "{}: already on a filesystem of its own",
                spool.notes().display()
            );
            0
        }
        Ok(mount::Mounted::Now { carried, left }) => {
            println!(
                "{}: a tmpfs of its own ({}), {carried} waiting notes carried over{}",
                spool.notes().display(),
                mount::OPTIONS,
                if left > 0 {
                    format!(", {left} not (logged)")
                } else {
                    String::new()
                }
            );
            0
        }
        Err(e) => {
            eprintln!("slurm-supervisord: {e}");
            1
        }
    }
}

/// The daemon never owns a terminal: a terminal it owned could stop it (^C, or SIGHUP
/// when it closes) at the will of whoever holds the other end. A new session has no
/// controlling terminal; where one cannot be made (the daemon already leads a process
/// group, as a foreground job does), it leads no session, and only a session leader can
/// acquire a terminal. Files opened for users are opened with `O_NOCTTY` besides.
fn detach_from_terminal() {
    // Under systemd the daemon already leads a session without a terminal, and setsid
    // fails harmlessly.
    let _ = nix::unistd::setsid();
}
