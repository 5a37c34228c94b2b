//! # The PostgreSQL backend
//!
//! A small pool: each connection is owned by a thread of its own (the `postgres` client is
//! synchronous, with a little runtime inside that must not run on a thread that drives async
//! tasks), and the threads take jobs from one queue. Every job runs in a transaction of its own
//! (`READ COMMITTED`); a light one with `synchronous_commit = off`, which, as with SQLite's
//! light commits, is safe because the WAL is flushed in order: a later synced commit carries it.
//!
//! Several server processes may share the database. What keeps a key's work to one ticket:
//!
//! - The claim is `INSERT ... ON CONFLICT (tenant, key) DO NOTHING`; when the row exists, it is
//!   read `FOR UPDATE`, so concurrent claimers (in any process) wait for each other, and for a
//!   completion under way, before deciding: done (replay), another body (conflict), a live lease
//!   (in progress) or an ended one (take over, with this request's token).
//! - The claim commits on its own; the work runs in a second transaction: the ticket, then
//!   `UPDATE receipts SET state = 'done' ... WHERE ... claim_token = $token AND state =
//!   'processing'`. No row updated means the lease was taken over: the transaction is rolled
//!   back, ticket included.
//! - Tokens are unique across processes (a random start per process plus a counter).
//! - Leases and receipt ages are judged by the database server's clock, never by a server
//!   process's: the hosts of a fleet disagree, and one whose clock runs ahead would find a live
//!   claim's lease ended and do the key's work beside its holder (one behind would have its own
//!   claims taken over at once, and forget or sweep receipts late or early likewise). A request
//!   gives only durations, on its own clock: its lease's length (`lease_until` less `now`) and
//!   the receipts' time to live (`now` less `expired_before`). The statements store and compare
//!   times as the database's `statement_timestamp()` (in Unix milliseconds) plus or less those,
//!   so no offset between clocks is measured, nor goes stale. A receipt read by a claim is put on
//!   the request's clock (its `now` plus the time left by the database's) before the shared
//!   decision (`Found::decide`), and a lease answered (`KeyClaim::InProgress`) is shown so.
//!   `created_at` and `completed_at` are the database's clock too.
//!
//! The schema is created by the first server on an empty database, under an advisory lock, and
//! versioned in `oncekey_server_schema`; a version this server does not know is refused.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use postgres::{Client, Config, NoTls, Statement};
use tokio::sync::oneshot;

use super::{
    attach, chain, hex, stored_length, Attachment, ClaimRequest, Claimed, Counts, Decision, File,
    Found, KeyClaim, Kind, NewTicket, StoreError, Stored, Ticket, Tx, Work,
};

/// The schema version this server writes: 2 added `attachments` (a version 1 database is
/// migrated in place).
const SCHEMA_VERSION: i32 = 2;

/// What version 2 added.
const ATTACHMENTS: &str = "
CREATE TABLE attachments (
    ticket_id BIGINT NOT NULL REFERENCES tickets (id),
    -- 0-based, in the order the files came.
    n INTEGER NOT NULL,
    name TEXT NOT NULL,
    media_type TEXT NOT NULL,
    size BIGINT NOT NULL,
    sha256 BYTEA NOT NULL,
    bytes BYTEA NOT NULL,
    PRIMARY KEY (ticket_id, n)
);
";

/// The same tables as SQLite's, in PostgreSQL's types.
const SCHEMA: &str = "
CREATE TABLE oncekey_server_schema (version INTEGER NOT NULL);

CREATE TABLE tickets (
    id BIGSERIAL PRIMARY KEY,
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
    fingerprint BYTEA NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('processing', 'done')),
    -- Who holds the lease while processing; the completion must present it.
    claim_token BIGINT NOT NULL,
    lease_until BIGINT NOT NULL,
    status INTEGER,
    content_type TEXT,
    response BYTEA,
    ticket_id BIGINT REFERENCES tickets (id),
    created_at BIGINT NOT NULL,
    completed_at BIGINT,
    PRIMARY KEY (tenant, key),
    CHECK (state = 'processing' OR (status IS NOT NULL AND response IS NOT NULL))
);
CREATE INDEX receipts_by_age ON receipts (created_at);
";

/// Held while a server looks at (and perhaps creates) the schema: servers starting together on
/// an empty database take turns. Any constant; this one spells \"oncekey\" in ASCII.
const SCHEMA_LOCK: i64 = 0x006f_6e63_656b_6579;

/// How long a connection attempt may take when the URL does not say (`connect_timeout`).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The database's clock in Unix milliseconds, as SQL: the time the statement began, one value
/// for the whole statement (and stable, so `receipts_by_age` can be searched with it).
macro_rules! db_now {
    () => {
        "(extract(epoch FROM statement_timestamp()) * 1000)::bigint"
    };
}

/// The longest duration passed to the database, either way: added to its clock it stays well
/// inside `BIGINT`.
const MAX_LENGTH: i64 = 1 << 62;

/// The time from `from` to `to` on one clock, in milliseconds (negative when `to` is earlier).
fn length(from: i64, to: i64) -> i64 {
    to.saturating_sub(from).clamp(-MAX_LENGTH, MAX_LENGTH)
}

/// The statements every connection prepares once.
struct Statements {
    insert_receipt: Statement,
    lock_receipt: Statement,
    renew_receipt: Statement,
    take_over: Statement,
    complete: Statement,
    release: Statement,
    insert_ticket: Statement,
    list_tickets: Statement,
    insert_attachment: Statement,
    list_attachments: Statement,
    attachment_size: Statement,
    attachment: Statement,
    count_tickets: Statement,
    count_receipts: Statement,
    sweep: Statement,
}

impl Statements {
    fn prepare(client: &mut Client) -> Result<Statements, postgres::Error> {
        Ok(Statements {
            // $5: the lease's length.
            insert_receipt: client.prepare(concat!(
                "INSERT INTO receipts (tenant, key, fingerprint, state, claim_token, lease_until, created_at)
                 VALUES ($1, $2, $3, 'processing', $4, ",
                db_now!(),
                " + $5, ",
                db_now!(),
                ") ON CONFLICT (tenant, key) DO NOTHING"
            ))?,
            // The lease's end and the creation as times from now by the database's clock.
            lock_receipt: client.prepare(concat!(
                "SELECT fingerprint, state, lease_until - ",
                db_now!(),
                ", created_at - ",
                db_now!(),
                ", status, content_type, response
                 FROM receipts WHERE tenant = $1 AND key = $2 FOR UPDATE"
            ))?,
            renew_receipt: client.prepare(concat!(
                "UPDATE receipts SET fingerprint = $3, state = 'processing', claim_token = $4,
                     lease_until = ",
                db_now!(),
                " + $5, created_at = ",
                db_now!(),
                ", status = NULL, content_type = NULL,
                     response = NULL, ticket_id = NULL, completed_at = NULL
                 WHERE tenant = $1 AND key = $2"
            ))?,
            take_over: client.prepare(concat!(
                "UPDATE receipts SET claim_token = $3, lease_until = ",
                db_now!(),
                " + $4 WHERE tenant = $1 AND key = $2"
            ))?,
            complete: client.prepare(concat!(
                "UPDATE receipts SET state = 'done', status = $4, content_type = $5, response = $6,
                     ticket_id = $7, completed_at = ",
                db_now!(),
                " WHERE tenant = $1 AND key = $2 AND claim_token = $3 AND state = 'processing'"
            ))?,
            release: client.prepare(
                "DELETE FROM receipts
                 WHERE tenant = $1 AND key = $2 AND claim_token = $3 AND state = 'processing'",
            )?,
            insert_ticket: client.prepare(
                "INSERT INTO tickets (tenant, subject, body, email, created_at, idempotency_key)
                 VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
            )?,
            list_tickets: client.prepare(
                "SELECT id, subject, body, email, created_at FROM tickets
                 WHERE tenant = $1 ORDER BY id DESC LIMIT $2",
            )?,
            insert_attachment: client.prepare(
                "INSERT INTO attachments (ticket_id, n, name, media_type, size, sha256, bytes)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )?,
            list_attachments: client.prepare(
                "SELECT a.ticket_id, a.name, a.media_type, a.size, a.sha256
                 FROM attachments a JOIN tickets t ON t.id = a.ticket_id
                 WHERE t.tenant = $1 AND a.ticket_id >= $2 ORDER BY a.ticket_id, a.n",
            )?,
            // octet_length() of a bytea reads its header (a TOAST pointer holds the length), not
            // its bytes.
            attachment_size: client.prepare(
                "SELECT octet_length(a.bytes) FROM attachments a JOIN tickets t ON t.id = a.ticket_id
                 WHERE t.tenant = $1 AND a.ticket_id = $2 AND a.n = $3",
            )?,
            attachment: client.prepare(
                "SELECT a.name, a.media_type, a.bytes FROM attachments a JOIN tickets t ON t.id = a.ticket_id
                 WHERE t.tenant = $1 AND a.ticket_id = $2 AND a.n = $3",
            )?,
            count_tickets: client.prepare("SELECT count(*) FROM tickets WHERE tenant = $1")?,
            count_receipts: client.prepare(
                "SELECT count(*) FILTER (WHERE state = 'done'), count(*) FILTER (WHERE state = 'processing')
                 FROM receipts WHERE tenant = $1",
            )?,
            // $1: the receipts' time to live.
            sweep: client.prepare(concat!(
                "DELETE FROM receipts WHERE created_at < ",
                db_now!(),
                " - $1"
            ))?,
        })
    }
}

/// One connection and its statements.
struct Conn {
    client: Client,
    statements: Statements,
    /// A transaction could not be ended: never reuse this connection.
    broken: bool,
}

impl Conn {
    /// Connects, creating or checking the schema first if asked to.
    fn connect(config: &Config, migrate_schema: bool) -> Result<Conn, StoreError> {
        let mut client = config.connect(NoTls)?;
        if migrate_schema {
            migrate(&mut client)?;
        }
        // Light jobs (and the one-statement claim) commit without waiting for the WAL to reach
        // the disk; durable ones ask for it (see `transaction`).
        client.batch_execute("SET synchronous_commit = off")?;
        let statements = Statements::prepare(&mut client)?;
        Ok(Conn {
            client,
            statements,
            broken: false,
        })
    }

    /// Runs `f` in a transaction of this kind: committed if it returns `Ok`, else rolled back.
    /// Beginning, like ending, is one round trip.
    fn transaction<T>(
        &mut self,
        kind: Kind,
        f: impl FnOnce(&mut dyn Tx) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.client.batch_execute(match kind {
            Kind::Light => "BEGIN",
            Kind::Durable => "BEGIN; SET LOCAL synchronous_commit = on",
        })?;
        let result = f(&mut PgTx {
            client: &mut self.client,
            st: &self.statements,
        });
        let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
        if let Err(e) = self.client.batch_execute(end) {
            // Whatever state the session is in now, the next job must not inherit it.
            self.broken = true;
            return Err(match result {
                Ok(_) => e.into(),
                Err(first) => first,
            });
        }
        result
    }

    /// Claims a key. The common case, a new key, is one statement in a transaction of its own;
    /// a key that exists is claimed in a transaction that reads its receipt `FOR UPDATE`.
    fn claim(&mut self, c: &ClaimRequest) -> Result<KeyClaim, StoreError> {
        if insert_receipt(&mut self.client, &self.statements, c)? == 1 {
            return Ok(KeyClaim::Taken { took_over: false });
        }
        self.transaction(Kind::Light, |tx| tx.claim(c))
    }
}

/// `INSERT ... ON CONFLICT DO NOTHING` of a claim: 1 if the key was free.
fn insert_receipt(
    client: &mut Client,
    st: &Statements,
    c: &ClaimRequest,
) -> Result<u64, postgres::Error> {
    let lease = length(c.now, c.lease_until);
    client.execute(&st.insert_receipt, &claim_params(c, &lease))
}

/// The parameters of the statements that write a claim (`insert_receipt`, `renew_receipt`):
/// `lease` is its length.
fn claim_params<'a>(
    c: &'a ClaimRequest,
    lease: &'a i64,
) -> [&'a (dyn postgres::types::ToSql + Sync); 5] {
    [&c.tenant, &c.key, &c.fingerprint, &c.token, lease]
}

/// Creates the schema on an empty database, or checks its version.
fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
    let exists: bool = tx
        .query_one(
            "SELECT to_regclass('oncekey_server_schema') IS NOT NULL",
            &[],
        )?
        .try_get(0)?;
    if !exists {
        tx.batch_execute(SCHEMA)?;
        tx.batch_execute(ATTACHMENTS)?;
        tx.execute(
            "INSERT INTO oncekey_server_schema (version) VALUES ($1)",
            &[&SCHEMA_VERSION],
        )?;
        tx.commit()?;
        tracing::info!(version = SCHEMA_VERSION, "created the PostgreSQL schema");
        return Ok(());
    }
    let version: Option<i32> = tx
        .query_one("SELECT max(version) FROM oncekey_server_schema", &[])?
        .try_get(0)?;
    match version {
        Some(SCHEMA_VERSION) => Ok(()),
        Some(1) => {
            tx.batch_execute(ATTACHMENTS)?;
            tx.execute(
                "UPDATE oncekey_server_schema SET version = $1",
                &[&SCHEMA_VERSION],
            )?;
            tx.commit()?;
            tracing::info!(version = SCHEMA_VERSION, "migrated the PostgreSQL schema");
            Ok(())
        }
        Some(v) if v > SCHEMA_VERSION => Err(StoreError::Open(format!(
            "the database has oncekey-server schema version {v}; this server knows version \
             {SCHEMA_VERSION} (a newer oncekey-server made it): refusing to use it"
        ))),
        other => Err(StoreError::Open(format!(
            "the database's oncekey_server_schema table holds version {other:?}; this server \
             knows version {SCHEMA_VERSION}"
        ))),
    }
}

/// A job for a pool thread: runs with its connection, or with why there is none.
type Job = Box<dyn FnOnce(Result<&mut Conn, StoreError>) + Send>;

enum Message {
    Job(Job),
    Stop,
}

/// The handle requests use to reach the pool's threads.
#[derive(Debug, Clone)]
pub(super) struct Pool {
    jobs: mpsc::Sender<Message>,
    threads: usize,
}

impl Pool {
    /// Connects `connections` times (creating or checking the schema first) and starts a thread
    /// for each connection. Errors never show the URL (its password); the caller names the
    /// database with [`super::describe`].
    pub(super) fn open(
        url: &str,
        connections: usize,
    ) -> Result<(Pool, Vec<JoinHandle<()>>), StoreError> {
        let mut config: Config = url
            .parse()
            .map_err(|e: postgres::Error| StoreError::Open(chain(&e)))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("oncekey-server");
        }
        // Connecting runs the client's own runtime: on a plain thread, never on the caller's,
        // which may be driving async tasks. The connections stay on threads of their own.
        let (tx, rx) = mpsc::channel();
        let opener = std::thread::Builder::new()
            .name("oncekey-pg-open".into())
            .spawn(move || start_threads(config, connections, rx))
            .map_err(|e| StoreError::Open(format!("cannot start a thread: {e}")))?;
        let threads = opener
            .join()
            .map_err(|_| StoreError::Open("opening the database panicked".into()))?
            .map_err(|e| match e {
                StoreError::Postgres(e) => StoreError::Open(chain(&e)),
                other => other,
            })?;
        let pool = Pool {
            jobs: tx,
            threads: threads.len(),
        };
        Ok((pool, threads))
    }

    /// Asks every thread to finish the jobs sent so far and stop.
    pub(super) fn stop(&self) {
        for _ in 0..self.threads {
            let _ = self.jobs.send(Message::Stop);
        }
    }

    /// Runs `f` in a transaction of this kind.
    pub(super) async fn run<T: Send + 'static>(
        &self,
        kind: Kind,
        f: Work<T>,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(move |conn| {
            let _ = reply.send(conn.and_then(|conn| conn.transaction(kind, f)));
        }))?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Claims a key (see [`Conn::claim`]).
    pub(super) async fn claim(&self, c: ClaimRequest) -> Result<KeyClaim, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(move |conn| {
            let _ = reply.send(conn.and_then(|conn| conn.claim(&c)));
        }))?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    /// Claims a key, commits, and if the claim was granted runs `work` in a durable transaction
    /// on the same connection.
    pub(super) async fn claim_then<T: Send + 'static>(
        &self,
        c: ClaimRequest,
        work: Work<T>,
    ) -> Result<Claimed<T>, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Box::new(move |conn| {
            let result =
                conn.and_then(
                    |conn| match conn.transaction(Kind::Light, |tx| tx.claim(&c))? {
                        KeyClaim::Taken { took_over } => Ok(Claimed::Worked {
                            took_over,
                            result: conn.transaction(Kind::Durable, work),
                        }),
                        found => Ok(Claimed::Not(found)),
                    },
                );
            let _ = reply.send(result);
        }))?;
        answer.await.map_err(|_| StoreError::Closed)?
    }

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .send(Message::Job(job))
            .map_err(|_| StoreError::Closed)
    }
}

/// Connects (the first connection creates or checks the schema), then starts one thread per
/// connection, all taking jobs from `rx`.
fn start_threads(
    config: Config,
    connections: usize,
    rx: mpsc::Receiver<Message>,
) -> Result<Vec<JoinHandle<()>>, StoreError> {
    let mut conns = vec![Conn::connect(&config, true)?];
    for _ in 1..connections {
        conns.push(Conn::connect(&config, false)?);
    }
    let rx = Arc::new(Mutex::new(rx));
    let mut threads = Vec::with_capacity(connections);
    for (i, conn) in conns.into_iter().enumerate() {
        let (config, rx) = (config.clone(), rx.clone());
        let thread = std::thread::Builder::new()
            .name(format!("oncekey-pg-{i}"))
            .spawn(move || work(conn, config, rx))
            .map_err(|e| StoreError::Open(format!("cannot start a thread: {e}")))?;
        threads.push(thread);
    }
    Ok(threads)
}

/// A pool thread: runs jobs until told to stop, reconnecting when its connection was lost.
fn work(conn: Conn, config: Config, rx: Arc<Mutex<mpsc::Receiver<Message>>>) {
    let mut conn = Some(conn);
    loop {
        let message = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => break,
        };
        let Ok(Message::Job(job)) = message else {
            break;
        };
        if conn
            .as_ref()
            .is_some_and(|c| c.broken || c.client.is_closed())
        {
            tracing::warn!("the PostgreSQL connection was lost; reconnecting");
            conn = None;
        }
        if conn.is_none() {
            match Conn::connect(&config, false) {
                Ok(c) => conn = Some(c),
                Err(e) => {
                    tracing::error!("cannot reconnect to PostgreSQL: {e}");
                    job(Err(e));
                    continue;
                }
            }
        }
        if let Some(c) = conn.as_mut() {
            job(Ok(c));
        }
    }
    tracing::debug!("PostgreSQL connection closed");
}

/// A connection inside a job's transaction, and its statements.
struct PgTx<'a> {
    client: &'a mut Client,
    st: &'a Statements,
}

impl Tx for PgTx<'_> {
    fn claim(&mut self, c: &ClaimRequest) -> Result<KeyClaim, StoreError> {
        let st = self.st;
        // A row the insert ran into may be gone (released, swept) before it is read: then the
        // insert is tried again. Three rounds of that is a very busy key: "in progress".
        for _ in 0..3 {
            if insert_receipt(self.client, st, c)? == 1 {
                return Ok(KeyClaim::Taken { took_over: false });
            }
            // Locked until this transaction ends: another claimer, or a completion, waits.
            let Some(row) = self
                .client
                .query_opt(&st.lock_receipt, &[&c.tenant, &c.key])?
            else {
                continue;
            };
            // On the request's clock: its now plus the time from now by the database's.
            let found = Found {
                fingerprint: row.try_get(0)?,
                state: row.try_get(1)?,
                lease_until: c.now.saturating_add(row.try_get(2)?),
                created_at: c.now.saturating_add(row.try_get(3)?),
                status: row.try_get::<_, Option<i32>>(4)?.map(i64::from),
                content_type: row.try_get(5)?,
                response: row.try_get(6)?,
            };
            let lease = length(c.now, c.lease_until);
            return match found.decide(c)? {
                Decision::Answer(claim) => Ok(claim),
                Decision::Renew => {
                    self.client
                        .execute(&st.renew_receipt, &claim_params(c, &lease))?;
                    Ok(KeyClaim::Taken { took_over: false })
                }
                Decision::TakeOver => {
                    self.client
                        .execute(&st.take_over, &[&c.tenant, &c.key, &c.token, &lease])?;
                    Ok(KeyClaim::Taken { took_over: true })
                }
            };
        }
        Ok(KeyClaim::InProgress { lease_until: c.now })
    }

    /// `completed_at` is the database's clock, as `created_at` is: `_now` is not used.
    fn complete(
        &mut self,
        c: &ClaimRequest,
        answer: &Stored,
        ticket_id: Option<i64>,
        _now: i64,
    ) -> Result<(), StoreError> {
        let changed = self.client.execute(
            &self.st.complete,
            &[
                &c.tenant,
                &c.key,
                &c.token,
                &i32::from(answer.status),
                &answer.content_type,
                &answer.body,
                &ticket_id,
            ],
        )?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::LostLease)
        }
    }

    fn release(&mut self, c: &ClaimRequest) -> Result<(), StoreError> {
        self.client
            .execute(&self.st.release, &[&c.tenant, &c.key, &c.token])?;
        Ok(())
    }

    fn insert_ticket(&mut self, t: &NewTicket, key: Option<&str>) -> Result<Ticket, StoreError> {
        let row = self.client.query_one(
            &self.st.insert_ticket,
            &[
                &t.tenant,
                &t.subject,
                &t.body,
                &t.email,
                &t.created_at,
                &key,
            ],
        )?;
        let id: i64 = row.try_get(0)?;
        for (n, a) in t.attachments.iter().enumerate() {
            let n = i32::try_from(n).unwrap_or(i32::MAX);
            let size = i64::try_from(a.bytes.len()).unwrap_or(i64::MAX);
            self.client.execute(
                &self.st.insert_attachment,
                &[&id, &n, &a.name, &a.media_type, &size, &a.sha256, &a.bytes],
            )?;
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
        let rows = self
            .client
            .query(&self.st.list_tickets, &[&tenant, &limit])?;
        rows.iter()
            .map(|r| {
                Ok(Ticket {
                    id: r.try_get(0)?,
                    subject: r.try_get(1)?,
                    body: r.try_get(2)?,
                    email: r.try_get(3)?,
                    created_at: r.try_get(4)?,
                    attachments: Vec::new(),
                })
            })
            .collect::<Result<Vec<_>, StoreError>>()
            .and_then(|mut tickets| {
                let Some(oldest) = tickets.last().map(|t| t.id) else {
                    return Ok(tickets);
                };
                let rows = self
                    .client
                    .query(&self.st.list_attachments, &[&tenant, &oldest])?;
                let files = rows
                    .iter()
                    .map(|r| {
                        let sha: Vec<u8> = r.try_get(4)?;
                        Ok((
                            r.try_get::<_, i64>(0)?,
                            Attachment {
                                name: r.try_get(1)?,
                                media_type: r.try_get(2)?,
                                size: r.try_get(3)?,
                                sha256: hex(&sha),
                            },
                        ))
                    })
                    .collect::<Result<Vec<_>, StoreError>>()?;
                attach(&mut tickets, files);
                Ok(tickets)
            })
    }

    fn attachment_size(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<usize>, StoreError> {
        let Ok(n) = i32::try_from(n) else {
            return Ok(None);
        };
        let row = self
            .client
            .query_opt(&self.st.attachment_size, &[&tenant, &ticket_id, &n])?;
        match row {
            Some(r) => stored_length(r.try_get::<_, i32>(0)?.into()).map(Some),
            None => Ok(None),
        }
    }

    fn attachment(
        &mut self,
        tenant: &str,
        ticket_id: i64,
        n: i64,
    ) -> Result<Option<File>, StoreError> {
        let Ok(n) = i32::try_from(n) else {
            return Ok(None);
        };
        let row = self
            .client
            .query_opt(&self.st.attachment, &[&tenant, &ticket_id, &n])?;
        match row {
            Some(r) => Ok(Some(File {
                name: r.try_get(0)?,
                media_type: r.try_get(1)?,
                bytes: r.try_get(2)?,
            })),
            None => Ok(None),
        }
    }

    fn counts(&mut self, tenant: &str) -> Result<Counts, StoreError> {
        let tickets = self
            .client
            .query_one(&self.st.count_tickets, &[&tenant])?
            .try_get(0)?;
        let row = self.client.query_one(&self.st.count_receipts, &[&tenant])?;
        Ok(Counts {
            tickets,
            receipts: row.try_get(0)?,
            processing: row.try_get(1)?,
        })
    }

    fn sweep(&mut self, now: i64, expired_before: i64) -> Result<usize, StoreError> {
        let ttl = length(expired_before, now);
        let removed = self.client.execute(&self.st.sweep, &[&ttl])?;
        Ok(usize::try_from(removed).unwrap_or(usize::MAX))
    }
}
