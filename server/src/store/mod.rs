//! # The store
//!
//! Receipts and tickets, in SQLite (a file, or `:memory:`) or in PostgreSQL (a `postgres://` or
//! `postgresql://` URL), behind one seam: a request hands the store a job, a closure over a
//! [`Tx`] (the open transaction, with the queries as methods), and hears its result once the
//! transaction has ended. Effects are kept when the job returns `Ok`, rolled back when it
//! returns `Err`.
//!
//! Jobs are *durable* ([`Store::run`]: a ticket and its receipt's answer, committed and synced
//! before anyone hears of them) or *light* ([`Store::run_light`]: claims, releases, reads and
//! sweeps, committed without waiting for a sync of their own; losing one in a power cut is
//! harmless, and the next durable commit syncs it along with its own). A keyed request's claim
//! is held before its work begins, and stays when the work fails ([`Store::claim_then`]).
//!
//! - SQLite: one connection, owned by a writer thread that groups waiting jobs into shared
//!   transactions (group commit), and one that reads the ticket list ([`Store::list_tickets`]).
//!   See `sqlite.rs`.
//! - PostgreSQL: a small pool of connections, each owned by a thread of its own, each job in a
//!   transaction of its own. The claim reads an existing receipt `FOR UPDATE`, so claimers in
//!   several server processes on one database take turns. See `pg.rs`.
//!
//! # Whose clock
//!
//! Times come from the caller, in Unix milliseconds on its clock ([`ClaimRequest`]'s `now`,
//! `lease_until`, `expired_before`; [`Tx::sweep`]'s). SQLite stores and compares them as they
//! are: the servers on one file are on one host and read one clock. PostgreSQL is shared by
//! the servers of a fleet, whose clocks disagree: a server whose clock runs ahead would find a
//! live claim's lease ended and do the key's work a second time. So it takes from the caller
//! only durations (a lease's length, `lease_until` less `now`; the receipts' time to live,
//! `now` less `expired_before`) and judges them by the database server's clock. Both decide
//! about a receipt with the same rule (`Found::decide`), on the caller's clock.

mod pg;
mod sqlite;

use std::thread::JoinHandle;

/// Why a job did not leave its effect in the database.
#[derive(Debug)]
pub enum StoreError {
    /// SQLite said no.
    Sqlite(rusqlite::Error),
    /// PostgreSQL said no, or could not be reached.
    Postgres(postgres::Error),
    /// The database cannot be used by this server (unreachable, or a schema it does not know).
    Open(String),
    /// The database held a value this server cannot read.
    Corrupt(String),
    /// The store is closed (the server is shutting down).
    Closed,
    /// The job ran but its transaction did not commit.
    NotCommitted,
    /// The job asked for its work to be rolled back (the `crash-before-commit` fault).
    Aborted,
    /// The claim's lease had been taken over by another request: this request's work was
    /// rolled back so that the key's work is done once.
    LostLease,
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> StoreError {
        StoreError::Sqlite(e)
    }
}

impl From<postgres::Error> for StoreError {
    fn from(e: postgres::Error) -> StoreError {
        StoreError::Postgres(e)
    }
}

/// An error and its causes, `: `-separated (the PostgreSQL client's errors keep the server's
/// message in their cause).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let more = c.to_string();
        if !text.ends_with(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        cause = c.source();
    }
    text
}

impl std::fmt::Display for StoreError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreError::Sqlite(e) => write!(f, "database error: {e}"),
            StoreError::Postgres(e) => write!(f, "PostgreSQL: {}", chain(e)),
            StoreError::Open(why) => f.write_str(why),
            StoreError::Corrupt(why) => write!(f, "unreadable data in the database: {why}"),
            StoreError::Closed => f.write_str("the store is closed"),
            StoreError::NotCommitted => f.write_str("the transaction did not commit"),
            StoreError::Aborted => f.write_str("the work was aborted before commit"),
            StoreError::LostLease => f.write_str("the claim's lease was taken over"),
        }
    }
}

impl std::error::Error for StoreError {}

/// The queries, inside an open transaction. Implemented by the SQLite connection (inside the
/// writer's transaction) and by a PostgreSQL transaction.
pub trait Tx {
    /// Claims a key, or reports why not: the key is new (or its receipt expired), its holder's
    /// lease ended (a takeover), another request holds it, it was used with another body, or
    /// its work is done. Leases and receipt ages are judged by the clock of the
    /// [module docs](self#whose-clock).
    fn claim(&mut self, c: &ClaimRequest) -> Result<KeyClaim, StoreError>;

    /// Completes a claim with its answer, if the lease is still this request's; otherwise
    /// [`StoreError::LostLease`], and the job's other work (the ticket) is rolled back with it.
    /// `now` is the completion's time, on the caller's clock (PostgreSQL writes its own).
    fn complete(
        &mut self,
        c: &ClaimRequest,
        answer: &Stored,
        ticket_id: Option<i64>,
        now: i64,
    ) -> Result<(), StoreError>;

    /// Gives a claim up (its request answered 5xx: nothing was done, the retry does the work).
    fn release(&mut self, c: &ClaimRequest) -> Result<(), StoreError>;

    /// Inserts a ticket and returns it.
    fn insert_ticket(&mut self, t: &NewTicket, key: Option<&str>) -> Result<Ticket, StoreError>;

    /// The tenant's newest tickets, newest first, each with its attachments' descriptions.
    fn list_tickets(&mut self, tenant: &str, limit: i64) -> Result<Vec<Ticket>, StoreError>;

    /// The length of the tenant's ticket `ticket_id`'s attachment `n`, from the database
    /// without reading its bytes: the length of the stored value, what [`Tx::attachment`]
    /// reads (a download reserves it first); `None` when there is no such attachment.
    fn attachment_size(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<usize>, StoreError>;

    /// The bytes of the tenant's ticket `ticket_id`'s attachment `n` (0-based, in the order of
    /// `attachments`), with their media type; `None` when there is no such attachment.
    fn attachment(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<File>, StoreError>;

    /// The tenant's counts.
    fn counts(&mut self, tenant: &str) -> Result<Counts, StoreError>;

    /// Removes receipts created before `expired_before` when the caller's clock reads `now`
    /// (Unix milliseconds; PostgreSQL: older than `now` less `expired_before` by the database's
    /// clock); returns how many.
    fn sweep(&mut self, now: i64, expired_before: i64) -> Result<usize, StoreError>;
}

/// Whether `db` names a PostgreSQL database (`postgres://...` or `postgresql://...`) rather
/// than a SQLite file.
pub fn is_postgres(db: &str) -> bool {
    db.starts_with("postgres://") || db.starts_with("postgresql://")
}

/// `db` as it may be shown in logs and errors: a PostgreSQL URL's password (in the user info or
/// as a `password=` parameter) is replaced by `***`.
pub fn describe(db: &str) -> String {
    let Some((scheme, rest)) = db.split_once("://").filter(|_| is_postgres(db)) else {
        return db.to_owned();
    };
    // Everything before the last `@` is user info, whatever characters the password holds.
    let (user, rest) = match rest.rfind('@') {
        Some(at) => {
            let info = &rest[..at];
            let user = match info.split_once(':') {
                Some((name, _)) => format!("{name}:***@"),
                None => format!("{info}@"),
            };
            (user, &rest[at + 1..])
        }
        None => (String::new(), rest),
    };
    let (path, query) = match rest.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (rest, None),
    };
    let query = query
        .map(|q| {
            let params: Vec<&str> = q
                .split('&')
                .map(|p| {
                    if p.starts_with("password=") {
                        "password=***"
                    } else {
                        p
                    }
                })
                .collect();
            format!("?{}", params.join("&"))
        })
        .unwrap_or_default();
    format!("{scheme}://{user}{path}{query}")
}

/// Whether a job's commit must be synced before it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Light,
    Durable,
}

/// The PostgreSQL connections a store opens unless told otherwise.
pub const DEFAULT_CONNECTIONS: usize = 8;

/// The handle requests use to reach the database.
#[derive(Debug, Clone)]
pub struct Store(Backend);

#[derive(Debug, Clone)]
enum Backend {
    Sqlite(sqlite::Writer),
    Postgres(pg::Pool),
}

/// Joins the store's threads after [`Store::stop`].
#[derive(Debug)]
pub struct Writer(Vec<JoinHandle<()>>);

impl Writer {
    /// Waits until every job sent before the stop has been answered and the connections are
    /// closed.
    pub fn join(self) {
        for thread in self.0 {
            let _ = thread.join();
        }
    }
}

/// A job to run with a transaction.
type Work<T> = Box<dyn FnOnce(&mut dyn Tx) -> Result<T, StoreError> + Send>;

impl Store {
    /// Opens (and if needed creates) the database, and starts its threads: a SQLite file (or
    /// `:memory:`), or a PostgreSQL URL with [`DEFAULT_CONNECTIONS`] connections.
    pub fn open(db: &str) -> Result<(Store, Writer), StoreError> {
        Store::open_with(db, DEFAULT_CONNECTIONS)
    }

    /// [`Store::open`], with this many connections if `db` is PostgreSQL (at least one).
    pub fn open_with(db: &str, connections: usize) -> Result<(Store, Writer), StoreError> {
        if is_postgres(db) {
            let (pool, threads) = pg::Pool::open(db, connections.max(1))?;
            Ok((Store(Backend::Postgres(pool)), Writer(threads)))
        } else {
            let (writer, thread) = sqlite::Writer::open(db)?;
            Ok((Store(Backend::Sqlite(writer)), Writer(vec![thread])))
        }
    }

    /// Asks the store to finish the jobs sent so far and stop.
    pub fn stop(&self) {
        match &self.0 {
            Backend::Sqlite(w) => w.stop(),
            Backend::Postgres(p) => p.stop(),
        }
    }

    /// Runs `f` in a durable transaction; its effects are kept when it returns `Ok`, and the
    /// answer arrives once they are committed and synced.
    pub async fn run<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> Result<T, StoreError> + Send + 'static,
    {
        self.job(Kind::Durable, Box::new(f)).await
    }

    /// Runs `f` in a light transaction: committed (visible to every later job) but not synced
    /// on its own. For work whose loss in a power cut is harmless: claims, reads, releases,
    /// sweeps.
    pub async fn run_light<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> Result<T, StoreError> + Send + 'static,
    {
        self.job(Kind::Light, Box::new(f)).await
    }

    /// The tenant's newest `limit` tickets. On a SQLite file, read on a connection of its own,
    /// never by the writer thread, which a long list would hold up for every claim and ticket
    /// meanwhile; `:memory:` has the writer's connection only. On PostgreSQL, a light job.
    pub async fn list_tickets(
        &self,
        tenant: String,
        limit: i64,
    ) -> Result<Vec<Ticket>, StoreError> {
        match &self.0 {
            Backend::Sqlite(w) => w.list_tickets(tenant, limit).await,
            Backend::Postgres(_) => {
                self.run_light(move |tx| tx.list_tickets(&tenant, limit))
                    .await
            }
        }
    }

    async fn job<T: Send + 'static>(&self, kind: Kind, f: Work<T>) -> Result<T, StoreError> {
        match &self.0 {
            Backend::Sqlite(w) => w.run(kind, f).await,
            Backend::Postgres(p) => p.run(kind, f).await,
        }
    }

    /// Claims a key (see [`Tx::claim`]) in a light transaction.
    pub async fn claim(&self, c: ClaimRequest) -> Result<KeyClaim, StoreError> {
        match &self.0 {
            Backend::Sqlite(_) => self.run_light(move |tx| tx.claim(&c)).await,
            Backend::Postgres(p) => p.claim(c).await,
        }
    }

    /// Claims a key and, if the claim was granted, runs `work` in a durable transaction after
    /// it. PostgreSQL commits the claim in a light transaction of its own first (other server
    /// processes claim on the same database); SQLite, whose writer is the only one, runs both in
    /// one durable transaction, the work in a savepoint of its own, so that a failing work
    /// rolls back alone and the claim stays.
    pub async fn claim_then<T, F>(&self, c: ClaimRequest, work: F) -> Result<Claimed<T>, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> Result<T, StoreError> + Send + 'static,
    {
        match &self.0 {
            Backend::Sqlite(w) => w.claim_then(c, Box::new(work)).await,
            Backend::Postgres(p) => p.claim_then(c, Box::new(work)).await,
        }
    }
}

/// What [`Store::claim_then`] found.
#[derive(Debug)]
pub enum Claimed<T> {
    /// The key was not ours: in progress, a conflict, or done.
    Not(KeyClaim),
    /// The claim was committed and the work ran in the durable transaction after it.
    Worked {
        /// Whether an earlier holder's lease had expired.
        took_over: bool,
        /// The work's result, as committed (or not).
        result: Result<T, StoreError>,
    },
}

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
pub enum KeyClaim {
    /// The key is ours until the lease ends (`took_over`: an expired lease was taken over).
    Taken {
        /// Whether an earlier holder's lease had expired.
        took_over: bool,
    },
    /// Another request holds the key's lease.
    InProgress {
        /// When its lease ends, in Unix milliseconds on the claiming request's clock (its `now`
        /// plus the time left).
        lease_until: i64,
    },
    /// The key was used with another body.
    Conflict,
    /// The key's work is done: here is its answer.
    Done(Stored),
}

/// The request's side of a claim. Its times are Unix milliseconds on the request's clock; see
/// the [module docs](self#whose-clock) for whose clock judges them.
#[derive(Debug, Clone)]
pub struct ClaimRequest {
    /// The tenant.
    pub tenant: String,
    /// The key.
    pub key: String,
    /// The fingerprint of the normalized body.
    pub fingerprint: Vec<u8>,
    /// This request's token, presented again at completion; unique across the processes that
    /// share a database.
    pub token: i64,
    /// The time now.
    pub now: i64,
    /// When this request's lease ends (PostgreSQL: only its length, less `now`, is used).
    pub lease_until: i64,
    /// Receipts created before this are expired (treated as absent; PostgreSQL: only the time
    /// to live, `now` less this, is used).
    pub expired_before: i64,
}

/// What a receipt row holds, read by a claim; both backends decide the same way. Its times are
/// on the request's clock: as stored (SQLite), or its `now` plus the time from now by the
/// database's clock (PostgreSQL).
struct Found {
    fingerprint: Vec<u8>,
    state: String,
    lease_until: i64,
    created_at: i64,
    status: Option<i64>,
    content_type: Option<String>,
    response: Option<Vec<u8>>,
}

/// What a claim does about an existing receipt.
enum Decision {
    /// Older than the receipt TTL and not yet swept: the key is forgotten, claim it afresh.
    Renew,
    /// The holder's lease ended: take it over.
    TakeOver,
    /// Answer this.
    Answer(KeyClaim),
}

impl Found {
    fn decide(self, c: &ClaimRequest) -> Result<Decision, StoreError> {
        if self.created_at < c.expired_before {
            return Ok(Decision::Renew);
        }
        if self.fingerprint != c.fingerprint {
            return Ok(Decision::Answer(KeyClaim::Conflict));
        }
        if self.state == "done" {
            let status = self
                .status
                .and_then(|s| u16::try_from(s).ok())
                .filter(|s| (100..1000).contains(s))
                .ok_or_else(|| {
                    StoreError::Corrupt(format!(
                        "the receipt of key {:?} has status {:?}",
                        c.key, self.status
                    ))
                })?;
            return Ok(Decision::Answer(KeyClaim::Done(Stored {
                status,
                content_type: self.content_type.unwrap_or_default(),
                body: self.response.unwrap_or_default(),
            })));
        }
        if self.lease_until > c.now {
            return Ok(Decision::Answer(KeyClaim::InProgress {
                lease_until: self.lease_until,
            }));
        }
        Ok(Decision::TakeOver)
    }
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
    /// Its files, in the order they came (stored in the ticket's transaction).
    pub attachments: Vec<NewAttachment>,
}

/// A file sent with a ticket.
#[derive(Clone)]
pub struct NewAttachment {
    /// Its file name, as the client gave it.
    pub name: String,
    /// Its media type (`application/octet-stream` when the client gave none).
    pub media_type: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
    /// The SHA-256 of its bytes.
    pub sha256: Vec<u8>,
}

impl std::fmt::Debug for NewAttachment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NewAttachment")
            .field("name", &self.name)
            .field("media_type", &self.media_type)
            .field("size", &self.bytes.len())
            .finish()
    }
}

impl NewAttachment {
    /// How the API describes it.
    pub fn describe(&self) -> Attachment {
        Attachment {
            name: self.name.clone(),
            media_type: self.media_type.clone(),
            size: i64::try_from(self.bytes.len()).unwrap_or(i64::MAX),
            sha256: hex(&self.sha256),
        }
    }
}

/// Puts each (ticket id, attachment) in order into its ticket of `tickets`.
pub(crate) fn attach(tickets: &mut [Ticket], files: Vec<(i64, Attachment)>) {
    let at: std::collections::HashMap<i64, usize> =
        tickets.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    for (id, file) in files {
        if let Some(&i) = at.get(&id) {
            tickets[i].attachments.push(file);
        }
    }
}

/// A stored value's length as the database gave it (`length`, `octet_length`).
pub(crate) fn stored_length(length: i64) -> Result<usize, StoreError> {
    usize::try_from(length)
        .map_err(|_| StoreError::Corrupt(format!("an attachment's length is {length}")))
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A stored attachment's name, media type and bytes.
#[derive(Clone)]
pub struct File {
    /// Its file name.
    pub name: String,
    /// Its media type.
    pub media_type: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

impl std::fmt::Debug for File {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("File")
            .field("name", &self.name)
            .field("media_type", &self.media_type)
            .field("size", &self.bytes.len())
            .finish()
    }
}

/// A ticket's file as the API lists it (`GET /api/tickets/{id}/attachments/{n}` has its bytes).
#[derive(Debug, Clone, serde::Serialize, PartialEq, Eq)]
pub struct Attachment {
    /// Its file name.
    pub name: String,
    /// Its media type.
    #[serde(rename = "type")]
    pub media_type: String,
    /// Its size in bytes.
    pub size: i64,
    /// The SHA-256 of its bytes, lower-case hex.
    pub sha256: String,
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
    /// Its files (none for a JSON or form ticket).
    pub attachments: Vec<Attachment>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_urls_are_told_from_sqlite_paths() {
        assert!(is_postgres("postgres://u@h/db"));
        assert!(is_postgres("postgresql://h"));
        assert!(!is_postgres("helpdesk.db"));
        assert!(!is_postgres(":memory:"));
        assert!(!is_postgres("dir/postgres://x"));
    }

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://u:secret@h:5432/db",
                "postgres://u:***@h:5432/db",
            ),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("postgresql://h/db", "postgresql://h/db"),
            ("postgres://u:p@ss:w/rd@h/db", "postgres://u:***@h/db"),
            (
                "postgres://h/db?sslmode=disable&password=secret",
                "postgres://h/db?sslmode=disable&password=***",
            ),
            ("helpdesk.db", "helpdesk.db"),
        ] {
            assert_eq!(describe(url), shown, "{url}");
        }
    }
}
