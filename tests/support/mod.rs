//! Shared by the native tests: the reference server as a child process, and a small stub for
//! what the real server cannot show (the headers it received).
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use oncekey::core::Record;
use oncekey::{Client, HeaderProvider, Key, MemoryStore, Outgoing, RetryPolicy, Timestamp};
use reqwest::header::{HeaderMap, HeaderValue};

/// Where the reference server's binary is: `ONCEKEY_SERVER_BIN`, else next to this test's
/// target directory.
pub fn server_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("ONCEKEY_SERVER_BIN") {
        return PathBuf::from(p);
    }
    // <target>/debug/deps/<test binary>
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    profile_dir.join(format!("oncekey-server{}", std::env::consts::EXE_SUFFIX))
}

/// The `oncekey` command line built with these tests.
pub fn cli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_oncekey"))
}

/// The reference server, started on a free port with a temporary database and faults on;
/// killed when dropped.
pub struct Server {
    child: Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&["--lease", "3s"])
    }

    pub fn start_with(extra: &[&str]) -> Server {
        let bin = server_bin();
        assert!(
            bin.exists(),
            "the reference server binary is not at {}: run `cargo build -p oncekey-server` first (the Makefile does), or set ONCEKEY_SERVER_BIN",
            bin.display()
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let mut child = Command::new(&bin)
            .args(["--addr", "127.0.0.1:0", "--faults", "--db"])
            .arg(dir.path().join("server.db"))
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{} could not start: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => line,
            Err(_) => {
                let _ = child.kill();
                panic!("the reference server printed no `listening on` line within 30 s");
            }
        };
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line from the server: {line:?}"))
            .trim_end_matches('/')
            .to_owned();
        Server {
            child,
            url,
            _dir: dir,
        }
    }

    pub fn tickets_url(&self) -> String {
        format!("{}/api/tickets", self.url)
    }

    /// `GET /api/stats` for the tenant.
    pub async fn stats(&self, tenant: &str) -> serde_json::Value {
        plain_http()
            .get(format!("{}/api/stats", self.url))
            .header("X-Tenant", tenant)
            .send()
            .await
            .expect("stats")
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).expect("stats json"))
            .expect("stats body")
    }

    /// The tenant's ticket count.
    pub async fn tickets(&self, tenant: &str) -> i64 {
        self.stats(tenant).await["tickets"]
            .as_i64()
            .expect("tickets")
    }

    /// The subjects of the tenant's tickets.
    pub async fn subjects(&self, tenant: &str) -> Vec<String> {
        let list: Vec<serde_json::Value> = plain_http()
            .get(format!("{}/api/tickets?limit=500", self.url))
            .header("X-Tenant", tenant)
            .send()
            .await
            .expect("list")
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).expect("list json"))
            .expect("list body");
        let mut s: Vec<String> = list
            .iter()
            .map(|t| t["subject"].as_str().unwrap_or_default().to_owned())
            .collect();
        s.sort();
        s
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reqwest client for the tests' own look-ups (the crate is built without a bundled TLS
/// provider; plain http needs none, but reqwest wants one installed to build).
pub fn plain_http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

/// A tenant of its own for each test, so counts do not mix.
pub fn tenant(test: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{test}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn ticket(subject: &str) -> serde_json::Value {
    serde_json::json!({
        "subject": subject,
        "body": "The printer on the 3rd floor is on fire.",
        "email": "ana@example.com",
    })
}

/// Submits the ticket named `name` for `tenant` through `client`, to the server's ticket route.
pub async fn send(
    client: &Client,
    server: &Server,
    tenant: &str,
    name: &str,
) -> oncekey::Result<oncekey::Settlement> {
    client
        .submission(name)
        .post(&server.tickets_url())
        .header("X-Tenant", tenant)
        .json(&ticket(name))?
        .send()
        .await
}

/// [`send`] in a task of its own: a caller that can be dropped, or one of several at once.
pub fn spawn_send(
    client: &Client,
    server: &Server,
    tenant: &str,
    name: &str,
) -> tokio::task::JoinHandle<oncekey::Result<oncekey::Settlement>> {
    let (client, url) = (client.clone(), server.tickets_url());
    let (tenant, name) = (tenant.to_owned(), name.to_owned());
    tokio::spawn(async move {
        client
            .submission(&name)
            .post(&url)
            .header("X-Tenant", &tenant)
            .json(&ticket(&name))?
            .send()
            .await
    })
}

/// Short retry timing for tests.
pub fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 6,
        base: Duration::from_millis(20),
        cap: Duration::from_secs(3),
        budget: Duration::from_secs(60),
        ..RetryPolicy::default()
    }
}

/// Faults per attempt (by the submission's name and the attempt's number), added as `X-Fault`
/// by a header provider, and a log of every attempt the client sent.
#[derive(Default)]
pub struct Plan {
    faults: Mutex<Vec<(String, u32, String)>>,
    every: Mutex<Vec<(String, String)>>,
    pub sent: Mutex<Vec<(String, u32, Key, tokio::time::Instant)>>,
}

impl Plan {
    pub fn new() -> Arc<Plan> {
        Arc::new(Plan::default())
    }

    /// Attempt `n` of `name` suffers `fault`.
    pub fn fault(&self, name: &str, n: u32, fault: &str) {
        self.faults
            .lock()
            .unwrap()
            .push((name.into(), n, fault.into()));
    }

    /// Every attempt of `name` suffers `fault`.
    pub fn always(&self, name: &str, fault: &str) {
        self.every.lock().unwrap().push((name.into(), fault.into()));
    }

    pub fn clear(&self) {
        self.faults.lock().unwrap().clear();
        self.every.lock().unwrap().clear();
    }

    /// The keys sent for `name`, one per attempt.
    pub fn keys(&self, name: &str) -> Vec<Key> {
        self.sent
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.0 == name)
            .map(|s| s.2.clone())
            .collect()
    }

    pub fn attempts(&self, name: &str) -> usize {
        self.keys(name).len()
    }

    pub fn provider(self: &Arc<Self>) -> impl HeaderProvider {
        let plan = self.clone();
        move |o: &Outgoing<'_>| {
            plan.sent.lock().unwrap().push((
                o.name.to_owned(),
                o.attempt,
                o.key.clone(),
                tokio::time::Instant::now(),
            ));
            let mut h = HeaderMap::new();
            let fault = plan
                .faults
                .lock()
                .unwrap()
                .iter()
                .find(|f| f.0 == o.name && f.1 == o.attempt)
                .map(|f| f.2.clone())
                .or_else(|| {
                    plan.every
                        .lock()
                        .unwrap()
                        .iter()
                        .find(|f| f.0 == o.name)
                        .map(|f| f.1.clone())
                });
            if let Some(f) = fault {
                h.insert("x-fault", HeaderValue::from_str(&f).unwrap());
            }
            h
        }
    }
}

/// A client on a fresh memory store with the plan's faults and short retries.
pub fn client(plan: &Arc<Plan>) -> Client {
    client_on(Arc::new(MemoryStore::new()), plan)
}

/// A client on `store` with the plan's faults and short retries.
pub fn client_on(store: Arc<dyn oncekey::Store>, plan: &Arc<Plan>) -> Client {
    Client::builder()
        .shared_store(store)
        .retry(fast())
        .timeout(Duration::from_secs(5))
        .header_provider(plan.provider())
        .build()
        .expect("client")
}

/// A stub server that records the headers of each request and answers from a script (status,
/// extra headers), then 201 forever.
pub struct Stub {
    pub url: String,
    pub seen: Arc<Mutex<Vec<HeaderMap>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    pub async fn start(script: Vec<(u16, Vec<(&'static str, &'static str)>)>) -> Stub {
        use axum::http::StatusCode;
        use axum::response::IntoResponse;
        let seen: Arc<Mutex<Vec<HeaderMap>>> = Arc::default();
        let script = Arc::new(Mutex::new(std::collections::VecDeque::from(script)));
        let s = seen.clone();
        let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
            let s = s.clone();
            let script = script.clone();
            async move {
                let mut copy = HeaderMap::new();
                for (n, v) in headers.iter() {
                    copy.append(
                        reqwest::header::HeaderName::from_bytes(n.as_str().as_bytes()).unwrap(),
                        HeaderValue::from_bytes(v.as_bytes()).unwrap(),
                    );
                }
                s.lock().unwrap().push(copy);
                let (status, extra) = script.lock().unwrap().pop_front().unwrap_or((201, vec![]));
                let mut r = (
                    StatusCode::from_u16(status).unwrap(),
                    r#"{"id":1}"#.to_owned(),
                )
                    .into_response();
                for (n, v) in extra {
                    r.headers_mut().insert(n, v.parse().unwrap());
                }
                r
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Stub { url, seen, task }
    }
}

impl Stub {
    /// The `Idempotency-Key` of each request seen, in order.
    pub fn keys(&self) -> Vec<HeaderValue> {
        let seen = self.seen.lock().unwrap();
        seen.iter().map(|h| h["idempotency-key"].clone()).collect()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A fresh, empty database in the PostgreSQL cluster at `ONCEKEY_PG_URL` (which `make test`
/// starts through scripts/with-pg.sh), as a URL. `None` when there is no cluster: the test is
/// then named as skipped on stderr (past the harness's capture) and should return.
#[cfg(feature = "postgres")]
pub fn pg_database(test: &str) -> Option<String> {
    pg_database_with(test, "")
}

/// [`pg_database`], created with `options` (`CREATE DATABASE name options`, say
/// `ENCODING 'SQL_ASCII' TEMPLATE template0`).
#[cfg(feature = "postgres")]
pub fn pg_database_with(test: &str, options: &str) -> Option<String> {
    use std::io::Write;
    let Ok(base) = std::env::var("ONCEKEY_PG_URL") else {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {test}: no PostgreSQL (ONCEKEY_PG_URL is unset; make test starts one)"
        );
        return None;
    };
    static N: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        "oncekey_{}_{}_{}",
        test.chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(30)
            .collect::<String>(),
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    pg_blocking(|| {
        let mut admin = postgres::Client::connect(&base, postgres::NoTls)
            .unwrap_or_else(|e| panic!("the test cluster at {base}: {e}"));
        admin
            .batch_execute(&format!("CREATE DATABASE {name} {options}"))
            .expect("create the test's database");
    });
    let (head, _) = base.rsplit_once('/').expect("a URL ending in /database");
    Some(format!("{head}/{name}"))
}

/// Runs `f` on a thread of its own: the `postgres` crate blocks on a runtime of its own, which
/// panics on a thread that drives the test's tokio runtime.
#[cfg(feature = "postgres")]
pub fn pg_blocking<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    })
}

/// The record of a ticket `name` sent once at `at` under `key`, as its process stored it.
pub fn sent_once(url: &str, tenant: &str, name: &str, key: Key, at: Timestamp) -> Record {
    Record {
        name: name.into(),
        key,
        request: oncekey::Request::new(
            "POST",
            url,
            &ticket(name).to_string(),
            oncekey::Encoding::Json,
        )
        .unwrap()
        .header("X-Tenant", tenant)
        .unwrap(),
        started_at: at,
        attempts: 1,
        round_started_at: at,
        round_attempts: 1,
        key_lifetime: oncekey::core::DEFAULT_KEY_LIFETIME,
        offline: Duration::ZERO,
        offline_since: None,
        not_before: None,
        stopped: None,
    }
}

/// A record as a process that died `age` ago left it in `store`: sent once, then nothing.
pub fn left_behind(
    store: &dyn oncekey::Store,
    url: &str,
    tenant: &str,
    name: &str,
    age: Duration,
) -> Key {
    let key = Key::derive(
        &uuid::Uuid::from_u128(0x6f6e_6365_6b65_7900_8000_0000_0000_00bb),
        name,
    );
    let then = Timestamp::from_millis(now_ms() - age.as_millis() as u64);
    let record = sent_once(url, tenant, name, key.clone(), then);
    let lease = oncekey::Lease {
        owner: "gone".into(),
        until: Timestamp::from_millis(now_ms() + 60_000),
    };
    store
        .claim(name, &lease, Timestamp::from_millis(now_ms()))
        .unwrap();
    assert!(store.save(name, &record.to_json(), &lease).unwrap());
    store.release(name, "gone").unwrap();
    key
}

/// The wall clock in milliseconds, as the stores count it.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The store's due submissions resumed (`resume_due`): two it can read, `payout-1` and
/// `payout-2`, succeed; two it cannot, `payout-bytes` and `payout-text`, answer an unreadable
/// record moved to the quarantine, and are listed there.
pub async fn resume_two_good_and_two_unreadable(client: &Client) {
    let mut resumed = client.resume_due(10).await.expect("the poll goes on");
    resumed.sort_by(|a, b| a.name.cmp(&b.name));
    let names: Vec<&str> = resumed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["payout-1", "payout-2", "payout-bytes", "payout-text"]
    );
    for good in &resumed[..2] {
        let settled = good.result.as_ref().unwrap();
        assert_eq!(
            settled.outcome(),
            oncekey::Outcome::Succeeded,
            "{}",
            good.name
        );
    }
    for bad in &resumed[2..] {
        let e = bad.result.as_ref().unwrap_err();
        assert!(e.is_unreadable_record(), "{}: {e}", bad.name);
        assert!(e.to_string().contains("quarantine"), "{e}");
    }
    assert_eq!(
        quarantined_names(client).await,
        ["payout-bytes", "payout-text"]
    );
}

/// The names of the records `client`'s store moved aside, sorted.
pub async fn quarantined_names(client: &Client) -> Vec<String> {
    let mut moved: Vec<String> = client
        .quarantined()
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.name)
        .collect();
    moved.sort();
    moved
}

/// The record `client` would store for a ticket of `subject` to `tickets_url` under `name` for
/// `tenant`, made without storing or sending anything.
pub fn ticket_record(
    client: &Client,
    tickets_url: &str,
    tenant: &str,
    name: &str,
    subject: &str,
) -> Record {
    client
        .submission(name)
        .post(tickets_url)
        .header("X-Tenant", tenant)
        .json(&ticket(subject))
        .unwrap()
        .record()
        .unwrap()
}
