//! # The store
//!
//! One SQLite connection, owned by one writer thread. Requests hand it jobs; the thread runs the
//! jobs that are waiting together (group commit), each inside its own savepoint so a failing job
//! rolls back alone, and answers them only after their COMMIT has returned.
//!
//! Jobs are of two kinds. *Durable* jobs (a ticket and its receipt's answer) commit with an
//! fsync (`synchronous=FULL`): once a request hears of its ticket, the ticket survives a power
//! cut. *Light* jobs (claims, releases, reads, sweeps) commit without one. That is safe because
//! the WAL is a log: a light commit is visible to every later transaction at once, and the next
//! durable commit syncs it along with its own frames, so nothing durable can ever depend on a
//! light commit that was lost. A lost claim is harmless: its work had not committed either.
//!
//! A round of the writer: the light jobs waiting, in one transaction; then the durable jobs, in
//! one transaction with one fsync. A keyed request's claim comes with its work as a
//! continuation ([`Store::claim_then`]): once the claim's light transaction has committed, the
//! writer queues the work into the same round's durable transaction itself, so a keyed request
//! costs one trip to the writer and one fsync, like an unkeyed one, while the claim is still
//! committed in a transaction of its own before the work begins. The schema is versioned with
//! `PRAGMA user_version`.

use std::path::Path;
use std::thread::JoinHandle;

use rusqlite::{params, Connection};
use std::sync::mpsc;

use tokio::sync::oneshot;

/// The schema version this server writes.
const SCHEMA_VERSION: i64 = 1;

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
) WITHOUT ROWID;
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

/// Most jobs run in one transaction.
const MAX_BATCH: usize = 512;

/// What a job left to do once its transaction ended: `true` when it committed.
type Finish = Box<dyn FnOnce(bool) + Send>;

/// What a job reports after running: keep its effects or roll them back, what to do after the
/// commit, and a durable job to run next if the commit succeeds (a granted claim's work).
struct Ran {
    keep: bool,
    finish: Finish,
    then: Option<Job>,
}

impl Ran {
    fn end(keep: bool, finish: Finish) -> Ran {
        Ran {
            keep,
            finish,
            then: None,
        }
    }
}

/// What [`Store::claim_then`] found.
#[derive(Debug)]
pub enum Claimed<T> {
    /// The key was not ours: in progress, a conflict, or done.
    Not(Claim),
    /// The claim was committed and the work ran in the durable transaction after it.
    Worked {
        /// Whether an earlier holder's lease had expired.
        took_over: bool,
        /// The work's result, as committed (or not).
        result: Result<T, Failure>,
    },
}

/// A job: runs with the connection (`None` when the transaction could not begin).
type Job = Box<dyn FnOnce(Option<&Connection>) -> Ran + Send>;

/// Whether a job's commit must be synced before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Light,
    Durable,
}

enum Message {
    Job(Kind, Job),
    Stop,
}

/// The handle requests use to reach the writer thread.
#[derive(Debug, Clone)]
pub struct Store {
    tx: mpsc::Sender<Message>,
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
        let (tx, rx) = mpsc::channel();
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

    /// Runs `f` in a durable transaction; its effects are kept when it returns `Ok`, and the
    /// answer arrives once they are committed and synced.
    pub async fn run<T, F>(&self, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Kind::Durable, once(f, reply))?;
        answer.await.map_err(|_| Failure::Closed)?
    }

    /// Runs `f` in a light transaction: committed (visible to every later job) but not synced
    /// on its own. For work whose loss in a power cut is harmless: claims, reads, releases,
    /// sweeps.
    pub async fn run_light<T, F>(&self, f: F) -> Result<T, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel();
        self.send(Kind::Light, once(f, reply))?;
        answer.await.map_err(|_| Failure::Closed)?
    }

    /// Claims a key (see [`claim`]) in a light transaction.
    pub async fn claim(&self, c: ClaimRequest) -> Result<Claim, Failure> {
        self.run_light(move |conn| claim(conn, &c)).await
    }

    /// Claims a key in a light transaction and, once that has committed and if the claim was
    /// granted, runs `work` in the durable transaction of the same round.
    pub async fn claim_then<T, F>(&self, c: ClaimRequest, work: F) -> Result<Claimed<T>, Failure>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    {
        let (reply, answer) = oneshot::channel::<Result<Claimed<T>, Failure>>();
        let job = move |conn: Option<&Connection>| -> Ran {
            match conn.map(|conn| claim(conn, &c)) {
                // The work answers: the writer runs it after this claim's commit, or tells it
                // (with no connection) that the claim did not commit.
                Some(Ok(Claim::Taken { took_over })) => Ran {
                    keep: true,
                    finish: Box::new(|_| {}),
                    then: Some(once_with(work, reply, move |result| {
                        Ok(Claimed::Worked { took_over, result })
                    })),
                },
                Some(Ok(found)) => Ran::end(
                    true,
                    Box::new(move |committed| {
                        let _ = reply.send(if committed {
                            Ok(Claimed::Not(found))
                        } else {
                            Err(Failure::NotCommitted)
                        });
                    }),
                ),
                Some(Err(e)) => Ran::end(false, Box::new(move |_| drop(reply.send(Err(e))))),
                None => Ran::end(
                    false,
                    Box::new(move |_| drop(reply.send(Err(Failure::NotCommitted)))),
                ),
            }
        };
        self.send(Kind::Light, Box::new(job))?;
        answer.await.map_err(|_| Failure::Closed)?
    }

    fn send(&self, kind: Kind, job: Job) -> Result<(), Failure> {
        self.tx
            .send(Message::Job(kind, job))
            .map_err(|_| Failure::Closed)
    }
}

/// A job that runs `f` and sends its result once the transaction has ended.
fn once<T, F>(f: F, reply: oneshot::Sender<Result<T, Failure>>) -> Job
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
{
    once_with(f, reply, |result| result)
}

/// A job that runs `f` (keeping its effects only if it succeeds) and sends `wrap` of its result
/// once the transaction has ended: its value if committed, else why not.
fn once_with<T, F, R, W>(f: F, reply: oneshot::Sender<R>, wrap: W) -> Job
where
    T: Send + 'static,
    F: FnOnce(&Connection) -> Result<T, Failure> + Send + 'static,
    R: Send + 'static,
    W: FnOnce(Result<T, Failure>) -> R + Send + 'static,
{
    Box::new(move |conn: Option<&Connection>| -> Ran {
        match conn.map(f) {
            Some(Ok(value)) => Ran::end(
                true,
                Box::new(move |committed| {
                    let _ = reply.send(wrap(if committed {
                        Ok(value)
                    } else {
                        Err(Failure::NotCommitted)
                    }));
                }),
            ),
            Some(Err(e)) => Ran::end(false, Box::new(move |_| drop(reply.send(wrap(Err(e)))))),
            None => Ran::end(
                false,
                Box::new(move |_| drop(reply.send(wrap(Err(Failure::NotCommitted))))),
            ),
        }
    })
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

fn writer(conn: Connection, rx: mpsc::Receiver<Message>) {
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
        // Granted claims' work joins this round's durable transaction.
        let work = run_batch(&conn, std::mem::take(&mut light), Kind::Light);
        durable.extend(work);
        let none = run_batch(&conn, std::mem::take(&mut durable), Kind::Durable);
        debug_assert!(none.is_empty(), "durable jobs have no continuation");
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

/// Runs jobs in one transaction and answers them; returns the continuations of the jobs that
/// committed (a job whose transaction failed has its continuation told so, and answered).
fn run_batch(conn: &Connection, batch: Vec<Job>, kind: Kind) -> Vec<Job> {
    if batch.is_empty() {
        return Vec::new();
    }
    let sync = match kind {
        Kind::Light => "PRAGMA synchronous = NORMAL",
        Kind::Durable => "PRAGMA synchronous = FULL",
    };
    if let Err(e) = conn
        .execute_batch(sync)
        .and_then(|()| exec(conn, "BEGIN IMMEDIATE"))
    {
        tracing::error!("cannot begin a transaction: {e}");
        for job in batch {
            (job(None).finish)(false);
        }
        return Vec::new();
    }
    let mut finishes = Vec::with_capacity(batch.len());
    let mut then = Vec::new();
    for job in batch {
        if let Err(e) = exec(conn, "SAVEPOINT job") {
            tracing::error!("cannot open a savepoint: {e}");
            finishes.push(job(None).finish);
            continue;
        }
        let ran = job(Some(conn));
        let end = if ran.keep {
            exec(conn, "RELEASE job")
        } else {
            exec(conn, "ROLLBACK TO job").and_then(|()| exec(conn, "RELEASE job"))
        };
        if let Err(e) = end {
            tracing::error!("cannot end a savepoint: {e}");
        }
        finishes.push(ran.finish);
        then.extend(ran.then);
    }
    let committed = match exec(conn, "COMMIT") {
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
    if committed {
        then
    } else {
        for job in then {
            (job(None).finish)(false);
        }
        Vec::new()
    }
}

/// Runs a statement without rows through the statement cache (these run for every job).
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
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
    // The common case, a new key, is one statement.
    let insert = |conn: &Connection| -> Result<usize, Failure> {
        Ok(conn
            .prepare_cached(
                "INSERT INTO receipts (tenant, key, fingerprint, state, claim_token, lease_until, created_at)
                 VALUES (?1, ?2, ?3, 'processing', ?4, ?5, ?6)
                 ON CONFLICT (tenant, key) DO NOTHING",
            )?
            .execute(params![c.tenant, c.key, c.fingerprint, c.token, c.lease_until, c.now])?)
    };
    if insert(conn)? == 1 {
        return Ok(Claim::Taken { took_over: false });
    }
    type Row = (
        Vec<u8>,
        String,
        i64,
        i64,
        Option<u16>,
        Option<String>,
        Option<Vec<u8>>,
    );
    let (fingerprint, state, lease_until, created_at, status, content_type, response): Row = conn
        .prepare_cached(
            "SELECT fingerprint, state, lease_until, created_at, status, content_type, response
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
                r.get(6)?,
            ))
        })?;
    if created_at < c.expired_before {
        // Older than the receipt TTL and not yet swept: the key is forgotten.
        conn.prepare_cached("DELETE FROM receipts WHERE tenant = ?1 AND key = ?2")?
            .execute(params![c.tenant, c.key])?;
        insert(conn)?;
        return Ok(Claim::Taken { took_over: false });
    }
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
