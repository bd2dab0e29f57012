//! The generated files of the packages, written into one folder before `cargo deb` or
//! `rpmbuild` packs them (scripts/package runs this; `[package.metadata.deb] assets` in
//! Cargo.toml names what it writes):
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
//! - `rpm/`: what `rpm/slurm-supervisor.spec` holds, read from Cargo.toml so that the RPM
//!   and the Debian package are made from one list: `assets`, every file and folder of the
//!   package with its mode, its source and its path on RHEL (`[package.metadata.deb]`'s
//!   `assets` and the units its `systemd-units` finds, with the paths RHEL keeps elsewhere
//!   mapped: `RHEL_PATHS`; the folders both packages ship empty, `[package.metadata.packages]
//!   empty-dirs`, as folders it owns), and `preamble.spec`, the name, version, summary,
//!   licence, weak dependencies, maintainer and description;
//! - `deb-empty-dirs`: those folders the packages ship empty as `MODE PATH` lines, which
//!   scripts/package adds to the .deb (cargo-deb's assets are files only).
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

/// The folders where RHEL's packages put what Debian's put elsewhere: (Debian's, RHEL's).
/// Every other path of the Debian package is RHEL's too: `/usr/bin`, the units in
/// `/usr/lib/systemd/system` and `/user`, the man pages, bash's and fish's completions, the
/// docs in `/usr/share/doc/<name>` (unversioned since Fedora 20 and so in RHEL 8 and 9).
const RHEL_PATHS: &[(&str, &str)] = &[
    // Debian's zsh reads vendor completions from vendor-completions, RHEL's from
    // site-functions.
    (
        "usr/share/zsh/vendor-completions/",
        "usr/share/zsh/site-functions/",
    ),
];

/// The RHEL names of the Debian packages that `recommends` names: (Debian's, RHEL's).
const RHEL_PACKAGES: &[(&str, &str)] = &[
    // Slurm's commands: EPEL's and SchedMD's RPMs have them in `slurm`.
    ("slurm-client", "slurm"),
    // libmunge.so.2, which the daemon opens only for network clients (docs/security.md).
    ("libmunge2", "munge-libs"),
];

/// The unit types cargo-deb's `systemd-units` installs from `unit-scripts`, as
/// `<unit-name>.<type>` or `<unit-name>@.<type>` into `/usr/lib/systemd/system`
/// (cargo-deb's `dh_installsystemd`). tests/rpm.rs compares the two packages' files, so a
/// unit cargo-deb finds another way would not go unnoticed.
const UNIT_TYPES: &[&str] = &["mount", "path", "service", "socket", "target", "timer"];

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

    let daemon = slurm_supervisor::daemon::start::Args::command();
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

    let deb_dirs = write_rpm_lists(root, &out.join("rpm"))?;
    let path = out.join("deb-empty-dirs");
    std::fs::write(&path, deb_dirs).with_context(|| format!("cannot write {}", path.display()))
}

/// One line of `rpm/assets`: what rpm/slurm-supervisor.spec installs and how it lists it.
struct RpmAsset {
    /// `binary` (a release binary: stripped at installation, as `cargo deb --strip` does),
    /// `config` (`%config(noreplace)`: every file under /etc, as cargo-deb makes every such
    /// file a conffile), `doc` (`%doc`), `file`, or `dir` (a folder the package owns).
    kind: &'static str,
    /// Octal, as Cargo.toml gives it.
    mode: String,
    /// A path or glob as `[package.metadata.deb] assets` gives it (`target/release/` is the
    /// real target directory, as for cargo-deb), or `-` for a folder.
    source: String,
    /// The absolute path on RHEL; a folder (ending in `/`) takes each source by its name.
    dest: String,
}

/// Writes `rpm/assets` (one `KIND MODE SOURCE DEST` line per file and owned folder) and
/// `rpm/preamble.spec` from Cargo.toml, for rpm/slurm-supervisor.spec. Returns the folders
/// both packages ship empty as `MODE PATH` lines, for the .deb.
fn write_rpm_lists(root: &Path, out: &Path) -> Result<String> {
    let manifest = root.join("Cargo.toml");
    let cargo: toml::Table = std::fs::read_to_string(&manifest)
        .with_context(|| format!("cannot read {}", manifest.display()))?
        .parse()
        .with_context(|| format!("cannot parse {}", manifest.display()))?;
    let field = |value: Option<&toml::Value>, what: &str| -> Result<String> {
        match value {
            Some(toml::Value::String(s)) => Ok(s.clone()),
            _ => bail!("Cargo.toml has no string {what}, which the RPM needs"),
        }
    };
    let package = cargo
        .get("package")
        .context("Cargo.toml has no [package]")?;
    let deb = package
        .get("metadata")
        .and_then(|m| m.get("deb"))
        .context("Cargo.toml has no [package.metadata.deb], the RPM's list of files")?;
    let name = field(package.get("name"), "package.name")?;
    let bins: Vec<String> = match cargo.get("bin") {
        Some(toml::Value::Array(bins)) => bins
            .iter()
            .map(|b| field(b.get("name"), "[[bin]] name"))
            .collect::<Result<_>>()?,
        _ => bail!("Cargo.toml has no [[bin]]"),
    };

    let mut assets = Vec::new();
    let Some(toml::Value::Array(listed)) = deb.get("assets") else {
        bail!("Cargo.toml's [package.metadata.deb] has no assets");
    };
    for asset in listed {
        let fields: Vec<String> = match asset {
            toml::Value::Array(fields) => fields
                .iter()
                .map(|f| field(Some(f), "asset field"))
                .collect::<Result<_>>()?,
            _ => bail!("an asset of [package.metadata.deb] is not an array: {asset}"),
        };
        let [source, dest, mode] = &fields[..] else {
            bail!("an asset of [package.metadata.deb] is not [source, dest, mode]: {asset}");
        };
        let mut dest = dest.trim_start_matches('/').to_string();
        for (debian, rhel) in RHEL_PATHS {
            if let Some(rest) = dest.strip_prefix(debian) {
                dest = format!("{rhel}{rest}");
            }
        }
        let kind = if bins
            .iter()
            .any(|b| *source == format!("target/release/{b}"))
        {
            "binary"
        } else if dest.starts_with("etc/") {
            "config"
        } else if dest.starts_with("usr/share/doc/") {
            "doc"
        } else {
            "file"
        };
        assets.push(RpmAsset {
            kind,
            mode: mode.clone(),
            source: source.clone(),
            dest: format!("/{dest}"),
        });
    }
    if let Some(units) = deb.get("systemd-units") {
        let dir = field(units.get("unit-scripts"), "systemd-units.unit-scripts")?;
        let unit = field(units.get("unit-name"), "systemd-units.unit-name")?;
        for ty in UNIT_TYPES {
            for file in [format!("{unit}.{ty}"), format!("{unit}@.{ty}")] {
                let source = format!("{}/{file}", dir.trim_end_matches('/'));
                if root.join(&source).is_file() {
                    assets.push(RpmAsset {
                        kind: "file",
                        mode: "644".into(),
                        source,
                        dest: format!("/usr/lib/systemd/system/{file}"),
                    });
                }
            }
        }
    }
    // The folders both packages ship empty: the RPM owns them with their modes, and
    // scripts/package adds them to the .deb (cargo-deb packs files only).
    let empty_dirs = empty_dirs(package)?;
    let mut deb_dirs = String::new();
    for (dir, mode) in &empty_dirs {
        assets.push(RpmAsset {
            kind: "dir",
            mode: mode.clone(),
            source: "-".into(),
            dest: format!("/{dir}"),
        });
        deb_dirs.push_str(&format!("{mode} {dir}\n"));
    }
    // The package owns the folders that are its own (a path component is its name), not
    // the system's it puts files in, which their own packages own.
    let mut dirs = std::collections::BTreeSet::new();
    for asset in &assets {
        let dest = Path::new(&asset.dest);
        let dest = if asset.dest.ends_with('/') {
            dest
        } else {
            dest.parent().unwrap()
        };
        for dir in dest.ancestors() {
            if dir.components().any(|c| c.as_os_str() == name.as_str()) {
                // Rebuilt from its components: no trailing `/`.
                dirs.insert(dir.components().collect::<std::path::PathBuf>());
            }
        }
    }
    for (dir, _) in &empty_dirs {
        dirs.remove(Path::new("/").join(dir).as_path());
    }
    assets.extend(dirs.into_iter().map(|dir| RpmAsset {
        kind: "dir",
        mode: "755".into(),
        source: "-".into(),
        dest: dir.display().to_string(),
    }));

    let mut lines = String::new();
    for a in &assets {
        let fields = [a.kind, &a.mode, &a.source, &a.dest];
        if fields
            .iter()
            .any(|f| f.is_empty() || f.contains(char::is_whitespace))
        {
            bail!("an RPM asset has an empty field or one with a space: {fields:?}");
        }
        lines.push_str(&fields.join(" "));
        lines.push('\n');
    }

    // RPM's Version cannot hold `-`; `~` sorts a pre-release before its release, as
    // Cargo's `-` does.
    let version = field(package.get("version"), "package.version")?.replace('-', "~");
    let mut preamble = format!(
        "Name: {name}\nVersion: {version}\nSummary: {}\nLicense: {}\n\
         %global ssv_maintainer {}\n",
        field(package.get("description"), "package.description")?,
        field(package.get("license"), "package.license")?,
        field(deb.get("maintainer"), "[package.metadata.deb] maintainer")?,
    );
    let recommends = field(deb.get("recommends"), "[package.metadata.deb] recommends")?;
    for debian in recommends.split(',').map(str::trim) {
        let Some((_, rhel)) = RHEL_PACKAGES.iter().find(|(d, _)| *d == debian) else {
            bail!(
                "[package.metadata.deb] recommends {debian}: add its RHEL name to \
                 RHEL_PACKAGES in examples/package-assets.rs"
            );
        };
        preamble.push_str(&format!("Recommends: {rhel}\n"));
    }
    preamble.push_str("\n%description\n");
    preamble.push_str(&wrap(
        &field(deb.get("extended-description"), "extended-description")?,
        79,
    ));

    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    for (file, text) in [("assets", lines), ("preamble.spec", preamble)] {
        let path = out.join(file);
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(deb_dirs)
}

/// `[package.metadata.packages] empty-dirs` of Cargo.toml: each folder's path (relative,
/// as cargo-deb's asset destinations) and octal mode.
fn empty_dirs(package: &toml::Value) -> Result<Vec<(String, String)>> {
    let Some(listed) = package
        .get("metadata")
        .and_then(|m| m.get("packages"))
        .and_then(|p| p.get("empty-dirs"))
    else {
        return Ok(Vec::new());
    };
    let toml::Value::Array(listed) = listed else {
        bail!("Cargo.toml's [package.metadata.packages] empty-dirs is not an array");
    };
    let mut out = Vec::new();
    for entry in listed {
        let fields: Option<Vec<&str>> = match entry {
            toml::Value::Array(f) => f.iter().map(toml::Value::as_str).collect(),
            _ => None,
        };
        let Some([dir, mode]) = fields.as_deref() else {
            bail!(
                "an entry of [package.metadata.packages] empty-dirs is not [path, mode]: {entry}"
            );
        };
        let dir = dir.trim_start_matches('/').trim_end_matches('/');
        let plain = |c: std::path::Component| matches!(c, std::path::Component::Normal(_));
        if dir.is_empty()
            || dir.contains(char::is_whitespace)
            || !Path::new(dir).components().all(plain)
        {
            bail!("[package.metadata.packages] empty-dirs: {dir:?} is not a plain path without spaces");
        }
        if mode.len() != 3 || !mode.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
            bail!("[package.metadata.packages] empty-dirs: the mode of {dir} is not octal like \"755\": {mode:?}");
        }
        out.push((dir.to_string(), mode.to_string()));
    }
    Ok(out)
}

/// `text` in lines of at most `width` characters (rpmlint's limit for a description).
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + word.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    out.push_str(&line);
    out.push('\n');
    out
}
