//! # The SQLite store
//!
//! The embedded default: one file, created with mode `0600` (owner only: a record holds request
//! bodies), in WAL mode, its log synced after every write of a record, so a record is on disk
//! before the attempt it covers is sent. Its schema is versioned (`PRAGMA user_version`) and migrated forward on open;
//! a file from a newer oncekey, a foreign database or a damaged file is refused with a clear
//! [`Error::is_corrupt`] instead of being changed.
//!
//! # Group commit, and one sync per submission
//!
//! One writer thread owns the connection. Every call is queued to it (a client's calls through
//! [`Store::start`], answered from the writer or the syncer straight to the awaiting task, with
//! no thread of tokio's blocking pool in between); it takes all the calls
//! waiting and runs each, atomically (one statement, or a savepoint around several), in one open
//! `BEGIN IMMEDIATE` transaction.
//! Commits sync nothing by themselves (`synchronous = NORMAL`). A batch that writes a record
//! ([`Store::save`], before the attempt it covers, and [`Store::quarantine`]) commits at once,
//! and its calls are answered only after the write-ahead log is synced up to its end, as `FULL`
//! would at that commit. When no other call waits and no sync is under way the writer syncs
//! itself (no thread to wake on the way to the answer); otherwise a thread of its own does,
//! while the writer goes on with the next calls, and one sync answers every batch committed
//! before it. A new submission's claim and its first record come as one call
//! ([`StoreCall::ClaimSave`]): one commit and one sync.
//!
//! Every other call (claim, renew, release, and the removal after a definite answer) is
//! answered at once and left in the open transaction, which the next durable batch commits and
//! syncs with its own: a submission's claim, its record and the previous submission's removal
//! are one commit and one sync, and concurrent submissions share them (group commit). When no
//! call comes for a moment the writer commits the open transaction without a sync; closing the
//! store commits it too. A removal lost in a power cut only makes the next process resend the
//! submission with the same key, and the server replays its first answer (CONTRACT.md section
//! 5); a lost claim or lease is simply free again, and nothing was sent under it, since sending
//! waits for the synced record. [`SqliteStore::syncs`] counts the syncs. Two processes deciding
//! about the same lease are serialised by SQLite's own write lock (held by the open transaction
//! until it commits).
//!
//! Leases are stored and judged on the caller's clock (the `now` and `until` it passes): the
//! processes sharing a file are on one host and read one clock. Hosts sharing a store disagree
//! about the time; `PostgresStore` (feature `postgres`) judges leases by the database's clock.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::error::{BoxError, Error, Result};
use super::store::{Claim, Due, Lease, Listed, Quarantined, Store, StoreAnswer, StoreCall};
use crate::core::Timestamp;

/// The schema, one step per version: `MIGRATIONS[i]` takes `user_version` from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE oncekey_pending (
        name        TEXT PRIMARY KEY NOT NULL,
        record      TEXT,
        lease_owner TEXT,
        lease_until INTEGER
    );",
    // Unreadable records, moved aside as they were stored (the column keeps text or bytes).
    "CREATE TABLE oncekey_quarantine (
        id             INTEGER PRIMARY KEY,
        name           TEXT NOT NULL,
        record,
        reason         TEXT NOT NULL,
        quarantined_at INTEGER NOT NULL
    );",
];

/// When a submission set aside ([`Store::defer`]) is due for `claim_due` again: a column added
/// where it is missing, not a schema version of its own, so that a build from before it still
/// opens the file (its statements name their columns; it only ignores the set-aside time).
const DUE_COLUMN: &str = "ALTER TABLE oncekey_pending ADD COLUMN due INTEGER;";

/// A [`Store`] in a SQLite file. See the module docs.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    jobs: Mutex<Option<mpsc::Sender<Job>>>,
    /// Calls queued and not yet taken by the writer.
    queued: Arc<AtomicUsize>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    syncs: Arc<AtomicU64>,
}

type Reply = std::result::Result<Done, BoxError>;

enum Done {
    Claim(Claim),
    Bool(bool),
    Unit,
    List(Vec<Listed>),
    Quarantined(Vec<Quarantined>),
    Due(Vec<Due>),
}

/// One call, run on the writer's connection inside the batch's transaction.
type Run = Box<dyn FnOnce(&Connection) -> rusqlite::Result<Done> + Send>;

/// Where a call's answer goes: a blocking caller's channel, or [`Store::start`]'s reply.
type Answer = Box<dyn FnOnce(Reply) + Send>;

struct Job {
    run: Run,
    durable: bool,
    reply: Answer,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("durable", &self.durable)
            .finish()
    }
}

/// The most calls one commit carries.
const MAX_BATCH: usize = 512;

fn sql_error(path: &Path, what: &str, e: rusqlite::Error) -> Error {
    let corrupt = matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
    );
    let message = format!("the store {} could not be {what}", path.display());
    if corrupt {
        Error::corrupt(
            format!("{message}: it is damaged or not a SQLite database (move it aside and restore a backup, or start a new store)"),
            e,
        )
    } else {
        Error::store(message, e)
    }
}

impl SqliteStore {
    /// Opens the store at `path`, creating it (mode `0600`) if it does not exist, and migrates
    /// its schema to this version.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        create_private(&path)?;
        let mut conn = Connection::open(&path).map_err(|e| sql_error(&path, "opened", e))?;
        prepare(&path, &mut conn)?;
        let (jobs, queue) = mpsc::channel::<Job>();
        let writer_path = path.clone();
        let syncs = Arc::new(AtomicU64::new(0));
        let counted = syncs.clone();
        let queued = Arc::new(AtomicUsize::new(0));
        let taken = queued.clone();
        let writer = std::thread::Builder::new()
            .name("oncekey-sqlite".into())
            .spawn(move || write_batches(&writer_path, conn, queue, &taken, &counted))
            .map_err(|e| Error::store("the store's writer thread could not start", e))?;
        Ok(SqliteStore {
            path,
            jobs: Mutex::new(Some(jobs)),
            queued,
            writer: Mutex::new(Some(writer)),
            syncs,
        })
    }

    /// How many times this handle has synced its log since it was opened: once per batch that
    /// wrote a record, shared by every call in the batch (see the module docs).
    pub fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn prepare(path: &Path, conn: &mut Connection) -> Result<()> {
    let err = |what: &str, e| sql_error(path, what, e);
    conn.busy_timeout(Duration::from_secs(10))
        .map_err(|e| err("opened", e))?;
    // Every statement the store runs, its own and the writer's, stays parsed.
    conn.set_prepared_statement_cache_capacity(64);
    // Switching a fresh file to WAL takes SQLite's exclusive lock, and SQLite answers "busy"
    // there without waiting on the busy handler: a fleet of processes opening a new store at
    // once would fail but for one. Retried, within the same 10 s as every other lock.
    // A new file gets 1 KiB pages (SQLite's default is 4 KiB): a record is a few hundred
    // bytes, and each commit writes every page it dirtied to the log, so smaller pages write
    // less for the same records. No effect on an existing file.
    conn.execute_batch("PRAGMA page_size = 1024;")
        .map_err(|e| err("opened", e))?;
    let started = std::time::Instant::now();
    let mode: String = loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
            Err(rusqlite::Error::SqliteFailure(f, _))
                if f.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < Duration::from_secs(10) =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            done => break done.map_err(|e| err("read", e))?,
        }
    };
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::store(
            format!("the store {} could not be put in WAL mode", path.display()),
            format!("journal_mode is {mode}"),
        ));
    }
    // Commits sync nothing by themselves; the writer syncs the log after each durable batch
    // (`sync_log`), and SQLite syncs it before every checkpoint.
    conn.execute_batch("PRAGMA synchronous = NORMAL;")
        .map_err(|e| err("opened", e))?;
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| err("opened", e))?;
    let version: usize = tx
        .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0))
        .map_err(|e| err("read", e))?
        .try_into()
        .unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        return Err(Error::corrupt(
            format!(
                "the store {} has schema version {version}, made by a newer oncekey; this one reads up to {}",
                path.display(),
                MIGRATIONS.len()
            ),
            "refusing to change it",
        ));
    }
    if version == 0 {
        let tables: i64 = tx
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(|e| err("read", e))?;
        if tables > 0 {
            return Err(Error::corrupt(
                format!(
                    "{} is a SQLite database of something else, not an oncekey store",
                    path.display()
                ),
                "refusing to change it",
            ));
        }
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
        tx.execute_batch(step).map_err(|e| err("migrated", e))?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .map_err(|e| err("migrated", e))?;
    }
    let has_due: i64 = tx
        .query_row(
            "SELECT count(*) FROM pragma_table_info('oncekey_pending') WHERE name = 'due'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| err("read", e))?;
    if has_due == 0 {
        tx.execute_batch(DUE_COLUMN)
            .map_err(|e| err("migrated", e))?;
    }
    tx.commit().map_err(|e| err("migrated", e))
}

impl SqliteStore {
    /// Runs `run` on the writer thread, in the next batch, and waits for its answer.
    fn call(
        &self,
        durable: bool,
        run: impl FnOnce(&Connection) -> rusqlite::Result<Done> + Send + 'static,
    ) -> Reply {
        let (reply, answer) = mpsc::sync_channel(1);
        self.queue(
            durable,
            Box::new(run),
            Box::new(move |done| {
                let _ = reply.send(done);
            }),
        );
        answer.recv().unwrap_or_else(|_| Err(self.gone()))
    }

    /// Queues `run` to the writer thread, which hands its answer to `reply` (or, when the
    /// store is closed, answers so here).
    fn queue(&self, durable: bool, run: Run, reply: Answer) {
        let job = Job {
            run,
            durable,
            reply,
        };
        self.queued.fetch_add(1, Ordering::AcqRel);
        let refused = match &*self.jobs.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(jobs) => jobs.send(job).err().map(|e| e.0),
            None => Some(job),
        };
        if let Some(job) = refused {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            (job.reply)(Err(self.gone()));
        }
    }

    fn gone(&self) -> BoxError {
        Box::new(Error::store(
            format!("the store {} is closed", self.path.display()),
            "its writer thread stopped",
        ))
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the queue ends the writer, which closes the connection (and checkpoints).
        self.jobs.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(writer) = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = writer.join();
        }
    }
}

/// How long the writer keeps a transaction holding only unsynced work (claims, renewals,
/// releases, removals) open for the next durable write to carry, before committing it alone.
const IDLE_COMMIT: Duration = Duration::from_millis(2);

/// The longest such a transaction stays open under a steady stream of light calls, so that
/// another process waiting for the write lock gets it.
const MAX_OPEN: Duration = Duration::from_millis(20);

/// The writer thread, and the syncer it starts: takes every job waiting and runs each,
/// atomically, in the open transaction. A batch with a durable job commits at once and is
/// answered once the log is synced: by the writer itself when no call waits and no sync is
/// under way (no thread to wake on the way to the answer), otherwise by the syncer, while the
/// writer goes on with the next calls. A batch of light jobs is answered at once and left in
/// the open transaction, for the next durable batch to commit (or the writer commits it,
/// without a sync, once no job came for [`IDLE_COMMIT`], and when the store closes). Later
/// calls run on the same connection, so they see its work at once; other connections see it
/// once committed, and wait on SQLite's write lock meanwhile.
fn write_batches(
    path: &Path,
    conn: Connection,
    queue: mpsc::Receiver<Job>,
    queued: &AtomicUsize,
    syncs: &AtomicU64,
) {
    // Durable batches handed to the syncer and not yet answered.
    let handed = AtomicUsize::new(0);
    let writer = Writer {
        path,
        queued,
        syncs,
        handed: &handed,
    };
    std::thread::scope(|scope| {
        let (synced, to_sync) = mpsc::channel::<Vec<Ran>>();
        let syncer = std::thread::Builder::new()
            .name("oncekey-sqlite-sync".into())
            .spawn_scoped(scope, move || sync_batches(&writer, to_sync));
        match syncer {
            Ok(_) => write(&writer, &conn, &queue, &synced),
            Err(e) => {
                let message = format!("the store's sync thread could not start: {e}");
                while let Ok(job) = queue.recv() {
                    (job.reply)(Err(message.clone().into()));
                }
            }
        }
        // Dropping `synced` ends the syncer once it has answered every batch handed to it.
    });
}

/// A call that ran, with its answer, waiting for the sync that makes it durable.
type Ran = (rusqlite::Result<Done>, Answer);

/// What the writer and the syncer share.
#[derive(Clone, Copy)]
struct Writer<'a> {
    path: &'a Path,
    queued: &'a AtomicUsize,
    syncs: &'a AtomicU64,
    handed: &'a AtomicUsize,
}

impl Writer<'_> {
    /// Syncs the log up to its end, and then answers `waiting`, committed before the sync.
    fn sync(&self, wal: &mut Option<std::fs::File>, waiting: Vec<Ran>) {
        match sync_log(self.path, wal) {
            Ok(()) => {
                self.syncs.fetch_add(1, Ordering::Relaxed);
                answer(self.path, waiting);
            }
            Err(e) => fail_all(self.path, waiting.into_iter().map(|(_, r)| r), "synced", e),
        }
    }
}

fn write(
    writer: &Writer<'_>,
    conn: &Connection,
    queue: &mpsc::Receiver<Job>,
    synced: &mpsc::Sender<Vec<Ran>>,
) {
    let path = writer.path;
    let mut wal: Option<std::fs::File> = None;
    let mut open = false;
    let mut opened = std::time::Instant::now();
    loop {
        if open && opened.elapsed() >= MAX_OPEN {
            open = false;
            commit_light(path, conn);
        }
        let first = if open {
            match queue.recv_timeout(IDLE_COMMIT) {
                Ok(job) => job,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    open = false;
                    commit_light(path, conn);
                    continue;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    commit_light(path, conn);
                    break;
                }
            }
        } else {
            match queue.recv() {
                Ok(job) => job,
                Err(_) => break,
            }
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        writer.queued.fetch_sub(batch.len(), Ordering::AcqRel);
        let durable = batch.iter().any(|j| j.durable);
        if !open {
            if let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
                fail_all(path, batch.into_iter().map(|j| j.reply), "written", e);
                continue;
            }
            open = true;
            opened = std::time::Instant::now();
        }
        let mut answers = Vec::with_capacity(batch.len());
        let mut replies = Vec::with_capacity(batch.len());
        for job in batch {
            // Each job is atomic by itself: one write (a statement is), or a savepoint of its
            // own around more (`in_savepoint`).
            answers.push((job.run)(conn));
            replies.push(job.reply);
        }
        let answered: Vec<Ran> = answers.into_iter().zip(replies).collect();
        if !durable {
            answer(path, answered);
            continue;
        }
        open = false;
        if let Err(e) = exec(conn, "COMMIT") {
            let _ = conn.execute_batch("ROLLBACK");
            fail_all(path, answered.into_iter().map(|(_, r)| r), "written", e);
            continue;
        }
        // No call waiting and no sync under way: sync here, with no thread to wake. Else the
        // syncer does, while this thread goes on with the next calls.
        if writer.handed.load(Ordering::Acquire) == 0 && writer.queued.load(Ordering::Acquire) == 0
        {
            writer.sync(&mut wal, answered);
            continue;
        }
        writer.handed.fetch_add(1, Ordering::AcqRel);
        if let Err(std::sync::mpsc::SendError(answered)) = synced.send(answered) {
            writer.handed.fetch_sub(1, Ordering::AcqRel);
            let e = sync_error("the store's sync thread stopped".into());
            fail_all(path, answered.into_iter().map(|(_, r)| r), "synced", e);
        }
    }
}

fn answer(path: &Path, answered: Vec<Ran>) {
    for (answer, reply) in answered {
        reply(answer.map_err(|e| -> BoxError { Box::new(sql_error(path, "written", e)) }));
    }
}

/// The syncer thread: takes every committed durable batch waiting, syncs the log once for them
/// all (a sync covers every commit before it), and only then answers their calls.
fn sync_batches(writer: &Writer<'_>, queue: mpsc::Receiver<Vec<Ran>>) {
    let mut wal: Option<std::fs::File> = None;
    while let Ok(mut waiting) = queue.recv() {
        let mut batches = 1;
        while let Ok(more) = queue.try_recv() {
            waiting.extend(more);
            batches += 1;
        }
        writer.sync(&mut wal, waiting);
        writer.handed.fetch_sub(batches, Ordering::AcqRel);
    }
}

/// Commits the open transaction of light work, without a sync (it rides the next one). A
/// failure loses that work, which the store allows for it (see the module docs).
fn commit_light(path: &Path, conn: &Connection) {
    if let Err(e) = exec(conn, "COMMIT") {
        let _ = conn.execute_batch("ROLLBACK");
        tracing::warn!(
            store = %path.display(),
            "unsynced store changes (a removal, a lease) could not be committed: {e}"
        );
    }
}

/// Syncs the write-ahead log up to its end: the commit just made and every unsynced one before
/// it. The connection runs with `synchronous = NORMAL` (a commit appends to the log and syncs
/// nothing); this sync is what `FULL` would do at the commit of a durable batch, and only there.
fn sync_log(path: &Path, wal: &mut Option<std::fs::File>) -> rusqlite::Result<()> {
    let io =
        |e: std::io::Error| sync_error(format!("the write-ahead log could not be synced: {e}"));
    if wal.is_none() {
        // The log exists while a connection is open in WAL mode, as the writer's is.
        let mut name = path.as_os_str().to_owned();
        name.push("-wal");
        *wal = Some(std::fs::File::open(name).map_err(io)?);
    }
    match wal {
        Some(file) => file.sync_data().map_err(io),
        None => Ok(()),
    }
}

fn sync_error(message: String) -> rusqlite::Error {
    rusqlite::Error::SqliteFailure(
        rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR_FSYNC),
        Some(message),
    )
}

/// Answers every reply of a batch that failed with the same error.
fn fail_all(path: &Path, replies: impl Iterator<Item = Answer>, what: &str, e: rusqlite::Error) {
    let error = sql_error(path, what, e);
    let corrupt = error.is_corrupt();
    let message = error.to_string();
    for reply in replies {
        let failed = format!("the store {} failed", path.display());
        let e = if corrupt {
            Error::corrupt(failed, message.clone())
        } else {
            Error::store(failed, message.clone())
        };
        reply(Err(Box::new(e)));
    }
}

/// Runs `f`, a call that writes more than once, in a savepoint of the open transaction: all of
/// it is kept, or none.
fn in_savepoint(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> rusqlite::Result<Done>,
) -> rusqlite::Result<Done> {
    exec(conn, "SAVEPOINT oncekey_op")?;
    match f(conn) {
        Ok(done) => exec(conn, "RELEASE oncekey_op").map(|()| done),
        Err(e) => {
            let _ = exec(conn, "ROLLBACK TO oncekey_op");
            let _ = exec(conn, "RELEASE oncekey_op");
            Err(e)
        }
    }
}

/// Runs one statement of the writer's own (transaction control, the sync level) from the
/// statement cache: they run several times per batch, and are parsed once.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

#[cfg(unix)]
fn create_private(path: &Path) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(Error::store(
            format!("the store {} could not be created", path.display()),
            e,
        )),
    }
}

#[cfg(not(unix))]
fn create_private(_path: &Path) -> Result<()> {
    Ok(())
}

fn unexpected() -> BoxError {
    "the store's writer answered another kind of call".into()
}

/// A submission's call as a job for the writer: whether it must be durable before it is
/// answered, and what it runs.
fn job(call: StoreCall) -> (bool, Run) {
    match call {
        StoreCall::Claim { name, lease, now } => (
            false,
            Box::new(move |conn| claim(conn, &name, None, &lease, now)),
        ),
        StoreCall::Save {
            name,
            record,
            lease,
        } => (
            true,
            Box::new(move |conn| save(conn, &name, &record, &lease)),
        ),
        // One job: the claim and the save commit (and are synced) together.
        StoreCall::ClaimSave {
            name,
            lease,
            now,
            record,
        } => (
            true,
            Box::new(move |conn| {
                // Most names are new: the row, its record and its lease in one statement.
                let inserted = conn
                    .prepare_cached(
                        "INSERT INTO oncekey_pending (name, record, lease_owner, lease_until)
                         VALUES (?1, ?2, ?3, ?4) ON CONFLICT (name) DO NOTHING",
                    )?
                    .execute(params![name, record, lease.owner, millis(lease.until)])?;
                if inserted == 1 {
                    return Ok(Done::Claim(Claim::Taken(None)));
                }
                in_savepoint(conn, |conn| {
                    let claimed = claim(conn, &name, None, &lease, now)?;
                    if matches!(claimed, Done::Claim(Claim::Taken(None))) {
                        save(conn, &name, &record, &lease)?;
                    }
                    Ok(claimed)
                })
            }),
        ),
        StoreCall::Renew { name, lease } => (
            false,
            Box::new(move |conn| {
                conn.prepare_cached(
                    "UPDATE oncekey_pending SET lease_until = ?3 WHERE name = ?1 AND lease_owner = ?2",
                )?
                .execute(params![name, lease.owner, millis(lease.until)])
                .map(|n| Done::Bool(n == 1))
            }),
        ),
        // Not synced on its own: it rides the next synced commit (see the module docs).
        StoreCall::Remove { name, owner } => {
            (false, Box::new(move |conn| remove(conn, &name, &owner)))
        }
        // Deferred (`due`): kept out of `claim_due` until then; released, due at once.
        StoreCall::Release { name, owner, due } => (
            false,
            Box::new(move |conn| {
                in_savepoint(conn, |conn| {
                    conn.prepare_cached(
                        "DELETE FROM oncekey_pending WHERE name = ?1 AND lease_owner = ?2 AND record IS NULL",
                    )?
                    .execute(params![name, owner])?;
                    conn.prepare_cached(
                        "UPDATE oncekey_pending SET lease_owner = NULL, lease_until = NULL, due = ?3
                         WHERE name = ?1 AND lease_owner = ?2",
                    )?
                    .execute(params![name, owner, due.map(millis)])?;
                    Ok(Done::Unit)
                })
            }),
        ),
    }
}

/// Removes the record and lease of `name` if `owner` holds its lease.
fn remove(conn: &Connection, name: &str, owner: &str) -> rusqlite::Result<Done> {
    conn.prepare_cached("DELETE FROM oncekey_pending WHERE name = ?1 AND lease_owner = ?2")?
        .execute(params![name, owner])
        .map(|n| Done::Bool(n == 1))
}

/// Writes `record` under `name` if `lease.owner` holds its lease, extending it.
fn save(conn: &Connection, name: &str, record: &str, lease: &Lease) -> rusqlite::Result<Done> {
    conn.prepare_cached(
        "UPDATE oncekey_pending SET record = ?2, lease_until = ?4 WHERE name = ?1 AND lease_owner = ?3",
    )?
    .execute(params![name, record, lease.owner, millis(lease.until)])
    .map(|n| Done::Bool(n == 1))
}

/// A job's answer as the [`StoreCall`]'s.
fn answered(done: Done) -> std::result::Result<StoreAnswer, BoxError> {
    match done {
        Done::Claim(c) => Ok(StoreAnswer::Claim(c)),
        Done::Bool(b) => Ok(StoreAnswer::Bool(b)),
        Done::Unit => Ok(StoreAnswer::Unit),
        Done::List(_) | Done::Quarantined(_) | Done::Due(_) => Err(unexpected()),
    }
}

impl SqliteStore {
    /// [`Store::release`], or [`Store::defer`] until `due` when it is set.
    fn release_until(
        &self,
        name: &str,
        owner: &str,
        due: Option<Timestamp>,
    ) -> Result<(), BoxError> {
        let call = StoreCall::Release {
            name: name.to_owned(),
            owner: owner.to_owned(),
            due,
        };
        self.call_blocking(call)?;
        Ok(())
    }

    /// Makes `call` on the writer thread and waits for its answer.
    fn call_blocking(&self, call: StoreCall) -> Reply {
        let (durable, run) = job(call);
        self.call(durable, run)
    }
}

impl Store for SqliteStore {
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError> {
        let call = StoreCall::Claim {
            name: name.to_owned(),
            lease: lease.clone(),
            now,
        };
        match self.call_blocking(call)? {
            Done::Claim(c) => Ok(c),
            _ => Err(unexpected()),
        }
    }

    fn take_over(
        &self,
        name: &str,
        holder: &str,
        lease: &Lease,
        now: Timestamp,
    ) -> Result<Claim, BoxError> {
        let (name, holder, lease) = (name.to_owned(), holder.to_owned(), lease.clone());
        match self.call(false, move |conn| {
            claim(conn, &name, Some(&holder), &lease, now)
        })? {
            Done::Claim(c) => Ok(c),
            _ => Err(unexpected()),
        }
    }

    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError> {
        let call = StoreCall::Save {
            name: name.to_owned(),
            record: record.to_owned(),
            lease: lease.clone(),
        };
        match self.call_blocking(call)? {
            Done::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError> {
        let call = StoreCall::Renew {
            name: name.to_owned(),
            lease: lease.clone(),
        };
        match self.call_blocking(call)? {
            Done::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let call = StoreCall::Remove {
            name: name.to_owned(),
            owner: owner.to_owned(),
        };
        match self.call_blocking(call)? {
            Done::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    /// The removal as a durable job: answered once it is synced.
    fn discard(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        match self.call(true, move |conn| remove(conn, &name, &owner))? {
            Done::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError> {
        self.release_until(name, owner, None)
    }

    fn defer(&self, name: &str, owner: &str, due: Timestamp) -> Result<(), BoxError> {
        self.release_until(name, owner, Some(due))
    }

    /// One job: the free submissions that are due, oldest name first, each claimed.
    fn claim_due(&self, lease: &Lease, now: Timestamp, limit: usize) -> Result<Vec<Due>, BoxError> {
        let lease = lease.clone();
        let done = self.call(false, move |conn| {
            in_savepoint(conn, |conn| {
                let names = conn
                    .prepare_cached(
                        "SELECT name FROM oncekey_pending WHERE record IS NOT NULL
                         AND (lease_until IS NULL OR lease_until <= ?1)
                         AND (due IS NULL OR due <= ?1) ORDER BY name LIMIT ?2",
                    )?
                    .query_map(
                        params![millis(now), i64::try_from(limit).unwrap_or(i64::MAX)],
                        |r| r.get::<_, String>(0),
                    )?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let mut due = Vec::with_capacity(names.len());
                for name in names {
                    if let Done::Claim(Claim::Taken(Some(record))) =
                        claim(conn, &name, None, &lease, now)?
                    {
                        due.push(Due { name, record });
                    }
                }
                Ok(Done::Due(due))
            })
        })?;
        match done {
            Done::Due(due) => Ok(due),
            _ => Err(unexpected()),
        }
    }

    /// The writer thread answers a submission's calls itself: a save once the sync that makes
    /// it durable is done, every other call at once.
    fn starts(&self) -> bool {
        true
    }

    fn start(&self, call: StoreCall, reply: super::store::StoreReply) {
        let (durable, run) = job(call);
        self.queue(
            durable,
            run,
            Box::new(move |done| reply(done.and_then(answered))),
        );
    }

    fn list(&self) -> Result<Vec<Listed>, BoxError> {
        match self.call(false, list)? {
            Done::List(l) => Ok(l),
            _ => Err(unexpected()),
        }
    }

    fn quarantine(
        &self,
        name: &str,
        owner: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        let (name, owner, reason) = (name.to_owned(), owner.to_owned(), reason.to_owned());
        let done = self.call(true, move |conn| {
            in_savepoint(conn, |conn| {
                let moved = conn
                    .prepare_cached(
                        "INSERT INTO oncekey_quarantine (name, record, reason, quarantined_at)
                     SELECT name, record, ?3, ?4 FROM oncekey_pending
                     WHERE name = ?1 AND lease_owner = ?2 AND record IS NOT NULL",
                    )?
                    .execute(params![name, owner, reason, millis(now)])?;
                if moved == 1 {
                    conn.prepare_cached("DELETE FROM oncekey_pending WHERE name = ?1")?
                        .execute([&name])?;
                }
                Ok(Done::Bool(moved == 1))
            })
        })?;
        match done {
            Done::Bool(b) => Ok(b),
            _ => Err(unexpected()),
        }
    }

    fn quarantined(&self) -> Result<Vec<Quarantined>, BoxError> {
        let done = self.call(false, |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT name, record, reason, quarantined_at FROM oncekey_quarantine ORDER BY id",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(Quarantined {
                    name: r.get(0)?,
                    record: lossy(r.get_ref(1)?),
                    reason: r.get(2)?,
                    at: Timestamp::from_millis(r.get::<_, i64>(3)?.max(0) as u64),
                })
            })?;
            rows.collect::<rusqlite::Result<Vec<_>>>()
                .map(Done::Quarantined)
        })?;
        match done {
            Done::Quarantined(q) => Ok(q),
            _ => Err(unexpected()),
        }
    }
}

/// A stored value as text: a record that is not text is read as lossy text, so it fails to
/// parse as a record (one unreadable record) instead of failing the whole list.
fn lossy(value: rusqlite::types::ValueRef<'_>) -> String {
    match value {
        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
            String::from_utf8_lossy(t).into_owned()
        }
        other => format!("{other:?}"),
    }
}

/// A stored record's text ([`record_text`](super::store::record_text)) from its bytes, text or
/// blob.
fn stored_text(value: rusqlite::types::ValueRef<'_>) -> String {
    match value {
        rusqlite::types::ValueRef::Text(t) | rusqlite::types::ValueRef::Blob(t) => {
            super::store::record_text(t.to_vec())
        }
        other => lossy(other),
    }
}

/// A claim, with a lease held by `dead` counted as run out.
fn claim(
    conn: &Connection,
    name: &str,
    dead: Option<&str>,
    lease: &Lease,
    now: Timestamp,
) -> rusqlite::Result<Done> {
    // The record as text whatever the column holds ([`stored_text`]): the client then finds
    // one that is not UTF-8 unreadable and moves it aside, as the store keeps it, rather than
    // every claim of the name failing.
    let row: Option<(Option<String>, Option<String>, Option<i64>)> = conn
        .prepare_cached(
            "SELECT record, lease_owner, lease_until FROM oncekey_pending WHERE name = ?1",
        )?
        .query_row([name], |r| {
            let record = match r.get_ref(0)? {
                rusqlite::types::ValueRef::Null => None,
                value => Some(stored_text(value)),
            };
            Ok((record, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let record = match row {
        Some((record, Some(owner), Some(until))) => {
            let until = Timestamp::from_millis(until.max(0) as u64);
            if owner != lease.owner && Some(owner.as_str()) != dead && until > now {
                return Ok(Done::Claim(Claim::Busy(Lease { owner, until })));
            }
            record
        }
        Some((record, _, _)) => record,
        None => None,
    };
    conn.prepare_cached(
        "INSERT INTO oncekey_pending (name, record, lease_owner, lease_until) VALUES (?1, NULL, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET lease_owner = excluded.lease_owner, lease_until = excluded.lease_until, due = NULL",
    )?
    .execute(params![name, lease.owner, millis(lease.until)])?;
    Ok(Done::Claim(Claim::Taken(record)))
}

fn list(conn: &Connection) -> rusqlite::Result<Done> {
    let mut stmt = conn.prepare_cached(
        "SELECT name, record, lease_owner, lease_until FROM oncekey_pending
         WHERE record IS NOT NULL ORDER BY name",
    )?;
    let rows = stmt.query_map([], |r| {
        let owner: Option<String> = r.get(2)?;
        let until: Option<i64> = r.get(3)?;
        Ok(Listed {
            name: r.get(0)?,
            record: lossy(r.get_ref(1)?),
            lease: owner.zip(until).map(|(owner, until)| Lease {
                owner,
                until: Timestamp::from_millis(until.max(0) as u64),
            }),
        })
    })?;
    rows.collect::<rusqlite::Result<Vec<_>>>().map(Done::List)
}

fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A new store at `path` holding one record, `{}` under "n", and the lease it was saved
    /// with (run out at 1 ms).
    fn one_record(path: &Path) -> (SqliteStore, Lease) {
        let store = SqliteStore::open(path).unwrap();
        let lease = Lease {
            owner: "o".into(),
            until: Timestamp::from_millis(1),
        };
        store.claim("n", &lease, Timestamp::from_millis(0)).unwrap();
        assert!(store.save("n", "{}", &lease).unwrap());
        (store, lease)
    }

    #[test]
    fn a_file_without_the_set_aside_column_gets_it_and_keeps_its_version_and_records() {
        // As the build before it wrote the file (schema version 2, no `due`): opened, the
        // column is added, the version stays (so that build still opens it), records stay.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let (store, lease) = one_record(&path);
        drop(store);
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("ALTER TABLE oncekey_pending DROP COLUMN due")
            .unwrap();
        drop(conn);
        let store = SqliteStore::open(&path).unwrap();
        let due = store
            .claim_due(&lease, Timestamp::from_millis(2), 10)
            .unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].name.as_str(), due[0].record.as_str()), ("n", "{}"));
        drop(store);
        let conn = Connection::open(&path).unwrap();
        let (version, columns): (i64, i64) = conn
            .query_row(
                "SELECT (SELECT user_version FROM pragma_user_version),
                        (SELECT count(*) FROM pragma_table_info('oncekey_pending') WHERE name = 'due')",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!((version, columns), (2, 1));
    }

    #[test]
    fn sqlite_store_has_the_semantics_across_connections() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let a = SqliteStore::open(&path).unwrap();
        let b = SqliteStore::open(&path).unwrap();
        super::super::store::check_semantics(&a, &b, super::super::store::Judged::ByCaller);
    }

    /// A fleet starting at once: every process opens the same fresh store, and each of them
    /// gets it (none fails with "database is locked" while another sets up WAL mode).
    #[test]
    fn many_open_a_fresh_store_at_once() {
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("s.db");
            let start = std::sync::Barrier::new(8);
            std::thread::scope(|scope| {
                let opened: Vec<_> = (0..8)
                    .map(|_| {
                        scope.spawn(|| {
                            start.wait();
                            SqliteStore::open(&path).map(|_| ())
                        })
                    })
                    .collect();
                for o in opened {
                    if let Err(e) = o.join().unwrap() {
                        panic!("round {round}: {e}");
                    }
                }
            });
        }
    }

    #[cfg(unix)]
    #[test]
    fn the_file_is_private_and_reopens_at_the_same_version() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let (store, _) = one_record(&path);
        for file in ["s.db", "s.db-wal", "s.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(file))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600, "{file}");
        }
        drop(store);
        drop(SqliteStore::open(&path).unwrap());
        let conn = Connection::open(&path).unwrap();
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, MIGRATIONS.len() as i64);
        // Set before the file's first page is written (after it, SQLite ignores it).
        let page: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .unwrap();
        assert_eq!(page, 1024, "a new store's pages");
    }

    #[test]
    fn concurrent_calls_share_commits_and_all_land() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
        let threads: Vec<_> = (0..32)
            .map(|i| {
                let store = store.clone();
                std::thread::spawn(move || {
                    let name = format!("n{i:02}");
                    let lease = Lease {
                        owner: format!("o{i}"),
                        until: Timestamp::from_millis(100),
                    };
                    let t = Timestamp::from_millis(0);
                    assert_eq!(store.claim(&name, &lease, t).unwrap(), Claim::Taken(None));
                    assert!(store.save(&name, &format!("{{{i}}}"), &lease).unwrap());
                    // Another owner's claim in the same batch is refused.
                    let other = Lease {
                        owner: "x".into(),
                        until: Timestamp::from_millis(100),
                    };
                    assert!(matches!(
                        store.claim(&name, &other, t).unwrap(),
                        Claim::Busy(_)
                    ));
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let listed = store.list().unwrap();
        assert_eq!(listed.len(), 32);
        assert_eq!(listed[7].record, "{7}");
    }

    #[test]
    fn a_submission_syncs_once_its_removal_rides_the_next_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        let lease = Lease {
            owner: "o".into(),
            until: Timestamp::from_millis(100),
        };
        let t = Timestamp::from_millis(0);
        for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
            // What one submission does: claim, save before sending, remove after the answer.
            assert_eq!(store.claim(name, &lease, t).unwrap(), Claim::Taken(None));
            assert!(store.save(name, "{r}", &lease).unwrap());
            assert!(store.remove(name, "o").unwrap());
            assert_eq!(store.syncs(), i as u64 + 1, "one sync per submission");
        }
        assert!(
            store.list().unwrap().is_empty(),
            "the removals are committed"
        );
        // Renewing and releasing sync nothing either.
        store.claim("d", &lease, t).unwrap();
        store.renew("d", &lease).unwrap();
        store.release("d", "o").unwrap();
        assert_eq!(store.syncs(), 3);
        // Another connection sees the last removal once committed: closing the store commits
        // what it left open.
        store.claim("e", &lease, t).unwrap();
        assert!(store.save("e", "{r}", &lease).unwrap());
        assert!(store.remove("e", "o").unwrap());
        drop(store);
        let rows: i64 = Connection::open(dir.path().join("s.db"))
            .unwrap()
            .query_row("SELECT count(*) FROM oncekey_pending", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0);
    }

    #[test]
    fn a_claim_with_its_save_commits_and_syncs_once_and_saves_only_over_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(dir.path().join("s.db")).unwrap();
        let lease = |owner: &str| Lease {
            owner: owner.into(),
            until: Timestamp::from_millis(100),
        };
        let claim_save = |name: &str, owner: &str, record: &str| {
            store
                .call_blocking(StoreCall::ClaimSave {
                    name: name.into(),
                    lease: lease(owner),
                    now: Timestamp::from_millis(0),
                    record: record.into(),
                })
                .and_then(answered)
                .unwrap()
        };
        // Nothing stored: claimed and saved, in one commit and one sync.
        assert_eq!(
            claim_save("a", "o", "{1}"),
            StoreAnswer::Claim(Claim::Taken(None))
        );
        assert_eq!(store.syncs(), 1);
        assert_eq!(store.list().unwrap()[0].record, "{1}");
        // A record found: answered with it, and not replaced.
        store.release("a", "o").unwrap();
        assert_eq!(
            claim_save("a", "p", "{2}"),
            StoreAnswer::Claim(Claim::Taken(Some("{1}".into())))
        );
        // Held by another owner: busy, nothing saved.
        assert!(matches!(
            claim_save("a", "q", "{3}"),
            StoreAnswer::Claim(Claim::Busy(_))
        ));
        assert_eq!(store.list().unwrap()[0].record, "{1}");
        // The same through a store's blocking methods (StoreCall::run), on memory.
        let memory = super::super::store::MemoryStore::new();
        let call = |owner: &str, record: &str| {
            StoreCall::ClaimSave {
                name: "a".into(),
                lease: lease(owner),
                now: Timestamp::from_millis(0),
                record: record.into(),
            }
            .run(&memory)
            .unwrap()
        };
        assert_eq!(call("o", "{1}"), StoreAnswer::Claim(Claim::Taken(None)));
        assert!(matches!(
            call("q", "{3}"),
            StoreAnswer::Claim(Claim::Busy(_))
        ));
        assert_eq!(memory.list().unwrap()[0].record, "{1}");
    }

    #[test]
    fn started_calls_are_answered_from_the_store_a_save_after_its_sync() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
        assert!(store.starts());
        let lease = Lease {
            owner: "o".into(),
            until: Timestamp::from_millis(100),
        };
        let start = |call: StoreCall| {
            let (tx, rx) = mpsc::channel();
            let seen = store.clone();
            store.start(
                call,
                Box::new(move |answer| {
                    // The syncs counted when the answer is handed over.
                    let _ = tx.send((answer.unwrap(), seen.syncs()));
                }),
            );
            rx.recv().unwrap()
        };
        let claim = StoreCall::Claim {
            name: "a".into(),
            lease: lease.clone(),
            now: Timestamp::from_millis(0),
        };
        assert_eq!(start(claim), (StoreAnswer::Claim(Claim::Taken(None)), 0));
        let save = StoreCall::Save {
            name: "a".into(),
            record: "{r}".into(),
            lease: lease.clone(),
        };
        assert_eq!(
            start(save),
            (StoreAnswer::Bool(true), 1),
            "answered once synced"
        );
        let other = StoreCall::Save {
            name: "a".into(),
            record: "{x}".into(),
            lease: Lease {
                owner: "p".into(),
                until: Timestamp::from_millis(100),
            },
        };
        assert_eq!(start(other).0, StoreAnswer::Bool(false));
        assert_eq!(store.list().unwrap()[0].record, "{r}");
        let remove = StoreCall::Remove {
            name: "a".into(),
            owner: "o".into(),
        };
        assert_eq!(start(remove), (StoreAnswer::Bool(true), 2));
        assert!(store.list().unwrap().is_empty());
    }

    #[test]
    fn foreign_newer_and_damaged_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let junk = dir.path().join("junk.db");
        std::fs::write(&junk, vec![0x42u8; 8192]).unwrap();
        let e = SqliteStore::open(&junk).unwrap_err();
        assert!(e.is_corrupt(), "{e:?}");
        assert!(e.to_string().contains("not a SQLite database"), "{e}");

        let foreign = dir.path().join("foreign.db");
        Connection::open(&foreign)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let e = SqliteStore::open(&foreign).unwrap_err();
        assert!(
            e.is_corrupt() && e.to_string().contains("something else"),
            "{e}"
        );

        let newer = dir.path().join("newer.db");
        Connection::open(&newer)
            .unwrap()
            .execute_batch("PRAGMA user_version = 99")
            .unwrap();
        let e = SqliteStore::open(&newer).unwrap_err();
        assert!(
            e.is_corrupt() && e.to_string().contains("newer oncekey"),
            "{e}"
        );
    }
}
