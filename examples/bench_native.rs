//! Benchmark of the native client against the reference server on loopback: sequential and
//! concurrent (64 in flight) submissions through `Client` with `MemoryStore`, with
//! `SqliteStore`, and the same requests with plain reqwest (a fresh key header each, so the
//! server does the same work), the three taking turns (request by request, or batch by batch)
//! so that the machine's changing load falls on them alike; then the peak memory of a process
//! that resumes 10,000 pending records. Run by `scripts/bench-native.sh` (release, opt-level 3).
//!
//! `bench_native SERVER_BIN [N]` runs the throughput part (N * 5 / 2 sequential requests of each
//! sender, 20 batches of N / 4 concurrent ones) and then itself as
//! `bench_native --memory SERVER_BIN STORE_KIND COUNT` for each memory figure, so each peak is
//! a process's own.

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
#[path = "support/server.rs"]
mod server;

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
mod app {
    use super::server::Server;
    use std::process::Command;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use oncekey::{Client, Key, Lease, MemoryStore, RetryPolicy, SqliteStore, Store, Timestamp};

    const CONCURRENCY: usize = 64;
    const ROUNDS: usize = 5;

    fn body(i: usize) -> serde_json::Value {
        serde_json::json!({
            "subject": format!("Benchmark ticket {i}"),
            "body": "The printer on the 3rd floor is on fire again.",
            "email": "bench@example.com",
        })
    }

    fn random_key() -> Key {
        let mut b = [0u8; 16];
        getrandom::fill(&mut b).unwrap();
        Key::from_random_bytes(b)
    }

    #[derive(Clone)]
    enum Sender {
        Plain(reqwest::Client),
        Once(Client),
        /// Plain reqwest after the least a durable record can cost: 4 KiB written to a file
        /// and synced (`fdatasync`), here on the sending task, before the request goes.
        Synced(reqwest::Client, Arc<std::fs::File>),
    }

    impl Sender {
        async fn send(&self, url: &str, tenant: &str, i: usize) {
            match self {
                Sender::Synced(http, file) => {
                    use std::os::unix::fs::FileExt;
                    file.write_all_at(&[1u8; 4096], (i as u64 % 50) * 4096)
                        .unwrap();
                    file.sync_data().unwrap();
                    plain(http, url, tenant, i).await
                }
                Sender::Plain(http) => plain(http, url, tenant, i).await,
                Sender::Once(client) => {
                    let s = client
                        .submission(&format!("b-{i}"))
                        .post(url)
                        .header("X-Tenant", tenant)
                        .json(&body(i))
                        .unwrap()
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(s.status(), Some(201), "{s}");
                }
            }
        }
    }

    /// One request of plain reqwest, as a service without oncekey sends it.
    async fn plain(http: &reqwest::Client, url: &str, tenant: &str, i: usize) {
        let r = http
            .post(url)
            .header("X-Tenant", tenant)
            .header("Idempotency-Key", random_key().as_str())
            .header("Content-Type", "application/json")
            .body(body(i).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status().as_u16(), 201);
        r.bytes().await.unwrap();
    }

    async fn run(sender: &Sender, url: &str, tenant: &str, n: usize, concurrency: usize) -> f64 {
        // Warm up the connection pool.
        for i in 0..concurrency.min(WARM) {
            sender.send(url, &format!("{tenant}-warm"), n + i).await;
        }
        let start = Instant::now();
        let mut tasks = Vec::new();
        for w in 0..concurrency {
            let sender = sender.clone();
            let (url, tenant) = (url.to_owned(), tenant.to_owned());
            tasks.push(tokio::spawn(async move {
                let mut i = w;
                while i < n {
                    sender.send(&url, &tenant, i).await;
                    i += concurrency;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        n as f64 / start.elapsed().as_secs_f64()
    }

    /// Untimed requests before timing: the connection pool warmed up.
    const WARM: usize = 8;

    /// Plain reqwest, the client on memory, the client on `sqlite`.
    fn senders(sqlite: &Arc<SqliteStore>) -> [Sender; 3] {
        [
            Sender::Plain(reqwest::Client::new()),
            Sender::Once(client(Arc::new(MemoryStore::new()))),
            Sender::Once(client(sqlite.clone())),
        ]
    }

    /// `n` sequential requests of each sender, one of each in turn (after a warm-up); the
    /// median latency of each, in microseconds.
    async fn in_turn<const N: usize>(senders: &[Sender; N], url: &str, n: usize) -> [f64; N] {
        for (i, sender) in senders.iter().enumerate() {
            for w in 0..WARM {
                sender.send(url, &format!("s{i}-warm"), n + w).await;
            }
        }
        let mut took: [Vec<f64>; N] = std::array::from_fn(|_| Vec::new());
        for k in 0..n {
            for (i, sender) in senders.iter().enumerate() {
                let start = Instant::now();
                sender.send(url, &format!("s{i}"), k).await;
                took[i].push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        took.map(median)
    }

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => 0.0,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        }
    }

    /// What one sync costs on the disk under `dir`, in microseconds: the median of 200 writes of
    /// 4 KiB into a file already written and synced (as the store's log is once it has
    /// wrapped), each followed by `fdatasync`; each right after the one before, then each after
    /// `gap` of idle time (a device that idled takes longer to sync).
    fn sync_cost_us(dir: &std::path::Path, gap: Duration) -> (f64, f64) {
        use std::os::unix::fs::FileExt;
        let path = dir.join("sync-probe");
        let file = std::fs::File::create(&path).unwrap();
        file.write_all_at(&vec![0u8; 50 * 4096], 0).unwrap();
        file.sync_all().unwrap();
        let mut took = [Vec::new(), Vec::new()];
        for (pause, took) in [Duration::ZERO, gap].into_iter().zip(&mut took) {
            for i in 0..200 {
                std::thread::sleep(pause);
                let start = Instant::now();
                file.write_all_at(&[1u8; 4096], (i % 50) * 4096).unwrap();
                file.sync_data().unwrap();
                took.push(start.elapsed().as_secs_f64() * 1e6);
            }
        }
        let _ = std::fs::remove_file(&path);
        let [alone, after_gap] = took;
        (median(alone), median(after_gap))
    }

    fn client(store: Arc<dyn Store>) -> Client {
        Client::builder()
            .shared_store(store)
            .retry(RetryPolicy {
                attempts: 3,
                base: Duration::from_millis(50),
                ..RetryPolicy::default()
            })
            .build()
            .unwrap()
    }

    /// The CPU time (user and system) of process `pid` (0: this one) so far, in milliseconds.
    fn cpu_ms(pid: u32) -> f64 {
        let path = match pid {
            0 => "/proc/self/stat".to_owned(),
            pid => format!("/proc/{pid}/stat"),
        };
        let stat = std::fs::read_to_string(path).unwrap_or_default();
        // The fields after the command's closing parenthesis; utime and stime are the 12th and
        // 13th of them, in clock ticks (100 a second here).
        let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) * 10.0
    }

    /// The ids of this process's child processes.
    fn children() -> Vec<u32> {
        let mut out = Vec::new();
        for task in std::fs::read_dir("/proc/self/task")
            .into_iter()
            .flatten()
            .flatten()
        {
            let list = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            out.extend(
                list.split_whitespace()
                    .filter_map(|p| p.parse::<u32>().ok()),
            );
        }
        out
    }

    fn peak_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("VmHWM:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    }

    fn now() -> Timestamp {
        Timestamp::from_millis(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64,
        )
    }

    /// The record text of submission `i` to `url`, made at `now` and sent once, as a client
    /// stores it before the first attempt.
    fn record(name: &str, url: &str, i: usize, now: Timestamp) -> String {
        oncekey::core::Record {
            name: name.to_owned(),
            key: random_key(),
            request: oncekey::Request::new(
                "POST",
                url,
                &body(i).to_string(),
                oncekey::Encoding::Json,
            )
            .unwrap()
            .header("X-Tenant", "memory")
            .unwrap(),
            started_at: now,
            attempts: 1,
            round_started_at: now,
            round_attempts: 1,
            key_lifetime: oncekey::core::DEFAULT_KEY_LIFETIME,
            offline: std::time::Duration::ZERO,
            offline_since: None,
            not_before: None,
            stopped: None,
        }
        .to_json()
    }

    /// What a new sequential submission waits for in `store` before its request goes out: the
    /// median time of its claim and first record (one `StoreCall::ClaimSave`, committed and
    /// synced), each after `gap` of idle time as between the benchmark's submissions, and its
    /// removal started after it, not waited for, as the client does.
    fn store_round_trip_us(store: &SqliteStore, url: &str, gap: Duration) -> f64 {
        let owner = "bench-round-trip";
        let mut took = Vec::new();
        for i in 0..200 {
            std::thread::sleep(gap);
            let (name, now) = (format!("rt-{i}"), now());
            let call = oncekey::StoreCall::ClaimSave {
                name: name.clone(),
                lease: Lease {
                    owner: owner.into(),
                    until: Timestamp::from_millis(now.as_millis() + 60_000),
                },
                now,
                record: record(&name, url, i, now),
            };
            let (answered, answer) = std::sync::mpsc::channel();
            let start = Instant::now();
            store.start(
                call,
                Box::new(move |a| {
                    let _ = answered.send(a);
                }),
            );
            answer.recv().unwrap().unwrap();
            took.push(start.elapsed().as_secs_f64() * 1e6);
            let remove = oncekey::StoreCall::Remove {
                name,
                owner: owner.into(),
            };
            store.start(remove, Box::new(|_| {}));
        }
        median(took)
    }

    /// One process: store `count` pending records as a crash would leave them, then resume them
    /// all against the server; print the peak resident memory.
    async fn memory(server_bin: &str, kind: &str, count: usize) {
        let server = Server::start(server_bin);
        let url = format!("{}/api/tickets", server.url);
        let dir = std::env::temp_dir().join(format!("oncekey-bench-mem-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let store: Arc<dyn Store> = match kind {
            "sqlite" => Arc::new(SqliteStore::open(dir.join("pending.db")).unwrap()),
            _ => Arc::new(MemoryStore::new()),
        };
        let base = peak_kib();
        let now = now();
        let dead = Lease {
            owner: "crashed".into(),
            until: now,
        };
        for i in 0..count {
            let name = format!("m-{i}");
            let record = record(&name, &url, i, now);
            store.claim(&name, &dead, now).unwrap();
            store.save(&name, &record, &dead).unwrap();
        }
        let stored = peak_kib();
        let client = Client::builder()
            .shared_store(store.clone())
            .build()
            .unwrap();
        let start = Instant::now();
        let resumed = client.resume_pending().await.unwrap();
        let took = start.elapsed();
        let ok = resumed
            .iter()
            .filter(|r| r.result.as_ref().is_ok_and(|s| s.status() == Some(201)))
            .count();
        assert_eq!(ok, count);
        assert!(store.list().unwrap().is_empty());
        println!(
            "memory {kind:>6}: {count} pending records resumed in {:.2} s; peak RSS {} KiB (before storing {} KiB, after storing {} KiB)",
            took.as_secs_f64(),
            peak_kib(),
            base,
            stored
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::main]
    pub async fn main() {
        let args: Vec<String> = std::env::args().collect();
        if args.get(1).map(String::as_str) == Some("--memory") {
            let count = args[4].parse().unwrap();
            memory(&args[2], &args[3], count).await;
            return;
        }
        let server_bin = args.get(1).expect("usage: bench_native SERVER_BIN [N]");
        let n: usize = args.get(2).map(|n| n.parse().unwrap()).unwrap_or(2000);
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = std::env::temp_dir().join(format!("oncekey-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        println!("oncekey native benchmark (N = {n}), loopback, reference server with an in-memory database");
        println!("(the senders take turns on one server: request by request sequentially, batch by batch concurrently; each figure is a median)");
        if let Some(profile) = std::env::var_os("ONCEKEY_BENCH_PROFILE") {
            // One sender alone, for a profiler: `memory` (the default), `plain` or `sqlite`,
            // then `sequential` (the default) or `concurrent` ("plain-concurrent").
            let profile = profile.to_string_lossy().into_owned();
            let server = Server::start(server_bin);
            let url = format!("{}/api/tickets", server.url);
            let sqlite = Arc::new(SqliteStore::open(dir.join("pending-p.db")).unwrap());
            let [plain, mem, sql] = senders(&sqlite);
            let sender = match profile.split('-').next() {
                Some("plain") => plain,
                Some("sqlite") => sql,
                _ => mem,
            };
            let concurrency = if profile.ends_with("concurrent") {
                CONCURRENCY
            } else {
                1
            };
            let server_pid = children().into_iter().next().unwrap_or(0);
            let (client, server) = (cpu_ms(0), cpu_ms(server_pid));
            let r = run(&sender, &url, "profile", n, concurrency).await;
            let per = |ms: f64| ms * 1000.0 / (n + concurrency.min(WARM)) as f64;
            println!(
                "{profile} (concurrency {concurrency}): {r:.0} req/s; CPU per request: client {:.1} us, server {:.1} us",
                per(cpu_ms(0) - client),
                per(cpu_ms(server_pid) - server),
            );
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        // Sequential: one request of each sender in turn, each timed alone, on one server; the
        // median latency of each. Load that drifts over seconds (this machine is shared) falls
        // on the three alike, and a burst on a few requests cannot move a median.
        {
            let sqlite = Arc::new(SqliteStore::open(dir.join("pending-1.db")).unwrap());
            let [plain, memory, on_sqlite] = senders(&sqlite);
            // The floor of any durable store, written by hand: a file already written and
            // synced once (as the store's log is once it has wrapped), on the same disk.
            let file = std::fs::File::create(dir.join("synced-by-hand")).unwrap();
            std::os::unix::fs::FileExt::write_all_at(&file, &vec![0u8; 50 * 4096], 0).unwrap();
            file.sync_all().unwrap();
            let by_hand = Sender::Synced(reqwest::Client::new(), Arc::new(file));
            let senders = [plain, memory, on_sqlite, by_hand];
            let server = Server::start(server_bin);
            let url = format!("{}/api/tickets", server.url);
            let count = n * ROUNDS / 2;
            let before = sqlite.syncs();
            let [p, m, s, h] = in_turn(&senders, &url, count).await;
            let syncs = (sqlite.syncs() - before) as f64 / (count + WARM) as f64;
            println!("sequential (one request of each in turn, {count} each, median latency):");
            println!(
                "  plain reqwest          {p:>9.0} us   ({:.0} req/s)",
                1e6 / p
            );
            println!(
                "  Client + MemoryStore   {m:>9.0} us   this/plain = {:.2}",
                m / p
            );
            println!(
                "  Client + SqliteStore   {s:>9.0} us   this/plain = {:.2}   syncs per submission = {syncs:.3}",
                s / p
            );
            println!(
                "  by hand: 4 KiB synced, then plain reqwest   {h:>6.0} us   this/plain = {:.2}   (the floor of a record made durable before sending, on this disk and this machine; SqliteStore / this = {:.2})",
                h / p,
                s / h
            );
            // The disk idles between two of SqliteStore's syncs for one turn of the three
            // senders less that store call; a disk that idled longer syncs slower (here about
            // 150 us back to back, 250 us after 0.5 ms, 340 us after 1.5 ms), so the floor is
            // measured after that idle, found in two steps.
            let us = |us: f64| Duration::from_secs_f64(us.max(0.0) / 1e6);
            let turn = p + m + s + h;
            let idle = turn - store_round_trip_us(&sqlite, &url, us(turn - s / 2.0));
            let trip = store_round_trip_us(&sqlite, &url, us(idle));
            let (alone, after_idle) = sync_cost_us(&dir, us(idle));
            println!(
                "  (this disk: one sync {alone:.0} us back to back, {after_idle:.0} us after {idle:.0} us idle, as between two of SqliteStore's syncs in these turns: that sync alone makes this/plain at least {:.2})",
                (p + after_idle) / p
            );
            println!(
                "  (SqliteStore alone after that idle: a new submission's claim and first record, committed and synced, {trip:.0} us; plain + that = {:.2} of plain; the other {:.0} us of its median over plain are the client's own work ({:.0} us with MemoryStore) and what the sync costs the request after it)",
                (p + trip) / p,
                s - p - trip,
                m - p
            );
        }
        // Concurrent: batches of each sender in turn on one server, the median rate of each.
        {
            let sqlite = Arc::new(SqliteStore::open(dir.join("pending-64.db")).unwrap());
            let senders = senders(&sqlite);
            let server = Server::start(server_bin);
            let url = format!("{}/api/tickets", server.url);
            let batch = (n / 4).max(CONCURRENCY);
            let mut rates: [Vec<f64>; 3] = Default::default();
            let (mut syncs, mut submissions) = (0, 0);
            for round in 0..4 * ROUNDS {
                for (i, sender) in senders.iter().enumerate() {
                    let before = sqlite.syncs();
                    let tenant = format!("c{i}-{round}");
                    rates[i].push(run(sender, &url, &tenant, batch, CONCURRENCY).await);
                    if i == 2 {
                        syncs += sqlite.syncs() - before;
                        submissions += batch + WARM;
                    }
                }
            }
            let [p, m, s] = rates.map(median);
            println!(
                "concurrent ({CONCURRENCY}; batches of {batch} of each in turn, median rate):"
            );
            println!("  plain reqwest          {p:>9.0} req/s");
            println!(
                "  Client + MemoryStore   {m:>9.0} req/s   plain/this = {:.2}",
                p / m
            );
            println!(
                "  Client + SqliteStore   {s:>9.0} req/s   plain/this = {:.2}   syncs per submission = {:.3}",
                p / s,
                syncs as f64 / submissions as f64
            );
        }
        let _ = std::fs::remove_dir_all(&dir);

        let exe = std::env::current_exe().unwrap();
        for kind in ["memory", "sqlite"] {
            let out = Command::new(&exe)
                .args(["--memory", server_bin, kind, "10000"])
                .output()
                .unwrap();
            print!("{}", String::from_utf8_lossy(&out.stdout));
            if !out.status.success() {
                eprint!("{}", String::from_utf8_lossy(&out.stderr));
            }
        }
    }
}

#[cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
fn main() {
    app::main()
}

/// A server-side example: nothing to run in the browser build.
#[cfg(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))]
fn main() {}
