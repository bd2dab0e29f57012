//! Opening a store: a file checked before anything writes to it, brought to this
//! program's schema ([`migrate`]); a read-only reader beside the daemon; in cluster mode
//! a replica of the shared journal, made or reloaded from a snapshot
//! ([`Store::load_snapshot`]) and written out as one ([`Store::snapshot_to`]).

use super::*;

/// Brings the store's schema up to this program's (the migrations it lacks, in order).
/// Returns whether submissions from before dependency rows were kept still wait for
/// theirs ([`backfill_dependencies`] without a reader).
pub(super) fn migrate(conn: &mut Connection, reader: Option<DependencyReader>) -> Result<bool> {
    let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    let known = schema::MIGRATIONS.len() as i64;
    if version > known {
        return Err(StoreError::TooNew {
            found: version,
            known,
        });
    }
    for (i, sql) in schema::MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.savepoint()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
    }
    let pending = backfill_dependencies(conn, reader)?;
    ensure_user_totals(conn)?;
    Ok(pending)
}

/// `VACUUM INTO dest` on `conn` (one read transaction); the journal entry the copy holds.
pub(super) fn snapshot_into(conn: &Connection, dest: &Path) -> Result<u64> {
    let path = dest
        .to_str()
        .ok_or_else(|| StoreError::Busy(format!("{} is not a UTF-8 path", dest.display())))?;
    conn.execute("VACUUM INTO ?1", [path])?;
    let copy = Connection::open_with_flags(
        dest,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    journal_seq(&copy)
}

/// Fills in the dependency rows of submissions made before they were kept (migration 4),
/// once, read by `reader`. Only submissions with an unfinished chain can still matter to
/// anyone. Without a reader, when there are such submissions, nothing is done and it
/// returns `true`: the work stays pending (and the store writes nothing) until
/// [`Store::read_dependencies_with`] gives one.
pub(super) fn backfill_dependencies(
    conn: &mut Connection,
    reader: Option<DependencyReader>,
) -> Result<bool> {
    let pending: Option<String> = conn
        .query_row(
            "SELECT value FROM meta WHERE key = 'dependencies_backfill'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if pending.is_none() {
        return Ok(false);
    }
    let tx = conn.savepoint()?;
    let subs: Vec<(i64, String, Option<Vec<u8>>)> = {
        let mut q = tx.prepare(&format!(
            "SELECT id, argv, script FROM submissions WHERE id IN
               (SELECT submission_id FROM chains WHERE state IN ({}))",
            open_states()
        ))?;
        let rows = q.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    if !subs.is_empty() && reader.is_none() {
        return Ok(true);
    }
    for (id, argv, script) in subs {
        let argv: Vec<String> = from_json(&argv)?;
        let rows = dependency_rows(reader, &argv, script.as_deref(), || {
            format!("filling in the dependency rows of submission {id}")
        })?;
        insert_dependencies(&tx, id, &rows)?;
    }
    tx.execute("DELETE FROM meta WHERE key = 'dependencies_backfill'", [])?;
    tx.commit()?;
    Ok(false)
}

impl Store {
    /// Opens (creating if needed) the store at `path` and brings its schema up to date.
    /// A file that is there but is not a healthy store (empty, not SQLite, someone else's
    /// database, damaged pages) is refused and left exactly as it is.
    pub fn open(path: &Path) -> Result<Store> {
        Self::check_existing(path)?;
        let conn = Connection::open(path)?;
        Store::init(conn)
    }

    /// Checks a store file before anything writes to it: read-only, `quick_check`.
    pub(super) fn check_existing(path: &Path) -> Result<()> {
        let not_a_store = |why: String| StoreError::NotAStore {
            path: path.display().to_string(),
            why,
        };
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(not_a_store(format!("cannot be read ({e})"))),
        };
        if !meta.is_file() {
            return Err(not_a_store("it is not a regular file".into()));
        }
        if meta.len() == 0 {
            return Err(not_a_store("it is empty (0 bytes)".into()));
        }
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| not_a_store(e.to_string()))?;
        let check = || -> rusqlite::Result<(String, i64, i64)> {
            let ok: String = conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0))?;
            let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
            let has_meta: i64 = conn.query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'meta'",
                [],
                |r| r.get(0),
            )?;
            Ok((ok, version, has_meta))
        };
        match check() {
            Err(e) => Err(not_a_store(e.to_string())),
            Ok((ok, _, _)) if ok != "ok" => {
                Err(not_a_store(format!("integrity check failed: {ok}")))
            }
            Ok((_, version, has_meta)) if version == 0 || has_meta == 0 => Err(not_a_store(
                "it is an SQLite database, but not one this program made".into(),
            )),
            Ok(_) => Ok(()),
        }
    }

    /// A second, read-only connection to a running daemon's store, for answering read
    /// requests beside the writer (WAL lets readers and the writer go on together).
    pub fn open_reader(path: &Path) -> Result<Store> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        conn.pragma_update(None, "query_only", true)?;
        let instance: String = conn
            .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                r.get(0)
            })
            .optional()?
            .unwrap_or_default();
        let live = live::LiveCache::watch(&conn);
        Ok(Store {
            conn,
            instance,
            live,
            journal: None,
            dependency_reader: None,
            backfill_pending: false,
        })
    }

    /// An in-memory store, for tests.
    pub fn in_memory() -> Result<Store> {
        Store::init(Connection::open_in_memory()?)
    }

    /// Opens (creating if needed) the replica at `path` of the journal `journal` of the
    /// shared database whose store instance is `instance`, and applies what it has not
    /// applied yet. A replica of another shared database is refused and left as it is.
    pub fn open_replica(path: &Path, instance: &str, journal: Box<dyn Journal>) -> Result<Store> {
        let mut store = Self::open_replica_as_it_is(path, instance, journal)?;
        store.catch_up()?;
        Ok(store)
    }

    /// [`Store::open_replica`] without applying the journal (the caller does, when the
    /// shared database answers).
    pub fn open_replica_as_it_is(
        path: &Path,
        instance: &str,
        journal: Box<dyn Journal>,
    ) -> Result<Store> {
        Self::check_existing(path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            snapshot::remove_leftovers(dir);
        }
        let conn = Connection::open(path)?;
        Self::replica_as_it_is(conn, instance, journal).map_err(|e| match e {
            StoreError::Corrupt(why) => StoreError::NotAStore {
                path: path.display().to_string(),
                why,
            },
            e => e,
        })
    }

    /// An in-memory replica of `journal`, for tests.
    pub fn in_memory_replica(instance: &str, journal: Box<dyn Journal>) -> Result<Store> {
        Self::replica(Connection::open_in_memory()?, instance, journal)
    }

    pub(super) fn replica(
        conn: Connection,
        instance: &str,
        journal: Box<dyn Journal>,
    ) -> Result<Store> {
        let mut store = Self::replica_as_it_is(conn, instance, journal)?;
        store.catch_up()?;
        Ok(store)
    }

    /// The instance of the store in the file at `path`, if there is a healthy one (a
    /// replica made before, when the shared database does not answer).
    pub fn instance_of(path: &Path) -> Result<Option<String>> {
        if !path.exists() {
            return Ok(None);
        }
        Self::check_existing(path)?;
        let reader = Store::open_reader(path)?;
        Ok(Some(reader.instance).filter(|i| !i.is_empty()))
    }

    pub(super) fn replica_as_it_is(
        conn: Connection,
        instance: &str,
        journal: Box<dyn Journal>,
    ) -> Result<Store> {
        let mut store = Store::init_as(conn, Some(instance))?;
        if store.instance != instance {
            return Err(StoreError::Corrupt(format!(
                "it is the store of instance {}, and the shared database's is {instance}: \
                 it is not a replica of this shared database (move it away and start again \
                 to make a new replica)",
                store.instance
            )));
        }
        let seq = journal_seq(&store.conn)?;
        store.journal = Some(Journaling {
            sink: journal,
            pending: Pending::default(),
            seq,
            unsure: false,
            opt_ins: Some(Default::default()),
        });
        Ok(store)
    }

    /// Replaces every row of this replica by snapshot `head`'s (read from the journal,
    /// checked), in one SQLite transaction: a crash meanwhile leaves the replica as it was.
    pub(super) fn load_snapshot(&mut self, head: &snapshot::SnapshotHead) -> Result<()> {
        head.check_known(journal::FORMAT)?;
        let file = snapshot::TempFile::beside(self.conn.path().map(Path::new));
        let j = self.journal.as_mut().expect("a replica");
        j.sink.read_snapshot(head, &file.0)?;
        // The file is what it claims to be: a healthy store of this instance, at the entry.
        let bad = |why: String| {
            StoreError::Corrupt(format!(
                "the shared database's snapshot at journal entry {} {why}",
                head.seq
            ))
        };
        {
            let snap = Connection::open_with_flags(
                &file.0,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            let ok: String = snap
                .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
                .map_err(|e| bad(format!("is not a healthy SQLite file: {e}")))?;
            if ok != "ok" {
                return Err(bad(format!("fails SQLite's check: {ok}")));
            }
            let version: i64 = snap.pragma_query_value(None, "user_version", |r| r.get(0))?;
            if version > schema::MIGRATIONS.len() as i64 {
                return Err(StoreError::TooNew {
                    found: version,
                    known: schema::MIGRATIONS.len() as i64,
                });
            }
            let instance: Option<String> = snap
                .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                    r.get(0)
                })
                .optional()?;
            if instance.as_deref() != Some(self.instance.as_str()) {
                return Err(bad(format!(
                    "is of store instance {instance:?}, and this replica's is {}",
                    self.instance
                )));
            }
            let seq = journal_seq(&snap)?;
            if seq != head.seq {
                return Err(bad(format!("holds entry {seq}, not {}", head.seq)));
            }
        }
        self.conn
            .restore(rusqlite::DatabaseName::Main, &file.0, None::<fn(_)>)?;
        // The rows are the snapshot's from here on, whatever fails next (a migration): the
        // copy told no update hook and changed no version, so the live list is read whole.
        self.live.forget();
        // A snapshot made by an earlier version is brought to this one's schema, as the
        // replica's own file would be.
        self.backfill_pending = migrate(&mut self.conn, self.dependency_reader)?;
        let seq = journal_seq(&self.conn)?;
        let j = self.journal.as_mut().expect("a replica");
        j.seq = seq;
        j.opt_ins = None;
        j.unsure = false;
        Ok(())
    }

    /// Writes this store's whole file, as one read transaction sees it, to the new file
    /// `dest` (`VACUUM INTO`: compact, every table); returns the journal entry it stands at.
    pub fn snapshot_to(&self, dest: &Path) -> Result<u64> {
        snapshot_into(&self.conn, dest)
    }

    /// [`Store::snapshot_to`] of the replica in the file `replica`, on a read-only
    /// connection of its own (the daemon's loop goes on writing meanwhile: WAL).
    pub fn snapshot_file(replica: &Path, dest: &Path) -> Result<u64> {
        let conn = Connection::open_with_flags(
            replica,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        snapshot_into(&conn, dest)
    }

    pub(super) fn init(conn: Connection) -> Result<Store> {
        Store::init_as(conn, None)
    }

    /// [`Store::init`], a new store taking `given` as its instance (else a random one).
    pub(super) fn init_as(mut conn: Connection, given: Option<&str>) -> Result<Store> {
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // After a checkpoint the write-ahead log is cut back to this size, so a burst of
        // writes does not leave the disk holding a huge log.
        conn.pragma_update(None, "journal_size_limit", 64i64 << 20)?;
        // Every statement the loop runs stays prepared (rusqlite keeps 16 by default,
        // fewer than a cycle and a submit use between them).
        conn.set_prepared_statement_cache_capacity(64);
        let backfill_pending = migrate(&mut conn, None)?;
        let instance: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'instance'", [], |r| {
                r.get(0)
            })
            .optional()?;
        let instance = match instance {
            Some(i) => i,
            None => {
                let i = given
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{:08x}", rand::random::<u32>()));
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('instance', ?1)",
                    [&i],
                )?;
                i
            }
        };
        let live = live::LiveCache::watch(&conn);
        Ok(Store {
            conn,
            instance,
            live,
            journal: None,
            dependency_reader: None,
            backfill_pending,
        })
    }

    /// Gives the store its reader of a submission's `--dependency` (from its argv and
    /// script: `daemon::sbatch::dependency_rows`), which it keeps: upgrading what an
    /// earlier version wrote needs it (a journal entry of revision 1, a store or snapshot
    /// whose submissions predate their dependency rows). Rows pending for such a store
    /// are filled in now. Whoever opens a store it will write gives it one, right after
    /// opening it (before a replica catches up). The store imports no reader itself: a
    /// writer gives the rows it computed ([`Store::create_submission_waiting`]).
    pub fn read_dependencies_with(&mut self, reader: DependencyReader) -> Result<()> {
        self.dependency_reader = Some(reader);
        if self.backfill_pending {
            self.backfill_pending = backfill_dependencies(&mut self.conn, Some(reader))?;
        }
        Ok(())
    }

    /// Copies everything in the write-ahead log into the database file and empties the
    /// log (at a clean shutdown).
    pub fn checkpoint(&mut self) -> Result<()> {
        let (busy, _, _): (i64, i64, i64) =
            self.conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })?;
        if busy != 0 {
            return Err(StoreError::Busy(
                "a reader kept the checkpoint from finishing".into(),
            ));
        }
        Ok(())
    }
}
