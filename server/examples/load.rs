//! Throughput of `POST /api/tickets` with keys against the same route with the key check
//! switched off, on loopback, each server on its own SQLite file (or both on one PostgreSQL
//! database with `--db postgres://...`).
//!
//! ```text
//! CARGO_PROFILE_RELEASE_OPT_LEVEL=3 cargo run --release -p oncekey-server --example load -- \
//!     [--requests 10000] [--concurrency 64] [--rounds 5] [--dir DIR | --db postgres://...]
//!     [--keyed-url URL --plain-url URL] [--uuid-keys]
//! ```
//!
//! By default it starts both servers in-process (a runtime of their own, 2 threads); with
//! `--keyed-url` and `--plain-url` it targets servers already running (the second started with
//! `--no-key-check`). The rounds alternate keyed and unkeyed runs; the medians count. The CPU
//! time is this process's (client and servers): PostgreSQL's own processes are not in it. The
//! servers' share of it is given too, for in-process servers: their runtimes' workers and (on
//! SQLite) their writer thread, without the client, which costs the same either way.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oncekey_server::Config;

struct Args {
    requests: usize,
    concurrency: usize,
    rounds: usize,
    dir: Option<String>,
    db: Option<String>,
    keyed_url: Option<String>,
    plain_url: Option<String>,
    only: Option<String>,
    uuid_keys: bool,
}

fn args() -> Args {
    let mut a = Args {
        requests: 10_000,
        concurrency: 64,
        rounds: 5,
        dir: None,
        db: None,
        keyed_url: None,
        plain_url: None,
        only: None,
        uuid_keys: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--requests" => a.requests = value().parse().expect("--requests N"),
            "--concurrency" => a.concurrency = value().parse().expect("--concurrency C"),
            "--rounds" => a.rounds = value().parse().expect("--rounds R"),
            "--dir" => a.dir = Some(value()),
            "--db" => a.db = Some(value()),
            "--keyed-url" => a.keyed_url = Some(value()),
            "--plain-url" => a.plain_url = Some(value()),
            // For profiling one side: `--only keyed` or `--only plain`.
            "--only" => a.only = Some(value()),
            // Keys shaped as a browser makes them (UUID v4, in no order) instead of
            // `load-RUN-ROUND-N`, whose neighbours in a round sort near each other.
            "--uuid-keys" => a.uuid_keys = true,
            "--help" | "-h" => {
                println!("see the comment at the top of server/examples/load.rs");
                std::process::exit(0);
            }
            other => panic!("unknown argument {other}"),
        }
    }
    a
}

/// Starts a server with its own runtime on its own thread; returns its URL.
fn start_server(db: String, key_check: bool) -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("server-worker")
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let config = Config {
                db,
                key_check,
                ..Config::default()
            };
            let server = oncekey_server::start(config).await.expect("server starts");
            tx.send(server.url()).unwrap();
            server.wait().await;
        });
    });
    rx.recv().unwrap()
}

/// CPU time used so far by this process's threads, in nanoseconds, from Linux's schedstat;
/// `None` elsewhere. All of them (client and in-process servers) with `name` `None`, or those
/// named `name`: the servers' SQLite writer threads (`oncekey-store`, the part of a request that
/// cannot be spread over cores) or their runtimes' workers (`server-worker`). Only the server
/// under load moves the named ones.
fn cpu_ns(name: Option<&str>) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let path = task.ok()?.path();
        if let Some(name) = name {
            if std::fs::read_to_string(path.join("comm")).ok()?.trim() != name {
                continue;
            }
        }
        let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

/// One run's figures.
#[derive(Clone, Copy)]
struct Run {
    /// Requests per second.
    rate: f64,
    /// CPU time of the whole process per request, in microseconds.
    cpu_us: f64,
    /// CPU time of the SQLite writer thread per request, in microseconds.
    writer_us: f64,
    /// CPU time of the server's runtime workers per request, in microseconds.
    server_us: f64,
}

/// Sends `n` ticket requests at concurrency `c`, each with a fresh key.
async fn run(client: &reqwest::Client, url: &str, tag: &str, n: usize, c: usize) -> Run {
    let next = Arc::new(AtomicUsize::new(0));
    let cpu_before = cpu_ns(None);
    let writer_before = cpu_ns(Some("oncekey-store"));
    let server_before = cpu_ns(Some("server-worker"));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..c {
        let (client, next, url, tag) =
            (client.clone(), next.clone(), url.to_owned(), tag.to_owned());
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    return;
                }
                let body = format!(
                    r#"{{"subject":"Load {tag} {i}","body":"Printer on fire.","email":"load@example.com"}}"#
                );
                let key = key(&tag, i);
                // A lost connection or a 409 (the first try still in progress) is tried again
                // with the same key, a few times, as a client of the contract would; counted.
                for attempt in 1.. {
                    let sent = client
                        .post(format!("{url}/api/tickets"))
                        .header("Content-Type", "application/json")
                        .header("X-Tenant", "load")
                        .header("Idempotency-Key", &key)
                        .body(body.clone())
                        .send()
                        .await;
                    let again = match sent {
                        Ok(response) if response.status() == 409 => "409".to_owned(),
                        Ok(response) => {
                            assert_eq!(response.status(), 201, "{:?}", response.text().await);
                            let _ = response.bytes().await;
                            break;
                        }
                        Err(e) => e.to_string(),
                    };
                    assert!(attempt < 5, "request {i} failed 5 times, last: {again}");
                    RETRIED.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10 * attempt)).await;
                }
            }
        }));
    }
    for w in workers {
        w.await.unwrap();
    }
    let rate = n as f64 / started.elapsed().as_secs_f64();
    let cpu_us = match (cpu_before, cpu_ns(None)) {
        (Some(a), Some(b)) => (b - a) as f64 / 1000.0 / n as f64,
        _ => f64::NAN,
    };
    let per_request = |before: Option<u64>, name: &str| match (before, cpu_ns(Some(name))) {
        (Some(a), Some(b)) => (b - a) as f64 / 1000.0 / n as f64,
        _ => f64::NAN,
    };
    Run {
        rate,
        cpu_us,
        writer_us: per_request(writer_before, "oncekey-store"),
        server_us: per_request(server_before, "server-worker"),
    }
}

/// Requests tried again with their key (a lost connection, or a 409 while the first try was in
/// progress), over the whole benchmark.
static RETRIED: AtomicUsize = AtomicUsize::new(0);

/// Whether keys are UUID v4 (`--uuid-keys`).
static UUID_KEYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The key of request `i` of the run `tag`: `load-RUN-TAG-I`, or with `--uuid-keys` a UUID v4
/// drawn from them (SplitMix64: spread evenly, which is all a key's position in an index needs).
fn key(tag: &str, i: usize) -> String {
    if !UUID_KEYS.load(Ordering::Relaxed) {
        return format!("load-{}-{tag}-{i}", run_id());
    }
    let mut state = (run_id() as u64) ^ tag.bytes().fold(0u64, |h, b| h.rotate_left(8) ^ b as u64);
    state = state.wrapping_add((i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut next = || {
        state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let (a, b) = (next(), next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// Different for every run of the benchmark, so keys left in a database by an earlier run are
/// never replayed.
fn run_id() -> u128 {
    static ID: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
    *ID.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => 0.0,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

#[tokio::main]
async fn main() {
    let args = args();
    UUID_KEYS.store(args.uuid_keys, Ordering::Relaxed);
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _tmp;
    let (keyed_url, plain_url) = match (args.keyed_url.clone(), args.plain_url.clone()) {
        (Some(k), Some(p)) => (k, p),
        (None, None) if args.db.is_some() => {
            let db = args.db.clone().unwrap_or_default();
            (start_server(db.clone(), true), start_server(db, false))
        }
        (None, None) => {
            let dir = match &args.dir {
                Some(d) => d.clone(),
                None => {
                    _tmp = tempfile::tempdir().unwrap();
                    _tmp.path().to_str().unwrap().to_owned()
                }
            };
            let keyed = start_server(format!("{dir}/keyed.db"), true);
            let plain = start_server(format!("{dir}/plain.db"), false);
            (keyed, plain)
        }
        _ => panic!("give both --keyed-url and --plain-url, or neither"),
    };
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let (n, c) = (args.requests, args.concurrency);
    let store = match &args.db {
        Some(db) => format!("PostgreSQL {}", oncekey_server::store::describe(db)),
        None if args.keyed_url.is_some() => "the servers' own store".to_owned(),
        None => "SQLite file, synchronous=FULL".to_owned(),
    };
    if let Some(only) = &args.only {
        let url = if only == "keyed" {
            &keyed_url
        } else {
            &plain_url
        };
        for round in 0..args.rounds {
            let r = run(&client, url, &format!("only{round}"), n, c).await;
            println!(
                "{only}: {:.0} req/s, {:.0} us CPU per request ({:.1} us in the server's workers, {:.1} in the writer)",
                r.rate, r.cpu_us, r.server_us, r.writer_us
            );
        }
        return;
    }
    // Warm up both: connections, page cache, prepared statements.
    run(&client, &keyed_url, "warm", n / 10 + 1, c).await;
    run(&client, &plain_url, "warm", n / 10 + 1, c).await;
    let (mut keyed, mut plain) = (Vec::new(), Vec::new());
    for round in 0..args.rounds {
        // Alternate which goes first, so a slow patch of the machine hits both alike.
        let tag = format!("r{round}");
        let (k, p) = if round % 2 == 0 {
            let k = run(&client, &keyed_url, &tag, n, c).await;
            (k, run(&client, &plain_url, &tag, n, c).await)
        } else {
            let p = run(&client, &plain_url, &tag, n, c).await;
            (run(&client, &keyed_url, &tag, n, c).await, p)
        };
        eprintln!(
            "round {round}: keyed {:.0} req/s ({:.0} us CPU each: {:.1} server workers, {:.1} writer), no key check {:.0} req/s ({:.0} us CPU each: {:.1}, {:.1}), ratio {:.3}",
            k.rate,
            k.cpu_us,
            k.server_us,
            k.writer_us,
            p.rate,
            p.cpu_us,
            p.server_us,
            p.writer_us,
            k.rate / p.rate
        );
        keyed.push(k);
        plain.push(p);
    }
    let rates = |v: &[Run]| median(v.iter().map(|r| r.rate).collect());
    let cpus = |v: &[Run]| median(v.iter().map(|r| r.cpu_us).collect());
    let writers = |v: &[Run]| median(v.iter().map(|r| r.writer_us).collect());
    let servers = |v: &[Run]| median(v.iter().map(|r| r.server_us).collect());
    let (keyed_server, plain_server) = (servers(&keyed), servers(&plain));
    let (keyed_cpu, plain_cpu) = (cpus(&keyed), cpus(&plain));
    let (keyed_writer, plain_writer) = (writers(&keyed), writers(&plain));
    let (keyed, plain) = (rates(&keyed), rates(&plain));
    let keys = match args.uuid_keys {
        true => "UUID v4 keys, as browsers make them",
        false => "keys load-RUN-ROUND-N",
    };
    println!(
        "keyed (Idempotency-Key, {keys}, {store}): {keyed:.0} req/s, {keyed_cpu:.0} us CPU per request (medians of {} rounds of {n} requests, concurrency {c})",
        args.rounds
    );
    println!(
        "no key check (same route, {store}): {plain:.0} req/s, {plain_cpu:.0} us CPU per request"
    );
    // CPU per request (client and server, which share the machine) does not depend on what
    // else the machine is doing; throughput does.
    if args.keyed_url.is_none() {
        println!(
            "server workers: {keyed_server:.1} us CPU per keyed request, {plain_server:.1} us per unkeyed one ({:+.1} us)",
            keyed_server - plain_server
        );
    }
    if args.db.is_none() && args.keyed_url.is_none() {
        println!(
            "writer thread: {keyed_writer:.1} us CPU per keyed request, {plain_writer:.1} us per unkeyed one ({:+.1} us)",
            keyed_writer - plain_writer
        );
    }
    println!(
        "cpu ratio: {:.3} (by CPU time, the key check costs {:.1}% of throughput)",
        plain_cpu / keyed_cpu,
        (1.0 - plain_cpu / keyed_cpu) * 100.0
    );
    println!(
        "ratio: {:.3} (by wall clock, the key check costs {:.1}% of throughput)",
        keyed / plain,
        (1.0 - keyed / plain) * 100.0
    );
    println!(
        "requests tried again with their key (a lost connection, or a 409 while in progress): {}",
        RETRIED.load(Ordering::Relaxed)
    );
}
