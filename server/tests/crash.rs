//! The real binary, killed with SIGKILL in the middle of many keyed requests and restarted on
//! the same database file: no receipt without its ticket, no ticket without its receipt, and
//! retrying every key afterwards makes exactly one ticket per key. Unix only (signals).
#![cfg(unix)]

mod common;

use std::path::Path;

use common::process::Process;
use common::{send_until_definite, Answer};

const ARGS: &[&str] = &["--faults", "--lease", "300ms"];

const KEYS: usize = 200;

fn body(i: usize) -> String {
    format!(r#"{{"subject":"Crash {i}","body":"b","email":"k{i}@example.com"}}"#)
}

fn request(client: &reqwest::Client, url: &str, i: usize) -> reqwest::RequestBuilder {
    let request = client
        .post(format!("{url}/api/tickets"))
        .header("X-Tenant", "crash")
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", format!("crash-key-{i}"))
        .body(body(i));
    if i.is_multiple_of(2) {
        request // claim and work in one trip to the writer
    } else {
        // Claim, hold, then work: spread over time, so the kill finds requests at every stage.
        request.header("X-Fault", format!("delay={}", (i % 20) * 10))
    }
}

/// The invariants, read straight from the file.
fn check_database(db: &Path) -> (i64, i64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let integrity: String = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    assert_eq!(integrity, "ok");
    let count = |sql: &str| -> i64 { conn.query_row(sql, [], |r| r.get(0)).unwrap() };
    assert_eq!(
        count(
            "SELECT count(*) FROM receipts r WHERE r.state = 'done' AND r.status = 201
             AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.id = r.ticket_id)"
        ),
        0,
        "a completed receipt lacks its ticket"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM tickets t WHERE NOT EXISTS (
                 SELECT 1 FROM receipts r WHERE r.tenant = t.tenant AND r.key = t.idempotency_key
                 AND r.state = 'done' AND r.ticket_id = t.id)"
        ),
        0,
        "a ticket lacks its receipt"
    );
    assert_eq!(
        count(
            "SELECT count(*) FROM (SELECT idempotency_key FROM tickets
             GROUP BY tenant, idempotency_key HAVING count(*) > 1)"
        ),
        0,
        "a key made two tickets"
    );
    (
        count("SELECT count(*) FROM tickets"),
        count("SELECT count(*) FROM receipts WHERE state = 'processing'"),
    )
}

#[tokio::test]
async fn a_killed_server_leaves_no_receipt_without_its_ticket_and_retries_make_one_each() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let client = common::client();

    let mut server = Process::start(&db, ARGS);
    // Kill as soon as a quarter of the requests have their answer: the rest are in flight.
    let tasks = common::burst_until_a_quarter_answered(
        (0..KEYS)
            .map(|i| request(&client, &server.url, i))
            .collect(),
    )
    .await;
    server.kill();
    let before = common::answered(tasks).await;
    assert!(before.len() >= KEYS / 4);
    assert!(before.len() < KEYS, "the kill came after every answer");

    let (tickets, processing) = check_database(&db);
    eprintln!(
        "killed with {} of {KEYS} answered, {tickets} tickets committed, {processing} claims held",
        before.len()
    );
    // Every answered ticket was committed before its answer was sent.
    assert!(tickets as usize >= before.values().filter(|a| a.status == 201).count());
    assert!(
        tickets < KEYS as i64,
        "some work was cut off ({processing} claims held)"
    );

    let server = Process::start(&db, ARGS);
    let mut retries = Vec::new();
    for i in 0..KEYS {
        let client = client.clone();
        let url = server.url.clone();
        retries.push(tokio::spawn(async move {
            let request = move || {
                client
                    .post(format!("{url}/api/tickets"))
                    .header("X-Tenant", "crash")
                    .header("Content-Type", "application/json")
                    .header("Idempotency-Key", format!("crash-key-{i}"))
                    .body(body(i))
            };
            send_until_definite(request).await
        }));
    }
    for (i, task) in retries.into_iter().enumerate() {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, 201, "key {i}");
        assert_eq!(answer.json()["subject"], format!("Crash {i}"));
        if let Some(first) = before.get(&i) {
            assert!(answer.replayed);
            assert_eq!(answer.body, first.body, "key {i} replays its first answer");
        }
    }
    let stats: serde_json::Value = client
        .get(format!("{}/api/stats", server.url))
        .header("X-Tenant", "crash")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["tickets"], KEYS as i64, "{stats}");
    assert_eq!(stats["receipts"], KEYS as i64, "{stats}");
    drop(server);
    let (tickets, processing) = check_database(&db);
    assert_eq!((tickets, processing), (KEYS as i64, 0));
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully_and_keeps_committed_tickets() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("term.db");
    let client = common::client();
    let mut server = Process::start(&db, ARGS);
    let first = Answer::read(request(&client, &server.url, 0).send().await.unwrap()).await;
    assert_eq!(first.status, 201);
    let pid = libc::pid_t::try_from(server.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = server.child.wait().unwrap();
    assert!(exit.success(), "a graceful exit, not {exit:?}");
    let server = Process::start(&db, ARGS);
    let again = Answer::read(request(&client, &server.url, 0).send().await.unwrap()).await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
}
