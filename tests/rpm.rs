//! The RPM (`scripts/package --rpm`, rpm/slurm-supervisor.spec), checked on this Debian
//! machine with RPM's own tools and no Slurm: rpmlint finds no error; the package holds
//! exactly the Debian package's files, byte for byte and with their modes, at RHEL's paths;
//! it requires nothing a RHEL base system lacks, and docs/packaging.md names the glibc its
//! binaries need; installed with `rpm --root` into an empty root, its scriptlets do what
//! Fedora's guidelines ask (presets and `daemon-reload`, nothing started), an upgrade to a
//! newer build keeps the locally edited conffile and the rules accepted into `rules.d/`
//! (which both packages ship as an empty folder), and an erase leaves only that conffile
//! (as `.rpmsave`), those rules and the daemon's state.
//!
//! The packages are `$SSV_TEST_RPM`, `$SSV_TEST_RPM_NEWER` (the same binaries, a higher
//! Release) and `$SSV_TEST_DEB`, which scripts/test builds with scripts/package.

mod common;

use common::{copy_executable, must, output, scratch_root, write_executable};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

const PACKAGE: &str = "slurm-supervisor";
const RPM_VAR: &str = "SSV_TEST_RPM";
const NEWER_VAR: &str = "SSV_TEST_RPM_NEWER";
const DEB_VAR: &str = "SSV_TEST_DEB";
const CONFFILE: &str = "/etc/slurm-supervisor/supervisor.toml";
/// The folder beside the conffile where `supervisorctl rules accept` writes accepted rules
/// (docs/rules.md): shipped empty, root's, 0755, so that the packaged unit's
/// `ReadWritePaths=` finds it.
const RULES_D: &str = "/etc/slurm-supervisor/rules.d";
/// The rpm database inside a root, where RHEL keeps it.
const DBPATH: &str = "/var/lib/rpm";
/// What the system-wide daemon keeps in its state directory, as an erase must leave it.
const STATE_FILE: &str = "/var/lib/slurm-supervisor/supervisor.db";
/// The recording `systemctl` in the test's root (see [`Root::new`]) and its log.
const SYSTEMCTL_LOG: &str = "/systemctl.log";

/// Files the RPM must install, with their modes.
const EXPECTED: &[(&str, &str, &str)] = &[
    ("/usr/bin/slurm-supervisord", "-rwxr-xr-x", "the daemon"),
    ("/usr/bin/supervisorctl", "-rwxr-xr-x", "the client"),
    (
        "/usr/lib/systemd/system/slurm-supervisord.service",
        "-rw-r--r--",
        "the system-wide unit",
    ),
    (
        "/usr/lib/systemd/system/slurm-supervisord.socket",
        "-rw-r--r--",
        "the socket unit",
    ),
    (
        "/usr/lib/systemd/user/slurm-supervisord.service",
        "-rw-r--r--",
        "the per-user unit",
    ),
    (CONFFILE, "-rw-r--r--", "the conffile"),
    (
        "/usr/share/man/man8/slurm-supervisord.8.gz",
        "-rw-r--r--",
        "a man page",
    ),
    (
        "/usr/share/man/man1/supervisorctl.1.gz",
        "-rw-r--r--",
        "a man page",
    ),
    (
        "/usr/share/man/man1/supervisorctl-submit.1.gz",
        "-rw-r--r--",
        "a man page",
    ),
    (
        "/usr/share/bash-completion/completions/supervisorctl",
        "-rw-r--r--",
        "bash completion",
    ),
    (
        "/usr/share/zsh/site-functions/_supervisorctl",
        "-rw-r--r--",
        "zsh completion, where RHEL's zsh reads it",
    ),
    (
        "/usr/share/fish/vendor_completions.d/supervisorctl.fish",
        "-rw-r--r--",
        "fish completion",
    ),
    (
        "/usr/share/slurm-supervisor/cli_filter.lua",
        "-rw-r--r--",
        "the plain-sbatch cli_filter",
    ),
    (
        "/usr/share/slurm-supervisor/job_submit.lua",
        "-rw-r--r--",
        "the plain-sbatch job_submit script",
    ),
    (
        "/usr/share/doc/slurm-supervisor/README.md",
        "-rw-r--r--",
        "the README the units name",
    ),
];

/// Where the Debian package's paths are on RHEL, where they differ: (Debian's, RHEL's).
const DEB_TO_RHEL: &[(&str, &str)] = &[(
    "/usr/share/zsh/vendor-completions/",
    "/usr/share/zsh/site-functions/",
)];

/// The Debian package's files the RPM does not hold, and why.
const DEB_ONLY: &[(&str, &str)] = &[(
    "/usr/share/doc/slurm-supervisor/copyright",
    "cargo-deb writes Debian's copyright file; an RPM names its licence in its License tag",
)];

/// The package file `$var` names, built by scripts/package.
fn package(var: &str) -> String {
    let p = std::env::var(var)
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "this test reads the packages ${RPM_VAR}, ${NEWER_VAR} and ${DEB_VAR}: build them \
             with `scripts/package --deb --rpm` and `scripts/package --rpm --release 2` and set \
             the variables to the paths they print (scripts/test does both)"
            )
        });
    assert!(Path::new(&p).is_file(), "{var}={p} is not a file");
    p
}

/// One file or folder of a package.
#[derive(Debug, PartialEq)]
struct Entry {
    /// As `ls -l` shows it: `-rw-r--r--`, `drwxr-xr-x`.
    perms: String,
    /// `user:group`.
    owner: String,
    /// sha256 of a file's bytes; empty for a folder.
    digest: String,
}

/// Every file and folder the RPM holds, by path, and its file flags (`c` config, `n`
/// noreplace, `d` doc).
fn rpm_entries(rpm: &str) -> BTreeMap<String, (Entry, String)> {
    let algo = must("rpm", &["-qp", "--qf", "%{FILEDIGESTALGO}", rpm]);
    // 8: sha256, RPM's default since 4.14 (RHEL 8).
    assert_eq!(algo.trim(), "8", "the RPM's file digests are not sha256");
    must(
        "rpm",
        &[
            "-qp",
            "--qf",
            "[%{FILEMODES:perms}|%{FILEUSERNAME}:%{FILEGROUPNAME}|%{FILEDIGESTS}|%{FILEFLAGS:fflags}|%{FILENAMES}\\n]",
            rpm,
        ],
    )
    .lines()
    .map(|line| {
        let [perms, owner, digest, flags, path] = line.splitn(5, '|').collect::<Vec<_>>()[..]
        else {
            panic!("rpm -qp printed {line:?}");
        };
        let entry = Entry {
            perms: perms.into(),
            owner: owner.into(),
            digest: digest.into(),
        };
        (path.to_string(), (entry, flags.to_string()))
    })
    .collect()
}

/// Every file and folder of the Debian package, by its path on RHEL (`DEB_TO_RHEL`).
fn deb_entries(deb: &str) -> BTreeMap<String, Entry> {
    let unpacked = tempfile::Builder::new()
        .prefix("ssv-rpm-deb-")
        .tempdir_in(scratch_root())
        .unwrap();
    must("dpkg-deb", &["-x", deb, unpacked.path().to_str().unwrap()]);
    must("dpkg-deb", &["-c", deb])
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let path = fields.last()?.trim_start_matches('.').trim_end_matches('/');
            if path.is_empty() {
                return None;
            }
            // cargo-deb writes numeric owners, dpkg-deb (which adds the empty folders) names.
            let owner = match fields[1] {
                "0/0" | "root/root" => "root:root".to_string(),
                other => other.to_string(),
            };
            let digest = if fields[0].starts_with('-') {
                let bytes = std::fs::read(unpacked.path().join(&path[1..])).unwrap();
                format!("{:x}", Sha256::digest(bytes))
            } else {
                String::new()
            };
            let mut path = path.to_string();
            for (debian, rhel) in DEB_TO_RHEL {
                if let Some(rest) = path.strip_prefix(debian) {
                    path = format!("{rhel}{rest}");
                }
            }
            let entry = Entry {
                perms: fields[0].into(),
                owner,
                digest,
            };
            Some((path, entry))
        })
        .collect()
}

#[test]
fn rpmlint_finds_no_error() {
    let rpm = package(RPM_VAR);
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/rpm/rpmlint.toml");
    let out = output("rpmlint", &["-c", config, &rpm]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(" 0 errors,"),
        "rpmlint {rpm} ({}):\n{text}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The two packages are made from one list (Cargo.toml's `[package.metadata.deb]`) and
/// one release build: the RPM holds each of the .deb's files with the same bytes, mode and
/// owner (the binaries stripped the same way), at RHEL's path, and nothing else; it owns
/// the folders that are the package's own, and its conffile is the .deb's conffile.
#[test]
fn the_rpm_holds_the_debs_files_byte_for_byte_at_rhels_paths() {
    let rpm = package(RPM_VAR);
    let deb = package(DEB_VAR);
    let rpm_entries = rpm_entries(&rpm);
    let mut deb_entries = deb_entries(&deb);
    for (path, why) in DEB_ONLY {
        assert!(
            deb_entries.remove(*path).is_some(),
            "the .deb no longer has {path} ({why}): remove it from DEB_ONLY"
        );
    }

    let rpm_files: BTreeMap<&str, &Entry> = rpm_entries
        .iter()
        .filter(|(_, (e, _))| !e.perms.starts_with('d'))
        .map(|(p, (e, _))| (p.as_str(), e))
        .collect();
    let deb_files: BTreeMap<&str, &Entry> = deb_entries
        .iter()
        .filter(|(_, e)| !e.perms.starts_with('d'))
        .map(|(p, e)| (p.as_str(), e))
        .collect();
    assert_eq!(
        rpm_files.keys().collect::<Vec<_>>(),
        deb_files.keys().collect::<Vec<_>>(),
        "the RPM's files (left) are not the .deb's (right, at RHEL's paths)"
    );
    for (path, entry) in &rpm_files {
        assert_eq!(
            *entry, deb_files[path],
            "{path} in the RPM (left) differs from the .deb's (right)"
        );
    }
    for (path, perms, what) in EXPECTED {
        let entry = rpm_files
            .get(path)
            .unwrap_or_else(|| panic!("the RPM lacks {what} {path}"));
        assert_eq!(entry.perms, *perms, "{what} {path}");
        assert_eq!(entry.owner, "root:root", "{what} {path}");
    }

    // Folders: the RPM owns those of the .deb that are the package's own, as the .deb
    // has them, and leaves the system's (/usr/bin, /usr/share/man/man1...) to the
    // packages that own them.
    let own = |path: &str| path.split('/').any(|c| c == PACKAGE);
    let rpm_dirs: BTreeMap<&str, &Entry> = rpm_entries
        .iter()
        .filter(|(_, (e, _))| e.perms.starts_with('d'))
        .map(|(p, (e, _))| (p.as_str(), e))
        .collect();
    let deb_dirs: BTreeMap<&str, &Entry> = deb_entries
        .iter()
        .filter(|(p, e)| e.perms.starts_with('d') && own(p))
        .map(|(p, e)| (p.as_str(), e))
        .collect();
    assert_eq!(
        rpm_dirs, deb_dirs,
        "the RPM's folders (left), the .deb's own (right)"
    );
    assert!(rpm_dirs.contains_key("/etc/slurm-supervisor"));
    let rules_d = rpm_dirs
        .get(RULES_D)
        .unwrap_or_else(|| panic!("the packages do not ship {RULES_D}: {rpm_dirs:#?}"));
    assert_eq!(
        (rules_d.perms.as_str(), rules_d.owner.as_str()),
        ("drwxr-xr-x", "root:root"),
        "{RULES_D}"
    );
    assert!(
        !rpm_files
            .keys()
            .any(|p| p.starts_with(&format!("{RULES_D}/"))),
        "{RULES_D} is shipped with files in it"
    );

    // Configuration: the .deb's conffiles, %config(noreplace); docs are docs.
    let config: Vec<(&str, &str)> = rpm_entries
        .iter()
        .filter(|(_, (_, flags))| flags.contains('c'))
        .map(|(p, (_, flags))| (p.as_str(), flags.as_str()))
        .collect();
    assert_eq!(
        config,
        [(CONFFILE, "cn")],
        "the RPM's config files and flags"
    );
    let conffiles = must("dpkg-deb", &["-I", &deb, "conffiles"]);
    assert_eq!(
        conffiles.lines().collect::<Vec<_>>(),
        [CONFFILE],
        "the .deb's conffiles"
    );
    for path in rpm_files.keys() {
        let (_, flags) = &rpm_entries[*path];
        if path.starts_with("/usr/share/doc/slurm-supervisor/")
            || path.starts_with("/usr/share/man/")
        {
            assert!(flags.contains('d'), "{path} is not marked as documentation");
        }
    }
}

/// The shared libraries of glibc and libgcc (zig links its own unwinder, and glibc before
/// 2.34 has libdl and libpthread apart), as RPM names what a binary needs of them.
const GLIBC_AND_LIBGCC: &[&str] = &[
    "libc.so.6(",
    "libm.so.6(",
    "libdl.so.2(",
    "libpthread.so.0(",
    "ld-linux-x86-64.so.2(",
    "libgcc_s.so.1(",
];

/// The greatest `GLIBC_x.y` version among the RPM's requirements, as numbers.
fn glibc_needed(requires: &str) -> (u32, u32) {
    requires
        .lines()
        .filter_map(|r| r.split_once("(GLIBC_")?.1.split_once(')'))
        .map(|(v, _)| {
            let mut parts = v.split('.').map(|n| n.parse::<u32>().unwrap());
            (parts.next().unwrap(), parts.next().unwrap())
        })
        .max()
        .expect("the RPM requires no GLIBC_ version")
}

/// RPM finds the binaries' shared libraries and symbol versions itself (`elfdeps`, what
/// `objdump -T` shows): they must be glibc's and libgcc's only, which every RHEL has
/// (SQLite is built in, libmunge is opened only when used and recommended), and the glibc
/// docs/packaging.md names must be the one the binaries need, so that it says truly which
/// RHEL releases the package runs on.
#[test]
fn the_rpm_requires_only_glibc_libgcc_and_sh_and_the_docs_name_its_glibc() {
    let rpm = package(RPM_VAR);
    let requires = must("rpm", &["-qpR", &rpm]);
    let version = must("rpm", &["-qp", "--qf", "%{VERSION}-%{RELEASE}", &rpm]);
    let base_system = |r: &str| {
        r.starts_with("rpmlib(")
            || r == "/bin/sh"
            || r == "rtld(GNU_HASH)"
            || r == format!("config({PACKAGE}) = {version}")
            || GLIBC_AND_LIBGCC.iter().any(|lib| r.starts_with(lib))
    };
    let others: Vec<&str> = requires.lines().filter(|r| !base_system(r)).collect();
    assert!(
        others.is_empty(),
        "the RPM requires more than glibc, libgcc and /bin/sh: {others:?}"
    );
    let recommends = must("rpm", &["-qp", "--recommends", &rpm]);
    assert_eq!(
        recommends.lines().collect::<BTreeSet<_>>(),
        BTreeSet::from(["munge-libs", "slurm"]),
        "the RPM's weak dependencies (the .deb's slurm-client and libmunge2)"
    );

    let (major, minor) = glibc_needed(&requires);
    let docs =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/packaging.md")).unwrap();
    let claim = format!("need glibc {major}.{minor}");
    assert!(
        docs.contains(&claim),
        "docs/packaging.md does not say the binaries {claim} (the RPM requires GLIBC_{major}.{minor}): \
         update what it says they need and which RHEL releases that covers"
    );
}

/// A root for `rpm --root`: empty but for what the scriptlets use, `/bin/sh` (this
/// machine's dash and the libraries it loads), `/dev/null` and a `systemctl` that writes its arguments
/// to [`SYSTEMCTL_LOG`]. In a chroot the real systemctl ignores exactly what matters here
/// (starting, restarting, reloading), so the test records what the scriptlets ask for.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new() -> Root {
        let dir = tempfile::Builder::new()
            .prefix("ssv-rpm-root-")
            .tempdir_in(scratch_root())
            .unwrap();
        let root = Root { dir };
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let mut programs = vec![sh.clone()];
        for line in must("ldd", &[sh.to_str().unwrap()]).lines() {
            // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
            // "/lib64/ld-linux-x86-64.so.2 (0x...)"; the vDSO has no file.
            let path = line.split("=>").last().unwrap().split_whitespace().next();
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                programs.push(PathBuf::from(path));
            }
        }
        for program in &programs {
            let to = root.path(program.to_str().unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            copy_executable(program, &to);
        }
        std::fs::create_dir_all(root.path("/bin")).unwrap();
        copy_executable(&sh, &root.path("/bin/sh"));
        // The scriptlets send systemctl's output to /dev/null; without it, dash would not
        // run the command at all.
        std::fs::create_dir_all(root.path("/dev")).unwrap();
        nix::sys::stat::mknod(
            &root.path("/dev/null"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o666),
            nix::sys::stat::makedev(1, 3),
        )
        .expect("mknod /dev/null in the root");
        std::fs::create_dir_all(root.path("/usr/bin")).unwrap();
        write_executable(
            &root.path("/usr/bin/systemctl"),
            format!("#!/bin/sh\necho \"$*\" >> {SYSTEMCTL_LOG}\n"),
        );
        std::fs::write(root.path(SYSTEMCTL_LOG), "").unwrap();
        root
    }

    /// `path` (absolute, as inside the root) on this machine.
    fn path(&self, path: &str) -> PathBuf {
        self.dir.path().join(path.trim_start_matches('/'))
    }

    /// `rpm --root ROOT --dbpath DBPATH ARGS...`
    fn rpm(&self, args: &[&str]) -> Output {
        let root = self.dir.path().to_str().unwrap();
        let mut all = vec!["--root", root, "--dbpath", DBPATH];
        all.extend_from_slice(args);
        output("rpm", &all)
    }

    fn must_rpm(&self, args: &[&str]) -> String {
        let out = self.rpm(args);
        assert!(
            out.status.success(),
            "rpm {args:?} in the root failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the scriptlets asked systemctl since the last call, one call a line.
    fn systemctl_calls(&self) -> Vec<String> {
        let log = self.path(SYSTEMCTL_LOG);
        let calls = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, "").unwrap();
        calls.lines().map(str::to_string).collect()
    }

    /// Every path in the root (as inside it), and whether it is a folder.
    fn tree(&self) -> BTreeMap<String, bool> {
        fn walk(dir: &Path, base: &Path, out: &mut BTreeMap<String, bool>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                let is_dir = path.symlink_metadata().unwrap().is_dir();
                let inside = format!("/{}", path.strip_prefix(base).unwrap().display());
                out.insert(inside, is_dir);
                if is_dir {
                    walk(&path, base, out);
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(self.dir.path(), self.dir.path(), &mut out);
        out
    }
}

fn mode_of(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    path.symlink_metadata()
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `-rwxr-xr-x` as 0o755.
fn perms_mode(perms: &str) -> u32 {
    perms[1..]
        .chars()
        .fold(0, |mode, c| (mode << 1) | u32::from(c != '-'))
}

#[test]
fn installed_into_an_empty_root_upgraded_with_an_edited_conffile_and_erased() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test runs rpm --root, which runs the scriptlets in a chroot: run it as root \
         (scripts/test does)"
    );
    let rpm = package(RPM_VAR);
    let newer = package(NEWER_VAR);
    let nvr = |p: &str| must("rpm", &["-qp", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}", p]);
    let (old_nvr, new_nvr) = (nvr(&rpm), nvr(&newer));
    assert_ne!(
        old_nvr, new_nvr,
        "{NEWER_VAR} is the same build as {RPM_VAR}"
    );
    let entries = rpm_entries(&rpm);
    let units = |dir: &str| -> Vec<String> {
        entries
            .keys()
            .filter_map(|p| p.strip_prefix(dir))
            .map(str::to_string)
            .collect()
    };
    let (system_units, user_units) = (
        units("/usr/lib/systemd/system/").join(" "),
        units("/usr/lib/systemd/user/").join(" "),
    );
    let services: Vec<String> = units("/usr/lib/systemd/system/")
        .into_iter()
        .filter(|u| u.ends_with(".service"))
        .collect();

    let root = Root::new();
    root.must_rpm(&["--initdb"]);
    let before = root.tree();

    // Only what a RHEL system has and Debian cannot tell rpm about is missing: glibc's
    // and libgcc's libraries and /bin/sh (the root's rpm database is empty).
    let test = root.rpm(&["-i", "--test", &rpm]);
    let stderr = String::from_utf8_lossy(&test.stderr);
    let missing: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" is needed by "))
        .map(|l| l.trim().split(" is needed by ").next().unwrap())
        .collect();
    assert!(!missing.is_empty(), "rpm -i --test: {stderr}");
    let requires = must("rpm", &["-qpR", &rpm]);
    for dep in &missing {
        assert!(
            requires.lines().any(|r| r == *dep)
                && (GLIBC_AND_LIBGCC.iter().any(|lib| dep.starts_with(lib))
                    || *dep == "/bin/sh"
                    || *dep == "rtld(GNU_HASH)"),
            "rpm -i --test finds {dep} missing, which is not glibc's, libgcc's or /bin/sh:\n{stderr}"
        );
    }

    // Installed: every file as packed (rpm -V), the units neither enabled nor started.
    root.must_rpm(&["-i", "--nodeps", &rpm]);
    root.must_rpm(&["-V", "--nodeps", PACKAGE]);
    for (path, perms, what) in EXPECTED {
        assert_eq!(
            mode_of(&root.path(path)),
            perms_mode(perms),
            "{what} {path} as installed"
        );
    }
    // rules.d is there, empty, root's and 0755, for `rules accept` to write into.
    let rules_d = root.path(RULES_D);
    let meta = rules_d.symlink_metadata().unwrap();
    assert!(meta.is_dir(), "{RULES_D} as installed: {meta:?}");
    assert_eq!(mode_of(&rules_d), 0o755, "{RULES_D} as installed");
    {
        use std::os::unix::fs::MetadataExt;
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{RULES_D}'s owner");
    }
    assert_eq!(std::fs::read_dir(&rules_d).unwrap().count(), 0, "{RULES_D}");
    assert_eq!(
        root.systemctl_calls(),
        [
            format!("--no-reload preset {system_units}"),
            format!("--no-reload preset --global {user_units}"),
            "daemon-reload".to_string(),
        ],
        "what the first installation asked systemctl"
    );

    // The site edits the conffile and the daemon keeps its state.
    let conffile = root.path(CONFFILE);
    let edited = format!(
        "{}\n# a local edit\n",
        std::fs::read_to_string(&conffile).unwrap()
    );
    std::fs::write(&conffile, &edited).unwrap();
    let state = root.path(STATE_FILE);
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(&state, "the daemon's store").unwrap();
    // ... and accepts a rule, which the daemon writes into rules.d.
    let accepted = format!("{RULES_D}/learnt-0123456789ab.toml");
    let rule = "[[rules]]\nname = \"learnt-0123456789ab\"\nkind = \"transient\"\n";
    std::fs::write(root.path(&accepted), rule).unwrap();

    // Upgraded to the newer build: the edit is kept, with no .rpmnew beside it (the
    // packaged file did not change), and a running daemon would be restarted.
    root.must_rpm(&["-U", "--nodeps", &newer]);
    assert_eq!(
        root.must_rpm(&["-q", "--qf", "%{NAME}-%{VERSION}-%{RELEASE}\n", PACKAGE]),
        format!("{new_nvr}\n"),
        "installed after the upgrade (once)"
    );
    assert_eq!(std::fs::read_to_string(&conffile).unwrap(), edited);
    let mut beside: Vec<String> = std::fs::read_dir(conffile.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    beside.sort();
    assert_eq!(beside, ["rules.d", "supervisor.toml"], "after the upgrade");
    assert_eq!(
        std::fs::read_to_string(root.path(&accepted)).unwrap(),
        rule,
        "the accepted rule after the upgrade"
    );
    let verify = root.rpm(&["-V", "--nodeps", PACKAGE]);
    let changed = String::from_utf8_lossy(&verify.stdout);
    let changed: Vec<&str> = changed.lines().collect();
    assert!(
        changed.len() == 1 && changed[0].ends_with(&format!(" c {CONFFILE}")),
        "rpm -V after the upgrade should find only the edited conffile changed: {changed:?}"
    );
    assert_eq!(
        root.systemctl_calls(),
        [
            "daemon-reload".to_string(),
            "daemon-reload".to_string(),
            format!("try-restart {}", services.join(" ")),
        ],
        "what the upgrade asked systemctl (the new %post, then the old %postun)"
    );

    // Erased: the units stopped and disabled, every file and folder of the package gone
    // but the edited conffile, kept as .rpmsave, the accepted rule (and so its folder),
    // and the state.
    root.must_rpm(&["-e", PACKAGE]);
    assert!(!root.rpm(&["-q", PACKAGE]).status.success());
    assert_eq!(
        root.systemctl_calls(),
        [
            format!("--no-reload disable --now {system_units}"),
            format!("--global disable {user_units}"),
            "daemon-reload".to_string(),
        ],
        "what the erase asked systemctl"
    );
    let saved = format!("{CONFFILE}.rpmsave");
    assert_eq!(std::fs::read_to_string(root.path(&saved)).unwrap(), edited);
    assert_eq!(
        std::fs::read_to_string(&state).unwrap(),
        "the daemon's store"
    );
    let after = root.tree();
    for path in entries.keys() {
        if path != "/etc/slurm-supervisor" && path != RULES_D {
            assert!(!after.contains_key(path), "the erase left {path}");
        }
    }
    let new_files: Vec<&String> = after
        .iter()
        .filter(|(p, is_dir)| !**is_dir && !before.contains_key(*p))
        .map(|(p, _)| p)
        .filter(|p| !p.starts_with(&format!("{DBPATH}/")))
        .collect();
    assert_eq!(
        new_files,
        [&accepted, &saved, &STATE_FILE.to_string()],
        "files the erase left besides rpm's database"
    );
}
