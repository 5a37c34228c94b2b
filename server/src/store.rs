//! # The store
//!
//! One SQLite connection, owned by one writer thread. Requests hand it jobs; the thread runs every
//! job that is waiting in one transaction (group commit), each job inside its own savepoint so a
//! failing job rolls back alone, and answers the jobs only after the COMMIT has returned. A job's
//! answer therefore always describes durable state: a receipt is never reported before it is on
//! disk, and many requests share one fsync.
//!
//! Durability: WAL with `synchronous=FULL`, so every COMMIT is synced before anyone hears of it
//! (NORMAL would survive a killed process but could lose a reported ticket to a power cut).
//! The schema is versioned with `PRAGMA user_version`.

use std::path::Path;
use std::thread::JoinHandle;

use rusqlite::{params, Connection, OptionalExtension};
use tokio::sync::{mpsc, oneshot};

/// The schema version this server writes.
const SCHEMA_VERSION: i64 = 1;

/// Most jobs run in one transaction.
const MAX_BATCH: usize = 512;

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

CREATE TABLE receipts (
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
    PRIMARY KEY (tenant, key),
    CHECK (state = 'processing' OR (status IS NOT NULL AND response IS NOT NULL))
);
CREATE INDEX receipts_by_age ON receipts (created_at);
";

/// Why a job did not leave its effect in the database.
#[derive(Debug)]
pub enum Failure {
    /// SQLite said no.
    Db(rusqlite::Error),
    /// The writer thread is gone (the server is shutting down).
    Closed,
    /// The job ran but its transaction did not commit.
    NotCommitted,
    /// The job asked for its work to be rolled back (the `crash-before-commit` fault).
    Aborted,
    /// The claim's lease had been taken over by another request: this request's work was
    /// rolled back so that the key's work is done once.
    LostLease,
}

impl From<rusqlite::Error> for Failure {
    fn from(e: rusqlite::Error) -> Failure {
        Failure::Db(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Db(e) => write!(f, "database error: {e}"),
            Failure::Closed => f.write_str("the store is closed"),
            Failure::NotCommitted => f.write_str("the transaction did not commit"),
            Failure::Aborted => f.write_str("the work was aborted before commit"),
            Failure::LostLease => f.write_str("the claim's lease was taken over"),
        }
    }
}

/// What a job left to do once its transaction ended: `true` when it committed.
type Finish = Box<dyn FnOnce(bool) + Send>;

/// A job: runs with the connection (`None` when the transaction could not begin), says whether
/// to keep its effects, and what to do once the transaction ends.
type Job = Box<dyn FnOnce(Option<&Connection>) -> (bool, Finish) + Send>;

enum Message {
    /// Run this job; `None` means the transaction could not even begin.
    Job(Job),
    Stop,
}

/// The handle requests use to reach the writer thread.
#[derive(Debug, Clone)]
pub struct Store {
    tx: mpsc::UnboundedSender<Message>,
}

/// Joins the writer thread after [`Store::stop`].
#[derive(Debug)]
pub struct Writer(JoinHandle<()>);

impl Writer {
    /// Waits until every job sent before the stop has been answered.
    pub fn join(self) {
        let _ = self.0.join();
    }
}

impl Store {
    /// Opens (and if needed creates) the database, and starts its writer thread.
    pub fn open(path: &str) -> Result<(Store, Writer), Failure> {
        let conn = open_connection(path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let thread = std::thread::Builder::new()
            .name("oncekey-store".into())
            .spawn(move || writer(conn, rx))
            .map_err(|_| Failure::Closed)?;
        Ok((Store { tx }, Writer(thread)))
    }

    /// Asks the writer to finish the jobs sent so far and stop.
    pub fn stop(&self) {
        let _ = self.tx.send(Message::Stop);
    }

    /// Runs `f` in the writer's transaction; its effects are kept when it returns `Ok`, and the
    /// answer arrives once they are committed.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        let job = move |conn: Option<&Connection>| -> (bool, Finish) {
            match conn.map(f) {
                Some(Ok(value)) => (
                    true,
                    Box::new(move |committed| {
                        let _ = reply.send(if committed {
                            Ok(value)
                        } else {
                            Err(Failure::NotCommitted)
                        });
                    }),
                ),
                Some(Err(e)) => (false, Box::new(move |_| drop(reply.send(Err(e))))),
                None => (
                    false,
                    Box::new(move |_| drop(reply.send(Err(Failure::NotCommitted)))),
                ),
            }
        };
        self.tx
            .send(Message::Job(Box::new(job)))
            .map_err(|_| Failure::Closed)?;
        answer.await.map_err(|_| Failure::Closed)?
    }
}

fn open_connection(path: &str) -> Result<Connection, Failure> {
    let conn = if path == ":memory:" {
        Connection::open_in_memory()?
    } else {
        if let Some(dir) = Path::new(path).parent() {
            if !dir.as_os_str().is_empty() {
                std::fs::create_dir_all(dir).map_err(|e| {
                    Failure::Db(rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
                })?;
            }
        }
        Connection::open(path)?
    };
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // Returns the mode in effect; ":memory:" answers "memory", which is fine.
    let _mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
    conn.execute_batch("PRAGMA synchronous = FULL; PRAGMA foreign_keys = ON;")?;
    migrate(&conn)?;
    Ok(conn)
}

fn migrate(conn: &Connection) -> Result<(), Failure> {
    let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    match version {
        0 => {
            conn.execute_batch(&format!(
                "BEGIN; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            ))?;
            Ok(())
        }
        SCHEMA_VERSION => Ok(()),
        other => Err(Failure::Db(rusqlite::Error::InvalidParameterName(format!(
            "the database has schema version {other}; this server knows version {SCHEMA_VERSION}"
        )))),
    }
}

fn writer(conn: Connection, mut rx: mpsc::UnboundedReceiver<Message>) {
    let mut stopping = false;
    while !stopping {
        let Some(first) = rx.blocking_recv() else {
            break;
        };
        let mut batch = Vec::new();
        match first {
            Message::Job(job) => batch.push(job),
            Message::Stop => break,
        }
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(Message::Job(job)) => batch.push(job),
                Ok(Message::Stop) => {
                    stopping = true;
                    break;
                }
                Err(_) => break,
            }
        }
        run_batch(&conn, batch);
    }
    // Jobs still queued are dropped: their callers hear `Closed`.
    tracing::debug!("store writer stopped");
}

fn run_batch(conn: &Connection, batch: Vec<Job>) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        tracing::error!("cannot begin a transaction: {e}");
        for job in batch {
            let (_, finish) = job(None);
            finish(false);
        }
        return;
    }
    let mut finishes = Vec::with_capacity(batch.len());
    for job in batch {
        if let Err(e) = conn.execute_batch("SAVEPOINT job") {
            tracing::error!("cannot open a savepoint: {e}");
            let (_, finish) = job(None);
            finishes.push(finish);
            continue;
        }
        let (keep, finish) = job(Some(conn));
        let end = if keep {
            "RELEASE job"
        } else {
            "ROLLBACK TO job; RELEASE job"
        };
        if let Err(e) = conn.execute_batch(end) {
            tracing::error!("cannot end a savepoint: {e}");
        }
        finishes.push(finish);
    }
    let committed = match conn.execute_batch("COMMIT") {
        Ok(()) => true,
        Err(e) => {
            tracing::error!("commit failed: {e}");
            let _ = conn.execute_batch("ROLLBACK");
            false
        }
    };
    for finish in finishes {
        finish(committed);
    }
}

// ---------------------------------------------------------------------------------------------
// The queries. Each runs inside a job, so it sees and leaves a consistent database.

/// A stored response, replayed byte for byte.
#[derive(Debug, Clone)]
pub struct Stored {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` it was sent with.
    pub content_type: String,
    /// The body bytes.
    pub body: Vec<u8>,
}

/// What a claim on a key found.
#[derive(Debug)]
pub enum Claim {
    /// The key is ours until the lease ends (`took_over`: an expired lease was taken over).
    Taken {
        /// Whether an earlier holder's lease had expired.
        took_over: bool,
    },
    /// Another request holds the key's lease.
    InProgress {
        /// When its lease ends, in Unix milliseconds.
        lease_until: i64,
    },
    /// The key was used with another body.
    Conflict,
    /// The key's work is done: here is its answer.
    Done(Stored),
}

/// The request's side of a claim.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The tenant.
    pub tenant: String,
    /// The key.
    pub key: String,
    /// The fingerprint of the normalized body.
    pub fingerprint: Vec<u8>,
    /// This request's token, presented again at completion.
    pub token: i64,
    /// The time now, Unix milliseconds.
    pub now: i64,
    /// When this request's lease ends, Unix milliseconds.
    pub lease_until: i64,
    /// Receipts created before this are expired (treated as absent).
    pub expired_before: i64,
}

/// Claims a key, or reports why not.
pub fn claim(conn: &Connection, c: &ClaimRequest) -> Result<Claim, Failure> {
    conn.prepare_cached("DELETE FROM receipts WHERE tenant = ?1 AND key = ?2 AND created_at < ?3")?
        .execute(params![c.tenant, c.key, c.expired_before])?;
    type Row = (
        Vec<u8>,
        String,
        i64,
        Option<u16>,
        Option<String>,
        Option<Vec<u8>>,
    );
    let found: Option<Row> = conn
        .prepare_cached(
            "SELECT fingerprint, state, lease_until, status, content_type, response
             FROM receipts WHERE tenant = ?1 AND key = ?2",
        )?
        .query_row(params![c.tenant, c.key], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
            ))
        })
        .optional()?;
    let Some((fingerprint, state, lease_until, status, content_type, response)) = found else {
        conn.prepare_cached(
            "INSERT INTO receipts (tenant, key, fingerprint, state, claim_token, lease_until, created_at)
             VALUES (?1, ?2, ?3, 'processing', ?4, ?5, ?6)",
        )?
        .execute(params![c.tenant, c.key, c.fingerprint, c.token, c.lease_until, c.now])?;
        return Ok(Claim::Taken { took_over: false });
    };
    if fingerprint != c.fingerprint {
        return Ok(Claim::Conflict);
    }
    if state == "done" {
        return Ok(Claim::Done(Stored {
            status: status.unwrap_or(500),
            content_type: content_type.unwrap_or_default(),
            body: response.unwrap_or_default(),
        }));
    }
    if lease_until > c.now {
        return Ok(Claim::InProgress { lease_until });
    }
    conn.prepare_cached(
        "UPDATE receipts SET claim_token = ?3, lease_until = ?4 WHERE tenant = ?1 AND key = ?2",
    )?
    .execute(params![c.tenant, c.key, c.token, c.lease_until])?;
    Ok(Claim::Taken { took_over: true })
}

/// Completes a claim with its answer, if the lease is still this request's; otherwise
/// [`Failure::LostLease`], and the job's other work (the ticket) is rolled back with it.
pub fn complete(
    conn: &Connection,
    c: &ClaimRequest,
    answer: &Stored,
    ticket_id: Option<i64>,
    now: i64,
) -> Result<(), Failure> {
    let changed = conn
        .prepare_cached(
            "UPDATE receipts SET state = 'done', status = ?4, content_type = ?5, response = ?6,
                 ticket_id = ?7, completed_at = ?8
             WHERE tenant = ?1 AND key = ?2 AND claim_token = ?3 AND state = 'processing'",
        )?
        .execute(params![
            c.tenant,
            c.key,
            c.token,
            answer.status,
            answer.content_type,
            answer.body,
            ticket_id,
            now
        ])?;
    if changed == 1 {
        Ok(())
    } else {
        Err(Failure::LostLease)
    }
}

/// Gives a claim up (its request answered 5xx: nothing was done, the retry does the work).
pub fn release(conn: &Connection, c: &ClaimRequest) -> Result<(), Failure> {
    conn.prepare_cached(
        "DELETE FROM receipts
         WHERE tenant = ?1 AND key = ?2 AND claim_token = ?3 AND state = 'processing'",
    )?
    .execute(params![c.tenant, c.key, c.token])?;
    Ok(())
}

/// A ticket to create.
#[derive(Debug, Clone)]
pub struct NewTicket {
    /// The tenant it belongs to.
    pub tenant: String,
    /// Its subject.
    pub subject: String,
    /// Its text.
    pub body: String,
    /// Who asked.
    pub email: String,
    /// RFC 3339.
    pub created_at: String,
}

/// A ticket as the API shows it.
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct Ticket {
    /// Its id.
    pub id: i64,
    /// Its subject.
    pub subject: String,
    /// Its text.
    pub body: String,
    /// Who asked.
    pub email: String,
    /// When it was created, RFC 3339.
    #[serde(rename = "createdAt")]
    pub created_at: String,
}

/// Inserts a ticket and returns it.
pub fn insert_ticket(
    conn: &Connection,
    t: &NewTicket,
    key: Option<&str>,
) -> Result<Ticket, Failure> {
    conn.prepare_cached(
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
    Ok(Ticket {
        id: conn.last_insert_rowid(),
        subject: t.subject.clone(),
        body: t.body.clone(),
        email: t.email.clone(),
        created_at: t.created_at.clone(),
    })
}

/// The tenant's newest tickets, newest first.
pub fn list_tickets(conn: &Connection, tenant: &str, limit: i64) -> Result<Vec<Ticket>, Failure> {
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
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Counts kept in the database for one tenant.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counts {
    /// Tickets.
    pub tickets: i64,
    /// Completed receipts.
    pub receipts: i64,
    /// Receipts whose work is under way (or whose holder died before its lease ended).
    pub processing: i64,
}

/// The tenant's counts.
pub fn counts(conn: &Connection, tenant: &str) -> Result<Counts, Failure> {
    let tickets = conn
        .prepare_cached("SELECT count(*) FROM tickets WHERE tenant = ?1")?
        .query_row([tenant], |r| r.get(0))?;
    let (receipts, processing) = conn
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

/// Removes receipts created before `before` (Unix milliseconds); returns how many.
pub fn sweep(conn: &Connection, before: i64) -> Result<usize, Failure> {
    Ok(conn
        .prepare_cached("DELETE FROM receipts WHERE created_at < ?1")?
        .execute([before])?)
}
