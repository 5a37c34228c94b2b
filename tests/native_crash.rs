//! The crash test: a process sending with the `oncekey` command line is killed with SIGKILL at
//! points spread over its life (before its first attempt, while an attempt is on the wire, while
//! waiting to retry, right after the server committed), against a server that injects random
//! faults. A new process then runs `oncekey resume`, and every intended submission ends with
//! exactly one ticket: the ones whose record was stored at the kill are finished by the resume
//! alone, none ever has two, and the caller's own rerun (derived keys) completes the rest.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]
#![cfg(unix)]

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;

use support::*;

const INTENTS: u64 = 14;

/// Retry settings for every process: short waits, enough attempts to outlast random faults.
const TIMING: &[&str] = &[
    "--timeout",
    "3s",
    "--lease",
    "300ms",
    "--cap",
    "2s",
    "--attempts",
    "30",
];

fn seed() -> u64 {
    std::env::var("ONCEKEY_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

fn next(state: &mut u64) -> u64 {
    // splitmix64
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The fault every fresh attempt of intent `i` meets (a replay meets none): slow work, so kills
/// land while the server works and commits after the client died; a dropped reply, so kills land
/// in the wait after the server committed; or none asked, leaving the server's random faults.
fn fault(i: u64) -> Vec<String> {
    match i % 3 {
        0 => vec!["-H".into(), "X-Fault: delay=300".into()],
        1 => vec!["-H".into(), "X-Fault: drop-reply".into()],
        _ => vec![],
    }
}

/// What `oncekey list` shows of the store at `store`.
fn listed(store: &std::path::Path) -> String {
    let out = Command::new(cli_bin())
        .args(["list", "--store"])
        .arg(store)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until `oncekey list` shows `name` stored.
fn until_listed(store: &std::path::Path, name: &str) {
    let mut waited = 0;
    while !listed(store)
        .lines()
        .any(|l| l.starts_with(&format!("{name}\t")))
    {
        waited += 1;
        assert!(waited < 200, "{name} was never stored");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[derive(Debug, PartialEq)]
enum Fate {
    /// Finished on its own before the kill.
    Exited(i32),
    /// Killed with its record stored: resume must finish it.
    KilledStored,
    /// Killed with no record stored: before storing it (nothing may have been sent), or after a
    /// definite answer removed it.
    KilledUnstored,
}

#[test]
fn killed_at_random_points_then_resumed_every_submission_makes_one_ticket() {
    let seed = seed();
    eprintln!("crash test seed {seed} (set ONCEKEY_CRASH_SEED to repeat)");
    let mut rng = seed;
    // Random faults on 40 % of requests (dropped replies, 503s, crashes before commit with the
    // key held until the server's lease ends, delays).
    let server = Server::start_with(&[
        "--lease",
        "1s",
        "--fault-rate",
        "0.4",
        "--seed",
        &seed.to_string(),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let base = tenant("crash");
    let cli = cli_bin();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut fates = Vec::new();

    for i in 0..INTENTS {
        // Kill points spread from 0 ms (before the process has opened its store) to 500 ms.
        let at = Duration::from_millis(i * 450 / INTENTS + next(&mut rng) % 50);
        let mut child = Command::new(&cli)
            .args(["send", "--store"])
            .arg(&store)
            .args(["--name", &format!("payout-{i}")])
            .args(["--derive-key", &format!("withdrawal-{i}")])
            .args(["-H", &format!("X-Tenant: {base}-{i}")])
            .args(fault(i))
            .args(TIMING)
            // Longer waits between attempts in the killed processes, so kills land in them.
            .args(["--base", "400ms"])
            .args(["--json", &ticket(&format!("payout {i}")).to_string()])
            .args(["POST", &server.tickets_url()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        let fate = match child.try_wait().unwrap() {
            Some(status) => Fate::Exited(status.code().unwrap_or(-1)),
            None => {
                child.kill().unwrap(); // SIGKILL
                child.wait().unwrap();
                if listed(&store)
                    .lines()
                    .any(|l| l.starts_with(&format!("payout-{i}\t")))
                {
                    Fate::KilledStored
                } else {
                    Fate::KilledUnstored
                }
            }
        };
        eprintln!("payout-{i}: killed at {at:?}: {fate:?}");
        fates.push(fate);
    }
    assert!(
        fates.iter().filter(|f| **f == Fate::KilledStored).count() >= INTENTS as usize / 4,
        "most kills must land while a record is stored: {fates:?}"
    );

    // A new process resumes everything stored; leases of the killed processes run out first
    // (exit 7: busy), so it is run until nothing is left.
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 100, "resume did not finish");
        let out = Command::new(&cli)
            .args(["resume", "--store"])
            .arg(&store)
            .args(TIMING)
            .args(["--base", "50ms"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        match out.status.code() {
            Some(0) if err.contains("nothing pending") => break,
            Some(0) | Some(7) => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("resume failed with {other:?}: {err}"),
        }
    }

    for (i, fate) in fates.iter().enumerate() {
        let tenant = format!("{base}-{i}");
        let stats = rt.block_on(server.stats(&tenant));
        let tickets = stats["tickets"].as_i64().unwrap();
        match fate {
            Fate::Exited(0) | Fate::KilledStored => {
                assert_eq!(tickets, 1, "payout-{i} ({fate:?}): {stats}")
            }
            // No record at the kill: never stored (so never sent), or settled and removed just
            // before the kill. Never two.
            Fate::KilledUnstored => assert!(tickets <= 1, "payout-{i}: {stats}"),
            Fate::Exited(code) => panic!("payout-{i} exited with {code} on its own"),
        }
        assert!(stats["receipts"].as_i64().unwrap() <= 1, "{stats}");
    }

    // The caller's own job goes over its intents again (as the payouts example does after a
    // restart): the derived keys make the ones already done replays, and the rest are sent now.
    for i in 0..INTENTS {
        let out = Command::new(&cli)
            .args(["send", "--store"])
            .arg(&store)
            .args(["--name", &format!("payout-{i}")])
            .args(["--derive-key", &format!("withdrawal-{i}")])
            .args(["-H", &format!("X-Tenant: {base}-{i}")])
            .args(fault(i))
            .args(TIMING)
            .args(["--json", &ticket(&format!("payout {i}")).to_string()])
            .args(["POST", &server.tickets_url()])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    for i in 0..INTENTS {
        let stats = rt.block_on(server.stats(&format!("{base}-{i}")));
        assert_eq!(stats["tickets"], 1, "payout-{i}: {stats}");
        assert_eq!(stats["receipts"], 1, "one key per intent: {stats}");
    }
}

/// The removal after a definite answer is not synced on its own (it rides the next synced
/// commit), so a power cut may lose it. The store is put back as the power cut would leave it
/// (a copy of its files taken while the attempt was on the wire, the record synced before its
/// first byte) after the sending process settled and exited; the next process finds the record,
/// resends it with the same key, and the server replays its first answer: one ticket, one key.
#[test]
fn a_lost_removal_is_resent_with_the_same_key_and_replayed_never_duplicated() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let snapshot = dir.path().join("snapshot");
    std::fs::create_dir(&snapshot).unwrap();
    let tenant = tenant("lost-removal");
    let cli = cli_bin();
    let child = Command::new(&cli)
        .args(["send", "--store"])
        .arg(&store)
        .args(["--name", "payout-1", "--derive-key", "withdrawal-1"])
        .args(["-H", &format!("X-Tenant: {tenant}")])
        .args(["-H", "X-Fault: delay=1500"])
        .args(TIMING)
        .args(["--json", &ticket("payout 1").to_string()])
        .args(["POST", &server.tickets_url()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // While the attempt is on the wire: the record is synced, nothing else is being written.
    let list = || listed(&store);
    until_listed(&store, "payout-1");
    for file in ["pending.db", "pending.db-wal"] {
        std::fs::copy(dir.path().join(file), snapshot.join(file)).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(said.contains("succeeded"), "{said}");
    assert_eq!(list(), "", "settled: the record is removed");
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(rt.block_on(server.stats(&tenant))["tickets"], 1);

    // The power cut: the removal, never synced, is lost; the record is back.
    for file in ["pending.db", "pending.db-wal", "pending.db-shm"] {
        let _ = std::fs::remove_file(dir.path().join(file));
    }
    for file in ["pending.db", "pending.db-wal"] {
        std::fs::copy(snapshot.join(file), dir.path().join(file)).unwrap();
    }
    assert!(
        list().starts_with("payout-1\t"),
        "the lost removal left the record"
    );

    let mut rounds = 0;
    let resumed = loop {
        rounds += 1;
        assert!(rounds < 100, "resume did not finish");
        let out = Command::new(&cli)
            .args(["resume", "--store"])
            .arg(&store)
            .args(TIMING)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stderr).into_owned();
        match out.status.code() {
            Some(0) => break said,
            // The dead sender's lease, until it runs out.
            Some(7) => std::thread::sleep(Duration::from_millis(100)),
            other => panic!("resume failed with {other:?}: {said}"),
        }
    };
    assert!(
        resumed.contains("succeeded") && resumed.contains("replayed"),
        "{resumed}"
    );
    assert_eq!(list(), "");
    let stats = rt.block_on(server.stats(&tenant));
    assert_eq!(stats["tickets"], 1, "never duplicated: {stats}");
    assert_eq!(stats["receipts"], 1, "the same key: {stats}");
}

/// `oncekey resume` right after a SIGKILL takes the killed process's submission over at once
/// (its pid is gone: the lease, good for a minute more, is not waited out), and says so; a live
/// holder is reported as one (exit 7), and waited for with `--wait`.
#[test]
fn resume_takes_over_a_killed_holder_at_once_and_waits_for_a_live_one() {
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("pending.db");
    let tenant = tenant("takeover");
    let cli = cli_bin();
    let stored = |name: &str| {
        listed(&store)
            .lines()
            .any(|l| l.starts_with(&format!("{name}\t")))
    };
    let sender = |name: &str| {
        Command::new(&cli)
            .args(["send", "--store"])
            .arg(&store)
            .args(["--name", name, "--derive-key", name])
            .args(["-H", &format!("X-Tenant: {tenant}-{name}")])
            .args(["-H", "X-Fault: delay=1500"])
            .args(["--lease", "60s", "--timeout", "10s"])
            .args(["--json", &ticket(name).to_string()])
            .args(["POST", &server.tickets_url()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let resume = |wait: bool| {
        let mut c = Command::new(&cli);
        c.args(["resume", "--store"]).arg(&store).args(TIMING);
        if wait {
            c.arg("--wait");
        }
        let out = c.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let rt = tokio::runtime::Runtime::new().unwrap();

    // A live holder on this host: busy, and named as such; --wait waits for it to finish.
    let mut live = sender("live");
    until_listed(&store, "live");
    let (code, said) = resume(false);
    assert_eq!(code, Some(7), "{said}");
    assert!(
        said.contains(&format!("a live process on this host (pid {})", live.id())),
        "{said}"
    );
    assert!(said.contains("--wait"), "{said}");
    let (code, said) = resume(true);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("waiting"), "{said}");
    assert_eq!(live.wait().unwrap().code(), Some(0));
    assert!(!stored("live"));
    let stats = rt.block_on(server.stats(&format!("{tenant}-live")));
    assert_eq!(stats["tickets"], 1, "{stats}");

    // A holder killed with its attempt on the wire, its lease good for a minute: taken over at
    // once, resent with the same key, one ticket.
    let mut dead = sender("dead");
    until_listed(&store, "dead");
    let pid = dead.id();
    dead.kill().unwrap(); // SIGKILL
    dead.wait().unwrap();
    let (code, said) = resume(false);
    assert_eq!(code, Some(0), "taken over, not busy: {said}");
    assert!(
        said.contains("taken over") && said.contains(&pid.to_string()),
        "{said}"
    );
    assert!(said.contains("succeeded"), "{said}");
    assert!(!stored("dead"));
    let stats = rt.block_on(server.stats(&format!("{tenant}-dead")));
    assert_eq!(stats["tickets"], 1, "{stats}");
    assert_eq!(stats["receipts"], 1, "the same key: {stats}");
}
