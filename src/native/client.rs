//! # The client
//!
//! [`Client`] sends submissions through the core's [`Submission`] state machine: it claims the
//! name's lease, restores a pending record if there is one, begins, and then carries out the
//! core's actions in order (persist and sync the record, send an attempt, wait, forget the
//! record) until the core settles. The rules (the answer table, backoff, `Retry-After`, budget,
//! "same body") are the core's; this file only does the I/O.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, COOKIE};
use tokio::sync::watch;
use tracing::Instrument;

use super::error::{BoxError, Error, Result};
use super::store::{Claim, Lease, Store};
use crate::core::{
    classify, Action, Answer, Attempt, BeginError, Encoding, Failure, GiveUp, Key, KeyFormat,
    NewKey, Outcome, Record, Request, RetryPolicy, Settled, StateError, Submission, Timestamp,
    Verdict, DEFAULT_KEY_HEADER,
};

/// The wall clock, as the core wants it.
fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    Timestamp::from_millis(ms)
}

/// A uniform draw for the backoff's jitter. A failing OS generator only makes the jitter
/// predictable, never the key (keys fail loudly below).
fn jitter() -> u32 {
    getrandom::u32().unwrap_or(u32::MAX / 2)
}

fn random_key_bytes() -> Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::request("no random bytes for a new key").with_source(e.to_string()))?;
    Ok(bytes)
}

/// What a [`HeaderProvider`] is asked for: one attempt about to be sent.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The submission's name.
    pub name: &'a str,
    /// Its key.
    pub key: &'a Key,
    /// The attempt's number, counting every attempt of the submission from 1.
    pub attempt: u32,
    /// What is sent (method, URL, the stored headers, body).
    pub request: &'a Request,
}

/// Adds headers that must never be stored (credentials, session cookies) to every attempt,
/// including attempts resumed after a restart. Any `Fn(&Outgoing) -> HeaderMap` is one.
pub trait HeaderProvider: Send + Sync + 'static {
    /// The headers to add to this attempt.
    fn headers(&self, outgoing: &Outgoing<'_>) -> HeaderMap;
}

impl<F> HeaderProvider for F
where
    F: Fn(&Outgoing<'_>) -> HeaderMap + Send + Sync + 'static,
{
    fn headers(&self, outgoing: &Outgoing<'_>) -> HeaderMap {
        self(outgoing)
    }
}

/// Sends submissions once. Cheap to clone; clones share the store, the HTTP connection pool and
/// the lease owner id.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    store: Arc<dyn Store>,
    policy: RetryPolicy,
    timeout: Duration,
    lease: Duration,
    owner: String,
    key_header: HeaderName,
    key_format: KeyFormat,
    secret_names: Vec<HeaderName>,
    secrets: HeaderMap,
    provider: Option<Arc<dyn HeaderProvider>>,
    resume_concurrency: usize,
    flights: Mutex<HashMap<String, Flight>>,
    next_flight: AtomicU64,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.inner.store)
            .field("policy", &self.inner.policy)
            .field("timeout", &self.inner.timeout)
            .field("lease", &self.inner.lease)
            .field("owner", &self.inner.owner)
            .field("key_header", &self.inner.key_header)
            .field("secret_names", &self.inner.secret_names)
            .finish_non_exhaustive()
    }
}

/// Builds a [`Client`].
#[must_use]
pub struct ClientBuilder {
    store: Option<Arc<dyn Store>>,
    http: Option<reqwest::Client>,
    policy: RetryPolicy,
    timeout: Duration,
    lease: Duration,
    key_header: String,
    key_format: KeyFormat,
    secret_names: Vec<String>,
    secrets: Vec<(String, String)>,
    provider: Option<Arc<dyn HeaderProvider>>,
    resume_concurrency: usize,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("store", &self.store)
            .field("policy", &self.policy)
            .field("timeout", &self.timeout)
            .field("lease", &self.lease)
            .field("key_header", &self.key_header)
            .field("secret_names", &self.secret_names)
            .finish_non_exhaustive()
    }
}

impl Default for ClientBuilder {
    fn default() -> ClientBuilder {
        ClientBuilder {
            store: None,
            http: None,
            policy: RetryPolicy::default(),
            timeout: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            key_header: DEFAULT_KEY_HEADER.to_owned(),
            key_format: KeyFormat::Bare,
            secret_names: Vec::new(),
            secrets: Vec::new(),
            provider: None,
            resume_concurrency: 64,
        }
    }
}

impl ClientBuilder {
    /// Where pending submissions are kept: [`SqliteStore`](crate::SqliteStore) for restart
    /// safety, [`MemoryStore`](crate::MemoryStore) for tests. Required.
    pub fn store(mut self, store: impl Store) -> ClientBuilder {
        self.store = Some(Arc::new(store));
        self
    }

    /// A store shared with other code.
    pub fn shared_store(mut self, store: Arc<dyn Store>) -> ClientBuilder {
        self.store = Some(store);
        self
    }

    /// Retry timing and limits (the core's [`RetryPolicy`]).
    pub fn retry(mut self, policy: RetryPolicy) -> ClientBuilder {
        self.policy = policy;
        self
    }

    /// How long one attempt may take before it is abandoned as a timeout (and retried with the
    /// same key). 30 s by default.
    pub fn timeout(mut self, timeout: Duration) -> ClientBuilder {
        self.timeout = timeout;
        self
    }

    /// How long a lease outlives the step it covers (an attempt or a wait). A process that dies
    /// holds its submissions this long at most before another takes them over. 30 s by default.
    pub fn lease(mut self, lease: Duration) -> ClientBuilder {
        self.lease = lease;
        self
    }

    /// The header that carries the key (`Idempotency-Key` by default).
    pub fn key_header(mut self, name: &str) -> ClientBuilder {
        self.key_header = name.to_owned();
        self
    }

    /// How the key is written in its header (bare by default).
    pub fn key_format(mut self, format: KeyFormat) -> ClientBuilder {
        self.key_format = format;
        self
    }

    /// Marks a header as secret: it may not be stored with a submission, only added on every
    /// attempt by [`ClientBuilder::secret_header`] or a [`HeaderProvider`]. `Authorization`,
    /// `Proxy-Authorization` and `Cookie` are always secret.
    pub fn secret_header_name(mut self, name: &str) -> ClientBuilder {
        self.secret_names.push(name.to_owned());
        self
    }

    /// A secret header sent on every attempt and never stored (an API token, say).
    pub fn secret_header(mut self, name: &str, value: &str) -> ClientBuilder {
        self.secret_names.push(name.to_owned());
        self.secrets.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Adds headers to every attempt from code (a token that rotates, a signature); never
    /// stored. Mark the names it adds with [`ClientBuilder::secret_header_name`] if they must
    /// never be stored either.
    pub fn header_provider(mut self, provider: impl HeaderProvider) -> ClientBuilder {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// How many stored submissions [`Client::resume_pending`] sends at once (64 by default).
    pub fn resume_concurrency(mut self, n: usize) -> ClientBuilder {
        self.resume_concurrency = n.max(1);
        self
    }

    /// The reqwest client to send with (proxies, roots, pools). Its own timeout, if any, also
    /// applies.
    pub fn http_client(mut self, http: reqwest::Client) -> ClientBuilder {
        self.http = Some(http);
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<Client> {
        let store = self.store.ok_or_else(|| {
            Error::builder("a store is required: SqliteStore::open(path) to survive restarts, or MemoryStore::new() for tests")
        })?;
        self.policy
            .validate()
            .map_err(|e| Error::builder(format!("the retry policy cannot work: {e}")))?;
        if self.timeout.is_zero() || self.lease.is_zero() {
            return Err(Error::builder(
                "the timeout and the lease must be more than 0",
            ));
        }
        let header = |name: &str| {
            HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                Error::builder(format!("{name:?} is not a header name")).with_source(e)
            })
        };
        let key_header = header(&self.key_header)?;
        let mut secret_names = vec![AUTHORIZATION, COOKIE, reqwest::header::PROXY_AUTHORIZATION];
        for name in &self.secret_names {
            secret_names.push(header(name)?);
        }
        let mut secrets = HeaderMap::new();
        for (name, value) in &self.secrets {
            let mut value = HeaderValue::from_str(value).map_err(|e| {
                Error::builder(format!(
                    "the value of the secret header {name:?} cannot be sent"
                ))
                .with_source(e)
            })?;
            value.set_sensitive(true);
            secrets.append(header(name)?, value);
        }
        let http = match self.http {
            Some(http) => http,
            None => {
                install_crypto();
                reqwest::Client::builder().build().map_err(|e| {
                    Error::builder("the HTTP client could not be built").with_source(e)
                })?
            }
        };
        let owner = format!(
            "pid{}-{:08x}",
            std::process::id(),
            u32::from_be_bytes(random_key_bytes()?[..4].try_into().unwrap_or_default())
        );
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                store,
                policy: self.policy,
                timeout: self.timeout,
                lease: self.lease,
                owner,
                key_header,
                key_format: self.key_format,
                secret_names,
                secrets,
                provider: self.provider,
                resume_concurrency: self.resume_concurrency,
                flights: Mutex::new(HashMap::new()),
                next_flight: AtomicU64::new(0),
            }),
        })
    }
}

/// reqwest is built without a bundled crypto provider (`rustls-no-provider`, so that ring is used
/// and aws-lc's C build is not needed); install ring as the process default unless the
/// application installed one.
fn install_crypto() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another thread installing one is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// How a submission ended, or why its retries stopped: the core's outcome with the last answer.
#[derive(Debug, Clone)]
pub struct Settlement {
    name: String,
    settled: Settled,
    headers: HeaderMap,
    body: Vec<u8>,
}

impl Settlement {
    /// The outcome: succeeded, refused, conflict, misconfigured, or unsure (still stored).
    pub fn outcome(&self) -> Outcome {
        self.settled.outcome
    }

    /// The submission's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key it was sent with.
    pub fn key(&self) -> &Key {
        &self.settled.key
    }

    /// Attempts made, over every round and restart.
    pub fn attempts(&self) -> u32 {
        self.settled.attempts
    }

    /// The last status received, if any answer came.
    pub fn status(&self) -> Option<u16> {
        self.settled.status
    }

    /// The server replayed the answer it stored for this key.
    pub fn replayed(&self) -> bool {
        self.settled.replayed
    }

    /// For [`Outcome::Unsure`]: why the retries stopped.
    pub fn gave_up(&self) -> Option<GiveUp> {
        self.settled.gave_up
    }

    /// The headers of the last answer (empty without one).
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The body of the last answer (empty without one).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body of the last answer as JSON.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> serde_json::Result<T> {
        serde_json::from_slice(&self.body)
    }
}

impl fmt::Display for Settlement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.outcome().as_str())?;
        if let Some(status) = self.status() {
            write!(f, " ({status}")?;
            if self.replayed() {
                f.write_str(", replayed")?;
            }
            f.write_str(")")?;
        }
        write!(
            f,
            ", key {}, {} attempt{}",
            self.key().short(),
            self.attempts(),
            if self.attempts() == 1 { "" } else { "s" }
        )?;
        if let Some(why) = self.gave_up() {
            write!(f, "; stopped: {}", why.as_str())?;
        }
        Ok(())
    }
}

/// One stored submission found by [`Client::resume_pending`], and how it ended.
#[derive(Debug)]
pub struct Resumed {
    /// Its name.
    pub name: String,
    /// Its settlement, or why it could not be resumed (busy elsewhere, unreadable, the store
    /// failed).
    pub result: Result<Settlement>,
}

/// A stored submission, as [`Client::pending`] lists it.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Its name.
    pub name: String,
    /// Its record, or why it cannot be read.
    pub record: std::result::Result<Record, String>,
    /// Its lease, if held (it may have run out).
    pub lease: Option<Lease>,
}

/// One send or resume under way in this client, which a second call for the same name joins
/// instead of sending again (CONTRACT.md section 3).
struct Flight {
    id: u64,
    /// Method, URL and canonical body, when the flight is a send.
    identity: Option<(String, String, String)>,
    done: watch::Receiver<Option<Arc<Result<Settlement>>>>,
}

/// Removes its flight when the send ends or is dropped.
struct FlightGuard<'a> {
    client: &'a Inner,
    name: String,
    id: u64,
    done: watch::Sender<Option<Arc<Result<Settlement>>>>,
}

impl FlightGuard<'_> {
    fn remove(&self) {
        let mut flights = self
            .client
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if flights.get(&self.name).is_some_and(|f| f.id == self.id) {
            flights.remove(&self.name);
        }
    }

    /// Ends the flight (so a caller waking up finds the name free) and hands its result to the
    /// callers that joined it.
    fn finish(self, result: Arc<Result<Settlement>>) {
        self.remove();
        let _ = self.done.send(Some(result));
    }
}

impl Drop for FlightGuard<'_> {
    fn drop(&mut self) {
        self.remove();
    }
}

fn share(result: &Arc<Result<Settlement>>) -> Result<Settlement> {
    match &**result {
        Ok(s) => Ok(s.clone()),
        Err(e) => Err(e.duplicate()),
    }
}

enum Job {
    Send {
        request: Request,
        key: Option<Key>,
    },
    Resume,
    /// A resume whose lease [`Store::claim_due`] already took, with the record it found.
    Claimed(String),
    TryAgain,
}

impl Client {
    /// A builder. A store is required.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Starts describing the intended submission named `name`: one name per thing meant to
    /// happen once ("payout-77").
    pub fn submission(&self, name: &str) -> SubmissionBuilder {
        SubmissionBuilder {
            client: self.clone(),
            name: name.to_owned(),
            key: None,
            method: None,
            url: String::new(),
            headers: Vec::new(),
            body: None,
            error: None,
        }
    }

    /// This client's lease owner id.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Finishes every stored submission: each one not leased by another live client is resumed
    /// with its key and body (a submission whose round is spent, by attempts or time budget,
    /// stays unsure without being sent). Runs up to [`ClientBuilder::resume_concurrency`] at
    /// once; one result per stored name.
    pub async fn resume_pending(&self) -> Result<Vec<Resumed>> {
        let listed = self.store_call(|s| s.list()).await?;
        Ok(self
            .resume_all(listed.into_iter().map(|l| (l.name, Job::Resume)).collect())
            .await)
    }

    /// For a fleet sharing one store: takes up to `limit` stored submissions that no live
    /// client holds (enqueued with [`PostgresStore::enqueue`](crate::PostgresStore::enqueue),
    /// or left by a client that died, whose lease ran out) in one step of the store
    /// ([`Store::claim_due`]: instances calling it at once get different ones), and finishes
    /// them as [`Client::resume_pending`] does. Call it in a loop, with a pause when it finds
    /// nothing; one result per submission taken. A submission that settles unsure stays stored
    /// and is set aside for as long as a lease lasts ([`ClientBuilder::timeout`] plus
    /// [`ClientBuilder::lease`]) before a poll takes it again; [`Client::try_again`] takes it at
    /// once.
    pub async fn resume_due(&self, limit: usize) -> Result<Vec<Resumed>> {
        let lease = self.lease_until(now());
        let due = self
            .store_call(move |s| s.claim_due(&lease, now(), limit))
            .await?;
        Ok(self
            .resume_all(
                due.into_iter()
                    .map(|d| (d.name, Job::Claimed(d.record)))
                    .collect(),
            )
            .await)
    }

    async fn resume_all(&self, jobs: Vec<(String, Job)>) -> Vec<Resumed> {
        // At most `resume_concurrency` at once, by as many workers taking names from one queue:
        // ten thousand stored records must not open ten thousand connections, nor hold ten
        // thousand spawned futures.
        type Queue = std::collections::VecDeque<(usize, (String, Job))>;
        let queue: Arc<Mutex<Queue>> = Arc::new(Mutex::new(jobs.into_iter().enumerate().collect()));
        let workers = self
            .inner
            .resume_concurrency
            .min(queue.lock().unwrap_or_else(|e| e.into_inner()).len());
        let mut tasks = Vec::with_capacity(workers);
        for _ in 0..workers {
            let client = self.clone();
            let queue = queue.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((i, (name, job))) = next else { break };
                    let result = client.run(&name, job).await;
                    done.push((i, Resumed { name, result }));
                }
                done
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            match task.await {
                Ok(done) => out.extend(done),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// "Try again" for one stored submission (typically unsure): a new round of retries, with
    /// a fresh attempt limit and time budget, with its key and body.
    pub async fn try_again(&self, name: &str) -> Result<Settlement> {
        self.run(name, Job::TryAgain).await
    }

    /// Every stored submission, readable or not.
    pub async fn pending(&self) -> Result<Vec<Pending>> {
        let listed = self.store_call(|s| s.list()).await?;
        Ok(listed
            .into_iter()
            .map(|l| Pending {
                record: serde_json::from_str::<Record>(&l.record).map_err(|e| e.to_string()),
                name: l.name,
                lease: l.lease,
            })
            .collect())
    }

    /// Deliberately drops the stored submission `name` (the next send under it gets a new
    /// key). Refused while another client holds its lease. Answers whether one was stored.
    pub async fn discard(&self, name: &str) -> Result<bool> {
        let lease = self.lease_until(now());
        let n = name.to_owned();
        match self.store_call(move |s| s.claim(&n, &lease, now())).await? {
            Claim::Busy(l) => Err(Error::busy(name, &l.owner, l.until)),
            Claim::Taken(record) => {
                let n = name.to_owned();
                let owner = self.inner.owner.clone();
                self.store_call(move |s| s.remove(&n, &owner)).await?;
                Ok(record.is_some())
            }
        }
    }

    fn lease_until(&self, from: Timestamp) -> Lease {
        Lease {
            owner: self.inner.owner.clone(),
            until: from + self.inner.timeout + self.inner.lease,
        }
    }

    async fn store_call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> std::result::Result<T, BoxError> + Send + 'static,
    {
        let store = self.inner.store.clone();
        let result = if store.blocks() {
            tokio::task::spawn_blocking(move || f(&*store))
                .await
                .map_err(|e| Error::store("the store call failed", e.to_string()))?
        } else {
            f(&*store)
        };
        result.map_err(|e| match e.downcast::<Error>() {
            Ok(e) => *e,
            Err(e) => Error::store("the store failed", e),
        })
    }

    /// One send or resume of `name`, joined by any other in this client meanwhile.
    async fn run(&self, name: &str, job: Job) -> Result<Settlement> {
        let identity = match &job {
            Job::Send { request, .. } => Some((
                request.method.clone(),
                request.url.clone(),
                request
                    .canonical_body()
                    .map_err(|e| Error::request(format!("the body cannot be sent: {e}")))?,
            )),
            Job::Resume | Job::Claimed(_) | Job::TryAgain => None,
        };
        loop {
            // Either join the flight under way, or start ours (the map's lock is not held
            // across an await).
            let joined = {
                let mut flights = self.inner.flights.lock().unwrap_or_else(|e| e.into_inner());
                match flights.get(name) {
                    Some(flight) => Ok((flight.identity.clone(), flight.done.clone())),
                    None => {
                        let id = self.inner.next_flight.fetch_add(1, Ordering::Relaxed);
                        let (tx, rx) = watch::channel(None);
                        flights.insert(
                            name.to_owned(),
                            Flight {
                                id,
                                identity: identity.clone(),
                                done: rx,
                            },
                        );
                        Err(FlightGuard {
                            client: &self.inner,
                            name: name.to_owned(),
                            id,
                            done: tx,
                        })
                    }
                }
            };
            let (theirs, mut done) = match joined {
                Ok(joined) => joined,
                Err(guard) => {
                    let result = Arc::new(self.fly(name, job).await);
                    guard.finish(result.clone());
                    return share(&result);
                }
            };
            match (&identity, &theirs) {
                (Some(mine), Some(theirs)) if mine != theirs => {
                    let differs = if mine.2 != theirs.2 {
                        "body"
                    } else if mine.0 != theirs.0 {
                        "method"
                    } else {
                        "url"
                    };
                    return Err(Error::pending_mismatch(name, None, differs));
                }
                // The same request (or a resume joining a send): wait for its settlement.
                (_, Some(_)) | (None, None) => {
                    return match done.wait_for(Option::is_some).await {
                        Ok(result) => share(result.as_ref().expect("waited for Some")),
                        Err(_) => Err(Error::cancelled(name)),
                    };
                }
                // A send meeting a resume of the same name: wait, then go on with the store.
                (Some(_), None) => {
                    let _ = done.wait_for(Option::is_some).await;
                }
            }
        }
    }

    /// Claims the lease, sets up the core's submission and drives it.
    async fn fly(&self, name: &str, job: Job) -> Result<Settlement> {
        let stored = if let Job::Claimed(record) = &job {
            Some(record.clone())
        } else {
            let lease = self.lease_until(now());
            let n = name.to_owned();
            let claimed = self
                .store_call(move |s| s.claim(&n, &lease, now()))
                .await
                .map_err(|e| e.with_name(name))?;
            match claimed {
                Claim::Busy(l) => return Err(Error::busy(name, &l.owner, l.until)),
                Claim::Taken(stored) => stored,
            }
        };
        match self.begin(name, job, stored) {
            Ok(Some(sub)) => self.drive(name, sub).await,
            Ok(None) => {
                self.release(name, None).await;
                Err(Error::request(format!("nothing is stored under {name:?}")).with_name(name))
            }
            Err(e) => {
                self.release(name, None).await;
                Err(e)
            }
        }
    }

    /// Gives the lease on `name` up: for anyone at once (`None`), or keeping the submission out
    /// of [`Store::claim_due`] until `due` ([`Store::defer`]).
    async fn release(&self, name: &str, due: Option<Timestamp>) {
        let n = name.to_owned();
        let owner = self.inner.owner.clone();
        let released = self
            .store_call(move |s| match due {
                None => s.release(&n, &owner),
                Some(due) => s.defer(&n, &owner, due),
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(
                name,
                "the lease could not be released (it runs out by itself): {e}"
            );
        }
    }

    /// The core's submission for `job`, with its first actions queued. `None` when a resume
    /// found nothing stored.
    fn begin(&self, name: &str, job: Job, stored: Option<String>) -> Result<Option<Submission>> {
        let t = now();
        let mut sub = Submission::new(name, self.inner.policy);
        let record = match stored {
            None => None,
            Some(text) => Some(
                serde_json::from_str::<Record>(&text)
                    .map_err(|e| Error::unreadable_record(name, e))?,
            ),
        };
        let unreadable = |e: StateError| Error::unreadable_record(name, e);
        match job {
            Job::Resume | Job::Claimed(_) => {
                let Some(record) = record else {
                    return Ok(None);
                };
                // With its round spent before the restart it stays unsure, unsent: the caller's
                // try_again starts a new round.
                sub.restore(t, record, true).map_err(unreadable)?;
                Ok(Some(sub))
            }
            Job::TryAgain => {
                let Some(record) = record else {
                    return Ok(None);
                };
                sub.restore(t, record, false).map_err(unreadable)?;
                sub.try_again(t).map_err(unreadable)?;
                Ok(Some(sub))
            }
            Job::Send { request, key } => {
                if let Some(record) = record {
                    if let Some(given) = &key {
                        if *given != record.key {
                            return Err(Error::pending_mismatch(
                                name,
                                Some(record.key.clone()),
                                "key",
                            ));
                        }
                    }
                    sub.restore(t, record, false).map_err(unreadable)?;
                }
                let new_key = match key {
                    Some(k) => NewKey::Given(k),
                    None => NewKey::Random(random_key_bytes()?),
                };
                match sub.begin(t, request, new_key) {
                    Ok(_) => Ok(Some(sub)),
                    Err(BeginError::PendingMismatch { key, differs }) => {
                        Err(Error::pending_mismatch(name, Some(key), differs))
                    }
                    Err(BeginError::Body(e)) => {
                        Err(Error::request(format!("the body cannot be sent: {e}")).with_name(name))
                    }
                }
            }
        }
    }

    /// Carries out the core's actions until it settles.
    async fn drive(&self, name: &str, mut sub: Submission) -> Result<Settlement> {
        let mut last: Option<(HeaderMap, Vec<u8>)> = None;
        loop {
            let mut send: Option<Attempt> = None;
            while let Some(action) = sub.poll_action() {
                match action {
                    Action::Persist(record) => {
                        let text = serde_json::to_string(&record).map_err(|e| {
                            Error::store("the record could not be written", e).with_name(name)
                        })?;
                        let lease = self.lease_until(now());
                        let n = name.to_owned();
                        let saved = self
                            .store_call(move |s| s.save(&n, &text, &lease))
                            .await
                            .map_err(|e| e.with_name(name))?;
                        if !saved {
                            return Err(Error::lease_lost(name));
                        }
                    }
                    Action::Send(attempt) => send = Some(attempt),
                    Action::Forget => {
                        let n = name.to_owned();
                        let owner = self.inner.owner.clone();
                        match self.store_call(move |s| s.remove(&n, &owner)).await {
                            Ok(true) => {}
                            Ok(false) => tracing::warn!(
                                name,
                                "settled, but the lease had been taken over; the other client will get the server's replay"
                            ),
                            Err(e) => return Err(e.with_name(name)),
                        }
                    }
                    Action::Changed(change) => tracing::debug!(
                        name,
                        state = change.state.as_str(),
                        key = change.key.as_ref().map(Key::short),
                        attempts = change.attempts,
                        "oncekey state"
                    ),
                    Action::Settled(settled) => {
                        if settled.outcome == Outcome::Unsure {
                            // Kept, and set aside from resume_due for as long as a lease lasts.
                            let due = self.lease_until(now()).until;
                            self.release(name, Some(due)).await;
                        }
                        let (headers, body) = last.take().unwrap_or_default();
                        return Ok(Settlement {
                            name: name.to_owned(),
                            settled,
                            headers,
                            body,
                        });
                    }
                }
            }
            if let Some(attempt) = send {
                let span = tracing::info_span!(
                    "oncekey.attempt",
                    name,
                    key = attempt.key.short(),
                    attempt = attempt.number,
                    outcome = tracing::field::Empty,
                );
                let result = self.attempt(name, &attempt).instrument(span.clone()).await;
                let t = now();
                match result {
                    Ok((answer, headers, body)) => {
                        let verdict = match classify(&answer) {
                            Verdict::Definite { outcome, .. } => outcome.as_str(),
                            Verdict::Retry { .. } => "retry",
                            Verdict::Stop => "stop",
                        };
                        span.record("outcome", format!("{} {verdict}", answer.status));
                        span.in_scope(|| tracing::info!(status = answer.status, verdict, "answer"));
                        last = Some((headers, body));
                        sub.handle_answer(t, attempt.id, &answer, jitter());
                    }
                    Err(failure) => {
                        let what = match failure {
                            Failure::Network => "network error",
                            Failure::Timeout => "timeout",
                        };
                        span.record("outcome", what);
                        span.in_scope(|| tracing::info!(failure = what, "no answer"));
                        sub.handle_failure(t, attempt.id, failure, jitter());
                    }
                }
                continue;
            }
            if let Some(at) = sub.poll_timeout() {
                let lease = self.lease_until(at);
                let n = name.to_owned();
                if !self
                    .store_call(move |s| s.renew(&n, &lease))
                    .await
                    .map_err(|e| e.with_name(name))?
                {
                    return Err(Error::lease_lost(name));
                }
                let wait = at.saturating_since(now());
                tokio::time::sleep(wait).await;
                sub.handle_timeout(now().max(at));
                continue;
            }
            // The core always sends, waits or settles (a restored record whose round is spent
            // settles unsure): reaching here is a bug, so say so rather than hang.
            self.release(name, None).await;
            return Err(Error::request(format!(
                "the submission {name:?} neither sent, waited nor settled"
            )));
        }
    }

    /// Sends one attempt and reads its answer, or says why none came.
    async fn attempt(
        &self,
        name: &str,
        attempt: &Attempt,
    ) -> std::result::Result<(Answer, HeaderMap, Vec<u8>), Failure> {
        let inner = &*self.inner;
        let request = &attempt.request;
        let failure = |e: reqwest::Error| {
            if e.is_timeout() {
                Failure::Timeout
            } else {
                Failure::Network
            }
        };
        // Checked when the submission was described, and again when a record was read.
        let method =
            reqwest::Method::from_bytes(request.method.as_bytes()).map_err(|_| Failure::Network)?;
        let mut headers = HeaderMap::new();
        for (n, v) in &request.headers {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n.as_bytes()),
                HeaderValue::from_str(v),
            ) {
                headers.append(n, v);
            }
        }
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(request.encoding.content_type()),
        );
        for (n, v) in &inner.secrets {
            headers.insert(n, v.clone());
        }
        if let Some(provider) = &inner.provider {
            let extra = provider.headers(&Outgoing {
                name,
                key: &attempt.key,
                attempt: attempt.number,
                request,
            });
            for (n, v) in extra {
                if let Some(n) = n {
                    headers.insert(n, v);
                }
            }
        }
        let key = HeaderValue::from_str(&attempt.key.header_value(inner.key_format))
            .map_err(|_| Failure::Network)?;
        headers.insert(inner.key_header.clone(), key);
        let body = request.wire_body().map_err(|_| Failure::Network)?;
        let response = inner
            .http
            .request(method, &request.url)
            .headers(headers)
            .body(body)
            .timeout(inner.timeout)
            .send()
            .await
            .map_err(failure)?;
        let status = response.status().as_u16();
        // Copied, not cloned: a parsed header value is a slice of the connection's whole read
        // buffer, which a kept clone would hold alive (7 KiB per settlement kept).
        let mut headers = HeaderMap::with_capacity(response.headers().len());
        for (n, v) in response.headers() {
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(n.as_str().as_bytes()),
                HeaderValue::from_bytes(v.as_bytes()),
            ) {
                headers.append(n, v);
            }
        }
        let bytes = response.bytes().await.map_err(failure)?;
        let text = if status == 400 {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            String::new()
        };
        let answer = Answer::from_response(
            status,
            headers
                .iter()
                .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?))),
            &text,
            inner.key_header.as_str(),
        );
        Ok((answer, headers, bytes.to_vec()))
    }
}

/// One intended submission being described; [`SubmissionBuilder::send`] sends it.
#[must_use]
pub struct SubmissionBuilder {
    client: Client,
    name: String,
    key: Option<Key>,
    method: Option<String>,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<(String, Encoding)>,
    error: Option<Error>,
}

impl fmt::Debug for SubmissionBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SubmissionBuilder")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("method", &self.method)
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl SubmissionBuilder {
    /// The key to use if the submission is new, typically derived from a durable id the caller
    /// owns ([`Key::derive`]) so that a restart recomputes it. Without one a random UUID v4 is
    /// made. A pending submission keeps its key; a different one here is a pending mismatch.
    pub fn key(mut self, key: Key) -> SubmissionBuilder {
        self.key = Some(key);
        self
    }

    /// Any method and URL (`http` or `https`).
    pub fn request(mut self, method: &str, url: &str) -> SubmissionBuilder {
        self.method = Some(method.to_owned());
        self.url = url.to_owned();
        self
    }

    /// `POST url`.
    pub fn post(self, url: &str) -> SubmissionBuilder {
        self.request("POST", url)
    }

    /// `PUT url`.
    pub fn put(self, url: &str) -> SubmissionBuilder {
        self.request("PUT", url)
    }

    /// `PATCH url`.
    pub fn patch(self, url: &str) -> SubmissionBuilder {
        self.request("PATCH", url)
    }

    /// A header stored with the submission and sent on every attempt. Secret headers
    /// (`Authorization`, `Cookie`, names marked secret) are refused here: give them to the
    /// client ([`ClientBuilder::secret_header`], [`HeaderProvider`]) so that a resume after a
    /// restart sends them too.
    pub fn header(mut self, name: &str, value: &str) -> SubmissionBuilder {
        self.headers.push((name.to_owned(), value.to_owned()));
        self
    }

    /// The body, serialized as JSON.
    pub fn json<T: serde::Serialize + ?Sized>(mut self, body: &T) -> Result<SubmissionBuilder> {
        let text = serde_json::to_string(body)
            .map_err(|e| Error::request("the body cannot be serialized as JSON").with_source(e))?;
        self.body = Some((text, Encoding::Json));
        Ok(self)
    }

    /// The body as JSON text, sent byte for byte on every attempt.
    pub fn json_text(mut self, text: &str) -> SubmissionBuilder {
        self.body = Some((text.to_owned(), Encoding::Json));
        self
    }

    /// The body, sent form-encoded (`application/x-www-form-urlencoded`); it must serialize to
    /// a flat JSON object.
    pub fn form<T: serde::Serialize + ?Sized>(mut self, body: &T) -> Result<SubmissionBuilder> {
        let text = serde_json::to_string(body)
            .map_err(|e| Error::request("the body cannot be serialized").with_source(e))?;
        self.body = Some((text, Encoding::Form));
        Ok(self)
    }

    fn request_value(&mut self) -> Result<(Request, Option<Key>)> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let method = self.method.as_deref().ok_or_else(|| {
            Error::request("no method and URL: call post(url) or request(method, url)")
        })?;
        let url = reqwest::Url::parse(&self.url)
            .map_err(|e| Error::request(format!("{:?} is not a URL", self.url)).with_source(e))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::request(format!(
                "{:?} is not an http or https URL",
                self.url
            )));
        }
        let (body, encoding) = self
            .body
            .clone()
            .unwrap_or(("{}".to_owned(), Encoding::Json));
        let mut request = Request::new(method, url.as_str(), &body, encoding)
            .map_err(|e| Error::request(format!("the request cannot be made: {e}")))?;
        for (name, value) in &self.headers {
            let parsed = HeaderName::from_bytes(name.as_bytes()).map_err(|e| {
                Error::request(format!("{name:?} is not a header name")).with_source(e)
            })?;
            if self.client.inner.secret_names.contains(&parsed) {
                return Err(Error::request(format!(
                    "{name} is a secret header and is never stored; give it to the client (ClientBuilder::secret_header or header_provider) so a resume after a restart sends it too"
                )));
            }
            if parsed == self.client.inner.key_header || parsed == CONTENT_TYPE {
                return Err(Error::request(format!(
                    "{name} is set by oncekey itself on every attempt"
                )));
            }
            HeaderValue::from_str(value).map_err(|e| {
                Error::request(format!("the value of header {name:?} cannot be sent"))
                    .with_source(e)
            })?;
            request = request
                .header(name, value)
                .map_err(|e| Error::request(format!("the request cannot be made: {e}")))?;
        }
        Ok((request, self.key.take()))
    }

    /// The record this submission would store, made without storing or sending anything: for
    /// [`PostgresStore::enqueue`](crate::PostgresStore::enqueue), which writes it in the
    /// caller's own transaction (a transactional outbox). Its key is the one given with
    /// [`SubmissionBuilder::key`], or a new random one; it has made no attempt yet.
    pub fn record(mut self) -> Result<Record> {
        let (request, key) = self.request_value().map_err(|e| e.with_name(&self.name))?;
        request.canonical_body().map_err(|e| {
            Error::request(format!("the body cannot be sent: {e}")).with_name(&self.name)
        })?;
        let key = match key {
            Some(k) => k,
            None => Key::from_random_bytes(random_key_bytes()?),
        };
        let t = now();
        Ok(Record {
            name: self.name,
            key,
            request,
            started_at: t,
            attempts: 0,
            round_started_at: t,
            round_attempts: 0,
        })
    }

    /// Stores the submission and sends it until a definite answer or until its retries stop.
    /// A second send of the same name and body while one is under way in this client joins it;
    /// while one is pending in the store it goes on with the pending key ("Try again"); with
    /// another body it is refused ([`Error::is_pending_mismatch`]) and nothing is sent.
    pub async fn send(mut self) -> Result<Settlement> {
        let (request, key) = self.request_value().map_err(|e| e.with_name(&self.name))?;
        self.client
            .run(&self.name, Job::Send { request, key })
            .await
    }
}
