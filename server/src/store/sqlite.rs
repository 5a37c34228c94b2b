//! # The SQLite backend
//!
//! One SQLite connection, owned by one writer thread. Requests hand it jobs; the thread runs the
//! jobs that are waiting together (group commit), each inside its own savepoint so a failing job
//! rolls back alone, and answers them only after their COMMIT has returned. The ticket list,
//! which may read megabytes, is read on a second connection of its own ([`Writer::list_tickets`]),
//! never by the writer (but for `:memory:`).
//!
//! *Durable* jobs commit with an fsync (`synchronous=FULL`): once a request hears of its ticket,
//! the ticket survives a power cut. *Light* jobs commit without one. That is safe because the
//! WAL is a log: a light commit is visible to every later transaction at once, and the next
//! durable commit syncs it along with its own frames, so nothing durable can ever depend on a
//! light commit that was lost. A lost claim is harmless: its work had not committed either.
//!
//! A round of the writer: the light jobs waiting, in one transaction; then the durable jobs, in
//! one transaction with one fsync. A keyed request's claim comes with its work
//! ([`Writer::claim_then`]) as one durable job: the claim, then the work in a savepoint of its
//! own, so a keyed request costs one trip to the writer and one fsync, like an unkeyed one, and
//! a failing work rolls back alone, leaving the claim held. A new key's claim (the common case)
//! is not written before its work: its completion writes the receipt, claim and answer, as one
//! row, and a work that fails or ends without completing is followed by the claim alone. The schema is versioned with
//! `PRAGMA user_version`.

use std::path::Path;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

use rusqlite::functions::FunctionFlags;
use rusqlite::{params, Connection};
use tokio::sync::oneshot;

use super::{
    attach, hex, stored_length, Attachment, ClaimRequest, Claimed, Counts, Decision, File, Found,
    KeyClaim, Kind, NewTicket, StoreError, Stored, Ticket, Tx, Work,
};

/// The schema version this server writes: 2 added `attachments`, 3 keeps `receipts` in a rowid
/// table, 4 finds a receipt by a hash of its tenant and key, 5 by that hash in two parts
/// (`keys.rs`): a map in memory for the receipts since the last merge, `receipt_keys` for the
/// rest (an older database is migrated in place).
const SCHEMA_VERSION: i64 = 5;

mod keys;

/// What version 2 added.
const ATTACHMENTS: &str = "
CREATE TABLE attachments (
    ticket_id INTEGER NOT NULL REFERENCES tickets (id),
    -- 0-based, in the order the files came.
    n INTEGER NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    sha256 BLOB NOT NULL,
    bytes BLOB NOT NULL,
    PRIMARY KEY (ticket_id, n)
) WITHOUT ROWID;
";

const SCHEMA: &str = "
CREATE TABLE tickets (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    email TEXT NOT NULL,
    created_at TEXT NOT NULL,
    -- The key of the receipt written with this ticket; NULL for the unkeyed routes.
    idempotency_key TEXT
);
CREATE INDEX tickets_by_tenant ON tickets (tenant, id);
";

/// Receipts, in the order they are written: a rowid table, so a new receipt goes at its end
/// (its row holds the stored answer, a few hundred bytes). A table ordered by key (version 2,
/// `WITHOUT ROWID`) split its pages of whole receipts wherever a new key fell. Version 3 kept an
/// index of (tenant, key), version 4 one of [`key_hash`] (8 bytes: a third of the pages); both
/// had a new key read and dirty a leaf of the index at a random place. Version 5 finds a receipt
/// by its hash through `keys.rs` (a map in memory for the receipts written since the last
/// merge, `receipt_keys` behind a Bloom filter for the others), so a new receipt is appended and
/// reads and writes no page at a random place. A rowid committed is never given out again
/// (`AUTOINCREMENT`): every row after `receipt_keys_upto` is one the map knows or reads. The
/// hash only finds the rows to look at: every query compares the tenant and the key themselves,
/// so two keys that share a hash keep a receipt each. A key has one receipt because every
/// insert follows a lookup of its tenant and key in the same write transaction (`BEGIN
/// IMMEDIATE`: one writer at a time, on this connection or any other).
const RECEIPTS: &str = "
CREATE TABLE receipts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- key_hash(tenant, key), see sqlite.rs.
    key_hash INTEGER NOT NULL,
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint BLOB NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('processing', 'done')),
    -- Who holds the lease while processing; the completion must present it.
    claim_token INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    status INTEGER,
    content_type TEXT,
    response BLOB,
    ticket_id INTEGER REFERENCES tickets (id),
    created_at INTEGER NOT NULL,
    completed_at INTEGER,
    CHECK (state = 'processing' OR (status IS NOT NULL AND response IS NOT NULL))
);
CREATE INDEX receipts_by_age ON receipts (created_at);
-- The hashes of the receipts up to `receipt_keys_upto`, merged from time to time (keys.rs).
CREATE TABLE receipt_keys (
    key_hash INTEGER NOT NULL,
    id INTEGER NOT NULL,
    PRIMARY KEY (key_hash, id)
) WITHOUT ROWID;
CREATE TABLE receipt_keys_upto (upto INTEGER NOT NULL);
INSERT INTO receipt_keys_upto (upto) VALUES (0);
";

/// An older version's receipts (the same columns; `{KEY_HASH}` their hash, stored by version
/// 4, computed for versions 1 to 3), moved into this version's tables in the order they were
/// written, their hashes merged. `{INDEXES}` drops the old table's indexes, whose names this
/// version's take.
const RECEIPTS_MOVED: &str = "
ALTER TABLE receipts RENAME TO receipts_old;
{INDEXES}
{RECEIPTS}
INSERT INTO receipts (key_hash, tenant, key, fingerprint, state, claim_token, lease_until,
        status, content_type, response, ticket_id, created_at, completed_at)
    SELECT {KEY_HASH}, tenant, key, fingerprint, state, claim_token, lease_until, status,
        content_type, response, ticket_id, created_at, completed_at
    FROM receipts_old ORDER BY {ORDER};
INSERT INTO receipt_keys (key_hash, id) SELECT key_hash, id FROM receipts ORDER BY key_hash;
UPDATE receipt_keys_upto SET upto = (SELECT coalesce(max(id), 0) FROM receipts);
DROP TABLE receipts_old;
";

/// How a receipt is found (`keys.rs`): the first 8 bytes of the SHA-256 of the
/// tenant's length (8 bytes, big-endian), the tenant and the key, read as a big-endian `i64`.
/// Stored, so it must never change. A cryptographic hash, so that no client can pile its keys
/// onto another's in the index.
pub(super) fn key_hash(tenant: &str, key: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update((tenant.len() as u64).to_be_bytes())
        .chain_update(tenant)
        .chain_update(key)
        .finalize();
    let mut first = [0; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// The WAL pages after which a commit copies them back into the database (SQLite's default is
/// 1,000). A merge of the receipts' hashes dirties many pages of `receipt_keys` at once
/// (`keys.rs`), and a page written many times between two checkpoints is copied once: with
/// 4,000 (16 MB of 4 KiB pages, the WAL file's size from then on) a checkpoint copies back
/// fewer pages per request, and the writer thread, which runs it, stalls longer when it does.
const WAL_AUTOCHECKPOINT: u32 = 4_000;

/// Most jobs run in one transaction.
const MAX_BATCH: usize = 512;

/// What a job left to do once its transaction ended: `true` when it committed.
type Finish = Box<dyn FnOnce(bool) + Send>;

/// What a job reports after running: keep its effects or roll them back, and what to do after
/// the commit.
struct Ran {
    keep: bool,
    finish: Finish,
}

impl Ran {
    fn end(keep: bool, finish: Finish) -> Ran {
        Ran { keep, finish }
    }
}

/// A job: runs with the connection (`None` when the transaction could not begin).
type Job = Box<dyn FnOnce(Option<&mut Db>) -> Ran + Send>;

/// The writer's connection, with what finds a receipt written since the last merge
/// (`keys.rs`).
struct Db {
    conn: Connection,
    recent: keys::Recent,
}

impl std::ops::Deref for Db {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        &self.conn
    }
}

impl Db {
    fn open(conn: Connection, merge_at: usize) -> Result<Db, StoreError> {
        let recent = keys::Recent::load(&conn, merge_at)?;
        Ok(Db { conn, recent })
    }

    /// The rowid of the receipt of `c`'s key, if there is one; `hash` is its [`key_hash`].
    fn receipt(&self, c: &ClaimRequest, hash: i64) -> Result<Option<i64>, StoreError> {
        Ok(keys::find(
            &self.recent,
            &self.conn,
            hash,
            &c.tenant,
            &c.key,
        )?)
    }
}

enum Message {
    Job(Kind, Job),
    Stop,
}

/// The handle requests use to reach the writer thread, and the connection that reads the
/// ticket list.
#[derive(Debug, Clone)]
pub(super) struct Writer {
    tx: mpsc::Sender<Message>,
    /// A connection of its own for the ticket list, so that a long list never holds up the
    /// writer thread (in WAL mode a reader and the writer never wait on each other); `None` for
    /// `:memory:`, a database that lives in the writer's connection alone.
    reader: Option<Arc<tokio::sync::Mutex<Connection>>>,
}

impl Writer {
    /// Opens (and if needed creates) the database, and starts its writer thread.
    pub(super) fn open(path: &str) -> Result<(Writer, JoinHandle<()>), StoreError> {
        Writer::open_merging_at(path, keys::MERGE_AT)
    }

    /// [`Writer::open`], merging the receipts' hashes every `merge_at` new receipts (`keys.rs`).
    fn open_merging_at(
        path: &str,
        merge_at: usize,
    ) -> Result<(Writer, JoinHandle<()>), StoreError> {
        let conn = Db::open(open_connection(path)?, merge_at)?;
        // Opened once the writer's connection has made or migrated the schema.
        let reader = match path {
            ":memory:" => None,
            _ => open_reader(path)?.map(|conn| Arc::new(tokio::sync::Mutex::new(conn))),
        };
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("oncekey-store".into())
            .spawn(move || writer(conn, rx))
            .map_err(|e| StoreError::Open(format!("cannot start the writer thread: {e}")))?;
        Ok((Writer { tx, reader }, thread))
    }

    /// Asks the writer to finish the jobs sent so far and stop.
    pub(super) fn stop(&self) {
        let _ = self.tx.send(Message::Stop);
    }

    /// Runs `f` in a transaction of this kind.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        kind: Kind,
        f: Work<T>,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(kind, once_with(f, reply, |result| result))?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Claims a key and, if the claim was granted, runs `work` right after it, in a savepoint
    /// of its own within the same durable transaction: a failing work rolls back alone and the
    /// claim stays, as if committed before it (the lease then runs out, or the caller releases
    /// it). One job, one trip to the writer, one commit and one sync, as for an unkeyed
    /// request; a write transaction is the database's only one while it is open
    /// (`BEGIN IMMEDIATE`), so no other transaction can see the claim before its work either
    /// way.
    pub(super) async fn claim_then<T: Send + 'static>(
        &self,
        c: ClaimRequest,
        work: Work<T>,
    ) -> Result<Claimed<T>, StoreError> {
        let (reply, answer) = oneshot::channel::<Result<Claimed<T>, StoreError>>();
        // Hashed here, on the request's thread: the writer's time is the one all requests share.
        let hash = key_hash(&c.tenant, &c.key);
        let job = move |conn: Option<&mut Db>| -> Ran {
            let Some(conn) = conn else {
                return Ran::end(
                    false,
                    Box::new(move |_| drop(reply.send(Err(StoreError::NotCommitted)))),
                );
            };
            // Most keys are new: their claim is written with its answer, in one row.
            match unclaimed(conn, &c, hash) {
                Ok(true) => {
                    let result = claim_with_work(conn, &c, hash, work);
                    return match result {
                        Ok(result) => Ran::end(
                            true,
                            Box::new(move |committed| {
                                let result = if committed {
                                    result
                                } else {
                                    Err(StoreError::NotCommitted)
                                };
                                let _ = reply.send(Ok(Claimed::Worked {
                                    took_over: false,
                                    result,
                                }));
                            }),
                        ),
                        Err(e) => Ran::end(false, Box::new(move |_| drop(reply.send(Err(e))))),
                    };
                }
                Ok(false) => {}
                Err(e) => return Ran::end(false, Box::new(move |_| drop(reply.send(Err(e))))),
            }
            match conn.claim(&c) {
                Ok(KeyClaim::Taken { took_over }) => {
                    let result = in_savepoint(conn, work);
                    Ran::end(
                        true,
                        Box::new(move |committed| {
                            let result = if committed {
                                result
                            } else {
                                Err(StoreError::NotCommitted)
                            };
                            let _ = reply.send(Ok(Claimed::Worked { took_over, result }));
                        }),
                    )
                }
                Ok(found) => Ran::end(
                    true,
                    Box::new(move |committed| {
                        let _ = reply.send(if committed {
                            Ok(Claimed::Not(found))
                        } else {
                            Err(StoreError::NotCommitted)
                        });
                    }),
                ),
                Err(e) => Ran::end(false, Box::new(move |_| drop(reply.send(Err(e))))),
            }
        };
        self.send(Kind::Durable, Box::new(job))?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// The tenant's newest `limit` tickets, read on the reader's connection in one snapshot, or
    /// by the writer for `:memory:`.
    pub(super) async fn list_tickets(
        &self,
        tenant: String,
        limit: i64,
    ) -> Result<Vec<Ticket>, StoreError> {
        let Some(reader) = self.reader.clone() else {
            let list = move |tx: &mut dyn Tx| tx.list_tickets(&tenant, limit);
            return self.run(Kind::Light, Box::new(list)).await;
        };
        // Lists waiting for the connection wait here, not on a blocking thread each.
        let mut conn = reader.lock_owned().await;
        tokio::task::spawn_blocking(move || {
            let snapshot = conn.transaction()?;
            list_tickets(&snapshot, &tenant, limit)
        })
        .await
        .map_err(|_| StoreError::NotCommitted)?
    }

    fn send(&self, kind: Kind, job: Job) -> Result<(), StoreError> {
        self.tx
            .send(Message::Job(kind, job))
            .map_err(|_| StoreError::Closed)
    }
}

/// Whether no receipt is stored under the claim's key (not even an expired one); `hash` is its
/// [`key_hash`].
fn unclaimed(db: &Db, c: &ClaimRequest, hash: i64) -> Result<bool, StoreError> {
    Ok(db.receipt(c, hash)?.is_none())
}

/// Claims the new key `c` and runs `work` under the claim: the work's completion writes the
/// receipt with its answer in one row ([`Unwritten`]). A work that fails is rolled back (the job
/// is run in a savepoint of its own) and a work that ends without completing leaves the claim
/// held, as when the claim is written before the work. The outer `Err` is a failure to write
/// the claim itself.
fn claim_with_work<T>(
    conn: &mut Db,
    c: &ClaimRequest,
    hash: i64,
    work: Work<T>,
) -> Result<Result<T, StoreError>, StoreError> {
    let mut tx = Unwritten {
        conn: &mut *conn,
        claim: c,
        hash,
        written: false,
    };
    let result = work(&mut tx);
    let written = tx.written;
    if result.is_err() {
        exec(conn, "ROLLBACK TO job")?;
    }
    if result.is_err() || !written {
        conn.claim(c)?;
    }
    Ok(result)
}

/// A job's transaction with the claim of a new key not yet written: its completion inserts the
/// receipt, claim and answer at once, where a claim written first would be updated.
struct Unwritten<'a> {
    conn: &'a mut Db,
    claim: &'a ClaimRequest,
    /// The claim's [`key_hash`].
    hash: i64,
    /// Whether the claim's row is settled: written (by its completion, or a claim of the
    /// work's own), or given up.
    written: bool,
}

impl Unwritten<'_> {
    fn is_ours(&self, c: &ClaimRequest) -> bool {
        !self.written
            && c.token == self.claim.token
            && c.tenant == self.claim.tenant
            && c.key == self.claim.key
    }
}

impl Tx for Unwritten<'_> {
    fn claim(&mut self, c: &ClaimRequest) -> Result<KeyClaim, StoreError> {
        if !self.written && c.tenant == self.claim.tenant && c.key == self.claim.key {
            // Written now, as a claim made before the work would have been; another request's
            // claim on the key then finds it, and the key keeps one receipt.
            self.written = true;
            if c.token != self.claim.token {
                self.conn.claim(self.claim)?;
            }
        }
        self.conn.claim(c)
    }

    fn complete(
        &mut self,
        c: &ClaimRequest,
        answer: &Stored,
        ticket_id: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError> {
        if !self.is_ours(c) {
            return self.conn.complete(c, answer, ticket_id, now);
        }
        self.conn
            .prepare_cached(
                "INSERT INTO receipts (tenant, key, fingerprint, state, claim_token, lease_until,
                     status, content_type, response, ticket_id, created_at, completed_at, key_hash)
                 VALUES (?1, ?2, ?3, 'done', ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                c.tenant,
                c.key,
                c.fingerprint,
                c.token,
                c.lease_until,
                answer.status,
                answer.content_type,
                answer.body,
                ticket_id,
                c.now,
                now,
                self.hash
            ])?;
        let id = self.conn.last_insert_rowid();
        self.conn.recent.written(self.hash, id);
        self.written = true;
        Ok(())
    }

    fn release(&mut self, c: &ClaimRequest) -> Result<(), StoreError> {
        if self.is_ours(c) {
            // Given up before it was written: nothing to remove, nor to write.
            self.written = true;
            return Ok(());
        }
        self.conn.release(c)
    }

    fn insert_ticket(&mut self, t: &NewTicket, key: Option<&str>) -> Result<Ticket, StoreError> {
        self.conn.insert_ticket(t, key)
    }

    fn list_tickets(&mut self, tenant: &str, limit: i64) -> Result<Vec<Ticket>, StoreError> {
        self.conn.list_tickets(tenant, limit)
    }

    fn attachment_size(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<usize>, StoreError> {
        self.conn.attachment_size(tenant, ticket_id, n)
    }

    fn attachment(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<File>, StoreError> {
        self.conn.attachment(tenant, ticket_id, n)
    }

    /// Counts the claim as processing, as it is in this transaction.
    fn counts(&mut self, tenant: &str) -> Result<Counts, StoreError> {
        let mut counts = self.conn.counts(tenant)?;
        if !self.written && tenant == self.claim.tenant {
            counts.processing += 1;
        }
        Ok(counts)
    }

    fn sweep(&mut self, now: i64, expired_before: i64) -> Result<usize, StoreError> {
        self.conn.sweep(now, expired_before)
    }
}

/// A job that runs `f` (keeping its effects only if it succeeds) and sends `wrap` of its result
/// once the transaction has ended: its value if committed, else why not.
fn once_with<T, R, W>(f: Work<T>, reply: oneshot::Sender<R>, wrap: W) -> Job
where
    T: Send + 'static,
    R: Send + 'static,
    W: FnOnce(Result<T, StoreError>) -> R + Send + 'static,
{
    Box::new(move |conn: Option<&mut Db>| -> Ran {
        // A work that panics (a bug) answers its caller that nothing committed, as a failed
        // one does: its reply, dropped in the unwinding, would read as the store closed, which
        // the receipt sweeper takes for the server's shutdown and stops for good.
        let ran = conn.map(|conn| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(conn))).unwrap_or_else(
                |_| {
                    tracing::error!("a store job panicked; it is rolled back");
                    Err(StoreError::NotCommitted)
                },
            )
        });
        match ran {
            Some(Ok(value)) => Ran::end(
                true,
                Box::new(move |committed| {
                    let _ = reply.send(wrap(if committed {
                        Ok(value)
                    } else {
                        Err(StoreError::NotCommitted)
                    }));
                }),
            ),
            Some(Err(e)) => Ran::end(false, Box::new(move |_| drop(reply.send(wrap(Err(e)))))),
            None => Ran::end(
                false,
                Box::new(move |_| drop(reply.send(wrap(Err(StoreError::NotCommitted))))),
            ),
        }
    })
}

/// The tenant's newest `limit` tickets, with their files' descriptions, read on `conn`.
fn list_tickets(conn: &Connection, tenant: &str, limit: i64) -> Result<Vec<Ticket>, StoreError> {
    let mut stmt = conn.prepare_cached(
        "SELECT id, subject, body, email, created_at FROM tickets
         WHERE tenant = ?1 ORDER BY id DESC LIMIT ?2",
    )?;
    let rows = stmt.query_map(params![tenant, limit], |r| {
        Ok(Ticket {
            id: r.get(0)?,
            subject: r.get(1)?,
            body: r.get(2)?,
            email: r.get(3)?,
            created_at: r.get(4)?,
            attachments: Vec::new(),
        })
    })?;
    let mut tickets: Vec<Ticket> = rows.collect::<Result<_, _>>()?;
    let Some(oldest) = tickets.last().map(|t| t.id) else {
        return Ok(tickets);
    };
    let mut stmt = conn.prepare_cached(
        "SELECT a.ticket_id, a.name, a.media_type, a.size, a.sha256
         FROM attachments a JOIN tickets t ON t.id = a.ticket_id
         WHERE t.tenant = ?1 AND a.ticket_id >= ?2 ORDER BY a.ticket_id, a.n",
    )?;
    let files = stmt.query_map(params![tenant, oldest], |r| {
        let sha: Vec<u8> = r.get(4)?;
        Ok((
            r.get::<_, i64>(0)?,
            Attachment {
                name: r.get(1)?,
                media_type: r.get(2)?,
                size: r.get(3)?,
                sha256: hex(&sha),
            },
        ))
    })?;
    attach(&mut tickets, files.collect::<Result<Vec<_>, _>>()?);
    Ok(tickets)
}

/// The reader's connection to the file `path` (see [`Writer`]): reads only. `None` when it does
/// not see the writer's database (`""`, SQLite's private temporary one, or a memory URI: a
/// connection of their own is another, empty database); the writer lists then.
fn open_reader(path: &str) -> Result<Option<Connection>, StoreError> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.execute_batch("PRAGMA query_only = ON;")?;
    let shared: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'tickets')",
        [],
        |r| r.get(0),
    )?;
    Ok(shared.then_some(conn))
}

fn open_connection(path: &str) -> Result<Connection, StoreError> {
    let conn = if path == ":memory:" {
        Connection::open_in_memory()?
    } else {
        if let Some(dir) = Path::new(path).parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    StoreError::Open(format!("cannot create the folder {}: {e}", dir.display()))
                })?;
            }
        }
        Connection::open(path)?
    };
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // Returns the mode in effect; ":memory:" answers "memory", which is fine.
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.execute_batch(&format!(
        "PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;
         PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT};"
    ))?;
    // For the migration from version 3 or older.
    conn.create_scalar_function(
        "oncekey_key_hash",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| Ok(key_hash(&ctx.get::<String>(0)?, &ctx.get::<String>(1)?)),
    )?;
    migrate(&conn)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> Result<(), StoreError> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match version {
        0 => {
            conn.execute_batch(&format!(
                "BEGIN; {SCHEMA} {RECEIPTS} {ATTACHMENTS} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))?;
            Ok(())
        }
        1..=4 => {
            let attachments = if version == 1 { ATTACHMENTS } else { "" };
            // Version 4 wrote the hash and indexed it; versions 1 to 3 kept them by (tenant,
            // key), version 3 in a rowid table (in the order written), 1 and 2 by key.
            let (indexes, key_hash, order) = match version {
                4 => (
                    "DROP INDEX receipts_by_hash; DROP INDEX receipts_by_age;",
                    "key_hash",
                    "rowid",
                ),
                _ => (
                    "DROP INDEX receipts_by_age;",
                    "oncekey_key_hash(tenant, key)",
                    "created_at",
                ),
            };
            let receipts = RECEIPTS_MOVED
                .replace("{INDEXES}", indexes)
                .replace("{RECEIPTS}", RECEIPTS)
                .replace("{KEY_HASH}", key_hash)
                .replace("{ORDER}", order);
            conn.execute_batch(&format!(
                "BEGIN; {attachments} {receipts} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))?;
            tracing::info!(
                from = version,
                version = SCHEMA_VERSION,
                "migrated the SQLite schema"
            );
            Ok(())
        }
        SCHEMA_VERSION => Ok(()),
        other => Err(StoreError::Open(format!(
            "the database has schema version {other}; this server knows version {SCHEMA_VERSION}{}",
            if other > SCHEMA_VERSION {
                " (a newer oncekey-server made it)"
            } else {
                ""
            }
        ))),
    }
}

fn writer(mut conn: Db, rx: mpsc::Receiver<Message>) {
    let mut light: Vec<Job> = Vec::new();
    let mut durable: Vec<Job> = Vec::new();
    let mut stopping = false;
    loop {
        if light.is_empty() && durable.is_empty() {
            if stopping {
                break;
            }
            match rx.recv() {
                Ok(Message::Job(Kind::Light, job)) => light.push(job),
                Ok(Message::Job(Kind::Durable, job)) => durable.push(job),
                Ok(Message::Stop) | Err(_) => break,
            }
        }
        if !stopping {
            stopping = drain(&rx, &mut light, &mut durable);
        }
        run_batch(&mut conn, std::mem::take(&mut light), Kind::Light);
        run_batch(&mut conn, std::mem::take(&mut durable), Kind::Durable);
    }
    // Jobs still queued are dropped: their callers hear `Closed`.
    tracing::debug!("store writer stopped");
}

/// Takes what is waiting, up to a batch of each kind; `true` when asked to stop.
fn drain(rx: &mpsc::Receiver<Message>, light: &mut Vec<Job>, durable: &mut Vec<Job>) -> bool {
    while light.len() < MAX_BATCH && durable.len() < MAX_BATCH {
        match rx.try_recv() {
            Ok(Message::Job(Kind::Light, job)) => light.push(job),
            Ok(Message::Job(Kind::Durable, job)) => durable.push(job),
            Ok(Message::Stop) | Err(mpsc::TryRecvError::Disconnected) => return true,
            Err(mpsc::TryRecvError::Empty) => break,
        }
    }
    false
}

/// Runs jobs in one transaction and answers them once it has ended.
fn run_batch(conn: &mut Db, batch: Vec<Job>, kind: Kind) {
    if batch.is_empty() {
        return;
    }
    let sync = match kind {
        Kind::Light => "PRAGMA synchronous = NORMAL",
        Kind::Durable => "PRAGMA synchronous = FULL",
    };
    let begun = conn
        .execute_batch(sync)
        .and_then(|()| exec(conn, "BEGIN IMMEDIATE"))
        .and_then(|()| {
            // Under the write lock: another connection's receipts read, a merge if one is due.
            let Db { conn, recent } = &mut *conn;
            recent.begin(conn).inspect_err(|_| {
                let _ = conn.execute_batch("ROLLBACK");
            })
        });
    if let Err(e) = begun {
        tracing::error!("cannot begin a transaction: {e}");
        for job in batch {
            (job(None).finish)(false);
        }
        return;
    }
    let mut finishes = Vec::with_capacity(batch.len());
    for job in batch {
        if let Err(e) = exec(conn, "SAVEPOINT job") {
            tracing::error!("cannot open a savepoint: {e}");
            finishes.push(job(None).finish);
            continue;
        }
        // A job that panics (a bug) fails its own request, rolled back, and the writer goes
        // on: unwound here, every later request would find the store closed until a restart.
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(Some(&mut *conn))));
        let Ok(ran) = ran else {
            tracing::error!("a store job panicked; its request fails, the others go on");
            if let Err(e) = exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job")) {
                tracing::error!("cannot end a savepoint: {e}");
            }
            continue;
        };
        let end = if ran.keep {
            exec(conn, "RELEASE job")
        } else {
            exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job"))
        };
        if let Err(e) = end {
            tracing::error!("cannot end a savepoint: {e}");
        }
        finishes.push(ran.finish);
    }
    let committed = match exec(conn, "COMMIT") {
        Ok(()) => true,
        Err(e) => {
            tracing::error!("commit failed: {e}");
            let _ = conn.execute_batch("ROLLBACK");
            false
        }
    };
    let Db { conn, recent } = conn;
    recent.end(conn, committed);
    for finish in finishes {
        finish(committed);
    }
}

/// Runs `f` in a savepoint of its own (inside a job's), keeping its effects only if it
/// succeeds.
fn in_savepoint<T>(conn: &mut Db, f: Work<T>) -> Result<T, StoreError> {
    exec(conn, "SAVEPOINT work")?;
    let result = f(conn);
    let end = if result.is_ok() {
        exec(conn, "RELEASE work")
    } else {
        exec(conn, "ROLLBACK TO work").and_then(|()| exec(conn, "RELEASE work"))
    };
    match (result, end) {
        (Ok(_), Err(e)) => Err(e.into()),
        (result, _) => result,
    }
}

/// Runs a statement without rows through the statement cache (these run for every job).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

// ---------------------------------------------------------------------------------------------
// The queries. Each runs inside a job, so it sees and leaves a consistent database.

impl Db {
    /// Writes a receipt row of `c`'s key as claimed, and tells `keys.rs`.
    fn insert_claim(&mut self, c: &ClaimRequest, hash: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO receipts (key_hash, tenant, key, fingerprint, state, claim_token,
                     lease_until, created_at)
                 VALUES (?1, ?2, ?3, ?4, 'processing', ?5, ?6, ?7)",
            )?
            .execute(params![
                hash,
                c.tenant,
                c.key,
                c.fingerprint,
                c.token,
                c.lease_until,
                c.now
            ])?;
        let id = self.conn.last_insert_rowid();
        self.recent.written(hash, id);
        Ok(())
    }

    /// Deletes receipt `id` of hash `hash`, with its entry in `receipt_keys` (the map's goes at
    /// the next merge).
    fn delete_receipt(&self, id: i64, hash: i64) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM receipts WHERE id = ?1")?
            .execute([id])?;
        keys::forget(&self.conn, hash, id)?;
        Ok(())
    }
}

impl Tx for Db {
    fn claim(&mut self, c: &ClaimRequest) -> Result<KeyClaim, StoreError> {
        let hash = key_hash(&c.tenant, &c.key);
        // A new key (the common case) is not found, then inserted: no other transaction can
        // write between the two (see RECEIPTS).
        let Some(id) = self.receipt(c, hash)? else {
            self.insert_claim(c, hash)?;
            return Ok(KeyClaim::Taken { took_over: false });
        };
        let found = self
            .prepare_cached(
                "SELECT fingerprint, state, lease_until, created_at, status, content_type, response
                 FROM receipts WHERE id = ?1",
            )?
            .query_row([id], |r| {
                Ok(Found {
                    fingerprint: r.get(0)?,
                    state: r.get(1)?,
                    lease_until: r.get(2)?,
                    created_at: r.get(3)?,
                    status: r.get(4)?,
                    content_type: r.get(5)?,
                    response: r.get(6)?,
                })
            })?;
        match found.decide(c)? {
            Decision::Answer(claim) => Ok(claim),
            Decision::Renew => {
                self.delete_receipt(id, hash)?;
                self.insert_claim(c, hash)?;
                Ok(KeyClaim::Taken { took_over: false })
            }
            Decision::TakeOver => {
                self.prepare_cached(
                    "UPDATE receipts SET claim_token = ?2, lease_until = ?3 WHERE id = ?1",
                )?
                .execute(params![id, c.token, c.lease_until])?;
                Ok(KeyClaim::Taken { took_over: true })
            }
        }
    }

    fn complete(
        &mut self,
        c: &ClaimRequest,
        answer: &Stored,
        ticket_id: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError> {
        let Some(id) = self.receipt(c, key_hash(&c.tenant, &c.key))? else {
            return Err(StoreError::LostLease);
        };
        let changed = self
            .prepare_cached(
                "UPDATE receipts SET state = 'done', status = ?3, content_type = ?4, response = ?5,
                     ticket_id = ?6, completed_at = ?7
                 WHERE id = ?1 AND claim_token = ?2 AND state = 'processing'",
            )?
            .execute(params![
                id,
                c.token,
                answer.status,
                answer.content_type,
                answer.body,
                ticket_id,
                now,
            ])?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::LostLease)
        }
    }

    fn release(&mut self, c: &ClaimRequest) -> Result<(), StoreError> {
        let hash = key_hash(&c.tenant, &c.key);
        let Some(id) = self.receipt(c, hash)? else {
            return Ok(());
        };
        let deleted = self
            .prepare_cached(
                "DELETE FROM receipts WHERE id = ?1 AND claim_token = ?2 AND state = 'processing'",
            )?
            .execute(params![id, c.token])?;
        if deleted == 1 {
            keys::forget(&self.conn, hash, id)?;
        }
        Ok(())
    }

    fn insert_ticket(&mut self, t: &NewTicket, key: Option<&str>) -> Result<Ticket, StoreError> {
        self.prepare_cached(
            "INSERT INTO tickets (tenant, subject, body, email, created_at, idempotency_key)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            t.tenant,
            t.subject,
            t.body,
            t.email,
            t.created_at,
            key
        ])?;
        let id = self.last_insert_rowid();
        for (n, a) in t.attachments.iter().enumerate() {
            self.prepare_cached(
                "INSERT INTO attachments (ticket_id, n, name, media_type, size, sha256, bytes)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![
                id,
                n as i64,
                a.name,
                a.media_type,
                a.bytes.len() as i64,
                a.sha256,
                a.bytes
            ])?;
        }
        Ok(Ticket {
            id,
            subject: t.subject.clone(),
            body: t.body.clone(),
            email: t.email.clone(),
            created_at: t.created_at.clone(),
            attachments: t.attachments.iter().map(|a| a.describe()).collect(),
        })
    }

    fn list_tickets(&mut self, tenant: &str, limit: i64) -> Result<Vec<Ticket>, StoreError> {
        list_tickets(&self.conn, tenant, limit)
    }

    fn attachment_size(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<usize>, StoreError> {
        // length() of a blob reads the record's header, not the blob's overflow pages.
        let mut stmt = self.prepare_cached(
            "SELECT length(a.bytes) FROM attachments a JOIN tickets t ON t.id = a.ticket_id
             WHERE t.tenant = ?1 AND a.ticket_id = ?2 AND a.n = ?3",
        )?;
        let mut rows = stmt.query(params![tenant, ticket_id, n])?;
        match rows.next()? {
            Some(r) => stored_length(r.get(0)?).map(Some),
            None => Ok(None),
        }
    }

    fn attachment(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<File>, StoreError> {
        let mut stmt = self.prepare_cached(
            "SELECT a.name, a.media_type, a.bytes FROM attachments a JOIN tickets t ON t.id = a.ticket_id
             WHERE t.tenant = ?1 AND a.ticket_id = ?2 AND a.n = ?3",
        )?;
        let mut rows = stmt.query(params![tenant, ticket_id, n])?;
        match rows.next()? {
            Some(r) => Ok(Some(File {
                name: r.get(0)?,
                media_type: r.get(1)?,
                bytes: r.get(2)?,
            })),
            None => Ok(None),
        }
    }

    fn counts(&mut self, tenant: &str) -> Result<Counts, StoreError> {
        let tickets = self
            .prepare_cached("SELECT count(*) FROM tickets WHERE tenant = ?1")?
            .query_row([tenant], |r| r.get(0))?;
        let (receipts, processing) = self
            .prepare_cached(
                "SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'processing')
                 FROM receipts WHERE tenant = ?1",
            )?
            .query_row([tenant], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(Counts {
            tickets,
            receipts,
            processing,
        })
    }

    /// On the caller's clock, as given (one host): `_now` is not needed.
    fn sweep(&mut self, _now: i64, before: i64) -> Result<usize, StoreError> {
        // Their entries in `receipt_keys` first, found by the same condition; the map's stale
        // entries are passed over until the next merge.
        self.prepare_cached(
            "DELETE FROM receipt_keys WHERE (key_hash, id) IN
                 (SELECT key_hash, id FROM receipts WHERE created_at < ?1)",
        )?
        .execute([before])?;
        Ok(self
            .prepare_cached("DELETE FROM receipts WHERE created_at < ?1")?
            .execute([before])?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(key: &str, token: i64) -> ClaimRequest {
        ClaimRequest {
            tenant: "t".into(),
            key: key.into(),
            fingerprint: b"body".to_vec(),
            token,
            now: 1_000,
            lease_until: 1_000_000,
            expired_before: 0,
        }
    }

    /// A request with `key`, as the route makes it: claims the key and, if it is taken,
    /// completes it with an answer naming the key. What the claim found.
    async fn send(w: &Writer, key: &str, token: i64) -> KeyClaim {
        let c = request(key, token);
        let work: Work<KeyClaim> = Box::new(move |tx| {
            let claim = tx.claim(&c)?;
            if let KeyClaim::Taken { .. } = claim {
                let answer = Stored {
                    status: 201,
                    content_type: "text/plain".into(),
                    body: c.key.clone().into_bytes(),
                };
                tx.complete(&c, &answer, None, 2_000)?;
            }
            Ok(claim)
        });
        w.run(Kind::Durable, work).await.unwrap()
    }

    /// A database file, in a folder of its own that goes with the first value.
    fn file() -> (tempfile::TempDir, String) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("receipts.db").to_str().unwrap().to_owned();
        (dir, path)
    }

    /// Stops a writer, once its jobs are done.
    fn stop(w: Writer, thread: JoinHandle<()>) {
        w.stop();
        thread.join().unwrap();
    }

    fn is_new(claim: &KeyClaim) -> bool {
        matches!(claim, KeyClaim::Taken { took_over: false })
    }

    /// The key's own answer, replayed.
    fn replays(claim: &KeyClaim, key: &str) -> bool {
        matches!(claim, KeyClaim::Done(s) if s.body == key.as_bytes())
    }

    /// The one number `sql` reads, by a connection of the test's own.
    fn read(path: &str, sql: &str) -> i64 {
        Connection::open(path)
            .unwrap()
            .query_row(sql, [], |r| r.get(0))
            .unwrap()
    }

    /// Rows of a table.
    fn rows(path: &str, table: &str) -> i64 {
        read(path, &format!("SELECT count(*) FROM {table}"))
    }

    #[tokio::test]
    async fn receipts_are_found_across_merges_and_after_reopening() {
        let (_dir, path) = file();
        let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
        let (w, thread) = Writer::open_merging_at(&path, 4).unwrap();
        for (i, key) in keys.iter().enumerate() {
            assert!(is_new(&send(&w, key, i as i64).await), "{key}");
        }
        // Twice, so the second round runs after more merges than the first.
        for round in [100, 200] {
            for (i, key) in keys.iter().enumerate() {
                let again = send(&w, key, round + i as i64).await;
                assert!(replays(&again, key), "{key}: {again:?}");
            }
        }
        stop(w, thread);
        // Merged: most keys are in the index, the latest only in the table (and the map).
        let merged = rows(&path, "receipt_keys");
        assert!((8..10).contains(&merged), "{merged} of 10 merged");
        assert_eq!(rows(&path, "receipts"), 10, "one receipt per key");
        let (w, thread) = Writer::open_merging_at(&path, 4).unwrap();
        for (i, key) in keys.iter().enumerate() {
            assert!(replays(&send(&w, key, 300 + i as i64).await, key), "{key}");
        }
        assert!(is_new(&send(&w, "k-new", 400).await));
        stop(w, thread);
        assert_eq!(rows(&path, "receipts"), 11);
    }

    #[tokio::test]
    async fn a_receipt_another_connection_wrote_is_found() {
        // Two writers on one file (two server processes): each finds what the other wrote,
        // before a merge (the other's map does not know it) and after.
        let (_dir, path) = file();
        let (a, ta) = Writer::open_merging_at(&path, 1_000).unwrap();
        let (b, tb) = Writer::open_merging_at(&path, 2).unwrap();
        assert!(is_new(&send(&a, "from-a", 1).await));
        assert!(replays(&send(&b, "from-a", 2).await, "from-a"));
        assert!(is_new(&send(&b, "from-b", 3).await));
        assert!(is_new(&send(&b, "from-b-2", 4).await));
        // b merged its receipts (and a's) into the index: a finds them there.
        assert!(rows(&path, "receipt_keys") >= 2);
        assert!(replays(&send(&a, "from-b", 5).await, "from-b"));
        assert!(replays(&send(&a, "from-a", 6).await, "from-a"));
        assert!(is_new(&send(&a, "from-a-2", 7).await));
        assert!(replays(&send(&b, "from-a-2", 8).await, "from-a-2"));
        stop(a, ta);
        stop(b, tb);
        assert_eq!(rows(&path, "receipts"), 4, "one receipt per key");
    }

    #[tokio::test]
    async fn a_reload_that_fails_is_done_again_at_the_next_transaction() {
        // Two writers on one file. b's receipt changes the file under a; a's reload of its
        // index fails midway (an I/O error): that request fails, and a's next transaction reads
        // the index again. It took the version as read, found it unchanged next time and, its
        // map emptied, took b's key for a new one: a second receipt, a second ticket.
        let (_dir, path) = file();
        let (a, ta) = Writer::open_merging_at(&path, 1_000).unwrap();
        let (b, tb) = Writer::open_merging_at(&path, 1_000).unwrap();
        assert!(is_new(&send(&a, "from-a", 1).await));
        assert!(is_new(&send(&b, "from-b", 2).await));
        keys::fault::fail_next_reload(&path);
        let c = request("from-b", 3);
        let failed = a.run(Kind::Durable, Box::new(move |tx| tx.claim(&c))).await;
        assert!(
            failed.is_err(),
            "the request whose reload failed: {failed:?}"
        );
        assert!(replays(&send(&a, "from-b", 4).await, "from-b"));
        assert!(replays(&send(&a, "from-a", 5).await, "from-a"));
        stop(a, ta);
        stop(b, tb);
        assert_eq!(rows(&path, "receipts"), 2, "one receipt per key");
    }

    #[tokio::test]
    async fn a_job_that_panics_fails_alone_and_the_writer_goes_on() {
        let (_dir, path) = file();
        let (w, thread) = Writer::open_merging_at(&path, 1_000).unwrap();
        assert!(is_new(&send(&w, "before", 1).await));
        let c = request("half-done", 2);
        let work: Work<KeyClaim> = Box::new(move |tx| {
            tx.claim(&c)?;
            panic!("a bug in a request's work");
        });
        let panicked = w.run(Kind::Durable, work).await;
        assert!(
            matches!(panicked, Err(StoreError::NotCommitted)),
            "answered as not committed, not as the store closed: {panicked:?}"
        );
        // Served on: the receipt written before the panic was rolled back with its job.
        assert!(replays(&send(&w, "before", 3).await, "before"));
        assert!(is_new(&send(&w, "half-done", 4).await));
        stop(w, thread);
        assert_eq!(rows(&path, "receipts"), 2);
    }

    /// The last rowid merged.
    fn merged_upto(path: &str) -> i64 {
        read(path, "SELECT upto FROM receipt_keys_upto")
    }

    /// Claims `key` (its work not done) and releases it, as a request whose work failed.
    async fn claim_and_release(w: &Writer, key: &str, token: i64) {
        let c = request(key, token);
        let claim = w
            .run(
                Kind::Light,
                Box::new(move |tx| {
                    let claim = tx.claim(&c)?;
                    tx.release(&c)?;
                    Ok(claim)
                }),
            )
            .await
            .unwrap();
        assert!(is_new(&claim), "{key}");
    }

    #[tokio::test]
    async fn a_key_released_again_and_again_makes_a_merge_due_and_the_watermark_never_goes_back() {
        let (_dir, path) = file();
        let (w, thread) = Writer::open_merging_at(&path, 1_000).unwrap();
        assert!(is_new(&send(&w, "kept", 1).await));
        // Each claim of "k" writes a row, each release deletes it: dead rowids of one hash.
        for token in 2..9 {
            claim_and_release(&w, "k", token).await;
        }
        assert!(is_new(&send(&w, "k", 9).await));
        // Far fewer than 1,000 entries, but one hash had more than 4 (after its 6th claim):
        // merged at the start of the 7th, up to the last rowid given out then (7), not the
        // last one still there (1, "kept").
        assert_eq!(merged_upto(&path), 7);
        assert!(replays(&send(&w, "k", 10).await, "k"));
        assert!(replays(&send(&w, "kept", 11).await, "kept"));
        stop(w, thread);
        assert_eq!(rows(&path, "receipts"), 2);
    }

    #[tokio::test]
    async fn a_merge_that_fails_is_tried_again_later_and_the_requests_go_on() {
        let (_dir, path) = file();
        let (w, thread) = Writer::open_merging_at(&path, 2).unwrap();
        // Writes into `receipt_keys` fail for now, as on a full disk.
        let other = Connection::open(&path).unwrap();
        other
            .execute_batch(
                "CREATE TRIGGER full BEFORE INSERT ON receipt_keys
                 BEGIN SELECT RAISE(ABORT, 'disk full'); END;",
            )
            .unwrap();
        for (i, key) in ["a", "b", "c", "d"].into_iter().enumerate() {
            assert!(is_new(&send(&w, key, i as i64).await), "{key}");
        }
        assert_eq!(merged_upto(&path), 0, "no merge went through");
        assert!(replays(&send(&w, "a", 10).await, "a"));
        other.execute_batch("DROP TRIGGER full").unwrap();
        assert!(is_new(&send(&w, "e", 11).await));
        assert_eq!(merged_upto(&path), 4, "merged once it could");
        for key in ["a", "b", "c", "d", "e"] {
            assert!(replays(&send(&w, key, 20).await, key), "{key}");
        }
        stop(w, thread);
    }

    #[tokio::test]
    async fn released_and_swept_receipts_leave_no_entry_behind() {
        let (_dir, path) = file();
        let (w, thread) = Writer::open_merging_at(&path, 2).unwrap();
        // A claim held (its work not done), merged into the index by the requests after it.
        let held = request("held", 1);
        let c = held.clone();
        let claim = w
            .run(Kind::Light, Box::new(move |tx| tx.claim(&c)))
            .await
            .unwrap();
        assert!(is_new(&claim));
        for i in 0..4 {
            send(&w, &format!("k{i}"), 10 + i).await;
        }
        assert_eq!(rows(&path, "receipt_keys"), 4, "held, k0, k1, k2 merged");
        // Released: its row and its entry go, and the key is new again.
        let c = held.clone();
        w.run(Kind::Light, Box::new(move |tx| tx.release(&c)))
            .await
            .unwrap();
        assert_eq!(rows(&path, "receipt_keys"), 3);
        assert!(is_new(&send(&w, "held", 20).await));
        // Swept: every receipt and every entry.
        let swept = w
            .run(Kind::Light, Box::new(|tx| tx.sweep(0, i64::MAX)))
            .await
            .unwrap();
        assert_eq!(swept, 5);
        assert!(is_new(&send(&w, "k0", 30).await), "a swept key is new");
        stop(w, thread);
        assert_eq!(rows(&path, "receipts"), 1);
        assert!(rows(&path, "receipt_keys") <= 1);
    }
}
