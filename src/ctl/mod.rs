//! `supervisorctl`: the user's and the agent's side of the control socket.
//!
//! Exit codes (documented in the README): 0 ok; 1 the thing asked about is not ok (sbatch
//! refused, or the chain asked about failed); 2 usage; 3 unknown id; 4 not allowed in the
//! chain's state; 70 internal error; 75 Slurm or the daemon unavailable, try again;
//! 77 not your chain; 78 bad config.

pub mod render;
pub mod wait;

use crate::client;
use crate::config::ClientConfig;
use crate::domain::model::ChainState;
use crate::protocol::views::{
    ChainRow, HistoryAnswer, PendingChain, RecoverDryRun, StatsAnswer, SubmitAnswer,
};
use crate::protocol::{
    decode, ErrorKind, RecoverRequest, Request, Resolution, ResolveAction, Response, SubmitRequest,
    UnexpectedAnswer,
};
use clap::builder::PossibleValue;
use clap::{Parser, Subcommand, ValueEnum};
use serde_json::Value;
use std::io::Read;
use std::path::{Path, PathBuf};

pub const EXIT_CONFIG: i32 = 78;

#[derive(Debug, Parser)]
#[command(
    name = "supervisorctl",
    version,
    about = "Submit and inspect jobs supervised by slurm-supervisord"
)]
pub struct Cli {
    /// The config file (the same one the daemon uses); default: the site's
    /// /etc/slurm-supervisor/supervisor.toml if it exists, else built-in defaults (a
    /// per-user daemon's).
    #[arg(long, global = true, env = "SLURM_SUPERVISOR_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

/// `--action` takes the protocol's own action names. Written out rather than derived so
/// that the variants' doc comments, which are written for agents (they are the MCP
/// schema's descriptions), stay out of `--help`.
impl ValueEnum for ResolveAction {
    fn value_variants<'a>() -> &'a [Self] {
        &ResolveAction::ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.as_str()))
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Submit through sbatch under supervision; prints only the Slurm job id.
    Submit {
        /// Cap on automatic resubmissions of this work (default: the config's retry.max_retries).
        #[arg(long)]
        max_retries: Option<u32>,
        /// Running the script again is safe even after some of its srun steps completed:
        /// such a failure is retried automatically instead of waiting for a decision
        /// (default: the config's retry.restartable).
        #[arg(long)]
        restartable: bool,
        /// The job continues from its own checkpoints: at its time limit (or a preemption
        /// Slurm did not requeue) it is submitted again with the same resources, as long as
        /// it makes progress. It gets `--signal=B:USR1@<continuation.signal_grace>` unless
        /// it sets its own `--signal` (docs/continuation.md). A script's `#SSV --continue`
        /// line says the same.
        #[arg(long = "continue")]
        continue_: bool,
        /// With --continue: a file or folder (from the job's working directory) whose change
        /// during an attempt is the evidence of progress. Implies --continue.
        #[arg(long, value_name = "PATH")]
        progress: Option<String>,
        /// With --continue: exit codes (e.g. 85 or 85,86) with which the job asks to be
        /// continued. Implies --continue.
        #[arg(long, value_name = "CODES")]
        requeue_exit: Option<String>,
        /// sbatch options, then the script and its arguments (after `--`). Any bytes but
        /// NUL are carried exactly, as sbatch takes them.
        #[arg(last = true, required = true, allow_hyphen_values = true, value_parser = clap::value_parser!(std::ffi::OsString))]
        sbatch: Vec<std::ffi::OsString>,
    },
    /// Supervise jobs submitted with plain sbatch.
    Adopt {
        #[arg(required = true)]
        job_ids: Vec<String>,
    },
    /// Have your plain `sbatch` submissions supervised from now on (docs/plain-sbatch.md).
    OptIn,
    /// Stop having your plain `sbatch` submissions supervised (those supervised already stay so).
    OptOut,
    /// One row per chain.
    Status {
        #[arg(long)]
        json: bool,
        /// A chain id (c17) or a Slurm job id.
        id: Option<String>,
    },
    /// Every attempt and decision of a chain.
    History {
        #[arg(long)]
        json: bool,
        id: String,
    },
    /// Chains waiting for an agent's decision, with their evidence.
    Pending {
        #[arg(long)]
        json: bool,
    },
    /// Resolve a pending_failed chain.
    Classify {
        id: String,
        #[arg(long, value_enum)]
        action: ResolveAction,
        /// New memory for the retry, e.g. 4G.
        #[arg(long)]
        mem: Option<String>,
        /// New time limit for the retry, in Slurm's form, e.g. 2:00:00.
        #[arg(long)]
        time: Option<String>,
        /// Partition for the retry.
        #[arg(long)]
        partition: Option<String>,
        /// Nodes to keep the retry off (comma-separated).
        #[arg(long, value_delimiter = ',')]
        exclude: Vec<String>,
        /// Why; stored in the decision record.
        #[arg(long)]
        reason: String,
        /// How sure you are (0.0-1.0); below agent.min_confidence the chain is held for a person.
        #[arg(long)]
        confidence: Option<f64>,
        /// Show what would happen, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Resubmit a failed or pending_failed chain by hand.
    Recover {
        id: String,
        #[arg(long)]
        mem: Option<String>,
        #[arg(long)]
        time: Option<String>,
        /// Why; stored in the decision record (default: "manual recover").
        #[arg(long)]
        reason: Option<String>,
        /// Print the exact sbatch command instead of running it.
        #[arg(long)]
        dry_run: bool,
    },
    /// Retries, agent resolutions and whether they worked, per chain and in total.
    Stats {
        #[arg(long)]
        json: bool,
        id: Option<String>,
    },
    /// The rules in force, and the rules proposed from how failures with one signature
    /// were resolved, with their evidence (docs/rules.md).
    Rules {
        #[arg(long)]
        json: bool,
        /// Also list every decision about a rule proposal (acceptances and rejections:
        /// records of their own) that you may see.
        #[arg(long)]
        history: bool,
        #[command(subcommand)]
        action: Option<RulesAction>,
    },
    /// scancel the current attempt and stop supervising.
    Cancel { id: String },
    /// Which daemon acts, and each daemon's role, epoch, last cycle and heartbeat (cluster
    /// mode; a single node says so). Exits 1 when no daemon acts.
    Cluster {
        #[arg(long)]
        json: bool,
    },
    /// Wait until chains have settled: completed, failed, cancelled, or waiting in
    /// pending_failed for a decision. Exits 0 if all completed, 1 if some failed or were
    /// cancelled, 5 if some wait for a decision, 124 on --timeout.
    Wait {
        /// Chain ids or Slurm job ids (an array's job id names all its tasks); default:
        /// every chain of yours that is active, ready or pending_failed.
        ids: Vec<String>,
        /// Give up after this long, e.g. 90s, 30m, 2h (exit 124).
        #[arg(long, value_parser = parse_timeout)]
        timeout: Option<std::time::Duration>,
        /// Print the settled chains as a JSON array (status --json's rows), no progress.
        #[arg(long)]
        json: bool,
    },
    /// Check the config file and exit (78 when it is bad), with `slurm-supervisord --validate`
    /// from the folder supervisorctl is in.
    Validate,
    /// Serve the Model Context Protocol on stdin/stdout, for AI agents (docs/agents.md).
    Mcp,
    /// Print the shell completion script for supervisorctl, e.g.
    /// `supervisorctl completions bash > ~/.local/share/bash-completion/completions/supervisorctl`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `rules` subcommands (docs/rules.md).
#[derive(Debug, clap::Subcommand)]
pub enum RulesAction {
    /// Put a rule proposal in force: for everyone (root, or a member of [learn]
    /// admin_group: its entry is written to rules.d/ beside the config, checked as
    /// `validate` checks it, and taken at once), or for your own chains only (--mine,
    /// and what anyone else gets: kept in the daemon's store).
    Accept {
        /// The proposal's id, as `supervisorctl rules` lists it.
        id: String,
        /// Accept it although some resolutions of its signature decided otherwise.
        #[arg(long)]
        despite_conflicts: bool,
        /// Accept it although it was rejected.
        #[arg(long)]
        despite_rejection: bool,
        /// For your own chains only.
        #[arg(long)]
        mine: bool,
        /// Why, kept with the decision (at most 1024 bytes).
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a rule proposal: for everyone (root, or a member of [learn] admin_group),
    /// or for your own chains only (--mine, and what anyone else gets). It stays listed,
    /// as rejected; rejecting a rule you accepted for your chains takes it out of force.
    Reject {
        /// The proposal's id, as `supervisorctl rules` lists it.
        id: String,
        /// Why, kept with the decision (at most 1024 bytes).
        #[arg(long)]
        reason: Option<String>,
        /// For your own chains only.
        #[arg(long)]
        mine: bool,
    },
}

/// Writes `supervisorctl`'s completion script for `shell`. The Debian package ships the
/// same scripts (`examples/package-assets.rs` calls this).
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn std::io::Write) {
    let mut cmd = <Cli as clap::CommandFactory>::command();
    clap_complete::generate(shell, &mut cmd, "supervisorctl", out);
}

fn parse_timeout(s: &str) -> Result<std::time::Duration, String> {
    crate::config::parse_duration(s)
}

/// The site's config, where the Debian package installs it for the system-wide daemon.
/// Without `--config` (or `SLURM_SUPERVISOR_CONFIG`) supervisorctl uses it when it
/// exists, so a user on a login node reaches the site's daemon with no flag; a per-user
/// daemon is reached by its own config.
pub const SITE_CONFIG: &str = "/etc/slurm-supervisor/supervisor.toml";

/// The config file to read: the one given, else the site's if there is one, else none
/// (the built-in defaults: a per-user daemon's socket under ~/.local/state).
pub fn config_path(given: Option<&Path>) -> Option<PathBuf> {
    match given {
        Some(p) => Some(p.to_path_buf()),
        // `exists` follows links and says false for a file this user cannot see; such a
        // file is still the site's, and reading it then says why it cannot be read.
        None => {
            let site = Path::new(SITE_CONFIG);
            (site.exists() || site.symlink_metadata().is_ok()).then(|| site.to_path_buf())
        }
    }
}

fn load_config(path: Option<&Path>) -> Result<ClientConfig, i32> {
    match path {
        None => Ok(ClientConfig::defaults()),
        Some(p) => ClientConfig::load(p).map_err(|e| {
            eprintln!("supervisorctl: {e}");
            EXIT_CONFIG
        }),
    }
}

/// `slurm-supervisord --validate` on the same file (or the built-in defaults), run from
/// the folder this binary is in, as every install puts the two side by side; its output
/// and exit code are this command's. No daemon to run there is not a bad config: that is
/// an internal error (70), not 78.
fn validate_with_daemon(config: Option<&std::path::Path>) -> i32 {
    use std::os::unix::process::CommandExt;
    let broken_install = |what: String| {
        eprintln!(
            "supervisorctl: validate runs slurm-supervisord --validate, but {what}; run `slurm-supervisord --config FILE --validate` where it is installed"
        );
        ErrorKind::Internal.exit_code()
    };
    let me = match std::env::current_exe() {
        Ok(me) => me,
        Err(e) => return broken_install(format!("where supervisorctl is cannot be told ({e})")),
    };
    let daemon = me
        .parent()
        .unwrap_or(std::path::Path::new("/"))
        .join("slurm-supervisord");
    if !daemon.is_file() {
        return broken_install(format!(
            "there is none at {} (beside supervisorctl)",
            daemon.display()
        ));
    }
    let mut cmd = std::process::Command::new(&daemon);
    if let Some(p) = config {
        // One argument, so that a path that begins with `-` is still the option's value.
        let mut arg = std::ffi::OsString::from("--config=");
        arg.push(p);
        cmd.arg(arg);
    }
    // Without --config, the daemon must check its built-in defaults too, not a file the
    // environment names (this command was given none, so the variable is unset).
    cmd.env_remove("SLURM_SUPERVISOR_CONFIG").arg("--validate");
    let e = cmd.exec();
    broken_install(format!("{} cannot be run ({e})", daemon.display()))
}

/// `submit --continue`, `--progress` and `--requeue-exit` as one request value.
fn continuation_of(
    continue_: bool,
    progress: Option<&str>,
    requeue_exit: Option<&str>,
) -> Result<Option<crate::domain::continuation::Continuation>, String> {
    if !continue_ && progress.is_none() && requeue_exit.is_none() {
        return Ok(None);
    }
    let c = crate::domain::continuation::Continuation {
        progress: progress.map(str::to_string),
        requeue_exit: match requeue_exit {
            Some(codes) => {
                crate::domain::continuation::parse_exit_codes(codes).map_err(|e| e.to_string())?
            }
            None => Vec::new(),
        },
    };
    c.check().map_err(|e| e.to_string())?;
    Ok(Some(c))
}

fn submit_request(
    sbatch: &[std::ffi::OsString],
    max_retries: Option<u32>,
    restartable: bool,
    continuation: Option<crate::domain::continuation::Continuation>,
    config: &ClientConfig,
) -> Result<SubmitRequest, String> {
    use crate::plumbing::osbytes::{escape, from_os, to_path};
    let cwd =
        std::env::current_dir().map_err(|e| format!("cannot read the current directory: {e}"))?;
    let argv: Vec<String> = sbatch.iter().map(|a| from_os(a)).collect();
    let cmd = crate::domain::sbatch_args::parse(&argv)
        .map_err(|e| format!("cannot understand the sbatch command: {e}"))?;
    let wrap = cmd.options.iter().any(|o| o.name == "wrap");
    let script = match &cmd.script {
        Some(path) => Some(
            std::fs::read(cwd.join(to_path(path)))
                .map_err(|e| format!("cannot read the batch script {}: {e}", escape(path)))?,
        ),
        None if wrap => None,
        None => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| format!("cannot read the script from stdin: {e}"))?;
            if buf.is_empty() {
                return Err("no batch script: name one after the sbatch options, pipe one on stdin, or use --wrap".into());
            }
            Some(buf)
        }
    };
    // The daemon checks this too; saying it here spares sending a script it will refuse.
    let max = config.max_script_size;
    if let Some(s) = script.as_ref().filter(|s| s.len() as u64 > max) {
        return Err(format!(
            "the batch script is {} bytes, more than limits.max_script_size ({max} bytes); ask your admin to raise it",
            s.len()
        ));
    }
    let mut env: Vec<(String, String)> = std::env::vars_os()
        .map(|(k, v)| (from_os(&k), from_os(&v)))
        .collect();
    // sbatch gives the job its own umask as SLURM_UMASK, unless that is set. The daemon's
    // sbatch runs with the daemon's umask (077), so the submitter's is recorded here, as
    // their own sbatch would have done: the job creates its files as it would have.
    if !env.iter().any(|(k, _)| k == "SLURM_UMASK") {
        env.push(("SLURM_UMASK".into(), slurm_umask(current_umask())));
    }
    Ok(SubmitRequest {
        argv,
        cwd: from_os(cwd.as_os_str()),
        env,
        script,
        max_retries,
        restartable,
        continuation,
        // A retry of this request (the network client's, when an answer is lost) is
        // answered with the job it made, never a second one.
        request_id: Some(request_id()),
    })
}

/// A new request id: 128 bits from the kernel's generator, in hex. Read straight from it
/// (one `getrandom`), not through a seeded generator, whose set-up costs a short-lived
/// client more than the bits (docs/benchmarks.md, issue 32, session 20).
fn request_id() -> String {
    use rand::RngCore;
    let mut bits = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bits);
    bits.iter().map(|b| format!("{b:02x}")).collect()
}

/// This process's umask (set back at once; the client starts no thread that creates files).
fn current_umask() -> u32 {
    use nix::sys::stat::{umask, Mode};
    let mask = umask(Mode::from_bits_truncate(0o077));
    umask(mask);
    mask.bits()
}

/// A umask as sbatch writes it into SLURM_UMASK ("0" and three octal digits).
fn slurm_umask(mask: u32) -> String {
    format!("0{:03o}", mask & 0o777)
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(v).expect("json values print")
    );
}

/// Runs the command line; returns the process exit code.
pub fn main_with(cli: Cli) -> i32 {
    // The two commands that read no config here.
    match cli.command {
        // Completions are printed even where the config is broken.
        Command::Completions { shell } => {
            write_completions(shell, &mut std::io::stdout().lock());
            return 0;
        }
        // The daemon's own check: it compiles the rules' stderr patterns, which this
        // binary does not link (see `ClientConfig`).
        Command::Validate => {
            return validate_with_daemon(config_path(cli.config.as_deref()).as_deref())
        }
        _ => {}
    }
    let config_file = config_path(cli.config.as_deref());
    let config = match load_config(config_file.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let servers = std::env::var(crate::config::SERVERS_ENV).ok();
    let config = match config.with_servers_env(servers.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("supervisorctl: {e}");
            return EXIT_CONFIG;
        }
    };
    let endpoint = client::Endpoint::of(&config);
    let request = match cli.command {
        Command::Validate | Command::Completions { .. } => {
            unreachable!("answered before the config is read")
        }
        Command::Mcp => return crate::mcp::serve(endpoint),
        Command::Wait {
            ref ids,
            timeout,
            json,
        } => {
            return wait::run(
                &endpoint,
                wait::WaitArgs {
                    ids,
                    timeout,
                    json,
                    unreachable_hint: where_from(cli.config.as_deref(), config_file.as_deref()),
                },
            )
        }
        Command::Submit {
            ref sbatch,
            max_retries,
            restartable,
            continue_,
            ref progress,
            ref requeue_exit,
        } => match continuation_of(continue_, progress.as_deref(), requeue_exit.as_deref())
            .and_then(|c| submit_request(sbatch, max_retries, restartable, c, &config))
        {
            Ok(r) => Request::Submit(r),
            Err(e) => {
                eprintln!("supervisorctl: {e}");
                return 2;
            }
        },
        Command::Adopt { ref job_ids } => Request::Adopt {
            job_ids: job_ids.clone(),
        },
        Command::OptIn => Request::PlainOpt { opted_in: true },
        Command::OptOut => Request::PlainOpt { opted_in: false },
        Command::Status { ref id, .. } => Request::Status { id: id.clone() },
        Command::History { ref id, .. } => Request::History { id: id.clone() },
        Command::Pending { .. } => Request::Pending,
        Command::Classify {
            ref id,
            action,
            ref mem,
            ref time,
            ref partition,
            ref exclude,
            ref reason,
            confidence,
            dry_run,
        } => Request::Classify(Resolution {
            id: id.clone(),
            action,
            mem: mem.clone(),
            time: time.clone(),
            partition: partition.clone(),
            exclude: exclude.clone(),
            reason: reason.clone(),
            confidence,
            dry_run,
        }),
        Command::Recover {
            ref id,
            ref mem,
            ref time,
            ref reason,
            dry_run,
        } => Request::Recover(RecoverRequest {
            id: id.clone(),
            mem: mem.clone(),
            time: time.clone(),
            reason: reason.clone(),
            dry_run,
        }),
        Command::Stats { ref id, .. } => Request::Stats { id: id.clone() },
        Command::Cancel { ref id } => Request::Cancel { id: id.clone() },
        Command::Cluster { .. } => Request::Cluster,
        Command::Rules { action: None, .. } => Request::Rules,
        Command::Rules {
            action:
                Some(RulesAction::Accept {
                    ref id,
                    despite_conflicts,
                    despite_rejection,
                    mine,
                    ref reason,
                }),
            ..
        } => Request::RulesAccept {
            id: id.clone(),
            despite_conflicts,
            despite_rejection,
            mine,
            reason: reason.clone(),
        },
        Command::Rules {
            action:
                Some(RulesAction::Reject {
                    ref id,
                    ref reason,
                    mine,
                }),
            ..
        } => Request::RulesReject {
            id: id.clone(),
            reason: reason.clone(),
            mine,
        },
    };
    // The list of every chain can be long: it goes to stdout as it arrives.
    if let Command::Status {
        json: true,
        id: None,
    } = &cli.command
    {
        let stdout = std::io::stdout();
        let mut out = std::io::BufWriter::new(stdout.lock());
        let streamed = client::call_streamed(&endpoint, &request, &mut out);
        let written = match streamed {
            Ok(client::Streamed::Written) => {
                use std::io::Write;
                writeln!(out).and_then(|()| out.flush())
            }
            Ok(client::Streamed::Other(Response::Error(e))) => return error_exit(e),
            Ok(client::Streamed::Other(Response::Ok(v))) => {
                drop(out);
                return render(&cli.command, v);
            }
            Err(e) => {
                use std::io::Write;
                let _ = out.flush();
                eprintln!("supervisorctl: {e}");
                if let client::ClientError::Connect { .. } = &e {
                    eprintln!(
                        "supervisorctl: {}",
                        where_from(cli.config.as_deref(), config_file.as_deref())
                    );
                }
                return ErrorKind::Unavailable.exit_code();
            }
        };
        return match written {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("supervisorctl: cannot write the answer: {e}");
                1
            }
        };
    }
    let response = match client::call(&endpoint, &request) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("supervisorctl: {e}");
            if let client::ClientError::Connect { .. } = &e {
                eprintln!(
                    "supervisorctl: {}",
                    where_from(cli.config.as_deref(), config_file.as_deref())
                );
            }
            if matches!(request, Request::Submit(_)) {
                match &e {
                    client::ClientError::Connect { .. } => {}
                    e if e.timed_out() => eprintln!(
                        "supervisorctl: the daemon is still busy with this submission and may yet submit it; \
                         check `supervisorctl status` before submitting again"
                    ),
                    _ => eprintln!(
                        "supervisorctl: the daemon stopped before answering, so nothing will be submitted later on this request's behalf; \
                         if sbatch had already created the job, it is found and supervised: check `supervisorctl status` before submitting again"
                    ),
                }
            }
            return ErrorKind::Unavailable.exit_code();
        }
    };
    match response {
        Response::Ok(v) => render(&cli.command, v),
        Response::Error(e) => error_exit(e),
    }
}

/// Which config named the socket that could not be reached, and how to name another.
fn where_from(given: Option<&Path>, used: Option<&Path>) -> String {
    match (given, used) {
        (Some(p), _) => format!("the socket is the one {} names", p.display()),
        (None, Some(p)) => format!(
            "the socket is the site's daemon's ({} names it); to reach a daemon of your own, give its config with --config FILE or SLURM_SUPERVISOR_CONFIG",
            p.display()
        ),
        (None, None) => format!(
            "the socket is a per-user daemon's (built-in defaults; there is no {SITE_CONFIG}); give the daemon's config with --config FILE"
        ),
    }
}

/// Says what went wrong; returns the exit code for it.
fn error_exit(e: crate::protocol::ErrorBody) -> i32 {
    if let Some(stderr) = &e.stderr {
        // sbatch's own words, as sbatch would have printed them.
        eprint!("{stderr}");
        if !stderr.ends_with('\n') {
            eprintln!();
        }
        return e.exit_code.unwrap_or(1);
    }
    eprintln!("supervisorctl: {}", e.message);
    e.kind.exit_code()
}

/// Prints the daemon's answer to `command`; returns the exit code. The `--json` forms
/// print the answer as the daemon sent it; everything else reads it as its type first.
fn render(command: &Command, v: Value) -> i32 {
    match render_typed(command, v) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("supervisorctl: {e}");
            ErrorKind::Internal.exit_code()
        }
    }
}

fn render_typed(command: &Command, v: Value) -> Result<i32, UnexpectedAnswer> {
    match command {
        Command::Submit { .. } => println!("{}", decode::<SubmitAnswer>(v)?.job_id),
        Command::OptIn | Command::OptOut => {
            let a = decode::<crate::protocol::views::PlainOptAnswer>(v)?;
            if a.opted_in {
                println!("your plain sbatch submissions are supervised from now on");
            } else {
                println!("your plain sbatch submissions are no longer supervised (jobs supervised already stay so)");
            }
            if !a.enabled {
                eprintln!("supervisorctl: note: this daemon does not read plain sbatch submissions ([plain_sbatch] enabled = false); ask your admin");
            }
        }
        Command::Stats { json: false, .. } => {
            print!("{}", render::stats_text(&decode::<StatsAnswer>(v)?))
        }
        Command::Rules {
            action: Some(_),
            json,
            ..
        } => {
            if *json {
                print_json(&v);
            } else {
                let a = decode::<crate::protocol::views::RuleDecisionAnswer>(v)?;
                println!("{}", render::rule_decision_text(&a));
            }
        }
        Command::Rules {
            json: true,
            action: None,
            ..
        } => print_json(&v),
        Command::Rules {
            json: false,
            action: None,
            history,
        } => print!(
            "{}",
            render::rules_text(&decode::<crate::protocol::views::RulesAnswer>(v)?, *history)
        ),
        Command::Status { json, id } => {
            if *json {
                print_json(&v);
            }
            let rows: Vec<ChainRow> = decode(v)?;
            if !*json {
                print!("{}", render::status_table(&rows));
            }
            // Asked about one piece of work: say whether it failed.
            if id.is_some() && rows.iter().any(|r| r.chain.state == ChainState::Failed) {
                return Ok(1);
            }
        }
        Command::History { json: true, .. } | Command::Pending { json: true } => print_json(&v),
        Command::Cluster { json } => {
            if *json {
                print_json(&v);
            }
            let answer = decode::<crate::protocol::views::ClusterAnswer>(v)?;
            if !*json {
                print!("{}", render::cluster_text(&answer));
            }
            return Ok(render::cluster_exit(&answer));
        }
        Command::History { json: false, .. } => match decode::<HistoryAnswer>(v)? {
            HistoryAnswer::One(h) => print!("{}", render::history_text(&h)),
            HistoryAnswer::Many(all) => all
                .iter()
                .for_each(|h| println!("{}", render::history_text(h))),
        },
        Command::Pending { json: false } => {
            print!("{}", render::pending_text(&decode::<Vec<PendingChain>>(v)?))
        }
        Command::Recover { dry_run: true, .. } => {
            for p in decode::<RecoverDryRun>(v)?.would_run {
                let argv: Vec<String> = p.command.iter().map(|a| shell_quote(a)).collect();
                println!("(cd {} && {})", shell_quote(&p.cwd), argv.join(" "));
            }
        }
        _ => print_json(&v),
    }
    Ok(0)
}

/// Quotes a word for display as a shell command (the daemon never runs a shell).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_=./,:%+@".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_umask_is_written_as_sbatch_writes_slurm_umask() {
        assert_eq!(slurm_umask(0o022), "0022");
        assert_eq!(slurm_umask(0o077), "0077");
        assert_eq!(slurm_umask(0), "0000");
        assert_eq!(slurm_umask(0o7027), "0027");
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `completions` answers without reading a config, so it works where the config is
    /// broken or absent (a package's post-install, a fresh account).
    #[test]
    fn completions_need_no_config() {
        let cli = Cli::try_parse_from([
            "supervisorctl",
            "--config",
            "/nonexistent/supervisor.toml",
            "completions",
            "bash",
        ])
        .unwrap();
        assert_eq!(main_with(cli), 0);
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut script = Vec::new();
            write_completions(shell, &mut script);
            let script = String::from_utf8(script).unwrap();
            for word in ["supervisorctl", "submit", "classify", "completions"] {
                assert!(script.contains(word), "{shell}: no {word}");
            }
        }
    }
}
