//! Benchmark of a fleet: submissions per second through `PostgresStore` with 1, 2 and 4 client
//! processes on one database, beside `SqliteStore` in one process, against the reference server
//! on loopback; then the plan PostgreSQL picks for the fleet's claim of due submissions over
//! 10,000 rows. Run by `scripts/bench-native.sh` under `scripts/with-pg.sh` (release build).
//!
//! `bench_fleet SERVER_BIN PG_URL [N]` runs each figure with N submissions in all, split evenly
//! between the processes; each process is this program again, as
//! `bench_fleet --instance STORE TICKETS_URL FIRST COUNT`, sending 32 at once.

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
#[path = "support/server.rs"]
mod server;

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
mod app {
    use super::server::Server;
    use std::process::{Child, Command};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oncekey::{Client, PostgresStore, RetryPolicy, SqliteStore, Store};

    const IN_FLIGHT: usize = 32;

    /// One client process: sends `count` submissions from number `first` on, `IN_FLIGHT` at a
    /// time, and exits non-zero unless every one succeeded.
    fn instance(store: &str, url: &str, first: usize, count: usize) {
        let store: Arc<dyn Store> = if store.starts_with("postgres://") {
            Arc::new(PostgresStore::connect(store).expect("PostgresStore"))
        } else {
            Arc::new(SqliteStore::open(store).expect("SqliteStore"))
        };
        let runtime = tokio::runtime::Runtime::new().expect("runtime");
        let failed = runtime.block_on(async {
            let client = Client::builder()
                .shared_store(store)
                .retry(RetryPolicy {
                    attempts: 10,
                    base: Duration::from_millis(20),
                    cap: Duration::from_secs(1),
                    budget: Duration::from_secs(120),
                    ..RetryPolicy::default()
                })
                .build()
                .expect("client");
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(first));
            let mut tasks = Vec::new();
            for _ in 0..IN_FLIGHT.min(count) {
                let (client, next, url) = (client.clone(), next.clone(), url.to_owned());
                tasks.push(tokio::spawn(async move {
                    let mut failed = 0;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if i >= first + count {
                            return failed;
                        }
                        let body = serde_json::json!({
                            "subject": format!("Fleet ticket {i}"),
                            "body": "The printer on the 3rd floor is on fire again.",
                            "email": "bench@example.com",
                        });
                        let sent = match client.submission(&format!("s-{i}")).post(&url).json(&body)
                        {
                            Ok(b) => b.send().await,
                            Err(e) => Err(e),
                        };
                        if !matches!(sent, Ok(s) if s.outcome() == oncekey::Outcome::Succeeded) {
                            failed += 1;
                        }
                    }
                }));
            }
            let mut failed = 0;
            for t in tasks {
                failed += t.await.unwrap_or(1);
            }
            failed
        });
        if failed > 0 {
            eprintln!("bench_fleet: {failed} submissions did not succeed");
            std::process::exit(1);
        }
    }

    /// `n` submissions by `processes` processes on `store`; submissions per second.
    fn run(store: &str, url: &str, n: usize, processes: usize) -> f64 {
        let exe = std::env::current_exe().expect("own path");
        let started = Instant::now();
        let children: Vec<Child> = (0..processes)
            .map(|p| {
                let (first, count) = (
                    p * n / processes,
                    (p + 1) * n / processes - p * n / processes,
                );
                Command::new(&exe)
                    .args([
                        "--instance",
                        store,
                        url,
                        &first.to_string(),
                        &count.to_string(),
                    ])
                    .spawn()
                    .expect("an instance")
            })
            .collect();
        for mut c in children {
            assert!(c.wait().expect("wait").success(), "an instance failed");
        }
        n as f64 / started.elapsed().as_secs_f64()
    }

    fn fresh_database(base: &str, name: &str) -> String {
        let mut admin = postgres::Client::connect(base, postgres::NoTls).expect("the cluster");
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .expect("drop");
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .expect("create");
        let (head, _) = base.rsplit_once('/').expect("postgres://.../database");
        format!("{head}/{name}")
    }

    pub fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.first().map(String::as_str) == Some("--instance") {
            let parse = |i: usize| args[i].parse::<usize>().expect("a number");
            return instance(&args[1], &args[2], parse(3), parse(4));
        }
        let (Some(server_bin), Some(pg)) = (args.first(), args.get(1)) else {
            eprintln!("usage: bench_fleet SERVER_BIN PG_URL [N]");
            std::process::exit(2);
        };
        let n: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(2000);
        let server = Server::start(server_bin);
        let tickets = format!("{}/api/tickets", server.url);
        let dir = tempfile::tempdir().expect("temp dir");
        // Warm-up (connections, server caches), not counted.
        run(
            &dir.path().join("warm.db").display().to_string(),
            &tickets,
            200,
            1,
        );

        println!("fleet: {n} submissions against the reference server, {IN_FLIGHT} in flight per process (best of 2)");
        let best = |store: &dyn Fn(usize) -> String, processes: usize| {
            (0..2)
                .map(|round| run(&store(round), &tickets, n, processes))
                .fold(0.0, f64::max)
        };
        let sqlite = best(
            &|round| {
                dir.path()
                    .join(format!("sqlite-{round}.db"))
                    .display()
                    .to_string()
            },
            1,
        );
        println!("  SqliteStore,   1 process : {sqlite:>8.0} submissions/s");
        for processes in [1, 2, 4] {
            let rate = best(
                &|round| fresh_database(pg, &format!("oncekey_bench_{processes}_{round}")),
                processes,
            );
            println!(
                "  PostgresStore, {processes} process{}: {rate:>8.0} submissions/s ({:.2}x SqliteStore on one)",
                if processes == 1 { " " } else { "es" },
                rate / sqlite
            );
        }

        // The plan of the fleet's claim over 10,000 due rows.
        let url = fresh_database(pg, "oncekey_bench_explain");
        let store = PostgresStore::connect(&url).expect("store");
        let client = Client::builder()
            .store(oncekey::MemoryStore::new())
            .build()
            .expect("client");
        let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        let mut tx = db.transaction().expect("begin");
        for i in 0..10_000 {
            let record = client
                .submission(&format!("due-{i}"))
                .post("http://127.0.0.1:9/api/tickets")
                .json(&serde_json::json!({ "n": i }))
                .and_then(|b| b.record())
                .expect("record");
            PostgresStore::enqueue(&mut tx, &record).expect("enqueue");
        }
        tx.commit().expect("commit");
        db.batch_execute("ANALYZE oncekey_pending")
            .expect("analyze");
        println!("  claim of due submissions over 10,000 rows, EXPLAIN:");
        for line in store.explain_claim_due().expect("explain") {
            println!("    {line}");
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
fn main() {
    app::main()
}

#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
fn main() {}
