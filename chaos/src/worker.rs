//! # A worker: the application under test
//!
//! One process with its own [`SqliteStore`] file and a slice of the run's intended submissions,
//! sent through the native client as an application would send them. The conductor kills it
//! with SIGKILL at any moment and starts it again; a new process resumes the store first, then
//! sends what its results file does not show as settled, and keeps going until every submission
//! of its slice is settled and nothing is pending.
//!
//! The worker's own bookkeeping (its results file) is not the library's: between the store's
//! removal of a record and the worker's line about it, a kill would leave a submission that was
//! answered but looks unsent. [`JournalingStore`] closes that gap the way a careful application
//! would: it writes the key to the results file before the record is removed, and a new process
//! sends such a submission again with that key, which the server answers with its replay.
//!
//! `--break` plants one known mistake, built from the public API only (see [`Break`]).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncekey::{
    BoxError, Claim, Client, Key, Lease, Listed, Outcome, Outgoing, RetryPolicy, Settlement,
    SqliteStore, Store, Timestamp,
};
use reqwest::header::{HeaderMap, HeaderValue};
use tokio::sync::Semaphore;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use crate::plan::{read_events, sha256_hex, Event, Intent, Journal, Rng, TENANT};

/// One known mistake a worker can make, to prove the checks catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Break {
    /// Retries done by the application with a fresh key each time: the client makes one attempt,
    /// and an unsure submission is discarded and sent again (a new key).
    NewKey,
    /// An unsure submission (a timeout, a lost reply) is taken as a definite refusal and
    /// discarded.
    TimeoutRefusal,
    /// The store writes a new submission's record only after its first attempt went out, so a
    /// kill in between loses it and the application later sends it again under a new key.
    StoreAfterSend,
}

impl fmt::Display for Break {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Break::NewKey => "new-key",
            Break::TimeoutRefusal => "timeout-refusal",
            Break::StoreAfterSend => "store-after-send",
        })
    }
}

/// What the conductor tells a worker.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The run's folder (plan, results, store and attempt files are named by index in it).
    #[arg(long)]
    pub dir: PathBuf,
    /// This worker's number.
    #[arg(long)]
    pub index: usize,
    /// The ticket route's URL.
    #[arg(long)]
    pub url: String,
    /// Submissions sent at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// The client's attempt timeout, in milliseconds: below the longest `delay` fault (1 s), so
    /// some attempts time out while the server still works, and the retry meets a 409.
    #[arg(long, default_value_t = 800)]
    pub timeout_ms: u64,
    /// The client's lease, in milliseconds.
    #[arg(long, default_value_t = 500)]
    pub lease_ms: u64,
    /// The mistake to make, if any.
    #[arg(long = "break", value_enum)]
    pub mistake: Option<Break>,
    /// Ask the server for a fault on this fraction of attempts (`X-Fault`), chosen from the
    /// seed, the submission's name and the attempt's number (`--faults-from client`).
    #[arg(long, default_value_t = 0.0)]
    pub fault_rate: f64,
    /// The seed of those faults.
    #[arg(long, default_value_t = 0)]
    pub fault_seed: u64,
    /// Its store, when not its SQLite file in the run's folder: a postgres:// URL.
    #[arg(long)]
    pub store: Option<String>,
}

/// Opens a worker's store: the PostgreSQL store at `url` if given, else the SQLite file `path`.
pub fn open_store(url: Option<&str>, path: &std::path::Path) -> Result<Box<dyn Store>, String> {
    match url {
        Some(url) => oncekey::PostgresStore::connect(url)
            .map(|s| Box::new(s) as Box<dyn Store>)
            .map_err(|e| e.to_string()),
        None => SqliteStore::open(path)
            .map(|s| Box::new(s) as Box<dyn Store>)
            .map_err(|e| e.to_string()),
    }
}

/// The fault attempt `attempt` of submission `name` asks for: the same for a seed whatever the
/// timing, and across restarts (the attempt's number is stored with the record).
pub fn chosen_fault(seed: u64, rate: f64, name: &str, attempt: u32) -> Option<String> {
    let mut rng = Rng::new(seed, &format!("{name} {attempt}"));
    if rng.unit() >= rate {
        return None;
    }
    Some(match rng.below(4) {
        0 => "drop-reply".to_owned(),
        1 => "fail-before".to_owned(),
        2 => "crash-before-commit".to_owned(),
        _ => format!("delay={}", 50 + rng.below(950)),
    })
}

/// The files of worker `index` in a run's folder.
#[derive(Debug, Clone)]
pub struct Files {
    /// Its slice of the intents, one JSON line each.
    pub plan: PathBuf,
    /// Its results ([`Event`] lines).
    pub results: PathBuf,
    /// Its `SqliteStore` (unless it has a PostgreSQL store).
    pub store: PathBuf,
    /// One line per attempt answered or failed (the status, `network` or `timeout`).
    pub attempts: PathBuf,
    /// Its stderr.
    pub log: PathBuf,
}

impl Files {
    /// The files of worker `index` under `dir`.
    pub fn of(dir: &std::path::Path, index: usize) -> Files {
        let f = |ext: &str| dir.join(format!("worker-{index}.{ext}"));
        Files {
            plan: f("plan"),
            results: f("results"),
            store: f("db"),
            attempts: f("attempts"),
            log: f("log"),
        }
    }
}

/// Writes a line per attempt's answer or failure, from the client's `tracing` events: the only
/// place the native client reports each attempt.
struct AttemptLog {
    file: Mutex<std::fs::File>,
}

#[derive(Default)]
struct AttemptFields {
    status: Option<u64>,
    failure: Option<String>,
}

impl tracing::field::Visit for AttemptFields {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "status" {
            self.status = Some(value);
        }
    }

    fn record_i64(&mut self, field: &tracing::field::Field, value: i64) {
        if field.name() == "status" {
            self.status = u64::try_from(value).ok();
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "failure" {
            self.failure = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for AttemptLog {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !event.metadata().target().starts_with("oncekey") {
            return;
        }
        let mut fields = AttemptFields::default();
        event.record(&mut fields);
        let line = match (fields.status, fields.failure) {
            (Some(status), _) => format!("{status}\n"),
            (None, Some(failure)) => format!("{}\n", failure.replace(' ', "-")),
            (None, None) => return,
        };
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        let _ = file.write_all(line.as_bytes());
    }
}

/// The worker's store: a [`SqliteStore`] that first writes a record's key to the results file
/// before removing it, and under `--break store-after-send` holds a new record back until the
/// next store call for its name (after its first attempt went out).
#[derive(Debug)]
struct JournalingStore {
    inner: Box<dyn Store>,
    journal: Arc<Journal>,
    /// The key of each record saved by this process.
    keys: Mutex<HashMap<String, String>>,
    store_after_send: bool,
    /// Names claimed with no record stored: their first save is held back (the planted bug).
    fresh: Mutex<HashSet<String>>,
    held: Mutex<HashMap<String, (String, Lease)>>,
}

fn record_key(record: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(record)
        .ok()?
        .get("key")?
        .as_str()
        .map(str::to_owned)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl JournalingStore {
    /// Writes a held-back record now (the attempt it should have covered is already out).
    fn write_held(&self, name: &str) -> Result<(), BoxError> {
        let held = lock(&self.held).remove(name);
        if let Some((record, lease)) = held {
            self.inner.save(name, &record, &lease)?;
        }
        Ok(())
    }
}

impl Store for JournalingStore {
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError> {
        let claim = self.inner.claim(name, lease, now)?;
        if self.store_after_send && claim == Claim::Taken(None) {
            lock(&self.fresh).insert(name.to_owned());
        }
        Ok(claim)
    }

    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError> {
        if let Some(key) = record_key(record) {
            lock(&self.keys).insert(name.to_owned(), key);
        }
        if lock(&self.fresh).remove(name) {
            // The planted bug: say "saved", write it only later.
            if !self.inner.renew(name, lease)? {
                return Ok(false);
            }
            lock(&self.held).insert(name.to_owned(), (record.to_owned(), lease.clone()));
            return Ok(true);
        }
        lock(&self.held).remove(name);
        self.inner.save(name, record, lease)
    }

    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError> {
        self.write_held(name)?;
        self.inner.renew(name, lease)
    }

    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        lock(&self.held).remove(name);
        lock(&self.fresh).remove(name);
        let key = match lock(&self.keys).get(name).cloned() {
            Some(key) => Some(key),
            None => self
                .inner
                .list()?
                .into_iter()
                .find(|l| l.name == name)
                .and_then(|l| record_key(&l.record)),
        };
        if let Some(key) = key {
            self.journal.write(&Event::Removed {
                name: name.to_owned(),
                key,
            })?;
        }
        self.inner.remove(name, owner)
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError> {
        lock(&self.fresh).remove(name);
        self.write_held(name)?;
        self.inner.release(name, owner)
    }

    fn list(&self) -> Result<Vec<Listed>, BoxError> {
        self.inner.list()
    }
}

/// What the worker shares between its tasks.
struct Worker {
    client: Client,
    url: String,
    journal: Arc<Journal>,
    mistake: Option<Break>,
    intents: HashMap<String, Intent>,
    /// Names whose end is written in the results file.
    settled: Mutex<HashSet<String>>,
    /// Names answered and removed from the store without a settled line: sent again with this
    /// key, the server replays the answer.
    removed: Mutex<HashMap<String, String>>,
}

fn definite(outcome: Outcome) -> bool {
    !matches!(outcome, Outcome::Unsure)
}

impl Worker {
    fn is_settled(&self, name: &str) -> bool {
        lock(&self.settled).contains(name)
    }

    /// Writes `event` to the results file.
    fn note(&self, event: &Event) -> Result<(), String> {
        self.journal
            .write(event)
            .map_err(|e| format!("the results file could not be written: {e}"))
    }

    fn write_settled(&self, s: &Settlement, outcome: &str) -> Result<(), String> {
        self.note(&Event::Settled {
            name: s.name().to_owned(),
            key: s.key().as_str().to_owned(),
            outcome: outcome.to_owned(),
            status: s.status(),
            replayed: s.replayed(),
            sha: sha256_hex(s.body()),
            attempts: s.attempts(),
        })?;
        lock(&self.removed).remove(s.name());
        lock(&self.settled).insert(s.name().to_owned());
        Ok(())
    }

    /// Takes a settlement as the worker's application would. Answers whether to send the
    /// submission again now (only the `new-key` mistake does).
    async fn conclude(&self, s: &Settlement) -> Result<bool, String> {
        if definite(s.outcome()) {
            self.write_settled(s, s.outcome().as_str())?;
            return Ok(false);
        }
        match self.mistake {
            // Correct: the record stays, with its key; the final loop tries again.
            None | Some(Break::StoreAfterSend) => Ok(false),
            Some(Break::NewKey) => {
                self.discard(s).await?;
                Ok(true)
            }
            Some(Break::TimeoutRefusal) => {
                self.discard(s).await?;
                self.write_settled(s, "refused")?;
                Ok(false)
            }
        }
    }

    async fn discard(&self, s: &Settlement) -> Result<(), String> {
        self.client
            .discard(s.name())
            .await
            .map_err(|e| format!("{}: discard failed: {e}", s.name()))?;
        self.note(&Event::Discarded {
            name: s.name().to_owned(),
            key: s.key().as_str().to_owned(),
        })?;
        lock(&self.removed).remove(s.name());
        Ok(())
    }

    /// Sends one intended submission until the worker takes it as ended, or leaves it pending.
    async fn send(&self, name: &str) -> Result<(), String> {
        let Some(intent) = self.intents.get(name) else {
            return Err(format!("{name} is not in this worker's plan"));
        };
        // An impatient caller, for about one intent in eight: the first time it stops waiting
        // after a few milliseconds (the send's future dropped wherever it was: claiming, storing,
        // sending, reading the answer) and sends the same message again, as an application
        // whose own deadline passed would.
        let mut patience = {
            let mut rng = Rng::new(
                u64::from(intent.run) << 32 | u64::from(intent.id),
                "impatient",
            );
            (rng.below(8) == 0).then(|| Duration::from_millis(1 + rng.below(150)))
        };
        loop {
            let mut b = self
                .client
                .submission(name)
                .post(&self.url)
                .header("X-Tenant", TENANT)
                .json_text(&intent.body);
            let reuse = lock(&self.removed).get(name).cloned();
            if let Some(key) = reuse {
                let key = Key::parse(&key).map_err(|e| format!("{name}: stored key: {e}"))?;
                b = b.key(key);
            }
            let sent = match patience.take() {
                Some(deadline) => match tokio::time::timeout(deadline, b.send()).await {
                    Ok(sent) => sent,
                    Err(_) => {
                        self.note(&Event::GaveUp {
                            name: name.to_owned(),
                        })?;
                        continue;
                    }
                },
                None => b.send().await,
            };
            let settlement = sent.map_err(|e| format!("{name}: {e}"))?;
            if !self.conclude(&settlement).await? {
                return Ok(());
            }
        }
    }

    /// Resumes every stored submission, waiting out leases a killed process left behind.
    async fn resume(&self) -> Result<(), String> {
        loop {
            let resumed = self
                .client
                .resume_pending()
                .await
                .map_err(|e| format!("resume_pending: {e}"))?;
            let mut busy = false;
            for r in resumed {
                match r.result {
                    Ok(s) => {
                        if self.conclude(&s).await? {
                            self.send(&r.name).await?;
                        }
                    }
                    Err(e) if e.is_busy() => busy = true,
                    Err(e) => return Err(format!("{}: resume: {e}", r.name)),
                }
            }
            if !busy {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// "Try again" on every pending submission, and sends those neither settled nor pending,
    /// until the whole slice is settled and nothing is pending.
    async fn finish(self: &Arc<Self>, concurrency: usize) -> Result<(), String> {
        loop {
            let pending = self
                .client
                .pending()
                .await
                .map_err(|e| format!("pending: {e}"))?;
            let stored: HashSet<String> = pending.iter().map(|p| p.name.clone()).collect();
            let open: Vec<String> = self
                .intents
                .keys()
                .filter(|n| !self.is_settled(n) && !stored.contains(*n))
                .cloned()
                .collect();
            if stored.is_empty() && open.is_empty() {
                return Ok(());
            }
            let gate = Arc::new(Semaphore::new(concurrency));
            let mut tasks = tokio::task::JoinSet::new();
            for name in stored {
                let (w, gate) = (self.clone(), gate.clone());
                tasks.spawn(async move {
                    let _permit = gate.acquire().await;
                    match w.client.try_again(&name).await {
                        Ok(s) => {
                            if w.conclude(&s).await? {
                                w.send(&name).await?;
                            }
                            Ok(())
                        }
                        Err(e) if e.is_busy() => Ok(()),
                        Err(e) => Err(format!("{name}: try again: {e}")),
                    }
                });
            }
            for name in open {
                let (w, gate) = (self.clone(), gate.clone());
                tasks.spawn(async move {
                    let _permit = gate.acquire().await;
                    w.send(&name).await
                });
            }
            while let Some(done) = tasks.join_next().await {
                if let Ok(Err(e)) = done {
                    eprintln!("worker: {e}");
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The worker's process: resume, send the slice, finish. Exits 0 when nothing is left.
pub fn main(args: WorkerArgs) -> Result<(), String> {
    let files = Files::of(&args.dir, args.index);
    let attempts = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&files.attempts)
        .map_err(|e| format!("{}: {e}", files.attempts.display()))?;
    let faults_log = attempts
        .try_clone()
        .map_err(|e| format!("{}: {e}", files.attempts.display()))?;
    let subscriber = tracing_subscriber::registry().with(AttemptLog {
        file: Mutex::new(attempts),
    });
    tracing::subscriber::set_global_default(subscriber).map_err(|e| e.to_string())?;

    let plan = std::fs::read_to_string(&files.plan)
        .map_err(|e| format!("{}: {e}", files.plan.display()))?;
    let intents: HashMap<String, Intent> = plan
        .lines()
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_str::<Intent>(l).map(|i| (i.name.clone(), i)))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("the plan cannot be read: {e}"))?;

    let mut settled = HashSet::new();
    let mut removed = HashMap::new();
    for event in read_events(&files.results) {
        match event {
            Event::Settled { name, .. } => {
                removed.remove(&name);
                settled.insert(name);
            }
            Event::Removed { name, key } => {
                removed.insert(name, key);
            }
            Event::Discarded { name, .. } => {
                removed.remove(&name);
            }
            Event::GaveUp { .. } => {}
        }
    }
    let journal = Arc::new(
        Journal::open(&files.results).map_err(|e| format!("{}: {e}", files.results.display()))?,
    );
    let store = JournalingStore {
        inner: open_store(args.store.as_deref(), &files.store)?,
        journal: journal.clone(),
        keys: Mutex::new(HashMap::new()),
        store_after_send: args.mistake == Some(Break::StoreAfterSend),
        fresh: Mutex::new(HashSet::new()),
        held: Mutex::new(HashMap::new()),
    };
    let one_attempt = matches!(args.mistake, Some(Break::NewKey | Break::TimeoutRefusal));
    let policy = RetryPolicy {
        attempts: if one_attempt { 1 } else { 30 },
        base: Duration::from_millis(50),
        cap: Duration::from_secs(2),
        budget: Duration::from_secs(120),
        ..RetryPolicy::default()
    };
    let (rate, seed) = (args.fault_rate, args.fault_seed);
    let faults_log = Mutex::new(faults_log);
    let client = Client::builder()
        .header_provider(move |out: &Outgoing<'_>| {
            let mut headers = HeaderMap::new();
            if let Some(fault) = chosen_fault(seed, rate, out.name, out.attempt) {
                if let Ok(value) = HeaderValue::from_str(&fault) {
                    headers.insert("x-fault", value);
                    let kind = fault.split('=').next().unwrap_or_default();
                    let _ = lock(&faults_log).write_all(format!("fault:{kind}\n").as_bytes());
                }
            }
            headers
        })
        .store(store)
        .retry(policy)
        .timeout(Duration::from_millis(args.timeout_ms))
        .lease(Duration::from_millis(args.lease_ms))
        .build()
        .map_err(|e| e.to_string())?;
    let worker = Arc::new(Worker {
        client,
        url: args.url.clone(),
        journal,
        mistake: args.mistake,
        intents,
        settled: Mutex::new(settled),
        removed: Mutex::new(removed),
    });

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        worker.resume().await?;
        worker.finish(args.concurrency).await
    })
}
