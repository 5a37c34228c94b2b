//! # The conductor
//!
//! Runs the chaos: for each run, the reference server on a fresh database with random faults,
//! and worker processes (this binary's hidden `worker` subcommand) each with a slice of the
//! run's submissions. At seeded points of the run's progress it kills a worker or the server
//! with SIGKILL and starts it again (the server on the same database and port). Once the kills
//! are spent it turns the faults off (the server restarted without `--fault-rate`), lets every
//! worker finish, starts every worker once more to resume its store, and checks the guarantees.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::check::{self, Violation};
use crate::plan::{intents, sha256_hex, Rng, TENANT};
use crate::worker::{Break, Files};

/// The conductor's options.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Runs, each with a fresh server database and fresh worker stores.
    #[arg(long, default_value_t = 1)]
    pub runs: u32,
    /// Intended submissions per run.
    #[arg(long, default_value_t = 500)]
    pub submissions: u32,
    /// Worker processes per run.
    #[arg(long, default_value_t = 8)]
    pub workers: usize,
    /// Seed of every random choice: submissions, faults, kills and pauses (timing still varies).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The fraction of ticket requests given a random fault (lost reply, 503 before the work,
    /// crash before commit, delay): by the server, or by the workers' attempts with
    /// `--faults-from client`.
    #[arg(long, default_value_t = 0.3)]
    pub fault_rate: f64,
    /// Submissions each worker sends at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Server kills (SIGKILL, then a restart on the same database) per run.
    #[arg(long, default_value_t = 2)]
    pub server_kills: u32,
    /// Worker kills (SIGKILL, then a restart that resumes its store) per run; the number of
    /// workers by default.
    #[arg(long)]
    pub worker_kills: Option<u32>,
    /// Percent of submissions with an invalid body, which the server refuses with a 400.
    #[arg(long, default_value_t = 3)]
    pub invalid_percent: u32,
    /// The server's `--lease`: how long a crashed request holds its key.
    #[arg(long, default_value = "1s")]
    pub server_lease: String,
    /// Who picks the faults: `server` (its `--fault-rate`, drawn in the order requests arrive)
    /// or `client` (each attempt asks for one with `X-Fault`, chosen from the seed, the
    /// submission and the attempt's number, so the same seed gives every submission the same
    /// faults whatever the timing).
    #[arg(long, value_enum, default_value_t = FaultsFrom::Server)]
    pub faults_from: FaultsFrom,
    /// Plant one known mistake in the workers; the run must then report violations.
    #[arg(long = "break", value_enum)]
    pub mistake: Option<Break>,
    /// Where the runs' folders go (the system's temporary folder by default).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Keep the runs' folders (databases, results, logs) instead of removing them.
    #[arg(long)]
    pub keep: bool,
    /// Give up on a run that takes longer than this many seconds.
    #[arg(long, default_value_t = 600)]
    pub run_timeout: u64,
    /// A PostgreSQL cluster (postgres://user@host:port/database) instead of SQLite files: each
    /// run makes a fresh database in it, where the server keeps its receipts and tickets and
    /// every worker its PostgresStore (a schema each).
    #[arg(long, value_name = "URL")]
    pub db: Option<String>,
}

/// A run's PostgreSQL database, made fresh in the cluster at `base`, with one schema per worker;
/// dropped when the run's folder is (unless kept).
struct RunDatabase {
    base: String,
    name: String,
    url: String,
}

impl RunDatabase {
    fn create(base: &str, seed: u64, run: u32, workers: usize) -> Result<RunDatabase, String> {
        let name = format!("oncekey_chaos_{}_{seed}_{run}", std::process::id());
        let (head, _) = base
            .rsplit_once('/')
            .ok_or_else(|| format!("--db {base}: expected postgres://user@host:port/database"))?;
        let url = format!("{head}/{name}");
        let pg = |e: postgres::Error| match e.as_db_error() {
            Some(db) => format!("--db {head}/...: {db}"),
            None => format!("--db {head}/...: {e}"),
        };
        let mut admin = postgres::Client::connect(base, postgres::NoTls).map_err(pg)?;
        // One statement each: PostgreSQL runs a multi-statement batch as one transaction.
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
            .map_err(pg)?;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .map_err(pg)?;
        let mut db = postgres::Client::connect(&url, postgres::NoTls).map_err(pg)?;
        for index in 0..workers {
            db.batch_execute(&format!("CREATE SCHEMA worker_{index}"))
                .map_err(pg)?;
        }
        Ok(RunDatabase {
            base: base.to_owned(),
            name,
            url,
        })
    }

    /// Worker `index`'s store: the run's database, with its own schema first on the path.
    fn worker_store(&self, index: usize) -> String {
        format!("{}?options=-c%20search_path%3Dworker_{index}", self.url)
    }

    fn drop_database(&self) {
        if let Ok(mut admin) = postgres::Client::connect(&self.base, postgres::NoTls) {
            let _ = admin.batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ));
        }
    }
}

/// Who picks the random faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultsFrom {
    /// The server, with `--fault-rate` and `--seed`.
    Server,
    /// The workers, with an `X-Fault` header on chosen attempts.
    Client,
}

/// The reference server's binary: `ONCEKEY_SERVER_BIN`, else next to this binary in the target
/// directory (`<target>/<profile>/oncekey-server`).
fn server_bin() -> Result<PathBuf, String> {
    let path = match std::env::var_os("ONCEKEY_SERVER_BIN") {
        Some(p) => PathBuf::from(p),
        None => std::env::current_exe()
            .map_err(|e| format!("the chaos binary cannot find itself: {e}"))?
            .with_file_name(format!("oncekey-server{}", std::env::consts::EXE_SUFFIX)),
    };
    if !path.is_file() {
        return Err(format!(
            "the reference server is not at {}: build it with the same profile (`cargo build --release -p oncekey-server`) or set ONCEKEY_SERVER_BIN",
            path.display()
        ));
    }
    Ok(path)
}

/// The reference server as a child process.
struct Server {
    bin: PathBuf,
    /// A SQLite file, or a postgres:// URL.
    db: String,
    log: PathBuf,
    lease: String,
    child: Option<Child>,
    port: u16,
    /// Counters of the running server, as last polled.
    snapshot: BTreeMap<String, u64>,
    /// Counters of the servers already killed, as last polled before each kill.
    counted: BTreeMap<String, u64>,
    /// Starts after the first.
    restarts: u64,
}

impl Server {
    /// Starts it with `faults` (rate and seed), on `self.port` (any free port the first time),
    /// retrying while a killed predecessor's port is not free yet.
    fn start(&mut self, faults: Option<(f64, u64)>) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let log = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)
                .map_err(|e| format!("{}: {e}", self.log.display()))?;
            let mut cmd = Command::new(&self.bin);
            cmd.arg("--addr")
                .arg(format!("127.0.0.1:{}", self.port))
                .arg("--db")
                .arg(&self.db)
                .args(["--lease", &self.lease])
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(log);
            match faults {
                Some((rate, seed)) if rate > 0.0 => {
                    cmd.args([
                        "--faults",
                        "--fault-rate",
                        &rate.to_string(),
                        "--seed",
                        &seed.to_string(),
                    ]);
                }
                // Faults asked for by the workers (`X-Fault`), none at random.
                Some(_) => {
                    cmd.arg("--faults");
                }
                None => {}
            }
            let mut child = cmd
                .spawn()
                .map_err(|e| format!("{} could not start: {e}", self.bin.display()))?;
            let stdout = child.stdout.take().ok_or("no stdout")?;
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let mut line = String::new();
                let _ = BufReader::new(stdout).read_line(&mut line);
                let _ = tx.send(line);
            });
            let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
            let url = line.trim().strip_prefix("listening on ").map(str::to_owned);
            if let Some(port) = url
                .as_deref()
                .and_then(|u| u.trim_end_matches('/').rsplit(':').next())
                .and_then(|p| p.parse::<u16>().ok())
            {
                self.port = port;
                self.child = Some(child);
                return Ok(());
            }
            let _ = child.kill();
            let _ = child.wait();
            if Instant::now() > deadline {
                return Err(format!(
                    "the server did not start on port {} (see {})",
                    self.port,
                    self.log.display()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/api/tickets", self.port)
    }

    /// Reads the running server's counters (`GET /api/stats`).
    fn poll(&mut self) {
        if let Some(counters) = fetch_counters(self.port) {
            self.snapshot = counters;
        }
    }

    /// Polls its counters one last time and kills it (SIGKILL).
    fn kill(&mut self) {
        self.poll();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for (k, v) in std::mem::take(&mut self.snapshot) {
            *self.counted.entry(k).or_default() += v;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET /api/stats` for the chaos tenant, by hand (a plain HTTP/1.0 request).
fn fetch_counters(port: u16) -> Option<BTreeMap<String, u64>> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET /api/stats HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Tenant: {TENANT}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let (_, body) = text.split_once("\r\n\r\n")?;
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    // The per-process counters, flattened beside the database's counts.
    let counters = value.as_object()?;
    Some(
        counters
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "tickets" | "receipts" | "processing"))
            .filter_map(|(k, v)| Some((k.clone(), v.as_u64()?)))
            .collect(),
    )
}

/// The worker processes of a run.
struct Workers {
    exe: PathBuf,
    dir: PathBuf,
    url: String,
    concurrency: usize,
    mistake: Option<Break>,
    /// The run's PostgreSQL database, when the stores are there.
    database: Option<std::rc::Rc<RunDatabase>>,
    /// Rate and seed of the faults the workers ask for (`--faults-from client`).
    faults: Option<(f64, u64)>,
    children: Vec<Option<Child>>,
    done: Vec<bool>,
    kills: u64,
    crashes: u64,
}

impl Workers {
    fn spawn(&mut self, index: usize) -> Result<(), String> {
        let files = Files::of(&self.dir, index);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&files.log)
            .map_err(|e| format!("{}: {e}", files.log.display()))?;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("worker")
            .arg("--dir")
            .arg(&self.dir)
            .args(["--index", &index.to_string(), "--url", &self.url])
            .args(["--concurrency", &self.concurrency.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some(mistake) = self.mistake {
            cmd.args(["--break", &mistake.to_string()]);
        }
        if let Some(db) = &self.database {
            cmd.args(["--store", &db.worker_store(index)]);
        }
        if let Some((rate, seed)) = self.faults {
            cmd.args([
                "--fault-rate",
                &rate.to_string(),
                "--fault-seed",
                &seed.to_string(),
            ]);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("{} worker could not start: {e}", self.exe.display()))?;
        self.children[index] = Some(child);
        self.done[index] = false;
        Ok(())
    }

    fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.children[index].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Notes the workers that exited: done when they succeeded; restarted otherwise.
    fn reap(&mut self) -> Result<(), String> {
        for index in 0..self.children.len() {
            let Some(child) = self.children[index].as_mut() else {
                continue;
            };
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                self.children[index] = None;
                if status.success() {
                    self.done[index] = true;
                } else {
                    self.crashes += 1;
                    if self.crashes > 50 {
                        return Err(format!(
                            "worker {index} keeps failing ({status}); see {}",
                            Files::of(&self.dir, index).log.display()
                        ));
                    }
                    self.spawn(index)?;
                }
            }
        }
        Ok(())
    }

    fn all_done(&self) -> bool {
        self.done.iter().all(|d| *d)
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for index in 0..self.children.len() {
            self.kill(index);
        }
    }
}

/// Submissions settled so far, from the results files.
fn progress(dir: &Path, workers: usize) -> u64 {
    (0..workers)
        .map(|i| {
            std::fs::read_to_string(Files::of(dir, i).results)
                .map(|t| t.matches("\"ev\":\"settled\"").count() as u64)
                .unwrap_or(0)
        })
        .sum()
}

/// What a run saw, summed over runs for the table.
#[derive(Debug, Default)]
pub struct Totals {
    /// Runs done.
    pub runs: u32,
    /// Intended submissions.
    pub submissions: u64,
    /// Of which the server should refuse.
    pub invalid: u64,
    /// Attempts by status (or `network-error`, `timeout`), from the workers.
    pub attempts: BTreeMap<String, u64>,
    /// Faults the workers asked for, by kind (`--faults-from client`).
    pub asked_faults: BTreeMap<String, u64>,
    /// The servers' counters, polled (a killed server's last moments may be missing).
    pub server: BTreeMap<String, u64>,
    /// Final outcomes taken by the workers.
    pub outcomes: BTreeMap<String, u64>,
    /// Answers that were replays.
    pub replayed: u64,
    /// Answers compared with the stored receipts.
    pub compared: u64,
    /// Tickets in the servers' databases.
    pub tickets: u64,
    /// Deliberate discards (`--break` only).
    pub discards: u64,
    /// Sends an impatient caller stopped waiting for, and made again.
    pub gave_up: u64,
    /// Server starts after the first (kills, and the restart without faults).
    pub server_restarts: u64,
    /// Server kills.
    pub server_kills: u64,
    /// Worker kills and restarts.
    pub worker_kills: u64,
    /// Workers that exited with an error and were started again.
    pub worker_crashes: u64,
    /// Violations, with their run.
    pub violations: Vec<(u32, Violation)>,
    /// The digests of what the seed decided in each run (submissions, kill points and pauses,
    /// the server's fault seeds).
    pub plan: String,
}

/// Runs one run and adds what it saw to `totals`.
pub fn run(args: &RunArgs, run: u32, totals: &mut Totals) -> Result<(), String> {
    let bin = server_bin()?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let base = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let tmp = tempfile::Builder::new()
        .prefix(&format!("oncekey-chaos-{}-r{run}-", args.seed))
        .tempdir_in(&base)
        .map_err(|e| format!("{}: {e}", base.display()))?;
    // Kept when the run fails or finds violations of a correct worker, for a look inside.
    let dir = tmp.keep();
    let workers = args.workers.max(1);

    let plan = intents(args.seed, run, args.submissions, args.invalid_percent);
    let mut slices = vec![String::new(); workers];
    for intent in &plan {
        let line = serde_json::to_string(intent).map_err(|e| e.to_string())?;
        slices[intent.id as usize % workers].push_str(&line);
        slices[intent.id as usize % workers].push('\n');
    }
    for (index, slice) in slices.iter().enumerate() {
        let path = Files::of(&dir, index).plan;
        std::fs::write(&path, slice).map_err(|e| format!("{}: {e}", path.display()))?;
    }

    // The kills, at seeded points of the run's progress.
    let mut rng = Rng::new(args.seed, &format!("kills {run}"));
    let n = u64::from(args.submissions);
    let mut kills: Vec<(u64, Option<usize>, u64)> = Vec::new();
    for _ in 0..args.server_kills {
        let at = ((0.05 + 0.8 * rng.unit()) * n as f64) as u64;
        kills.push((at, None, rng.below(500)));
    }
    for _ in 0..args.worker_kills.unwrap_or(workers as u32) {
        let at = ((0.05 + 0.8 * rng.unit()) * n as f64) as u64;
        let index = rng.below(workers as u64) as usize;
        kills.push((at, Some(index), rng.below(300)));
    }
    kills.sort_by_key(|k| k.0);
    let mut incarnation = 0u64;
    let fault_seed =
        |incarnation: u64| Rng::new(args.seed, &format!("server {run} {incarnation}")).next_u64();
    // What the seed decides, so that two runs can be compared: equal seeds, equal digests.
    let mut decided = String::new();
    for intent in &plan {
        decided.push_str(&intent.body);
    }
    for (at, target, pause) in &kills {
        decided.push_str(&format!("|{at} {target:?} {pause}"));
    }
    for k in 0..=u64::from(args.server_kills) {
        decided.push_str(&format!("|{}", fault_seed(k)));
    }
    totals.plan.push_str(&sha256_hex(decided.as_bytes()));

    let database = match &args.db {
        Some(base) => Some(std::rc::Rc::new(RunDatabase::create(
            base, args.seed, run, workers,
        )?)),
        None => None,
    };
    let mut server = Server {
        bin,
        db: match &database {
            Some(d) => d.url.clone(),
            None => dir.join("server.db").display().to_string(),
        },
        log: dir.join("server.log"),
        lease: args.server_lease.clone(),
        child: None,
        port: 0,
        snapshot: BTreeMap::new(),
        counted: BTreeMap::new(),
        restarts: 0,
    };
    let faults = args.fault_rate > 0.0;
    // The server's random faults, or none when the workers ask for theirs.
    let server_rate = match args.faults_from {
        FaultsFrom::Server => args.fault_rate,
        FaultsFrom::Client => 0.0,
    };
    server.start(faults.then(|| (server_rate, fault_seed(incarnation))))?;
    let mut ws = Workers {
        exe,
        dir: dir.clone(),
        url: server.url(),
        concurrency: args.concurrency,
        mistake: args.mistake,
        database: database.clone(),
        faults: (faults && args.faults_from == FaultsFrom::Client).then(|| {
            (
                args.fault_rate,
                Rng::new(args.seed, &format!("client faults {run}")).next_u64(),
            )
        }),
        children: (0..workers).map(|_| None).collect(),
        done: vec![false; workers],
        kills: 0,
        crashes: 0,
    };
    for index in 0..workers {
        ws.spawn(index)?;
    }

    let started = Instant::now();
    let deadline = started + Duration::from_secs(args.run_timeout);
    let mut next = 0;
    let mut faults_on = faults;
    let mut server_kills = 0;
    let mut tick = 0u64;
    loop {
        std::thread::sleep(Duration::from_millis(50));
        tick += 1;
        if tick.is_multiple_of(5) {
            server.poll();
        }
        ws.reap()?;
        if ws.all_done() {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!(
                "run {run} did not finish within {} s (its folder: {})",
                args.run_timeout,
                dir.display()
            ));
        }
        let settled = progress(&dir, workers);
        while next < kills.len() && kills[next].0 <= settled {
            let (_, target, pause) = kills[next];
            next += 1;
            match target {
                None => {
                    server.kill();
                    server_kills += 1;
                    std::thread::sleep(Duration::from_millis(pause));
                    incarnation += 1;
                    server.start(faults.then(|| (server_rate, fault_seed(incarnation))))?;
                    server.restarts += 1;
                }
                Some(index) if !ws.done[index] => {
                    ws.kill(index);
                    ws.kills += 1;
                    std::thread::sleep(Duration::from_millis(pause));
                    ws.spawn(index)?;
                }
                Some(_) => {}
            }
        }
        if next == kills.len() && faults_on {
            // The kills are spent: faults off for the rest of the run.
            server.kill();
            server.start(None)?;
            server.restarts += 1;
            faults_on = false;
        }
    }
    if faults_on {
        server.kill();
        server.start(None)?;
        server.restarts += 1;
    }
    // The final resume: every worker once more, resuming its store until nothing is pending.
    for index in 0..workers {
        ws.spawn(index)?;
    }
    while !ws.all_done() {
        std::thread::sleep(Duration::from_millis(50));
        ws.reap()?;
        if Instant::now() > deadline {
            return Err(format!(
                "run {run}: the final resume did not finish within {} s (its folder: {})",
                args.run_timeout,
                dir.display()
            ));
        }
    }
    server.kill();

    let stores: Vec<Option<String>> = (0..workers)
        .map(|i| database.as_ref().map(|d| d.worker_store(i)))
        .collect();
    let found = check::check(&server.db, &dir, &stores, &plan)?;
    totals.runs += 1;
    totals.submissions += plan.len() as u64;
    totals.invalid += plan.iter().filter(|i| !i.valid).count() as u64;
    for index in 0..workers {
        let text = std::fs::read_to_string(Files::of(&dir, index).attempts).unwrap_or_default();
        for line in text.lines().filter(|l| !l.is_empty()) {
            match line.strip_prefix("fault:") {
                Some(kind) => *totals.asked_faults.entry(kind.to_owned()).or_default() += 1,
                None => *totals.attempts.entry(line.to_owned()).or_default() += 1,
            }
        }
    }
    for (k, v) in &server.counted {
        *totals.server.entry(k.clone()).or_default() += v;
    }
    for (k, v) in &found.outcomes {
        *totals.outcomes.entry(k.clone()).or_default() += v;
    }
    totals.replayed += found.replayed;
    totals.compared += found.compared;
    totals.tickets += found.tickets;
    totals.discards += found.discards;
    totals.gave_up += found.gave_up;
    totals.server_restarts += server.restarts;
    totals.server_kills += server_kills;
    totals.worker_kills += ws.kills;
    totals.worker_crashes += ws.crashes;
    let keep = args.keep || (!found.violations.is_empty() && args.mistake.is_none());
    eprintln!(
        "run {run}: {} submissions, {} tickets, {} violations, {:.1} s{}",
        plan.len(),
        found.tickets,
        found.violations.len(),
        started.elapsed().as_secs_f64(),
        if keep {
            format!(" (kept in {})", dir.display())
        } else {
            String::new()
        }
    );
    totals
        .violations
        .extend(found.violations.into_iter().map(|v| (run, v)));
    drop(ws);
    drop(server);
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
        if let Some(d) = &database {
            d.drop_database();
        }
    }
    Ok(())
}
