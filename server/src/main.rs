//! The command line of the reference server. See `--help`.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use axum::http::HeaderValue;
use clap::Parser;
use oncekey_server::Config;

/// The oncekey reference server: a small help desk whose `POST /api/tickets` honours
/// `Idempotency-Key` (CONTRACT.md section 6).
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// Address to listen on; port 0 picks a free one (printed as `listening on http://IP:PORT`).
    #[arg(long, default_value = "127.0.0.1:8080")]
    addr: SocketAddr,
    /// The database: a SQLite file, `:memory:`, or a PostgreSQL URL (`postgres://USER@HOST:PORT/DB`
    /// or `postgresql://...`), which several servers may share.
    #[arg(long, default_value = "helpdesk.db")]
    db: String,
    /// How many PostgreSQL connections to keep (ignored for SQLite).
    #[arg(long, default_value_t = oncekey_server::store::DEFAULT_CONNECTIONS)]
    db_connections: usize,
    /// Folder served at `/` (the demo's build output).
    #[arg(long)]
    www: Option<PathBuf>,
    /// Folder served at `/pkg/` (the browser package).
    #[arg(long)]
    pkg: Option<PathBuf>,
    /// Another static folder, as `/prefix=DIR` (repeatable).
    #[arg(long = "mount", value_parser = parse_mount)]
    mounts: Vec<(String, PathBuf)>,
    /// Obey the `X-Fault` request header (drop-reply, fail-before, delay=MS, crash-before-commit).
    #[arg(long)]
    faults: bool,
    /// Apply random faults to this fraction (0 to 1) of requests; implies --faults.
    #[arg(long, default_value_t = 0.0)]
    fault_rate: f64,
    /// Seed of the random faults.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How long completed receipts are kept (e.g. `24h`, `90m`); at most 365 days.
    #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
    receipt_ttl: Duration,
    /// How long a claim on a key holds before another request may take it over (e.g. `10s`,
    /// `500ms`); at most 1 day.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    lease: Duration,
    /// An origin allowed by CORS (repeatable); by default any `http://127.0.0.1:*` or
    /// `http://localhost:*` origin.
    #[arg(long = "cors-origin")]
    cors_origins: Vec<String>,
    /// Serve `POST /api/tickets` without the key check (the benchmark's baseline only).
    #[arg(long)]
    no_key_check: bool,
    /// How long a client has to send a request's header section, counted from when the
    /// connection is ready for one; then it is closed with no answer.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    header_read_timeout: Duration,
    /// How long a connection may sit idle between requests before it is closed (at most
    /// --header-read-timeout).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    keep_alive_timeout: Duration,
    /// The largest header section (request line and headers) read, in bytes; larger is `431`.
    #[arg(long, default_value_t = oncekey_server::DEFAULT_MAX_HEADER_BYTES)]
    max_header_bytes: usize,
    /// The most connections open at once; at the cap new ones wait in the listen backlog.
    #[arg(long, default_value_t = oncekey_server::DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// The largest request body read, in bytes; larger is `413`. At most 268435456 (256 MiB).
    #[arg(long, default_value_t = oncekey_server::api::MAX_BODY)]
    max_body: usize,
    /// The largest `multipart/form-data` body (a ticket with files) read, in bytes; larger is
    /// `413`. At most 268435456 (256 MiB): a body is held in memory while it is read.
    #[arg(long, default_value_t = oncekey_server::api::MAX_UPLOAD)]
    max_upload: usize,
    /// The bytes of bodies held in memory at once, over all requests, uploads, downloads and
    /// ticket lists (at most 500 tickets each); a request whose declared length (its limit,
    /// when chunked), a download whose file's length, or a list whose answer's length finds no
    /// room gets `503` + `Retry-After`.
    /// Default: 4 times the larger of --max-upload and --max-body (100 MiB); at least that
    /// larger limit.
    #[arg(long, value_name = "BYTES")]
    upload_memory: Option<usize>,
    /// How long a client has to send a request's body once its header section is read; then
    /// `408` and the connection is closed.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    body_read_timeout: Duration,
    /// How long an answer being written may wait on a client that takes none of it (not one
    /// byte); then the connection is closed, and the answer's memory given back. A client that
    /// reads slowly but steadily is not cut.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    send_timeout: Duration,
    /// A `Content-Security-Policy` header sent with every answer, e.g. `script-src 'self'
    /// 'wasm-unsafe-eval'; require-trusted-types-for 'script'` (the end-to-end CSP test's).
    #[arg(long, value_parser = parse_csp)]
    csp: Option<HeaderValue>,
}

fn parse_csp(s: &str) -> Result<HeaderValue, String> {
    HeaderValue::from_str(s.trim())
        .ok()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| "the policy must be visible ASCII text, not empty".to_owned())
}

fn parse_mount(s: &str) -> Result<(String, PathBuf), String> {
    let (prefix, dir) = s
        .split_once('=')
        .ok_or_else(|| format!("expected /prefix=DIR, got {s:?}"))?;
    if !prefix.starts_with('/') || prefix.len() < 2 || prefix.ends_with('/') {
        return Err(format!(
            "the prefix must start with / and not end with one, got {prefix:?}"
        ));
    }
    Ok((prefix.to_owned(), PathBuf::from(dir)))
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,tower_http=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let config = Config {
        addr: args.addr,
        db: args.db,
        db_connections: args.db_connections,
        www: args.www,
        pkg: args.pkg,
        mounts: args.mounts,
        faults: args.faults,
        fault_rate: args.fault_rate,
        seed: args.seed,
        receipt_ttl: args.receipt_ttl,
        lease: args.lease,
        cors_origins: args.cors_origins,
        key_check: !args.no_key_check,
        header_read_timeout: args.header_read_timeout,
        keep_alive_timeout: args.keep_alive_timeout,
        max_header_bytes: args.max_header_bytes,
        max_connections: args.max_connections,
        max_body: args.max_body,
        max_upload: args.max_upload,
        upload_memory: args.upload_memory,
        body_read_timeout: args.body_read_timeout,
        send_timeout: args.send_timeout,
        csp: args.csp,
        ..Config::default()
    };
    let server = match oncekey_server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("oncekey-server: {e}");
            std::process::exit(1);
        }
    };
    // Listening for signals before saying we listen: a SIGTERM right after the line below must
    // find the graceful shutdown, not the default action.
    let signal = shutdown_signal();
    let stop = server.shutdown_handle();
    tokio::spawn(async move {
        signal.await;
        tracing::info!("signal received");
        stop.cancel();
    });
    // The one line on stdout: scripts and tests read the port from it.
    let mut out = std::io::stdout();
    let _ = writeln!(out, "listening on {}", server.url());
    let _ = out.flush();
    server.wait().await;
}

/// Ctrl-C or SIGTERM. On Unix both handlers are installed when this is called, not when the
/// future is first polled.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate()).ok();
        let interrupt = signal(SignalKind::interrupt()).ok();
        async move {
            let term = async {
                match term {
                    Some(mut s) => drop(s.recv().await),
                    None => std::future::pending().await,
                }
            };
            let interrupt = async {
                match interrupt {
                    Some(mut s) => drop(s.recv().await),
                    None => drop(tokio::signal::ctrl_c().await),
                }
            };
            tokio::select! {
                _ = term => {}
                _ = interrupt => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
