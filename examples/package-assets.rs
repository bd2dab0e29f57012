//! The generated files of the Debian package, written into one folder before `cargo deb`
//! packs them (scripts/package runs this; `[package.metadata.deb] assets` in Cargo.toml
//! names what it writes):
//!
//! - `man/`: man pages made from the clap definitions the binaries parse their arguments
//!   with, so they cannot drift from `--help`: `slurm-supervisord.8` (a daemon, section 8),
//!   `supervisorctl.1` and one `supervisorctl-<command>.1` per subcommand;
//! - `completions/`: `supervisorctl`'s completion scripts for bash, zsh and fish, the
//!   same bytes `supervisorctl completions SHELL` prints;
//! - `supervisor.toml`: the conffile `/etc/slurm-supervisor/supervisor.toml`, which is
//!   `config/supervisor.toml` with the system-wide daemon's state directory and socket
//!   set (a root daemon has no per-user default it could use under the unit's
//!   `ProtectHome=read-only`).
//!
//! It is an example rather than a build script because it needs the library (the clap
//! definitions live in it), and rather than a hidden subcommand so that the release
//! binaries carry no man page generator. It runs in the dev profile, which the tests
//! have already built.
//!
//! Usage: `cargo run --example package-assets -- OUT_DIR`

use anyhow::{bail, Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::path::Path;

/// The lines of `config/supervisor.toml` that the packaged conffile turns on.
const SYSTEM_WIDE: &[(&str, &str)] = &[
    (
        "# state_dir = \"/var/lib/slurm-supervisor\"\n",
        "state_dir = \"/var/lib/slurm-supervisor\"\n",
    ),
    (
        "# socket = \"/run/slurm-supervisor/supervisor.sock\"\n",
        "socket = \"/run/slurm-supervisor/supervisor.sock\"\n",
    ),
];

const CONFFILE_HEADER: &str = "\
# /etc/slurm-supervisor/supervisor.toml: the system-wide daemon's config
# (slurm-supervisord.service), installed by the slurm-supervisor package. Users reach the
# daemon with `supervisorctl --config /etc/slurm-supervisor/supervisor.toml ...` or with
# SLURM_SUPERVISOR_CONFIG=/etc/slurm-supervisor/supervisor.toml in their environment.
";

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(out), None) = (args.next(), args.next()) else {
        eprintln!("usage: cargo run --example package-assets -- OUT_DIR");
        std::process::exit(2);
    };
    let out = Path::new(&out);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // A fresh folder each time: a page of a removed subcommand must not linger.
    if out.exists() {
        std::fs::remove_dir_all(out).with_context(|| format!("cannot clear {}", out.display()))?;
    }
    let man = out.join("man");
    let completions = out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }

    let daemon = slurm_supervisor::daemon_main::Args::command();
    clap_mangen::Man::new(daemon)
        .section("8")
        .manual("System Administration")
        .generate_to(&man)
        .context("cannot write the daemon's man page")?;
    clap_mangen::generate_to(slurm_supervisor::ctl::Cli::command(), &man)
        .context("cannot write supervisorctl's man pages")?;

    for (shell, name) in [
        (Shell::Bash, "supervisorctl"),
        (Shell::Zsh, "_supervisorctl"),
        (Shell::Fish, "supervisorctl.fish"),
    ] {
        let mut script = Vec::new();
        slurm_supervisor::ctl::write_completions(shell, &mut script);
        let path = completions.join(name);
        std::fs::write(&path, script)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }

    let example = root.join("config/supervisor.toml");
    let mut text = std::fs::read_to_string(&example)
        .with_context(|| format!("cannot read {}", example.display()))?;
    for (commented, set) in SYSTEM_WIDE {
        if !text.contains(commented) {
            bail!(
                "{} no longer has the line {commented:?}: update SYSTEM_WIDE in examples/package-assets.rs",
                example.display()
            );
        }
        text = text.replacen(commented, set, 1);
    }
    let conffile = out.join("supervisor.toml");
    std::fs::write(&conffile, format!("{CONFFILE_HEADER}{text}"))
        .with_context(|| format!("cannot write {}", conffile.display()))?;
    // The packaged conffile must be one the daemon accepts.
    slurm_supervisor::config::Config::load(&conffile)
        .map_err(|e| anyhow::anyhow!("the packaged config is refused: {e}"))?;
    Ok(())
}
