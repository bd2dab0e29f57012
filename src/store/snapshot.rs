//! Snapshots of a replica (cluster mode, docs/cluster.md "Snapshots"): the store's whole
//! SQLite file at one journal entry, so that the journal before it can be pruned and a new
//! node starts from it instead of replaying everything.
//!
//! A snapshot is made with `VACUUM INTO` from a read transaction on the replica: a
//! compact, consistent copy of **every table** the replica has, whatever they are (a table
//! added by a later migration is carried without this code knowing it), with its `meta`
//! row `journal_seq` saying which entry it stands at (committed in the same transaction as
//! the entry's rows). It is stored compressed (zlib) in parts of at most [`PART`] bytes,
//! with the SHA-256 of the compressed bytes; a node loading it checks the checksum, the
//! length, SQLite's `quick_check`, the store's instance and the entry before it copies it
//! into its replica, in one SQLite transaction (the backup API), so a crash while loading
//! leaves the replica as it was.
//!
//! **Invariant:** a snapshot at entry `n` holds exactly the rows a replica holds after
//! applying entries 1..=n: it is such a replica's file, read in one transaction.

use super::{Result, StoreError};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// How a snapshot is encoded: 1 = an SQLite database file made by `VACUUM INTO`,
/// zlib-compressed. A node never loads a snapshot of a format it does not know.
pub const FORMAT: u32 = 1;

/// The largest part of a snapshot (one row on the shared database).
pub const PART: usize = 1 << 20;

/// A snapshot as the shared database lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotHead {
    /// Its row's id (unique, increasing).
    pub id: u64,
    /// The journal entry it stands at: it holds what entries 1..=seq wrote.
    pub seq: u64,
    /// Its encoding ([`FORMAT`]).
    pub format: u32,
    /// The journal format of the program that made it (`journal::FORMAT`).
    pub journal_format: u32,
    pub parts: u32,
    /// The compressed bytes, and their SHA-256 (hex).
    pub bytes: u64,
    pub sha256: String,
}

impl SnapshotHead {
    /// Whether this program, whose journal format is `journal_format`
    /// (`journal::FORMAT`), can load it.
    pub fn check_known(&self, journal_format: u32) -> Result<()> {
        if self.format != FORMAT {
            return Err(StoreError::Corrupt(format!(
                "the shared database's snapshot at journal entry {} is of snapshot format {}, which this program does not know ({FORMAT}); upgrade slurm-supervisor on this node",
                self.seq, self.format
            )));
        }
        if self.journal_format > journal_format {
            return Err(StoreError::JournalTooNew {
                seq: self.seq,
                found: self.journal_format,
                known: journal_format,
            });
        }
        Ok(())
    }
}

/// Compresses the SQLite file `file` and hands it to `put` in parts of at most [`PART`]
/// bytes (numbered from 0); returns how many parts, the compressed length and its
/// SHA-256.
pub fn encode(
    file: &Path,
    mut put: impl FnMut(u32, &[u8]) -> Result<()>,
) -> Result<(u32, u64, String)> {
    struct Parts<'a> {
        buf: Vec<u8>,
        n: u32,
        bytes: u64,
        sha: Sha256,
        put: &'a mut dyn FnMut(u32, &[u8]) -> Result<()>,
        failed: Option<StoreError>,
    }
    impl Parts<'_> {
        fn flush_part(&mut self) -> std::io::Result<()> {
            if self.buf.is_empty() {
                return Ok(());
            }
            self.sha.update(&self.buf);
            self.bytes += self.buf.len() as u64;
            if let Err(e) = (self.put)(self.n, &self.buf) {
                self.failed = Some(e);
                return Err(std::io::Error::other("the part was not stored"));
            }
            self.n += 1;
            self.buf.clear();
            Ok(())
        }
    }
    impl Write for Parts<'_> {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            let room = PART - self.buf.len();
            let n = room.min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            if self.buf.len() == PART {
                self.flush_part()?;
            }
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut parts = Parts {
        buf: Vec::with_capacity(PART),
        n: 0,
        bytes: 0,
        sha: Sha256::new(),
        put: &mut put,
        failed: None,
    };
    let io = |what: &str, e: std::io::Error| {
        StoreError::Busy(format!(
            "cannot {what} the snapshot {}: {e}",
            file.display()
        ))
    };
    let mut src = std::fs::File::open(file).map_err(|e| io("read", e))?;
    let result = (|| {
        let mut z = flate2::write::ZlibEncoder::new(&mut parts, flate2::Compression::fast());
        std::io::copy(&mut src, &mut z)?;
        z.finish()?;
        Ok(())
    })();
    if let Err(e) = result {
        return Err(parts.failed.take().unwrap_or_else(|| io("compress", e)));
    }
    parts
        .flush_part()
        .map_err(|e| parts.failed.take().unwrap_or_else(|| io("store", e)))?;
    let sha = hex(&parts.sha.finalize());
    Ok((parts.n, parts.bytes, sha))
}

/// Decodes a snapshot's parts, given in order by `next` (`None` after the last), into the
/// file `out`, checking them against `head` (length and checksum). On any mismatch `out`
/// is removed and the snapshot refused.
pub fn decode(
    head: &SnapshotHead,
    out: &Path,
    mut next: impl FnMut(u32) -> Result<Vec<u8>>,
) -> Result<()> {
    let result = (|| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(out)
            .map_err(|e| {
                StoreError::Busy(format!(
                    "cannot write the snapshot to {}: {e}",
                    out.display()
                ))
            })?;
        let mut z = flate2::write::ZlibDecoder::new(file);
        let mut sha = Sha256::new();
        let mut bytes = 0u64;
        let corrupt = |why: String| {
            StoreError::Corrupt(format!(
                "the shared database's snapshot at journal entry {} {why}",
                head.seq
            ))
        };
        for i in 0..head.parts {
            let part = next(i)?;
            sha.update(&part);
            bytes += part.len() as u64;
            z.write_all(&part)
                .map_err(|e| corrupt(format!("cannot be decompressed: {e}")))?;
        }
        if bytes != head.bytes || hex(&sha.finalize()) != head.sha256 {
            return Err(corrupt(format!(
                "does not match its checksum ({bytes} bytes read, {} listed)",
                head.bytes
            )));
        }
        let file = z
            .finish()
            .map_err(|e| corrupt(format!("cannot be decompressed: {e}")))?;
        file.sync_all()
            .map_err(|e| StoreError::Busy(format!("cannot write {}: {e}", out.display())))?;
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(out);
    }
    result
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A file name beside `near` (a replica's file; `None`: in memory) for a snapshot on its
/// way in or out; removed when dropped.
pub struct TempFile(pub PathBuf);

impl TempFile {
    pub fn beside(near: Option<&Path>) -> TempFile {
        let dir = near
            .and_then(Path::parent)
            .filter(|d| !d.as_os_str().is_empty())
            .map(Path::to_path_buf)
            .unwrap_or_else(std::env::temp_dir);
        TempFile(dir.join(format!(
            ".snapshot-{}-{:08x}.db",
            std::process::id(),
            rand::random::<u32>()
        )))
    }
}

/// Removes the snapshot files a crashed process left beside a replica in `dir`: regular
/// files named `.snapshot-<pid>-<hex>.db` whose process is gone (a live one may be
/// writing its own). Links and anything else are left alone; errors are ignored, as a
/// leftover only takes room.
pub fn remove_leftovers(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten().take(10_000) {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = leftover_pid(name) else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        // `file_type` does not follow a link.
        if entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// The pid in a snapshot file's name, if `name` is one.
fn leftover_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(".snapshot-")?.strip_suffix(".db")?;
    let (pid, tag) = rest.split_once('-')?;
    (tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit())).then_some(())?;
    pid.parse().ok()
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Reads a whole small file (tests).
#[cfg(test)]
fn read(p: &Path) -> Vec<u8> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(p).unwrap().read_to_end(&mut v).unwrap();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file encoded in parts and decoded again is the same file; a part changed, or a
    /// part missing, is refused and leaves no file.
    #[test]
    fn leftovers_of_dead_processes_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        // No process has pid 4194305 (above the kernel's largest pid_max).
        let dead = d.join(".snapshot-4194305-0badcafe.db");
        let live = d.join(format!(".snapshot-{}-0badcafe.db", std::process::id()));
        let other = d.join("store.db");
        let odd = d.join(".snapshot-4194305-x.db");
        for f in [&dead, &live, &other, &odd] {
            std::fs::write(f, b"x").unwrap();
        }
        let link = d.join(".snapshot-4194306-0badcafe.db");
        std::os::unix::fs::symlink(&other, &link).unwrap();
        remove_leftovers(d);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists() && odd.exists());
        assert!(link.symlink_metadata().is_ok());
    }

    #[test]
    fn a_snapshot_round_trips_through_its_parts_and_a_damaged_one_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src.db");
        // Bytes that do not compress, so that the parts are several.
        let data: Vec<u8> = (0..(PART * 2 + 1000))
            .map(|_| rand::random::<u8>())
            .collect();
        std::fs::write(&src, &data).unwrap();
        let mut parts = Vec::new();
        let (n, bytes, sha256) = encode(&src, |i, p| {
            assert_eq!(i as usize, parts.len());
            parts.push(p.to_vec());
            Ok(())
        })
        .unwrap();
        assert!(n >= 3, "{n} parts");
        assert!(parts.iter().all(|p| p.len() <= PART));
        let head = SnapshotHead {
            id: 1,
            seq: 7,
            format: FORMAT,
            journal_format: 0x0f02,
            parts: n,
            bytes,
            sha256,
        };
        let out = dir.path().join("out.db");
        decode(&head, &out, |i| Ok(parts[i as usize].clone())).unwrap();
        assert_eq!(read(&out), data);

        let mut damaged = parts.clone();
        damaged[1][10] ^= 1;
        let out2 = dir.path().join("out2.db");
        let e = decode(&head, &out2, |i| Ok(damaged[i as usize].clone())).unwrap_err();
        assert!(e.to_string().contains("entry 7"), "{e}");
        assert!(!out2.exists());
        let short = SnapshotHead {
            parts: n - 1,
            ..head.clone()
        };
        assert!(decode(&short, &out2, |i| Ok(parts[i as usize].clone())).is_err());
        assert!(!out2.exists());
        let later = SnapshotHead {
            format: FORMAT + 1,
            ..head
        };
        assert!(later
            .check_known(0x0f02)
            .unwrap_err()
            .to_string()
            .contains("upgrade slurm-supervisor"));
    }
}
