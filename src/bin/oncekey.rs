//! `oncekey`: send a request once, from a shell script or by hand, with the native client's
//! guarantees (stored key and body, retries with the same key, resume after a crash).

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
mod cli {
    use std::collections::HashSet;
    use std::process::ExitCode;
    use std::sync::Arc;
    use std::time::Duration;

    use clap::{Args, Parser, Subcommand};
    use oncekey::{Client, Key, Outcome, RetryPolicy, Settlement, SqliteStore, Store};

    const AFTER_HELP: &str = "\
Outcomes and exit codes:
  0  succeeded      a 2xx: done (replayed if the server had already done it). The record is removed.
  3  refused        a 4xx: the server did not carry the request out. Fix it and send again (new key).
  4  conflict       a 422: the server holds this key for another body. A bug; nothing is retried.
  5  misconfigured  a 400 naming the idempotency key: the setup is wrong; nothing was done.
  6  unsure         no definite answer before the retries stopped. The record is KEPT with its key:
                    run `oncekey resume --again` (or the same send again) for a new round with the
                    same key; never send it under a new name.
  7  busy           another process holds the lease on this submission and is sending it.
  8  mismatch       another request is pending under this name; resume or discard it first.
  9  expired        the key is past its lifetime (--key-lifetime, less min(10 %, 5 min)) without a
                    definite answer: it may or may not have been done, and nothing more is sent
                    with it. The record is KEPT: check with the server, then `oncekey send-as-new`
                    (a deliberate new key) or `oncekey discard`.
  1  any other failure (store, usage, unreadable record), with a message on stderr.

A run over several submissions (resume, work) exits with the most urgent of their codes, in this
order: 1 (a failure is never hidden); then the ones still stored with their key, 9, 6, 8, 7; then
the ones settled without being done, 5, 4, 3; then 0.

The answer's body goes to stdout; a one-line summary to stderr.";

    #[derive(Parser, Debug)]
    #[command(
        name = "oncekey",
        version,
        about = "Send an HTTP request once: one idempotency key per intended submission, stored before the first byte is sent, kept across retries and restarts.",
        after_help = AFTER_HELP
    )]
    struct Cli {
        #[command(subcommand)]
        command: Command,
        /// Log every attempt (name, key's short form, attempt, outcome) to stderr.
        #[arg(short, long, global = true)]
        verbose: bool,
    }

    #[derive(Subcommand, Debug)]
    enum Command {
        /// Store and send one submission until a definite answer or until its retries stop.
        #[command(after_help = AFTER_HELP)]
        Send(Box<Send>),
        /// Finish every submission stored in the store (after a crash or an unsure outcome).
        #[command(after_help = AFTER_HELP)]
        Resume(Resume),
        /// For a fleet sharing a store: send the submissions no live process holds (enqueued
        /// in an outbox, or left by a process that died, once its lease ran out), polling,
        /// until none is left but the ones this worker found unsure; with --forever, keep
        /// polling.
        #[command(after_help = AFTER_HELP)]
        Work(Work),
        /// List the stored (pending) submissions, or with --quarantined the records moved
        /// aside because they could not be read.
        List(List),
        /// Deliberately drop a stored submission; the next send under its name gets a new key.
        Discard(Discard),
        /// Send a stored expired (or unsure) submission again under a new key, deliberately,
        /// once you have checked that the server did not carry it out.
        #[command(after_help = AFTER_HELP)]
        SendAsNew(SendAsNew),
    }

    #[derive(Args, Debug)]
    struct StoreArg {
        /// The store: a SQLite file (created with mode 0600 if missing), or, in a build with
        /// the `postgres` feature, a postgres://user@host:port/database address.
        #[arg(long, value_name = "PATH|URL")]
        store: String,
    }

    #[derive(Args, Debug)]
    struct Options {
        #[command(flatten)]
        store: StoreArg,
        /// Secret header sent on every attempt and never stored, its value read from an
        /// environment variable: NAME=ENV_VAR (e.g. Authorization=API_AUTH). Repeatable.
        #[arg(long = "secret-header", value_name = "NAME=ENV_VAR")]
        secret_headers: Vec<String>,
        /// Per-attempt timeout, the answer's body included (e.g. 30s, 500ms).
        #[arg(long, default_value = "30s", value_parser = duration)]
        timeout: Duration,
        /// The largest answer body kept and printed, in bytes; a larger one is not read, and its
        /// status alone decides the outcome.
        #[arg(long, default_value_t = oncekey::DEFAULT_MAX_RESPONSE_BYTES)]
        max_response_bytes: usize,
        /// How long a lease outlives the step it covers; a crashed process's work is taken over
        /// after it.
        #[arg(long, default_value = "30s", value_parser = duration)]
        lease: Duration,
        /// Attempts per round.
        #[arg(long, default_value_t = RetryPolicy::default().attempts)]
        attempts: u32,
        /// Backoff base (the first retry waits up to this).
        #[arg(long, default_value = "500ms", value_parser = duration)]
        base: Duration,
        /// Longest wait between attempts.
        #[arg(long, default_value = "30s", value_parser = duration)]
        cap: Duration,
        /// Time budget of a round, counted from its first attempt across restarts.
        #[arg(long, default_value = "15m", value_parser = duration)]
        budget: Duration,
        /// How long the server keeps a key (Stripe, Checkout.com 24h; Svix 12h; Qonto 30m;
        /// Adyen 31d): no attempt is sent later than this after the first, less min(10 %, 5m);
        /// the submission is then expired (exit 9).
        #[arg(long, default_value = "24h", value_parser = duration)]
        key_lifetime: Duration,
    }

    #[derive(Args, Debug)]
    struct Send {
        #[command(flatten)]
        options: Options,
        /// The submission's name: one per intended submission (e.g. payout-77).
        #[arg(long)]
        name: String,
        /// The idempotency key to use (default: a new random UUID v4).
        #[arg(long, conflicts_with = "derive_key")]
        key: Option<String>,
        /// Derive the key from a durable id you own (UUID v5 in --namespace), so a rerun after a
        /// crash computes the same key.
        #[arg(long, value_name = "ID")]
        derive_key: Option<String>,
        /// The namespace UUID for --derive-key.
        #[arg(long, default_value = "6f6e6365-6b65-7900-8000-000000000001")]
        namespace: String,
        /// A header stored and sent on every attempt, "Name: value". Secrets are refused here:
        /// use --secret-header.
        #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
        headers: Vec<String>,
        /// The JSON body: text, or @FILE, or @- for stdin.
        #[arg(long, conflicts_with = "form")]
        json: Option<String>,
        /// A flat JSON object sent form-encoded: text, or @FILE, or @- for stdin.
        #[arg(long)]
        form: Option<String>,
        /// The HTTP method (POST, PUT, ...).
        method: String,
        /// The URL (http or https).
        url: String,
    }

    #[derive(Args, Debug)]
    struct Resume {
        #[command(flatten)]
        options: Options,
        /// Start a new round of retries even for submissions whose round is spent.
        #[arg(long)]
        again: bool,
        /// Wait for submissions another live client holds (a process on another host, or a
        /// live one on this host) until it finishes them or its lease runs out, then take
        /// them over, instead of exiting 7 (busy). A holder on this host whose process is gone
        /// is taken over at once, with or without --wait. Not with --again, which never
        /// waits.
        #[arg(long, conflicts_with = "again")]
        wait: bool,
    }

    #[derive(Args, Debug)]
    struct Work {
        #[command(flatten)]
        options: Options,
        /// How many due submissions to take at a time, 1 to 64: all of them are sent at once (a
        /// larger batch would leave some waiting while their leases ran out).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=64))]
        batch: u16,
        /// The pause after a poll that found nothing due.
        #[arg(long, default_value = "200ms", value_parser = duration)]
        poll: Duration,
        /// Keep polling when nothing is left.
        #[arg(long)]
        forever: bool,
    }

    #[derive(Args, Debug)]
    struct List {
        #[command(flatten)]
        store: StoreArg,
        /// List the quarantine instead: records that could not be read, moved aside (never
        /// deleted) with the reason, for an operator to look at.
        #[arg(long)]
        quarantined: bool,
    }

    #[derive(Args, Debug)]
    struct SendAsNew {
        #[command(flatten)]
        options: Options,
        /// The submission's name.
        #[arg(long)]
        name: String,
    }

    #[derive(Args, Debug)]
    struct Discard {
        #[command(flatten)]
        store: StoreArg,
        /// The submission's name.
        #[arg(long)]
        name: String,
    }

    fn duration(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
        let (n, unit) = s.split_at(split);
        let n: u64 = n
            .parse()
            .map_err(|_| format!("{s:?} is not a duration like 500ms, 30s or 15m"))?;
        let seconds = |per: u64| {
            n.checked_mul(per)
                .map(Duration::from_secs)
                .ok_or_else(|| format!("{s:?} is too long a duration"))
        };
        match unit {
            "ms" => Ok(Duration::from_millis(n)),
            "s" | "" => seconds(1),
            "m" => seconds(60),
            "h" => seconds(3600),
            "d" => seconds(86_400),
            _ => Err(format!(
                "{s:?} is not a duration like 500ms, 30s, 15m, 24h or 31d"
            )),
        }
    }

    fn read_body(arg: &str) -> Result<String, String> {
        match arg.strip_prefix('@') {
            Some("-") => std::io::read_to_string(std::io::stdin())
                .map_err(|e| format!("the body could not be read from stdin: {e}")),
            Some(path) => std::fs::read_to_string(path)
                .map_err(|e| format!("the body file {path:?} could not be read: {e}")),
            None => Ok(arg.to_owned()),
        }
    }

    /// A PostgreSQL address: a `postgres://` or `postgresql://` URL (the scheme in any case),
    /// or libpq's `key=value` form that starts with one of its keywords (`host=db dbname=x`).
    /// Anything else is a SQLite file (a fleet's address taken for a file name would quietly
    /// make each host a store of its own).
    fn is_postgres(s: &str) -> bool {
        let lower = s.to_ascii_lowercase();
        const KEYWORDS: [&str; 8] = [
            "host=",
            "hostaddr=",
            "port=",
            "dbname=",
            "user=",
            "password=",
            "sslmode=",
            "service=",
        ];
        lower.starts_with("postgres://")
            || lower.starts_with("postgresql://")
            || KEYWORDS.iter().any(|k| lower.trim_start().starts_with(k))
    }

    fn open_store(arg: &StoreArg) -> Result<Arc<dyn Store>, String> {
        let s = arg.store.as_str();
        if is_postgres(s) {
            // The driver reads a URL's scheme in lower case only.
            #[cfg(feature = "postgres")]
            let address = match s.split_once("://") {
                Some((scheme, rest)) => scheme.to_ascii_lowercase() + "://" + rest,
                None => s.to_owned(),
            };
            #[cfg(feature = "postgres")]
            return oncekey::PostgresStore::connect(&address)
                .map(|p| Arc::new(p) as Arc<dyn Store>)
                .map_err(|e| e.to_string());
            #[cfg(not(feature = "postgres"))]
            return Err(
                "--store: this oncekey was built without PostgreSQL (cargo feature \"postgres\")"
                    .into(),
            );
        }
        SqliteStore::open(s)
            .map(|p| Arc::new(p) as Arc<dyn Store>)
            .map_err(|e| e.to_string())
    }

    fn client(o: &Options) -> Result<Client, String> {
        let store = open_store(&o.store)?;
        let mut b = Client::builder()
            .shared_store(store)
            .timeout(o.timeout)
            .max_response_bytes(o.max_response_bytes)
            .lease(o.lease)
            .retry(RetryPolicy {
                attempts: o.attempts,
                base: o.base,
                cap: o.cap,
                budget: o.budget,
                key_lifetime: o.key_lifetime,
            });
        for spec in &o.secret_headers {
            let (name, var) = spec
                .split_once('=')
                .ok_or_else(|| format!("--secret-header {spec:?}: expected NAME=ENV_VAR"))?;
            let value = std::env::var(var).map_err(|_| {
                format!("--secret-header {name}: the environment variable {var} is not set")
            })?;
            b = b.secret_header(name.trim(), &value);
        }
        b.build().map_err(|e| e.to_string())
    }

    fn now_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    const FAILED: u8 = 1;

    fn code(outcome: Outcome) -> u8 {
        match outcome {
            Outcome::Succeeded => 0,
            Outcome::Refused => 3,
            Outcome::Conflict => 4,
            Outcome::Misconfigured => 5,
            Outcome::Unsure => 6,
            Outcome::Expired => 9,
        }
    }

    /// Exit codes from the most urgent to the least, for a run over several submissions: a
    /// failure first (something could not even be tried); then the submissions still stored
    /// with their key, which someone must finish under that key (expired needs a person's
    /// check, unsure a new round, a mismatch a resume or discard, busy only time); then the
    /// ones settled without being done (the record is gone, and each says why on stderr).
    const URGENCY: [u8; 9] = [FAILED, 9, 6, 8, 7, 5, 4, 3, 0];

    /// The more urgent of two exit codes (a code not in [`URGENCY`] counts as a failure).
    fn worse(a: u8, b: u8) -> u8 {
        let rank = |c: u8| URGENCY.iter().position(|&u| u == c).unwrap_or(0);
        if rank(b) < rank(a) {
            b
        } else {
            a
        }
    }

    fn error_code(e: &oncekey::Error) -> u8 {
        if e.is_busy() {
            7
        } else if e.is_pending_mismatch() {
            8
        } else {
            FAILED
        }
    }

    fn report(s: &Settlement) -> u8 {
        eprintln!("oncekey: {s}");
        let advice = match s.outcome() {
            Outcome::Succeeded => None,
            Outcome::Refused => Some("the server refused the request; fix it and send it again"),
            Outcome::Conflict => Some("the server holds this key for another body: a bug, not retried"),
            Outcome::Misconfigured => Some("the server says the idempotency key is missing or malformed: check the setup"),
            Outcome::Unsure => Some("no definite answer: the record is kept; run `oncekey resume --again` for a new round with the same key"),
            Outcome::Expired => Some("the key is past its lifetime: it may or may not have been done, and nothing more is sent with it; check with the server, then `oncekey send-as-new` or `oncekey discard`"),
        };
        if let Some(advice) = advice {
            eprintln!("oncekey: {advice}");
        }
        code(s.outcome())
    }

    /// Reports how the stored submission `name` ended, or why it could not go on; its exit
    /// code.
    fn report_result(name: &str, result: &oncekey::Result<Settlement>) -> u8 {
        match result {
            Ok(s) => report(s),
            Err(e) => {
                eprintln!("oncekey: {name}: {e}");
                error_code(e)
            }
        }
    }

    async fn send(args: Send) -> Result<u8, (String, u8)> {
        let plain = |e: String| (e, FAILED);
        let client = client(&args.options).map_err(plain)?;
        let mut b = client
            .submission(&args.name)
            .request(&args.method, &args.url);
        if let Some(k) = &args.key {
            b = b.key(Key::parse(k).map_err(|e| plain(format!("--key: {e}")))?);
        }
        if let Some(id) = &args.derive_key {
            let ns = uuid::Uuid::parse_str(&args.namespace)
                .map_err(|e| plain(format!("--namespace: {e}")))?;
            b = b.key(Key::derive(&ns, id));
        }
        for h in &args.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| plain(format!("--header {h:?}: expected \"Name: value\"")))?;
            b = b.header(name.trim(), value.trim());
        }
        if let Some(json) = &args.json {
            b = b.json_text(&read_body(json).map_err(plain)?);
        }
        if let Some(form) = &args.form {
            let text = read_body(form).map_err(plain)?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| plain(format!("--form is not JSON: {e}")))?;
            b = b.form(&value).map_err(|e| plain(e.to_string()))?;
        }
        match b.send().await {
            Ok(s) => {
                use std::io::Write;
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(s.body());
                if !s.body().is_empty() && !s.body().ends_with(b"\n") {
                    let _ = out.write_all(b"\n");
                }
                if let Some(e) = s.body_error() {
                    eprintln!("oncekey: {e}");
                }
                Ok(report(&s))
            }
            Err(e) => Err((e.to_string(), error_code(&e))),
        }
    }

    async fn resume(args: Resume) -> Result<u8, (String, u8)> {
        let client = client(&args.options).map_err(|e| (e, FAILED))?;
        let mut worst = 0u8;
        if args.again {
            let pending = client
                .pending()
                .await
                .map_err(|e| (e.to_string(), FAILED))?;
            for p in pending {
                let result = client.try_again(&p.name).await;
                if result.as_ref().is_err_and(oncekey::Error::is_not_stored) {
                    // Settled or discarded elsewhere since it was listed: nothing to try again.
                    continue;
                }
                worst = worse(worst, report_result(&p.name, &result));
            }
        } else {
            let mut waited: HashSet<String> = HashSet::new();
            // Each pass takes up every stored submission again: one settled in an earlier pass
            // (unsure, kept) settles again without sending, and is not reported twice.
            let mut reported: HashSet<String> = HashSet::new();
            let mut first = true;
            loop {
                let resumed = client
                    .resume_pending()
                    .await
                    .map_err(|e| (e.to_string(), FAILED))?;
                if resumed.is_empty() && first {
                    eprintln!("oncekey: nothing pending");
                }
                first = false;
                let mut wake: Option<Duration> = None;
                for r in resumed {
                    match &r.result {
                        Err(e) if args.wait && e.is_busy() => {
                            if waited.insert(r.name.clone()) {
                                eprintln!("oncekey: {}: {e}; waiting", r.name);
                            }
                            let left = e.lease_holder().map_or(Duration::ZERO, |(_, until)| {
                                Duration::from_millis(until.as_millis().saturating_sub(now_ms()))
                            });
                            wake = Some(wake.map_or(left, |w| w.min(left)));
                        }
                        _ if !reported.insert(r.name.clone()) => {}
                        _ => worst = worse(worst, report_result(&r.name, &r.result)),
                    }
                }
                let Some(wake) = wake else { break };
                // Until the first lease runs out, looking again every second meanwhile (its
                // holder may finish or release it sooner).
                let pause = wake.clamp(Duration::from_millis(50), Duration::from_secs(1));
                tokio::time::sleep(pause).await;
            }
        }
        Ok(worst)
    }

    async fn work(args: Work) -> Result<u8, (String, u8)> {
        let client = client(&args.options).map_err(|e| (e, FAILED))?;
        let failed = |e: oncekey::Error| (e.to_string(), FAILED);
        let mut worst = 0u8;
        // Submissions this worker settled unsure or expired stay stored; it does not wait for
        // them.
        let mut unsure: HashSet<String> = HashSet::new();
        loop {
            let resumed = client.resume_due(args.batch.into()).await.map_err(failed)?;
            let found = !resumed.is_empty();
            for r in resumed {
                let c = report_result(&r.name, &r.result);
                if c == code(Outcome::Unsure) || c == code(Outcome::Expired) {
                    unsure.insert(r.name.clone());
                } else {
                    unsure.remove(&r.name);
                }
                worst = worse(worst, c);
            }
            if found {
                continue;
            }
            if !args.forever {
                let left = client.pending().await.map_err(failed)?;
                if left.iter().all(|p| unsure.contains(&p.name)) {
                    return Ok(worst);
                }
            }
            tokio::time::sleep(args.poll).await;
        }
    }

    async fn list(args: List) -> Result<u8, (String, u8)> {
        let store = open_store(&args.store).map_err(|e| (e, FAILED))?;
        let client = Client::builder()
            .shared_store(store)
            .build()
            .map_err(|e| (e.to_string(), FAILED))?;
        if args.quarantined {
            let moved = client
                .quarantined()
                .await
                .map_err(|e| (e.to_string(), FAILED))?;
            for q in moved {
                // One line each: the record's own line breaks and tabs are escaped.
                let record: String = q.record.escape_debug().collect();
                println!(
                    "{}\t{} ms\t{}\t{record}",
                    q.name,
                    q.at.as_millis(),
                    q.reason
                );
            }
            return Ok(0);
        }
        let pending = client
            .pending()
            .await
            .map_err(|e| (e.to_string(), FAILED))?;
        let now = oncekey::Timestamp::from_millis(now_ms());
        for p in pending {
            match &p.record {
                Ok(r) => println!(
                    "{}\t{}\t{} {}\t{} attempts\t{}{}",
                    p.name,
                    r.key,
                    r.request.method,
                    r.request.url,
                    r.attempts,
                    match &p.lease {
                        Some(l) => format!("leased by {}", l.owner),
                        None => "not leased".to_owned(),
                    },
                    if r.is_expired(now) {
                        "\tEXPIRED: key past its lifetime; check, then send-as-new or discard"
                    } else {
                        ""
                    }
                ),
                Err(e) => println!("{}\tUNREADABLE: {e}", p.name),
            }
        }
        Ok(0)
    }

    async fn send_as_new(args: SendAsNew) -> Result<u8, (String, u8)> {
        let client = client(&args.options).map_err(|e| (e, FAILED))?;
        let result = client.send_as_new(&args.name).await;
        if let Ok(s) = &result {
            use std::io::Write;
            let _ = std::io::stdout().lock().write_all(s.body());
        }
        Ok(report_result(&args.name, &result))
    }

    async fn discard(args: Discard) -> Result<u8, (String, u8)> {
        let store = open_store(&args.store).map_err(|e| (e, FAILED))?;
        let client = Client::builder()
            .shared_store(store)
            .build()
            .map_err(|e| (e.to_string(), FAILED))?;
        match client.discard(&args.name).await {
            Ok(true) => {
                eprintln!(
                    "oncekey: discarded {:?}; the next send under it gets a new key",
                    args.name
                );
                Ok(0)
            }
            Ok(false) => {
                eprintln!("oncekey: nothing was stored under {:?}", args.name);
                Ok(0)
            }
            Err(e) => Err((e.to_string(), error_code(&e))),
        }
    }

    pub fn main() -> ExitCode {
        let cli = Cli::parse();
        let filter =
            tracing_subscriber::EnvFilter::try_from_env("ONCEKEY_LOG").unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new(if cli.verbose {
                    "oncekey=info"
                } else {
                    "oncekey=warn"
                })
            });
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .init();
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("oncekey: the runtime could not start: {e}");
                return ExitCode::from(FAILED);
            }
        };
        let result = runtime.block_on(async {
            match cli.command {
                Command::Send(a) => send(*a).await,
                Command::Resume(a) => resume(a).await,
                Command::Work(a) => work(a).await,
                Command::List(a) => list(a).await,
                Command::Discard(a) => discard(a).await,
                Command::SendAsNew(a) => send_as_new(a).await,
            }
        });
        match result {
            Ok(code) => ExitCode::from(code),
            Err((message, code)) => {
                eprintln!("oncekey: error: {message}");
                ExitCode::from(code)
            }
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
fn main() -> std::process::ExitCode {
    cli::main()
}

/// The command line is for servers; the browser build has none.
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
fn main() {}
