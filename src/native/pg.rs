//! # The PostgreSQL store (feature `postgres`)
//!
//! For a fleet: several instances of a service share one table of pending submissions, so when
//! one dies another finishes its work under the same keys.
//!
//! - One row per submission name in `oncekey_pending`: the record (the core's
//!   [`Record`](crate::core::Record) as JSON text) and a lease (owner, expiry in Unix
//!   milliseconds of the database's clock). Every [`Store`] method is one statement, atomic on
//!   its own; the row lock PostgreSQL takes for the statement serialises two instances deciding
//!   about one lease.
//! - Leases are judged by the database server's clock, never by a host's: the hosts of a fleet
//!   disagree (a host whose clock runs ahead would take a live lease over, and two instances
//!   would send one submission at once; one behind would wait out a lease long gone). A caller
//!   gives only the lease's length, `lease.until` less its own `now` (or less this host's system
//!   clock, the client's `now`, for [`Store::save`], [`Store::renew`] and [`Store::defer`], which
//!   are given no `now`); the statement stores that length past the database's
//!   `statement_timestamp()` and compares stored expiries with that same time, in the same
//!   statement (no offset is measured, so none goes stale). Leases read back (a
//!   [`Claim::Busy`] holder's, [`Store::list`]'s) are shown on the caller's clock: its `now`
//!   (or this host's clock) plus the time left by the database's. A quarantined record's time
//!   is the caller's `now` as given: a record of when, not a lease.
//! - [`Store::claim_due`] takes up to `limit` submissions whose lease has run out (or was given
//!   up) in one `UPDATE … FROM (SELECT … FOR UPDATE SKIP LOCKED)`: instances polling the table
//!   at once each get different rows and never wait on each other. The partial index
//!   `oncekey_pending_due (lease_until) WHERE record IS NOT NULL` serves it.
//! - A record no client can read is moved aside into `oncekey_quarantine`, never deleted
//!   (CONTRACT.md section 5), by the client that claims it (with a warning): a text that is no
//!   record, as in every store, and bytes that are not UTF-8, which a `SQL_ASCII` database keeps
//!   as a foreign writer gave them. Those are read as they are and answered as an empty text
//!   ([`Due::record`]), so one such row never fails [`Store::claim_due`] (every worker's poll),
//!   a claim of its name or [`Store::list`]; the quarantine keeps its bytes.
//! - [`PostgresStore::enqueue`] writes a new submission inside the caller's own transaction (a
//!   transactional outbox): the withdrawal row and the submission that pays it commit together
//!   or not at all, and a worker's [`Client::resume_due`](crate::Client::resume_due) sends it.
//! - The schema is created and migrated on [`PostgresStore::connect`], under an advisory lock
//!   (instances starting together migrate once), and versioned in `oncekey_store_schema`; a
//!   database from a newer oncekey is refused unchanged.
//! - A connection lost while it sat in the pool (a PostgreSQL restart, a proxy's idle timeout,
//!   `pg_terminate_backend`) does not fail the call that finds it: the call runs again, once, on
//!   a new connection, when running it again cannot do it twice (`PostgresStore::with` and
//!   `PostgresStore::in_transaction` say which calls, and why).
//! - Durability is PostgreSQL's: a record is committed, and flushed, before the attempt it
//!   covers is sent (a `synchronous_commit = off` of the database, role or server is turned on
//!   for the store's connections; a stronger setting is kept). The removal after a definite
//!   answer commits with `synchronous_commit = off`, and is made durable by the next synchronous
//!   commit's flush. That setting is the session's: connect directly or through a pooler in
//!   session mode, as a transaction-pooling one (PgBouncer's `pool_mode = transaction`) keeps
//!   no session's settings.
//!
//! Connections are plain TCP or Unix sockets (`NoTls`): run it on a private network or a
//! loopback. Secrets never reach the table (CONTRACT.md section 5), but request bodies do.
//!
//! ```no_run
//! # fn outbox() -> oncekey::Result<()> {
//! use oncekey::{Client, PostgresStore};
//! let url = "postgres://app@127.0.0.1/payments";
//! let store = PostgresStore::connect(url)?;
//! let client = Client::builder().store(store).build()?;
//! // In the caller's transaction: the withdrawal and the submission that pays it, together.
//! let mut db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
//! let mut tx = db.transaction().expect("begin");
//! tx.execute("INSERT INTO withdrawals (id, amount) VALUES (77, 1200)", &[]).expect("insert");
//! let record = client
//!     .submission("payout-77")
//!     .post("https://api.example.com/payouts")
//!     .json(&serde_json::json!({ "withdrawal": 77, "amount": 1200 }))?
//!     .record()?;
//! PostgresStore::enqueue(&mut tx, &record)?;
//! tx.commit().expect("commit");
//! // Any instance's worker loop then sends it (with its key, once):
//! // loop { client.resume_due(64).await?; tokio::time::sleep(..).await; }
//! # Ok(()) }
//! ```

use std::sync::Mutex;

use postgres::{Config, GenericClient, NoTls};

use super::error::{BoxError, Error, Result};
use super::store::{record_text, Claim, Due, Lease, Listed, Quarantined, Store};
use crate::core::{Record, Timestamp};

/// The schema, one step per version: `MIGRATIONS[i]` takes the version from `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE oncekey_pending (
        name        TEXT PRIMARY KEY,
        record      TEXT,
        lease_owner TEXT,
        -- Unix milliseconds; 0 when no lease is held (free to claim).
        lease_until BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX oncekey_pending_due ON oncekey_pending (lease_until) WHERE record IS NOT NULL;",
    // Unreadable records, moved aside as they were stored.
    "CREATE TABLE oncekey_quarantine (
        id             BIGSERIAL PRIMARY KEY,
        name           TEXT NOT NULL,
        record         TEXT,
        reason         TEXT NOT NULL,
        quarantined_at BIGINT NOT NULL
    );",
];

/// The advisory lock key that serialises migrations ("oncekey" in ASCII).
const MIGRATION_LOCK: i64 = 0x006f_6e63_656b_6579;

/// Connections a store opens at most, by default: a call beyond them waits for one to be free
/// (a PostgreSQL connection is a server process; opening one per call costs more than waiting).
const MAX_CONNECTIONS: usize = 16;

/// The store's connections: the idle ones, and how many are open in all.
#[derive(Default)]
struct Pool {
    idle: Vec<postgres::Client>,
    open: usize,
}

/// The database's clock in Unix milliseconds, as SQL: the time the statement began, one value
/// for the whole statement (and stable, so an index can be searched with it).
macro_rules! db_now {
    () => {
        "(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
    };
}

/// A stored record (the column `$column`) as the bytes of its UTF-8 text, as SQL: converted
/// to UTF-8 as PostgreSQL would send it, except from a `SQL_ASCII` database, which stores the
/// bytes a writer gave it, UTF-8 or not, and refuses to send a UTF-8 client those that are not
/// (one foreign record would fail every statement that reads it): those are read as they are,
/// and judged here ([`record_text`]).
macro_rules! record_bytes {
    ($column:literal) => {
        concat!(
            "convert_to(",
            $column,
            ", CASE WHEN current_setting('server_encoding') = 'SQL_ASCII' THEN 'SQL_ASCII' ELSE 'UTF8' END)"
        )
    };
}

/// The statement [`Store::claim_due`] runs (also shown by [`PostgresStore::explain_claim_due`]):
/// `$2` is the lease's length in milliseconds.
const CLAIM_DUE: &str = concat!(
    "UPDATE oncekey_pending AS p SET lease_owner = $1, lease_until = ",
    db_now!(),
    " + $2
     FROM (SELECT name FROM oncekey_pending
           WHERE record IS NOT NULL AND lease_until <= ",
    db_now!(),
    "
           ORDER BY lease_until LIMIT $3
           FOR UPDATE SKIP LOCKED) AS due
     WHERE p.name = due.name
     RETURNING p.name, ",
    record_bytes!("p.record")
);

/// A [`Store`] in a PostgreSQL database. See the module docs.
pub struct PostgresStore {
    config: Config,
    /// Where it is, for messages: user, host, port and database, never the password.
    place: String,
    pool: Mutex<Pool>,
    /// Signalled when a connection is put back or closed.
    freed: std::sync::Condvar,
    max_connections: usize,
    /// This host's clock, which `save`, `renew`, `defer` and `list` count a lease's length
    /// from (the client's `now`); another in tests, for a host whose clock is off.
    clock: fn() -> Timestamp,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.place)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // A `postgres::Client` blocks as it closes, which panics on a runtime's thread.
        let idle = std::mem::take(&mut self.pool.lock().unwrap_or_else(|e| e.into_inner()).idle);
        if !idle.is_empty() {
            off_runtime(move || drop(idle));
        }
    }
}

/// User, hosts, ports and database of a configuration, without the password.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(h) => h.clone(),
            #[cfg(unix)]
            postgres::config::Host::Unix(p) => p.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}{}{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        if ports.is_empty() { "" } else { ":" },
        ports.join(","),
        config.get_dbname().unwrap_or("")
    )
}

/// What PostgreSQL said: `postgres::Error` shows only its kind ("db error"); the server's
/// message, or the cause, says what went wrong.
fn detail(e: &postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        return db.to_string();
    }
    match std::error::Error::source(e) {
        Some(cause) => format!("{e}: {cause}"),
        None => e.to_string(),
    }
}

/// Runs `f` where the `postgres` crate may block: on this thread, or, when this thread is
/// driving a tokio runtime (where blocking on another runtime panics), on a scoped thread of
/// its own. The [`Store`] methods need none of this: the client calls them on tokio's blocking
/// pool.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|scope| match scope.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

fn millis(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

fn timestamp(ms: i64) -> Timestamp {
    Timestamp::from_millis(u64::try_from(ms).unwrap_or(0))
}

/// The longest lease length passed to the database, either way: added to its clock it stays
/// well inside `BIGINT`.
const MAX_LENGTH: i64 = 1 << 62;

/// A stored record's bytes as text to show ([`Store::list`], [`Store::quarantined`]): bytes
/// that are not UTF-8 become replacement characters, and the record then fails to parse (one
/// unreadable record) instead of failing the whole list.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The length of a lease running until `until` on a clock that reads `now`, in milliseconds:
/// negative for one already run out.
fn length(until: Timestamp, now: Timestamp) -> i64 {
    let ms = i128::from(until.as_millis()) - i128::from(now.as_millis());
    i64::try_from(ms.clamp(-i128::from(MAX_LENGTH), i128::from(MAX_LENGTH))).unwrap_or(0)
}

/// A lease with `left` milliseconds to go by the database's clock, as `now` on the caller's
/// clock sees it.
fn until_from(now: Timestamp, left: i64) -> Timestamp {
    let ms = i128::from(now.as_millis()) + i128::from(left);
    Timestamp::from_millis(u64::try_from(ms.max(0)).unwrap_or(u64::MAX))
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://user:password@host:port/db`, or the
    /// key-value form `host=… user=…`), and creates or migrates the schema. It blocks while it
    /// does (like [`SqliteStore::open`](crate::SqliteStore::open)), and may be called from
    /// async code.
    pub fn connect(url: &str) -> Result<PostgresStore> {
        off_runtime(|| PostgresStore::connect_blocking(url))
    }

    fn connect_blocking(url: &str) -> Result<PostgresStore> {
        let config: Config = url.parse().map_err(|e| {
            Error::store(
                "the PostgreSQL address could not be read (expected postgres://user@host:port/database)",
                e,
            )
        })?;
        let store = PostgresStore {
            place: describe(&config),
            config,
            pool: Mutex::new(Pool::default()),
            freed: std::sync::Condvar::new(),
            max_connections: MAX_CONNECTIONS,
            clock: super::client::now,
        };
        let mut conn = store.connection()?;
        match migrate(&mut conn) {
            Ok(()) => {}
            Err(Refused::Db(e)) => return Err(store.failed("migrated", e)),
            Err(Refused::Newer(version)) => {
                return Err(Error::corrupt(
                    format!(
                        "the store {} has schema version {version}, made by a newer oncekey; this one reads up to {}",
                        store.place,
                        MIGRATIONS.len()
                    ),
                    "refusing to change it",
                ))
            }
        }
        store.put_back(conn);
        Ok(store)
    }

    /// Writes a new pending submission inside the caller's transaction (or on any
    /// [`postgres::Client`]): the transactional outbox. The record comes from
    /// [`SubmissionBuilder::record`](crate::SubmissionBuilder::record); it carries no lease, so
    /// the first [`Client::resume_due`](crate::Client::resume_due) of any instance after the
    /// commit claims and sends it. Its time budget starts when it is first sent.
    ///
    /// A submission already pending under the record's name is an error
    /// ([`Error::is_pending_mismatch`]) and, as PostgreSQL aborts the statement's transaction,
    /// the caller's transaction with it: the intent and its submission stay together.
    pub fn enqueue(db: &mut impl GenericClient, record: &Record) -> Result<()> {
        match db.execute(
            "INSERT INTO oncekey_pending (name, record, lease_owner, lease_until)
             VALUES ($1, $2, NULL, 0)",
            &[&record.name, &record.to_json()],
        ) {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(&postgres::error::SqlState::UNIQUE_VIOLATION) => {
                Err(Error::already_pending(&record.name).with_source(e))
            }
            Err(e) => Err(Error::store(
                format!("the submission {:?} could not be enqueued", record.name),
                detail(&e),
            )),
        }
    }

    /// The plan PostgreSQL chooses for [`Store::claim_due`]'s statement (`EXPLAIN`'s lines),
    /// for benchmarks and for checking the index serves it.
    pub fn explain_claim_due(&self) -> Result<Vec<String>> {
        off_runtime(|| self.explain_blocking())
    }

    fn explain_blocking(&self) -> Result<Vec<String>> {
        self.with(|c| {
            let mut tx = c.transaction()?;
            let rows = tx.query(
                &format!("EXPLAIN {CLAIM_DUE}"),
                &[&"explain", &0i64, &64i64],
            )?;
            tx.rollback()?;
            rows.iter().map(|r| r.try_get::<_, String>(0)).collect()
        })
    }

    /// Where the store is: user, hosts, ports and database (never the password).
    pub fn database(&self) -> &str {
        &self.place
    }

    fn failed(&self, what: &str, e: postgres::Error) -> Error {
        Error::store(
            format!("the store {} could not be {what}", self.place),
            detail(&e),
        )
    }

    /// At most `n` connections at once (16 by default).
    pub fn max_connections(mut self, n: usize) -> PostgresStore {
        self.max_connections = n.max(1);
        self
    }

    /// An idle connection, a new one while fewer than the maximum are open, or the next one
    /// put back.
    fn connection(&self) -> Result<postgres::Client> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            while let Some(c) = pool.idle.pop() {
                if !c.is_closed() {
                    return Ok(c);
                }
                pool.open -= 1;
            }
            if pool.open < self.max_connections {
                pool.open += 1;
                drop(pool);
                return self.open();
            }
            pool = self.freed.wait(pool).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A new connection whose commits are flushed before they are answered: a database,
    /// role or server configured with `synchronous_commit = off` would otherwise acknowledge a
    /// record, and its attempt be sent, before it is durable (CONTRACT.md section 5). A
    /// stronger setting (`remote_apply`, say) is kept; `remove` turns it off for itself.
    fn open(&self) -> Result<postgres::Client> {
        let durable = |mut conn: postgres::Client| {
            conn.batch_execute(
                "SELECT set_config('synchronous_commit', 'on', false) \
                 WHERE current_setting('synchronous_commit') = 'off'",
            )
            .map(|()| conn)
        };
        self.config.connect(NoTls).and_then(durable).map_err(|e| {
            self.closed();
            self.failed("reached", e)
        })
    }

    fn put_back(&self, conn: postgres::Client) {
        if conn.is_closed() {
            drop(conn);
            return self.closed();
        }
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .idle
            .push(conn);
        self.freed.notify_one();
    }

    /// A connection was dropped: its place is free.
    fn closed(&self) {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        pool.open = pool.open.saturating_sub(1);
        drop(pool);
        self.freed.notify_one();
    }

    /// Runs a call that is idempotent by construction on a pooled connection: run twice by the
    /// same owner, it leaves the table and answers as run once, so a connection lost while it
    /// ran (its statements may have reached the server) is replaced and the call run again.
    /// These are: `claim` and `take_over` (the owner takes its own lease again and reads the
    /// same record; the second statement only reads), `save` and `renew` (the same UPDATE of
    /// the owner's own row), `release` and `defer` (they answer nothing, and a second run finds
    /// the lease given up and changes nothing), and the reads (`list`, `quarantined`, the
    /// EXPLAIN). The others run through [`PostgresStore::in_transaction`].
    fn with<T>(
        &self,
        mut f: impl FnMut(&mut postgres::Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.run(|c| f(c).map_err(Failure::again))
    }

    /// Runs a call that must not be carried out twice in one transaction, BEGIN to COMMIT:
    /// `remove` and `quarantine` (a second run would answer that nothing was there), and
    /// `claim_due` (a second run would not return what the first claimed, left leased to this
    /// owner until the lease ran out). A connection lost before the COMMIT was sent (found
    /// closed at the BEGIN, as a connection closed while idle is) leaves nothing done, as the
    /// server rolls back a transaction whose connection ends: the call runs again on a new
    /// connection. Lost at the COMMIT, it may have been done, and its error is the caller's.
    fn in_transaction<T>(
        &self,
        mut f: impl FnMut(&mut postgres::Transaction<'_>) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        self.run(|c| {
            let mut tx = c.transaction().map_err(Failure::again)?;
            let v = f(&mut tx).map_err(Failure::again)?;
            tx.commit().map_err(|error| Failure {
                error,
                again: false,
            })?;
            Ok(v)
        })
    }

    /// Runs `f` on a pooled connection; a connection that failed is dropped, not reused. When
    /// the connection turns out lost (closed while it sat idle by a PostgreSQL restart or a
    /// proxy's timeout, reset, or ended by the server), `f` runs once more on a new connection
    /// if its failure says it may.
    fn run<T>(
        &self,
        mut f: impl FnMut(&mut postgres::Client) -> std::result::Result<T, Failure>,
    ) -> Result<T> {
        let mut conn = self.connection()?;
        let mut first = true;
        loop {
            let Failure { error, again } = match f(&mut conn) {
                Ok(v) => {
                    self.put_back(conn);
                    return Ok(v);
                }
                Err(failure) => failure,
            };
            let lost = lost(&error, &conn);
            if error.as_db_error().is_some() && !lost {
                // The server answered: the connection itself is fine.
                self.put_back(conn);
                return Err(self.failed("used", error));
            }
            drop(conn);
            self.closed();
            if !(lost && again && first) {
                return Err(self.failed("used", error));
            }
            first = false;
            // What closed this one (a restart, a failover) most likely closed the idle ones too.
            self.drop_idle();
            conn = self.connection()?;
        }
    }

    /// Drops every idle connection.
    fn drop_idle(&self) {
        let idle = {
            let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
            pool.open = pool.open.saturating_sub(pool.idle.len());
            std::mem::take(&mut pool.idle)
        };
        if !idle.is_empty() {
            drop(idle);
            self.freed.notify_all();
        }
    }
}

/// A call's error, and whether the call may run again after it on a new connection: false
/// when the connection was lost as a COMMIT was sent (it may have been carried out), true
/// before (nothing was) and for the idempotent calls.
struct Failure {
    error: postgres::Error,
    again: bool,
}

impl Failure {
    fn again(error: postgres::Error) -> Failure {
        Failure { error, again: true }
    }
}

/// Whether `e` says the connection is gone, rather than that the server refused a statement:
/// closed (a proxy closed it, or it ended earlier), an I/O error (reset), or a FATAL error,
/// which PostgreSQL sends as it ends the session (a restart, `pg_terminate_backend`,
/// `idle_session_timeout`).
fn lost(e: &postgres::Error, conn: &postgres::Client) -> bool {
    use postgres::error::Severity;
    e.is_closed()
        || conn.is_closed()
        || e.as_db_error().is_some_and(|db| {
            matches!(
                db.parsed_severity(),
                Some(Severity::Fatal | Severity::Panic)
            )
        })
        || std::error::Error::source(e).is_some_and(|cause| cause.is::<std::io::Error>())
}

/// Why [`migrate`] refused.
enum Refused {
    Db(postgres::Error),
    /// The schema is newer than this oncekey reads.
    Newer(usize),
}

impl From<postgres::Error> for Refused {
    fn from(e: postgres::Error) -> Refused {
        Refused::Db(e)
    }
}

fn migrate(conn: &mut postgres::Client) -> std::result::Result<(), Refused> {
    // A database already at this version needs no DDL: an application role may not be allowed
    // to create in its schema (PostgreSQL 15's public schema by default), and CREATE TABLE IF
    // NOT EXISTS asks for that right even when the table is there.
    let found = conn.query_one(
        "SELECT to_regclass('oncekey_store_schema') IS NOT NULL",
        &[],
    )?;
    if found.try_get::<_, bool>(0)? {
        let version = conn
            .query_opt("SELECT version FROM oncekey_store_schema", &[])?
            .map(|row| row.try_get::<_, i32>(0))
            .transpose()?;
        let version = version.map(|v| usize::try_from(v).unwrap_or(usize::MAX));
        match version {
            Some(v) if v == MIGRATIONS.len() => return Ok(()),
            Some(v) if v > MIGRATIONS.len() => return Err(Refused::Newer(v)),
            _ => {}
        }
    }
    let mut tx = conn.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])?;
    tx.batch_execute("CREATE TABLE IF NOT EXISTS oncekey_store_schema (version INTEGER NOT NULL)")?;
    let version: i32 = match tx.query_opt("SELECT version FROM oncekey_store_schema", &[])? {
        Some(row) => row.try_get(0)?,
        None => {
            tx.execute("INSERT INTO oncekey_store_schema (version) VALUES (0)", &[])?;
            0
        }
    };
    let version = usize::try_from(version).unwrap_or(usize::MAX);
    if version > MIGRATIONS.len() {
        // Leave the newer schema as it is.
        tx.rollback()?;
        return Err(Refused::Newer(version));
    }
    for (i, step) in MIGRATIONS.iter().enumerate().skip(version) {
        tx.batch_execute(step)?;
        let v = i32::try_from(i + 1).unwrap_or(i32::MAX);
        tx.execute("UPDATE oncekey_store_schema SET version = $1", &[&v])?;
    }
    Ok(tx.commit()?)
}

impl PostgresStore {
    /// A claim, with a lease held by `dead` counted as run out.
    fn claim_over(
        &self,
        name: &str,
        dead: Option<&str>,
        lease: &Lease,
        now: Timestamp,
    ) -> Result<Claim, BoxError> {
        let owner = lease.owner.as_str();
        let length = length(lease.until, now);
        Ok(self.with(|c| {
            // A held row that does not change is read again: another instance may release or
            // remove it between the two statements, so try a few times.
            for _ in 0..8 {
                let taken = c.query_opt(
                    concat!(
                        "INSERT INTO oncekey_pending (name, lease_owner, lease_until)
                         VALUES ($1, $2, ",
                        db_now!(),
                        " + $3)
                         ON CONFLICT (name) DO UPDATE
                         SET lease_owner = EXCLUDED.lease_owner, lease_until = EXCLUDED.lease_until
                         WHERE oncekey_pending.lease_owner IS NULL
                            OR oncekey_pending.lease_owner = EXCLUDED.lease_owner
                            OR oncekey_pending.lease_owner = $4
                            OR oncekey_pending.lease_until <= ",
                        db_now!(),
                        "
                         RETURNING ",
                        record_bytes!("record")
                    ),
                    &[&name, &owner, &length, &dead],
                )?;
                if let Some(row) = taken {
                    let record: Option<Vec<u8>> = row.try_get(0)?;
                    return Ok(Claim::Taken(record.map(record_text)));
                }
                let held = c.query_opt(
                    concat!(
                        "SELECT lease_owner, lease_until - ",
                        db_now!(),
                        " FROM oncekey_pending WHERE name = $1"
                    ),
                    &[&name],
                )?;
                if let Some(row) = held {
                    if let Some(holder) = row.try_get::<_, Option<String>>(0)? {
                        let left: i64 = row.try_get(1)?;
                        if left > 0 && holder != owner && Some(holder.as_str()) != dead {
                            return Ok(Claim::Busy(Lease {
                                owner: holder,
                                until: until_from(now, left),
                            }));
                        }
                    }
                }
            }
            // Still changing under us: report it busy to an unknown holder rather than spin.
            Ok(Claim::Busy(Lease {
                owner: "(changing)".into(),
                until: now,
            }))
        })?)
    }
}

impl Store for PostgresStore {
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError> {
        self.claim_over(name, None, lease, now)
    }

    fn take_over(
        &self,
        name: &str,
        holder: &str,
        lease: &Lease,
        now: Timestamp,
    ) -> Result<Claim, BoxError> {
        self.claim_over(name, Some(holder), lease, now)
    }

    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError> {
        let length = length(lease.until, (self.clock)());
        Ok(self.with(|c| {
            c.execute(
                concat!(
                    "UPDATE oncekey_pending SET record = $2, lease_until = ",
                    db_now!(),
                    " + $4 WHERE name = $1 AND lease_owner = $3"
                ),
                &[&name, &record, &lease.owner, &length],
            )
            .map(|n| n == 1)
        })?)
    }

    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError> {
        let length = length(lease.until, (self.clock)());
        Ok(self.with(|c| {
            c.execute(
                concat!(
                    "UPDATE oncekey_pending SET lease_until = ",
                    db_now!(),
                    " + $3 WHERE name = $1 AND lease_owner = $2"
                ),
                &[&name, &lease.owner, &length],
            )
            .map(|n| n == 1)
        })?)
    }

    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        Ok(self.in_transaction(|tx| {
            // Not flushed on its own: it rides the next synchronous commit's WAL flush (a lost
            // removal is resent with the same key and replayed, CONTRACT.md section 5).
            tx.batch_execute("SET LOCAL synchronous_commit = off")?;
            let removed = tx.execute(
                "DELETE FROM oncekey_pending WHERE name = $1 AND lease_owner = $2",
                &[&name, &owner],
            )?;
            Ok(removed == 1)
        })?)
    }

    /// The removal with the session's synchronous commit (turned on by `open`), flushed before
    /// it is answered.
    fn discard(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        Ok(self.with(|c| {
            c.execute(
                "DELETE FROM oncekey_pending WHERE name = $1 AND lease_owner = $2",
                &[&name, &owner],
            )
            .map(|n| n == 1)
        })?)
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError> {
        Ok(self.with(|c| {
            c.execute(
                "DELETE FROM oncekey_pending WHERE name = $1 AND lease_owner = $2 AND record IS NULL",
                &[&name, &owner],
            )?;
            c.execute(
                "UPDATE oncekey_pending SET lease_owner = NULL, lease_until = 0
                 WHERE name = $1 AND lease_owner = $2",
                &[&name, &owner],
            )
            .map(|_| ())
        })?)
    }

    fn defer(&self, name: &str, owner: &str, due: Timestamp) -> Result<(), BoxError> {
        // No owner (so a claim by name takes it), but not due before `due`.
        let length = length(due, (self.clock)());
        Ok(self.with(|c| {
            c.execute(
                concat!(
                    "UPDATE oncekey_pending SET lease_owner = NULL, lease_until = ",
                    db_now!(),
                    " + $3 WHERE name = $1 AND lease_owner = $2 AND record IS NOT NULL"
                ),
                &[&name, &owner, &length],
            )
            .map(|_| ())
        })?)
    }

    fn list(&self) -> Result<Vec<Listed>, BoxError> {
        let now = (self.clock)();
        Ok(self.with(|c| {
            c.query(
                concat!(
                    "SELECT name, ",
                    record_bytes!("record"),
                    ", lease_owner, lease_until - ",
                    db_now!(),
                    " FROM oncekey_pending WHERE record IS NOT NULL ORDER BY name"
                ),
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(Listed {
                    name: r.try_get(0)?,
                    record: lossy(r.try_get(1)?),
                    lease: r
                        .try_get::<_, Option<String>>(2)?
                        .map(|owner| -> std::result::Result<Lease, postgres::Error> {
                            Ok(Lease {
                                owner,
                                until: until_from(now, r.try_get(3)?),
                            })
                        })
                        .transpose()?,
                })
            })
            .collect()
        })?)
    }

    fn quarantine(
        &self,
        name: &str,
        owner: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        Ok(self.in_transaction(|tx| {
            tx.execute(
                "WITH moved AS (
                     DELETE FROM oncekey_pending
                     WHERE name = $1 AND lease_owner = $2 AND record IS NOT NULL
                     RETURNING name, record)
                 INSERT INTO oncekey_quarantine (name, record, reason, quarantined_at)
                 SELECT name, record, $3, $4 FROM moved",
                &[&name, &owner, &reason, &millis(now)],
            )
            .map(|n| n == 1)
        })?)
    }

    fn quarantined(&self) -> Result<Vec<Quarantined>, BoxError> {
        Ok(self.with(|c| {
            c.query(
                concat!(
                    "SELECT name, ",
                    record_bytes!("record"),
                    ", reason, quarantined_at FROM oncekey_quarantine ORDER BY id"
                ),
                &[],
            )?
            .iter()
            .map(|r| {
                Ok(Quarantined {
                    name: r.try_get(0)?,
                    record: lossy(r.try_get::<_, Option<Vec<u8>>>(1)?.unwrap_or_default()),
                    reason: r.try_get(2)?,
                    at: timestamp(r.try_get(3)?),
                })
            })
            .collect()
        })?)
    }

    fn claim_due(&self, lease: &Lease, now: Timestamp, limit: usize) -> Result<Vec<Due>, BoxError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        Ok(self.in_transaction(|tx| {
            tx.query(
                CLAIM_DUE,
                &[&lease.owner, &length(lease.until, now), &limit],
            )?
            .iter()
            .map(|r| {
                Ok(Due {
                    name: r.try_get(0)?,
                    record: record_text(r.try_get(1)?),
                })
            })
            .collect()
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::native::store::Judged;

    /// A fresh database in the cluster at `ONCEKEY_PG_URL` (`None`, with the test named as
    /// skipped, when it is unset).
    fn fresh_database(test: &str) -> Option<String> {
        let Ok(base) = std::env::var("ONCEKEY_PG_URL") else {
            // Straight to stderr, past the test harness's capture, so the skip shows.
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no PostgreSQL (ONCEKEY_PG_URL is unset; make test starts one)"
            );
            return None;
        };
        let name = format!("oncekey_unit_{}_{}", std::process::id(), rand_u32());
        let mut admin = postgres::Client::connect(&base, NoTls).expect("the test cluster");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create database");
        let (head, _) = base.rsplit_once('/').expect("a URL with a database");
        Some(format!("{head}/{name}"))
    }

    fn rand_u32() -> u32 {
        let mut b = [0u8; 4];
        getrandom::fill(&mut b).expect("random");
        u32::from_le_bytes(b)
    }

    #[test]
    fn postgres_store_has_the_semantics() {
        let Some(url) = fresh_database("postgres_store_has_the_semantics") else {
            return;
        };
        let one = PostgresStore::connect(&url).unwrap();
        let two = PostgresStore::connect(&url).unwrap();
        crate::native::store::check_semantics(&one, &two, Judged::ByDatabase);
    }

    const TEN_MINUTES: u64 = 10 * 60 * 1000;

    /// This host's clock, ten minutes ahead: another host of the fleet whose clock runs fast.
    fn ahead() -> Timestamp {
        Timestamp::from_millis(super::super::client::now().as_millis() + TEN_MINUTES)
    }

    /// This host's clock, ten minutes behind.
    fn behind() -> Timestamp {
        Timestamp::from_millis(super::super::client::now().as_millis() - TEN_MINUTES)
    }

    fn lease(owner: &str, from: Timestamp, ms: u64) -> Lease {
        Lease {
            owner: owner.into(),
            until: from + std::time::Duration::from_millis(ms),
        }
    }

    #[test]
    fn leases_are_judged_by_the_databases_clock_not_each_hosts() {
        let Some(url) = fresh_database("leases_are_judged_by_the_databases_clock_not_each_hosts")
        else {
            return;
        };
        // Three hosts on one database: one whose clock is right, one ten minutes ahead, one
        // ten minutes behind. Each passes its own clock's `now`, as its client would.
        let right = PostgresStore::connect(&url).unwrap();
        let mut fast = PostgresStore::connect(&url).unwrap();
        fast.clock = ahead;
        let mut slow = PostgresStore::connect(&url).unwrap();
        slow.clock = behind;
        let now = super::super::client::now;

        // The right host holds payout-77 for two seconds, as a client does: claim, then save.
        let t = now();
        assert_eq!(
            right
                .claim("payout-77", &lease("right", t, 2000), t)
                .unwrap(),
            Claim::Taken(None)
        );
        assert!(right
            .save("payout-77", "{r}", &lease("right", now(), 2000))
            .unwrap());
        // The host ahead does not take the live lease over: busy, and nothing is due.
        let t = ahead();
        match fast
            .claim("payout-77", &lease("fast", t, 60_000), t)
            .unwrap()
        {
            Claim::Busy(held) => {
                assert_eq!(held.owner, "right");
                // Shown on the fast host's clock: at most two seconds from its now.
                assert!(held.until > t && held.until <= t + std::time::Duration::from_secs(2));
            }
            taken => panic!("the live lease is stolen by the host ahead: {taken:?}"),
        }
        let due = fast.claim_due(&lease("fast", t, 60_000), t, 10).unwrap();
        assert!(
            due.is_empty(),
            "the live lease is stolen by a poll: {due:?}"
        );
        let listed = fast.list().unwrap();
        let shown = listed[0].lease.as_ref().expect("held");
        assert!(shown.until > t, "listed as live: {shown:?}");
        // A lease the host behind takes is as long as it says: the right host cannot take it.
        let t = behind();
        assert_eq!(
            slow.claim("payout-78", &lease("slow", t, 60_000), t)
                .unwrap(),
            Claim::Taken(None)
        );
        let t = now();
        match right
            .claim("payout-78", &lease("right", t, 2000), t)
            .unwrap()
        {
            Claim::Busy(held) => assert_eq!(held.owner, "slow"),
            taken => panic!("the host behind's lease is stolen: {taken:?}"),
        }

        // Once payout-77's lease truly ran out, the host ahead takes it up.
        std::thread::sleep(std::time::Duration::from_millis(2300));
        let t = ahead();
        let due = fast.claim_due(&lease("fast", t, 500), t, 10).unwrap();
        assert_eq!(
            due,
            [Due {
                name: "payout-77".into(),
                record: "{r}".into()
            }]
        );
        // And once the fast host's half second ran out, the host behind sees it run out too.
        std::thread::sleep(std::time::Duration::from_millis(800));
        let t = behind();
        assert_eq!(
            slow.claim("payout-77", &lease("slow", t, 60_000), t)
                .unwrap(),
            Claim::Taken(Some("{r}".into())),
            "the host behind sees the run-out lease as run out"
        );
    }

    #[test]
    fn a_record_is_committed_durably_whatever_the_database_says() {
        // A DBA's `synchronous_commit = off` (a common tuning) made every save an
        // asynchronous commit: a record could be acknowledged, and its attempt sent, before it
        // was flushed. A stronger setting is left as it is.
        let Some(url) = fresh_database("a_record_is_committed_durably_whatever_the_database_says")
        else {
            return;
        };
        let name = url.rsplit_once('/').unwrap().1.to_owned();
        let mut admin = postgres::Client::connect(&url, NoTls).unwrap();
        for (set, want) in [
            ("off", "on"),
            ("remote_apply", "remote_apply"),
            ("local", "local"),
        ] {
            admin
                .batch_execute(&format!(
                    "ALTER DATABASE {name} SET synchronous_commit = {set}"
                ))
                .unwrap();
            let store = PostgresStore::connect(&url).unwrap();
            let mut conn = store.connection().unwrap();
            let now: String = conn
                .query_one("SHOW synchronous_commit", &[])
                .unwrap()
                .get(0);
            assert_eq!(now, want, "the database says {set}");
            store.put_back(conn);
        }
    }

    #[test]
    fn a_newer_schema_is_refused_and_left_alone() {
        let Some(url) = fresh_database("a_newer_schema_is_refused_and_left_alone") else {
            return;
        };
        drop(PostgresStore::connect(&url).unwrap());
        let mut db = postgres::Client::connect(&url, NoTls).unwrap();
        db.batch_execute("UPDATE oncekey_store_schema SET version = 99")
            .unwrap();
        let err = PostgresStore::connect(&url).unwrap_err();
        assert!(err.is_corrupt(), "{err}");
        let text = err.to_string();
        assert!(text.contains("schema version 99"), "{text}");
        let version: i32 = db
            .query_one("SELECT version FROM oncekey_store_schema", &[])
            .unwrap()
            .get(0);
        assert_eq!(version, 99);
    }

    #[test]
    fn a_bad_address_is_named_without_its_password() {
        let err = PostgresStore::connect("postgres://u:hunter2@127.0.0.1:1/db").unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("127.0.0.1") && text.contains("could not be reached"),
            "{text}"
        );
        assert!(!text.contains("hunter2"), "{text}");
        let err = PostgresStore::connect("postgres://[nope").unwrap_err();
        assert!(err.to_string().contains("PostgreSQL address"), "{err}");
    }
}
