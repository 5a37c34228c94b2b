//! # oncekey-server: the reference server
//!
//! A small help desk that follows the server side of the oncekey contract (CONTRACT.md section
//! 6): people open support tickets with `POST /api/tickets` and an `Idempotency-Key`, and a
//! repeat of a request gets the first answer back instead of a second ticket. It is the demo's
//! backend and the real peer of the SDK's tests.
//!
//! [`start`] binds, serves and returns a [`Server`] with its bound address, so tests can run it
//! in-process on port 0; `main.rs` is the command line around it.
//!
//! The accept loop is our own (hyper's HTTP/1 connections, not `axum::serve`) for one reason:
//! the `drop-reply` and `crash-before-commit` faults must close a connection with no answer at
//! all, so every request carries a [`api::ConnectionAbort`] that its connection's task obeys.
#![deny(missing_docs, missing_debug_implementations)]

pub mod api;
mod budget;
mod connection;
pub mod faults;
mod idempotency;
mod problem;
pub mod store;
mod tickets;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::handler::HandlerWithoutStateExt;
use axum::http::{HeaderName, HeaderValue, Method, Request};
use axum::routing::{get, post};
use axum::Router;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tower_http::cors::{AllowOrigin, CorsLayer};
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::api::{App, ConnectionAbort};
use crate::budget::BodyBudget;
use crate::faults::RandomFaults;
use crate::store::Store;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen; port 0 picks a free port.
    pub addr: SocketAddr,
    /// The database: a SQLite file, `:memory:`, or a PostgreSQL URL (`postgres://...` or
    /// `postgresql://...`), which several servers may share.
    pub db: String,
    /// How many PostgreSQL connections this server keeps (ignored for SQLite).
    pub db_connections: usize,
    /// Served at `/` (the demo's build output).
    pub www: Option<PathBuf>,
    /// Served at `/pkg/` (the browser package).
    pub pkg: Option<PathBuf>,
    /// More static folders: (URL prefix, folder).
    pub mounts: Vec<(String, PathBuf)>,
    /// Whether `X-Fault` is obeyed.
    pub faults: bool,
    /// Random faults for this fraction of requests (implies `faults`).
    pub fault_rate: f64,
    /// The seed of the random faults.
    pub seed: u64,
    /// How long a completed receipt is kept (at most [`MAX_RECEIPT_TTL`]).
    pub receipt_ttl: Duration,
    /// How long a claim on a key holds before another request may take it over (at most
    /// [`MAX_LEASE`]).
    pub lease: Duration,
    /// Origins allowed by CORS; empty means any loopback origin (`http://127.0.0.1:*`,
    /// `http://localhost:*`).
    pub cors_origins: Vec<String>,
    /// Whether `POST /api/tickets` checks keys (off only for the benchmark's baseline).
    pub key_check: bool,
    /// How often expired receipts are removed.
    pub sweep_every: Duration,
    /// How long a client has to send a request's whole header section, counted from when the
    /// connection is ready for one (accepted, or its previous answer written); then the
    /// connection is closed with no answer. 10 s by default.
    pub header_read_timeout: Duration,
    /// How long a connection may sit idle (no request in flight, no byte moved) before it is
    /// closed. 5 s by default; at most `header_read_timeout`, which ends an idle connection too.
    pub keep_alive_timeout: Duration,
    /// The largest header section (request line and headers) read, in bytes; a larger one is
    /// answered `431`. 16 KiB by default (at least 8 KiB).
    pub max_header_bytes: usize,
    /// The most connections open at once; at the cap, new ones wait in the listen backlog.
    /// 1024 by default.
    pub max_connections: usize,
    /// The largest request body read, in bytes; a larger one is answered `413`. 64 KiB by
    /// default, at most [`api::MAX_UPLOAD_CAP`] (256 MiB).
    pub max_body: usize,
    /// The largest `multipart/form-data` body (a ticket with files) read, in bytes; a larger
    /// one is answered `413`. 25 MiB by default, at most [`api::MAX_UPLOAD_CAP`] (256 MiB):
    /// a body is held in memory while it is read and stored.
    pub max_upload: usize,
    /// The bytes of bodies held in memory at once, over every request being served, uploads
    /// and downloads (`--upload-memory`): a request reserves its declared `Content-Length` (its
    /// limit when it declares none) before its body is read and gives it back when it is done,
    /// a download its file's length until its answer is sent; one that finds no room is
    /// answered `503` with `Retry-After: 1`, nothing read, claimed or stored.
    /// `None` (the default) is [`UPLOAD_MEMORY_PER_BODY`] times the larger of `max_body` and
    /// `max_upload` (100 MiB with the defaults). At least that larger limit, or the server
    /// refuses to start: every body within its limit must fit alone.
    pub upload_memory: Option<usize>,
    /// How long a client has to send a request's body once its header section is read; then
    /// the answer is `408` and the connection is closed. 30 s by default.
    pub body_read_timeout: Duration,
    /// How long an answer being written may wait on a client that takes none of it (not one
    /// byte accepted by the connection's socket); then the connection is closed (reset), which
    /// drops the answer and gives back any memory it holds (a download's room in
    /// `upload_memory`). A client that reads slowly but takes some bytes within each such
    /// window is not cut. 30 s by default.
    pub send_timeout: Duration,
    /// A `Content-Security-Policy` sent with every answer that has none (`--csp`); none by
    /// default.
    pub csp: Option<HeaderValue>,
}

/// The default of [`Config::max_header_bytes`].
pub const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
/// The default of [`Config::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// The default [`Config::upload_memory`] is room for this many bodies of the largest size.
pub const UPLOAD_MEMORY_PER_BODY: usize = 4;
/// The longest [`Config::lease`] (`--lease`): a day. A claim whose request died holds its key
/// that long.
pub const MAX_LEASE: Duration = Duration::from_secs(24 * 60 * 60);
/// The longest [`Config::receipt_ttl`] (`--receipt-ttl`): 365 days.
pub const MAX_RECEIPT_TTL: Duration = Duration::from_secs(365 * 24 * 60 * 60);

impl Default for Config {
    fn default() -> Config {
        Config {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            db: ":memory:".to_owned(),
            db_connections: store::DEFAULT_CONNECTIONS,
            www: None,
            pkg: None,
            mounts: Vec::new(),
            faults: false,
            fault_rate: 0.0,
            seed: 0,
            receipt_ttl: Duration::from_secs(24 * 60 * 60),
            lease: Duration::from_secs(10),
            cors_origins: Vec::new(),
            key_check: true,
            sweep_every: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(10),
            keep_alive_timeout: Duration::from_secs(5),
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_body: api::MAX_BODY,
            max_upload: api::MAX_UPLOAD,
            upload_memory: None,
            body_read_timeout: Duration::from_secs(30),
            send_timeout: Duration::from_secs(30),
            csp: None,
        }
    }
}

/// Why the server could not start.
#[derive(Debug)]
pub enum StartError {
    /// The address could not be bound.
    Bind(std::io::Error),
    /// The database could not be opened.
    Store {
        /// The database, as [`store::describe`] shows it (no password).
        db: String,
        /// Why not.
        error: store::StoreError,
    },
    /// A configuration value is not usable.
    Config(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Bind(e) => write!(f, "cannot listen: {e}"),
            StartError::Store { db, error } => write!(f, "cannot open the database {db}: {error}"),
            StartError::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for StartError {}

/// A running server.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://IP:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A handle that asks the server to shut down when cancelled.
    pub fn shutdown_handle(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Stops accepting, lets open requests finish (10 s at most), and closes the database after
    /// its last commit.
    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }

    /// Runs until the shutdown handle is cancelled.
    pub async fn wait(self) {
        let _ = self.task.await;
    }
}

/// Builds the routes around an [`App`].
fn router(app: Arc<App>, config: &Config) -> Router {
    let mut router = Router::new()
        .route(
            "/api/tickets",
            post(api::create_ticket).get(api::list_tickets),
        )
        .route(
            "/api/tickets/{id}/attachments/{n}",
            get(api::get_attachment),
        )
        .route("/api/plain/tickets", post(api::create_plain_ticket))
        .route("/api/stats", get(api::stats))
        .method_not_allowed_fallback(api::wrong_method)
        .with_state(app);
    for (prefix, dir) in &config.mounts {
        router = router.nest_service(prefix, ServeDir::new(dir));
    }
    if let Some(pkg) = &config.pkg {
        router = router.nest_service("/pkg", ServeDir::new(pkg));
    }
    router = match &config.www {
        // Another method than GET or HEAD on a path of no route is no route either (ServeDir
        // would answer it an empty 405 of its own).
        Some(www) => router.fallback_service(
            ServeDir::new(www)
                .call_fallback_on_method_not_allowed(true)
                .not_found_service(api::no_route.into_service()),
        ),
        None => router.fallback(api::no_route),
    };
    router
        .layer(cors(&config.cors_origins))
        .layer(TraceLayer::new_for_http())
}

fn cors(origins: &[String]) -> CorsLayer {
    let origins: Vec<String> = origins.to_vec();
    let allow = AllowOrigin::predicate(move |origin: &HeaderValue, _| {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        if origins.is_empty() {
            is_loopback_origin(origin)
        } else {
            origins.iter().any(|o| o == origin)
        }
    });
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST])
        .allow_headers([
            HeaderName::from_static("idempotency-key"),
            HeaderName::from_static("content-type"),
            HeaderName::from_static("x-tenant"),
            HeaderName::from_static("x-fault"),
        ])
        .expose_headers([
            HeaderName::from_static("idempotent-replayed"),
            HeaderName::from_static("retry-after"),
        ])
        .max_age(Duration::from_secs(600))
}

/// `http://127.0.0.1`, `http://localhost` and `http://[::1]`, with any port or none.
fn is_loopback_origin(origin: &str) -> bool {
    let Some(rest) = origin.strip_prefix("http://") else {
        return false;
    };
    let host = ["127.0.0.1", "localhost", "[::1]"]
        .into_iter()
        .find_map(|h| rest.strip_prefix(h));
    match host {
        Some("") => true,
        Some(port) => port
            .strip_prefix(':')
            .is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit())),
        None => false,
    }
}

/// Binds, opens the database and serves until shut down.
pub async fn start(config: Config) -> Result<Server, StartError> {
    if !(0.0..=1.0).contains(&config.fault_rate) {
        return Err(StartError::Config(format!(
            "--fault-rate must be between 0 and 1, not {}",
            config.fault_rate
        )));
    }
    if config.lease.is_zero() {
        return Err(StartError::Config("--lease must be positive".into()));
    }
    for (flag, value, bound, said) in [
        ("--lease", config.lease, MAX_LEASE, "1 day"),
        (
            "--receipt-ttl",
            config.receipt_ttl,
            MAX_RECEIPT_TTL,
            "365 days",
        ),
    ] {
        if value > bound {
            return Err(StartError::Config(format!(
                "{flag} must be at most {said} ({}s), not {}",
                bound.as_secs(),
                humantime::format_duration(value)
            )));
        }
    }
    if config.receipt_ttl < config.lease {
        // A claim older than the TTL counts as expired: one still held (its request at work)
        // would be taken over, and a TTL of 0 would make every repeat a new ticket.
        return Err(StartError::Config(format!(
            "--receipt-ttl ({}) must be at least --lease ({}): a key is kept at least as long \
             as a claim on it holds",
            humantime::format_duration(config.receipt_ttl),
            humantime::format_duration(config.lease)
        )));
    }
    let limits = limits(&config)?;
    let upload_memory = upload_memory(&config)?;
    let db = store::describe(&config.db);
    let (store, writer) =
        Store::open_with(&config.db, config.db_connections).map_err(|error| StartError::Store {
            db: db.clone(),
            error,
        })?;
    let listener = TcpListener::bind(config.addr)
        .await
        .map_err(StartError::Bind)?;
    let addr = listener.local_addr().map_err(StartError::Bind)?;
    let random_faults =
        (config.fault_rate > 0.0).then(|| RandomFaults::new(config.fault_rate, config.seed));
    let app = Arc::new(App {
        store: store.clone(),
        faults: config.faults || random_faults.is_some(),
        random_faults,
        lease: config.lease,
        receipt_ttl: config.receipt_ttl,
        key_check: config.key_check,
        max_body: config.max_body,
        max_upload: config.max_upload,
        bodies: BodyBudget::new(upload_memory),
        body_read_timeout: config.body_read_timeout,
        counters: Mutex::new(HashMap::new()),
        // Unique across restarts and across the servers sharing a database, so a dead or other
        // process's token never matches this one's.
        next_token: AtomicI64::new(first_token()),
    });
    let router = router(app, &config);
    let stop = CancellationToken::new();
    let sweeper = tokio::spawn(idempotency::sweep(
        store.clone(),
        config.receipt_ttl,
        config.sweep_every,
    ));
    let router = match config.csp.clone() {
        Some(csp) => router.layer(axum::middleware::map_response(
            move |mut response: axum::response::Response| {
                let csp = csp.clone();
                async move {
                    response
                        .headers_mut()
                        .entry(axum::http::header::CONTENT_SECURITY_POLICY)
                        .or_insert(csp);
                    response
                }
            },
        )),
        None => router,
    };
    let task = tokio::spawn(serve(listener, router, limits, stop.clone(), async move {
        sweeper.abort();
        store.stop();
        let _ = tokio::task::spawn_blocking(move || writer.join()).await;
        tracing::info!("database closed");
    }));
    tracing::info!(%addr, %db, faults = config.faults, "serving");
    Ok(Server { addr, stop, task })
}

/// The connection limits, checked.
fn limits(config: &Config) -> Result<connection::Limits, StartError> {
    let positive = [
        ("--header-read-timeout", config.header_read_timeout),
        ("--keep-alive-timeout", config.keep_alive_timeout),
        ("--body-read-timeout", config.body_read_timeout),
        ("--send-timeout", config.send_timeout),
    ];
    if let Some((flag, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
        return Err(StartError::Config(format!("{flag} must be positive")));
    }
    if config.keep_alive_timeout > config.header_read_timeout {
        return Err(StartError::Config(format!(
            "--keep-alive-timeout ({}) must not be longer than --header-read-timeout ({}): a connection waiting for its next request is waiting for a header section, and is closed after the header read timeout",
            humantime::format_duration(config.keep_alive_timeout),
            humantime::format_duration(config.header_read_timeout)
        )));
    }
    if config.max_header_bytes < 8192 {
        return Err(StartError::Config(format!(
            "--max-header-bytes must be at least 8192, not {}",
            config.max_header_bytes
        )));
    }
    for (flag, limit) in [
        ("--max-body", config.max_body),
        ("--max-upload", config.max_upload),
    ] {
        if limit > api::MAX_UPLOAD_CAP {
            return Err(StartError::Config(format!(
                "{flag} must be at most {} (256 MiB; a body is held in memory), not {limit}",
                api::MAX_UPLOAD_CAP,
            )));
        }
    }
    if config.max_connections == 0 {
        return Err(StartError::Config(
            "--max-connections must be at least 1".into(),
        ));
    }
    Ok(connection::Limits {
        header_read_timeout: config.header_read_timeout,
        keep_alive_timeout: config.keep_alive_timeout,
        send_timeout: config.send_timeout,
        max_header_bytes: config.max_header_bytes,
        max_connections: config.max_connections,
    })
}

/// `--upload-memory`, or its default, checked against the body limits (already checked).
fn upload_memory(config: &Config) -> Result<usize, StartError> {
    let (flag, largest) = if config.max_upload >= config.max_body {
        ("--max-upload", config.max_upload)
    } else {
        ("--max-body", config.max_body)
    };
    let Some(budget) = config.upload_memory else {
        return Ok((largest * UPLOAD_MEMORY_PER_BODY).min(tokio::sync::Semaphore::MAX_PERMITS));
    };
    if budget < largest {
        return Err(StartError::Config(format!(
            "--upload-memory ({budget}) must be at least {flag} ({largest}): a body within \
             the limit must fit alone"
        )));
    }
    if budget > tokio::sync::Semaphore::MAX_PERMITS {
        return Err(StartError::Config(format!(
            "--upload-memory must be at most {}, not {budget}",
            tokio::sync::Semaphore::MAX_PERMITS
        )));
    }
    Ok(budget)
}

/// A random start for this process's claim tokens, in `0..2^62` (the counter after it has room
/// to grow): random so that servers sharing a database never hand out the same token.
fn first_token() -> i64 {
    use std::hash::{BuildHasher, Hasher};
    // The standard library seeds each `RandomState` from the operating system's generator.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    h.write_u128(nanos);
    h.write_u32(std::process::id());
    (h.finish() >> 2) as i64
}

async fn serve(
    listener: TcpListener,
    router: Router,
    limits: connection::Limits,
    stop: CancellationToken,
    close: impl std::future::Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let builder = limits.builder();
    let slots = connection::Slots::new(limits.max_connections);
    loop {
        let slot = tokio::select! {
            _ = stop.cancelled() => break,
            slot = slots.take() => slot,
        };
        let (stream, _peer) = tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: wait a moment rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let abort = ConnectionAbort::default();
        let router = router.clone();
        let token = abort.clone();
        let activity = connection::Activity::new();
        let requests = activity.clone();
        let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
            request.extensions_mut().insert(token.clone());
            let in_flight = requests.begin();
            let refused = not_a_path(&request);
            let answer = router.clone().oneshot(request);
            async move {
                let answer = match refused {
                    Some(refusal) => refusal,
                    None => answer.await?,
                };
                Ok::<_, std::convert::Infallible>(in_flight.until_written(answer))
            }
        });
        let connection = builder.serve_connection(
            TokioIo::new(connection::Watched::new(
                stream,
                activity.clone(),
                limits.send_timeout,
            )),
            service,
        );
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _slot = slot;
            tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!("connection ended: {e}");
                    }
                }
                // Dropping the connection closes the socket with no answer written.
                _ = abort.0.cancelled() => {}
                _ = activity.idle_for(limits.keep_alive_timeout) => {
                    tracing::debug!("idle connection closed");
                }
            }
        });
    }
    drop(listener);
    tracing::info!("shutting down: letting open requests finish");
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(Duration::from_secs(10)) => {
            tracing::warn!("open connections did not finish within 10 s");
        }
    }
    close.await;
}

/// `400` for a request target that is not a path (`GET abc`, authority-form outside `CONNECT`):
/// hyper passes it on, and the static folders cannot serve it (tower-http answered `500`).
fn not_a_path(request: &Request<Incoming>) -> Option<axum::response::Response> {
    let path = request.uri().path();
    if path.starts_with('/') || (path == "*" && request.method() == Method::OPTIONS) {
        return None;
    }
    let problem = serde_json::json!({
        "type": "urn:oncekey:problem:bad-request-target",
        "title": "Bad request target",
        "status": 400,
        "detail": "the request target must be a path that starts with /",
    });
    let mut response = axum::response::Response::new(axum::body::Body::from(problem.to_string()));
    *response.status_mut() = axum::http::StatusCode::BAD_REQUEST;
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    Some(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_origins_only_by_default() {
        for ok in [
            "http://127.0.0.1:8080",
            "http://localhost:3000",
            "http://localhost",
            "http://[::1]:9",
        ] {
            assert!(is_loopback_origin(ok), "{ok}");
        }
        for bad in [
            "https://localhost:3000",
            "http://localhost.evil.com",
            "http://127.0.0.1.evil:80",
            "http://127.0.0.1:",
            "http://evil.com",
            "null",
        ] {
            assert!(!is_loopback_origin(bad), "{bad}");
        }
    }
}
