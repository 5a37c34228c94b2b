//! The reference server on PostgreSQL: the contract on one server, and two server processes on
//! one database never making two tickets for one key, even when one of them is killed.
//!
//! Each test makes a database of its own in the cluster named by `ONCEKEY_PG_URL`
//! (`bash scripts/with-pg.sh cargo test -p oncekey-server` starts a throwaway one); without
//! it, each says by name that it is skipped.

mod common;

use std::time::Duration;

use common::pg::PgDb;
use common::process::{refused, Process};
use common::{send, send_until_definite, Answer, Desk, TICKET};
use oncekey_server::Config;
use serde_json::Value;

/// Every server process: faults on, a short lease, a few connections each.
const ARGS: &[&str] = &["--faults", "--lease", "300ms", "--db-connections", "4"];

/// A fresh database for the test, or a return (the test says it is skipped).
macro_rules! database {
    ($test:literal) => {
        match common::pg::fresh(concat!("pg::", $test)) {
            Some(db) => db,
            None => return,
        }
    };
}

fn post(
    client: &reqwest::Client,
    server: &str,
    tenant: &str,
    key: &str,
    body: &str,
    fault: Option<&str>,
) -> reqwest::RequestBuilder {
    let mut request = client
        .post(format!("{server}/api/tickets"))
        .header("X-Tenant", tenant)
        .header("Content-Type", "application/json")
        .header("Idempotency-Key", key)
        .body(body.to_owned());
    if let Some(fault) = fault {
        request = request.header("X-Fault", fault);
    }
    request
}

async fn get_json(client: &reqwest::Client, server: &str, path: &str, tenant: &str) -> Value {
    common::get_json(client, &format!("{server}{path}"), tenant).await
}

/// The tenant's tickets, counted in the database.
fn tickets_in(db: &PgDb, tenant: &str) -> i64 {
    let tenant = tenant.to_owned();
    db.sql(move |c| {
        c.query_one("SELECT count(*) FROM tickets WHERE tenant = $1", &[&tenant])
            .unwrap()
            .get(0)
    })
}

/// The tenant's receipts in the database: (done, processing).
fn receipts_in(db: &PgDb, tenant: &str) -> (i64, i64) {
    let tenant = tenant.to_owned();
    db.sql(move |c| {
        let row = c
            .query_one(
                "SELECT count(*) FILTER (WHERE state = 'done'),
                        count(*) FILTER (WHERE state = 'processing')
                 FROM receipts WHERE tenant = $1",
                &[&tenant],
            )
            .unwrap();
        (row.get(0), row.get(1))
    })
}

/// A hundred requests with one key, at once, spread over two server processes on one database.
async fn stampede(db: &PgDb, fault: Option<&'static str>) {
    let servers = [Process::start(&db.url, ARGS), Process::start(&db.url, ARGS)];
    let client = common::client();
    let tenant = "stampede";
    let key = "one-key-two-servers";
    let mut tasks = Vec::new();
    for i in 0..100 {
        let request = post(&client, &servers[i % 2].url, tenant, key, TICKET, fault);
        tasks.push(tokio::spawn(async move { send(request).await }));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let first: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed)
        .collect();
    assert_eq!(first.len(), 1, "one request did the work");
    let ticket = first[0].json();
    let mut replays = 0;
    let mut in_progress = 0;
    for a in &answers {
        match a.status {
            201 => {
                assert_eq!(a.body, first[0].body, "every 2xx carries the one ticket");
                replays += usize::from(a.replayed);
            }
            409 => {
                assert_eq!(a.retry_after.as_deref(), Some("1"));
                in_progress += 1;
            }
            other => panic!("unexpected {other}: {}", String::from_utf8_lossy(&a.body)),
        }
    }
    assert_eq!(1 + replays + in_progress, answers.len());

    assert_eq!(tickets_in(db, tenant), 1, "one ticket in the database");
    assert_eq!(receipts_in(db, tenant), (1, 0));
    let (mut created, mut replayed, mut busy) = (0, 0, 0);
    for server in &servers {
        let listed = get_json(&client, &server.url, "/api/tickets", tenant).await;
        assert_eq!(listed.as_array().unwrap(), &vec![ticket.clone()]);
        let stats = get_json(&client, &server.url, "/api/stats", tenant).await;
        assert_eq!(
            (&stats["tickets"], &stats["receipts"]),
            (&1.into(), &1.into())
        );
        created += stats["created"].as_i64().unwrap();
        replayed += stats["replays"].as_i64().unwrap();
        busy += stats["in_progress"].as_i64().unwrap();
    }
    assert_eq!(
        (created, replayed, busy),
        (1, replays as i64, in_progress as i64)
    );
    println!(
        "two servers, 100 requests with one key{}: 1 ticket, 1 created, {replays} replayed, \
         {in_progress} in progress (409)",
        fault.map(|f| format!(" ({f})")).unwrap_or_default()
    );
}

#[tokio::test]
async fn two_servers_a_hundred_concurrent_requests_with_one_key_make_one_ticket() {
    let db = database!("two_servers_a_hundred_concurrent_requests_with_one_key_make_one_ticket");
    stampede(&db, None).await;
}

#[tokio::test]
async fn two_servers_a_hundred_concurrent_slow_requests_with_one_key_make_one_ticket() {
    let db =
        database!("two_servers_a_hundred_concurrent_slow_requests_with_one_key_make_one_ticket");
    stampede(&db, Some("delay=300")).await;
}

#[tokio::test]
async fn deliveries_alternating_between_two_servers_make_one_ticket_and_another_body_is_a_422() {
    let db = database!(
        "deliveries_alternating_between_two_servers_make_one_ticket_and_another_body_is_a_422"
    );
    let servers = [Process::start(&db.url, ARGS), Process::start(&db.url, ARGS)];
    let client = common::client();
    let (tenant, key) = ("deliveries", "message-77");
    let mut answers = Vec::new();
    for i in 0..3 {
        let server = &servers[i % 2].url;
        answers.push(send(post(&client, server, tenant, key, TICKET, None)).await);
    }
    assert_eq!(answers[0].status, 201);
    assert!(!answers[0].replayed);
    for again in &answers[1..] {
        assert_eq!(again.status, 201);
        assert!(again.replayed);
        assert_eq!(again.body, answers[0].body, "a replay is byte for byte");
    }
    let other = TICKET.replace("Printer on fire", "Printer fixed");
    let conflict = send(post(&client, &servers[1].url, tenant, key, &other, None)).await;
    assert_eq!(conflict.status, 422);
    assert_eq!(conflict.content_type, "application/problem+json");
    assert_eq!(conflict.invalid_names(), ["Idempotency-Key"]);
    assert_eq!(tickets_in(&db, tenant), 1);
    assert_eq!(receipts_in(&db, tenant), (1, 0));
    println!("3 deliveries over two servers: 1 ticket, 2 replays; another body: 422");
}

// ---------------------------------------------------------------------------------------------
// The contract on one server (in this process), on PostgreSQL

async fn desk(db: &PgDb, test: &str) -> Desk {
    Desk::with(
        test,
        Config {
            db: db.url.clone(),
            db_connections: 4,
            faults: true,
            lease: Duration::from_millis(300),
            ..Config::default()
        },
    )
    .await
}

#[tokio::test]
async fn a_new_key_is_a_201_and_its_repeat_the_same_bytes_replayed() {
    let db = database!("a_new_key_is_a_201_and_its_repeat_the_same_bytes_replayed");
    let desk = desk(&db, "pg-replay").await;
    let first = send(desk.post(Some("k-1"), TICKET)).await;
    assert_eq!(first.status, 201);
    assert!(!first.replayed);
    assert_eq!(first.content_type, "application/json");
    assert_eq!(first.json()["subject"], "Printer on fire");
    let again = send(desk.post(Some("k-1"), TICKET)).await;
    assert_eq!(again.status, 201);
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    assert_eq!(again.content_type, first.content_type);
    assert_eq!(desk.tickets().await.len(), 1);
    assert_eq!(tickets_in(&db, &desk.tenant), 1);
}

#[tokio::test]
async fn a_400_is_stored_and_replayed() {
    let db = database!("a_400_is_stored_and_replayed");
    let desk = desk(&db, "pg-refusal").await;
    let bad = r#"{"subject":"","body":"b","email":"not-an-address"}"#;
    let first = send(desk.post(Some("k-bad"), bad)).await;
    assert_eq!(first.status, 400);
    assert_eq!(first.invalid_names(), ["subject", "email"]);
    let again = send(desk.post(Some("k-bad"), bad)).await;
    assert_eq!(again.status, 400);
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    assert_eq!(tickets_in(&db, &desk.tenant), 0);
    assert_eq!(receipts_in(&db, &desk.tenant), (1, 0));
    assert_eq!(desk.stat("invalid").await, 1);
}

#[tokio::test]
async fn fail_before_is_a_503_that_stores_nothing() {
    let db = database!("fail_before_is_a_503_that_stores_nothing");
    let desk = desk(&db, "pg-fail-before").await;
    let failed = send(
        desk.post(Some("k-fail"), TICKET)
            .header("X-Fault", "fail-before"),
    )
    .await;
    assert_eq!(failed.status, 503);
    assert_eq!(failed.retry_after.as_deref(), Some("1"));
    assert_eq!(receipts_in(&db, &desk.tenant), (0, 0));
    assert_eq!(tickets_in(&db, &desk.tenant), 0);
    let retry = send(desk.post(Some("k-fail"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed);
}

#[tokio::test]
async fn a_crash_before_commit_leaves_nothing_and_a_retry_takes_the_lease_over() {
    let db = database!("a_crash_before_commit_leaves_nothing_and_a_retry_takes_the_lease_over");
    let desk = desk(&db, "pg-crash").await;
    let crashed = desk
        .post(Some("k-crash"), TICKET)
        .header("X-Fault", "crash-before-commit")
        .send()
        .await;
    assert!(crashed.is_err(), "the connection closes with no answer");
    // No ticket and no answer stored; the claim is held until its lease ends.
    assert_eq!(tickets_in(&db, &desk.tenant), 0);
    assert_eq!(receipts_in(&db, &desk.tenant), (0, 1));
    let retry = send_until_definite(|| desk.post(Some("k-crash"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed);
    assert_eq!(tickets_in(&db, &desk.tenant), 1);
    assert_eq!(receipts_in(&db, &desk.tenant), (1, 0));
    assert_eq!(desk.stat("takeovers").await, 1);
}

/// A server holding a key (`delay=MS`) is killed; after the lease, the other server takes the
/// key over and makes the one ticket.
#[tokio::test]
async fn a_lease_held_by_a_killed_server_is_taken_over_by_the_other() {
    let db = database!("a_lease_held_by_a_killed_server_is_taken_over_by_the_other");
    let mut a = Process::start(&db.url, ARGS);
    let b = Process::start(&db.url, ARGS);
    let client = common::client();
    let (tenant, key) = ("takeover", "held-key");
    // A claims and holds the key for two seconds (its lease: 300 ms more).
    let held = tokio::spawn(post(&client, &a.url, tenant, key, TICKET, Some("delay=2000")).send());
    for _ in 0..500 {
        if receipts_in(&db, tenant).1 == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(receipts_in(&db, tenant), (0, 1), "A holds the claim");
    a.kill();
    assert!(held.await.unwrap().is_err(), "A died without answering");
    let early = send(post(&client, &b.url, tenant, key, TICKET, None)).await;
    assert_eq!(early.status, 409, "A's lease has not ended yet");
    let answer = send_until_definite(|| post(&client, &b.url, tenant, key, TICKET, None)).await;
    assert_eq!(answer.status, 201);
    assert!(!answer.replayed);
    let stats = get_json(&client, &b.url, "/api/stats", tenant).await;
    assert_eq!(stats["takeovers"], 1, "{stats}");
    assert_eq!(tickets_in(&db, tenant), 1);
    assert_eq!(receipts_in(&db, tenant), (1, 0));
}

// ---------------------------------------------------------------------------------------------
// A server killed in a burst

const KEYS: usize = 200;

fn burst_body(i: usize) -> String {
    format!(r#"{{"subject":"Crash {i}","body":"b","email":"k{i}@example.com"}}"#)
}

fn burst_request(client: &reqwest::Client, server: &str, i: usize) -> reqwest::RequestBuilder {
    let key = format!("burst-key-{i}");
    // Half claim, hold, then work: spread over time, so the kill finds requests at every stage.
    let delay = format!("delay={}", (i % 20) * 50);
    let fault = (i % 4 >= 2).then_some(delay.as_str());
    post(client, server, "burst", &key, &burst_body(i), fault)
}

/// The invariants, read straight from the database: (tickets, claims held).
fn check_database(db: &PgDb) -> (i64, i64) {
    assert_eq!(
        db.count(
            "SELECT count(*) FROM receipts r WHERE r.state = 'done' AND r.status = 201
             AND NOT EXISTS (SELECT 1 FROM tickets t WHERE t.id = r.ticket_id)"
        ),
        0,
        "a completed receipt lacks its ticket"
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM tickets t WHERE NOT EXISTS (
                 SELECT 1 FROM receipts r WHERE r.tenant = t.tenant AND r.key = t.idempotency_key
                 AND r.state = 'done' AND r.ticket_id = t.id)"
        ),
        0,
        "a ticket lacks its receipt"
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM (SELECT idempotency_key FROM tickets
             GROUP BY tenant, idempotency_key HAVING count(*) > 1) AS twice"
        ),
        0,
        "a key made two tickets"
    );
    (
        db.count("SELECT count(*) FROM tickets"),
        db.count("SELECT count(*) FROM receipts WHERE state = 'processing'"),
    )
}

#[tokio::test]
async fn a_server_killed_in_a_burst_leaves_no_receipt_without_its_ticket_and_retries_make_one_each()
{
    let db = database!(
        "a_server_killed_in_a_burst_leaves_no_receipt_without_its_ticket_and_retries_make_one_each"
    );
    let mut doomed = Process::start(&db.url, ARGS);
    let survivor = Process::start(&db.url, ARGS);
    let client = common::client();
    // Kill one server as soon as a quarter of the requests have their answer.
    let tasks = common::burst_until_a_quarter_answered(
        (0..KEYS)
            .map(|i| {
                let server = if i % 2 == 0 {
                    &doomed.url
                } else {
                    &survivor.url
                };
                burst_request(&client, server, i)
            })
            .collect(),
    )
    .await;
    doomed.kill();
    let before = common::answered(tasks).await;
    for (i, answer) in &before {
        assert_eq!(answer.status, 201, "key {i}");
    }
    let cut_off = (0..KEYS).filter(|i| !before.contains_key(i)).count();
    assert!(cut_off > 0, "the kill came after every answer");
    let (tickets, processing) = check_database(&db);
    println!(
        "one of two servers killed with {} of {KEYS} answered: {tickets} tickets committed, \
         {processing} claims held",
        before.len()
    );
    assert!(tickets as usize >= before.len());

    let mut retries = Vec::new();
    for i in 0..KEYS {
        let client = client.clone();
        let url = survivor.url.clone();
        retries.push(tokio::spawn(async move {
            send_until_definite(move || burst_request(&client, &url, i)).await
        }));
    }
    for (i, task) in retries.into_iter().enumerate() {
        let answer = task.await.unwrap();
        assert_eq!(answer.status, 201, "key {i}");
        assert_eq!(answer.json()["subject"], format!("Crash {i}"));
        if let Some(first) = before.get(&i) {
            assert!(answer.replayed, "key {i}");
            assert_eq!(answer.body, first.body, "key {i} replays its first answer");
        }
    }
    let stats = get_json(&client, &survivor.url, "/api/stats", "burst").await;
    assert_eq!(stats["tickets"], KEYS as i64, "{stats}");
    assert_eq!(stats["receipts"], KEYS as i64, "{stats}");
    assert_eq!(check_database(&db), (KEYS as i64, 0));
    println!(
        "after retries on the survivor: {KEYS} tickets for {KEYS} keys, {} takeovers",
        stats["takeovers"]
    );
}

// ---------------------------------------------------------------------------------------------
// The schema, and opening

/// `url` with a password (the test cluster trusts loopback, so it is never checked).
fn with_password(url: &str, password: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let scheme = &url[..url.len() - rest.len()];
    match rest.split_once('@') {
        Some((user, host)) => format!("{scheme}{user}:{password}@{host}"),
        None => format!("{scheme}postgres:{password}@{rest}"),
    }
}

#[tokio::test]
async fn a_database_with_a_newer_schema_is_refused_with_a_clear_error() {
    let db = database!("a_database_with_a_newer_schema_is_refused_with_a_clear_error");
    drop(Process::start(&db.url, ARGS)); // creates the schema
    assert_eq!(
        db.count("SELECT max(version)::bigint FROM oncekey_server_schema"),
        2
    );
    db.sql(|c| {
        c.batch_execute("UPDATE oncekey_server_schema SET version = 3")
            .unwrap()
    });
    let url = with_password(&db.url, "hunter2");
    let (code, stderr) = refused(&url, ARGS);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("schema version 3"), "{stderr}");
    assert!(stderr.contains("newer oncekey-server"), "{stderr}");
    assert!(stderr.contains(db.name()), "names the database: {stderr}");
    assert!(stderr.contains(":***@"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "shows the password: {stderr}");
    assert!(!stderr.contains("panic"), "{stderr}");
}

#[cfg(unix)]
#[tokio::test]
async fn reopening_a_database_keeps_its_tickets_and_receipts() {
    let db = database!("reopening_a_database_keeps_its_tickets_and_receipts");
    let client = common::client();
    let mut first_server = Process::start(&db.url, ARGS);
    let first = send(post(
        &client,
        &first_server.url,
        "reopen",
        "k",
        TICKET,
        None,
    ))
    .await;
    assert_eq!(first.status, 201);
    let pid = libc::pid_t::try_from(first_server.child.id()).unwrap();
    // SAFETY: kill(2) on our own child's pid, which has not been waited for yet.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let exit = first_server.child.wait().unwrap();
    assert!(exit.success(), "a graceful exit, not {exit:?}");
    let again = Process::start(&db.url, ARGS);
    let listed = get_json(&client, &again.url, "/api/tickets", "reopen").await;
    assert_eq!(listed.as_array().unwrap(), &vec![first.json()]);
    let replay = send(post(&client, &again.url, "reopen", "k", TICKET, None)).await;
    assert!(replay.replayed);
    assert_eq!(replay.body, first.body);
    assert_eq!(db.count("SELECT count(*) FROM oncekey_server_schema"), 1);
}

/// Needs no PostgreSQL: nothing listens on port 1.
#[test]
fn an_unreachable_database_is_a_clear_error_without_the_password() {
    let (code, stderr) = refused("postgres://helpdesk:hunter2@127.0.0.1:1/tickets", ARGS);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot open the database postgres://helpdesk:***@127.0.0.1:1/tickets"),
        "{stderr}"
    );
    assert!(stderr.contains("error connecting to server"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!stderr.contains("panic"), "{stderr}");
    let (code, stderr) = refused("postgresql://helpdesk:hunter2@host:port/tickets", ARGS);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("invalid connection string"), "{stderr}");
    assert!(!stderr.contains("hunter2"), "{stderr}");
}
