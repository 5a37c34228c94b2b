//! The fleet: clients sharing one PostgreSQL table of pending submissions, against the real
//! reference server. Each test makes its own database in the cluster `make test` starts
//! (scripts/with-pg.sh); without one, each test says it was skipped.
#![cfg(all(
    feature = "postgres",
    not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none")))
))]

mod support;

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use oncekey::core::Record;
use oncekey::{Client, Lease, Outcome, PostgresStore, Store, Timestamp};
use support::*;

fn client(url: &str) -> Client {
    Client::builder()
        .store(PostgresStore::connect(url).expect("the store"))
        .retry(fast())
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// Enqueues `records` in one transaction of the database at `url`, as an application would.
fn enqueue_all(url: &str, records: &[Record]) {
    pg_blocking(|| {
        let mut db = postgres::Client::connect(url, postgres::NoTls).unwrap();
        let mut tx = db.transaction().unwrap();
        for r in records {
            PostgresStore::enqueue(&mut tx, r).unwrap();
        }
        tx.commit().unwrap();
    })
}

fn rows(url: &str, sql: &str) -> i64 {
    pg_blocking(|| {
        let mut db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        db.query_one(sql, &[]).expect(sql).get(0)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_outbox_commits_or_rolls_back_with_the_callers_transaction() {
    let Some(url) = pg_database("the_outbox_commits_or_rolls_back_with_the_callers_transaction")
    else {
        return;
    };
    let server = Server::start();
    let tenant = tenant("outbox");
    let client = client(&url);
    let record = |name: &str, subject: &str| {
        ticket_record(&client, &server.tickets_url(), &tenant, name, subject)
    };
    let (r1, r2, r2_again) = (
        record("payout-1", "one"),
        record("payout-2", "two"),
        record("payout-2", "two again"),
    );
    let r2_key = r2.key.clone();
    let app_url = url.clone();
    let enqueue_error = tokio::task::spawn_blocking(move || {
        let mut db = postgres::Client::connect(&app_url, postgres::NoTls).unwrap();
        db.batch_execute("CREATE TABLE withdrawals (id INT PRIMARY KEY, amount INT NOT NULL)")
            .unwrap();
        // Rolled back: neither the withdrawal nor its payout exists.
        let mut tx = db.transaction().unwrap();
        tx.execute("INSERT INTO withdrawals VALUES (1, 100)", &[])
            .unwrap();
        PostgresStore::enqueue(&mut tx, &r1).unwrap();
        tx.rollback().unwrap();
        // Committed: both.
        let mut tx = db.transaction().unwrap();
        tx.execute("INSERT INTO withdrawals VALUES (2, 200)", &[])
            .unwrap();
        PostgresStore::enqueue(&mut tx, &r2).unwrap();
        tx.commit().unwrap();
        // The same name again is refused, and takes its transaction down with it.
        let mut tx = db.transaction().unwrap();
        tx.execute("INSERT INTO withdrawals VALUES (3, 300)", &[])
            .unwrap();
        let err = PostgresStore::enqueue(&mut tx, &r2_again).unwrap_err();
        // PostgreSQL answers the COMMIT of a failed transaction with a ROLLBACK: withdrawal 3
        // is gone (counted below).
        let _ = tx.commit();
        err
    })
    .await
    .unwrap();
    assert!(enqueue_error.is_pending_mismatch(), "{enqueue_error}");
    assert!(
        enqueue_error.to_string().contains("payout-2")
            && enqueue_error.to_string().contains("already pending"),
        "{enqueue_error}"
    );
    assert_eq!(rows(&url, "SELECT count(*) FROM withdrawals"), 1);
    assert_eq!(
        server.tickets(&tenant).await,
        0,
        "nothing is sent at enqueue"
    );

    // A worker sends the committed one, once, with the key enqueued.
    let done = client.resume_due(10).await.unwrap();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].name, "payout-2");
    let settled = done[0].result.as_ref().unwrap();
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(settled.key(), &r2_key);
    assert_eq!(settled.attempts(), 1);
    assert!(client.resume_due(10).await.unwrap().is_empty());
    assert_eq!(server.subjects(&tenant).await, ["two"]);
    assert_eq!(rows(&url, "SELECT count(*) FROM oncekey_pending"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn due_submissions_are_split_between_claimers_through_the_index() {
    let Some(url) = pg_database("due_submissions_are_split_between_claimers_through_the_index")
    else {
        return;
    };
    let client = client(&url);
    let records: Vec<_> = (0..5000)
        .map(|i| {
            client
                .submission(&format!("s-{i}"))
                .post("http://127.0.0.1:9/api/tickets")
                .json(&ticket(&format!("t{i}")))
                .unwrap()
                .record()
                .unwrap()
        })
        .collect();
    enqueue_all(&url, &records);
    let plan = pg_blocking(|| {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.batch_execute("ANALYZE oncekey_pending").unwrap();
        PostgresStore::connect(&url)
            .unwrap()
            .explain_claim_due()
            .unwrap()
    });
    let plan = plan.join("\n");
    assert!(
        plan.contains("Index Scan using oncekey_pending_due"),
        "the claim walks the due index:\n{plan}"
    );

    // Four claimers at once, each on its own connections, 100 at a time until none is left.
    let mut claimers = Vec::new();
    for c in 0..4 {
        let u = url.clone();
        claimers.push(std::thread::spawn(move || {
            let store = PostgresStore::connect(&u).unwrap();
            let lease = Lease {
                owner: format!("claimer-{c}"),
                until: Timestamp::from_millis(u64::MAX / 4),
            };
            let mut mine = Vec::new();
            loop {
                let due = store
                    .claim_due(&lease, Timestamp::from_millis(1), 100)
                    .unwrap();
                if due.is_empty() {
                    return mine;
                }
                mine.extend(due.into_iter().map(|d| d.name));
            }
        }));
    }
    let taken: Vec<Vec<String>> = claimers.into_iter().map(|t| t.join().unwrap()).collect();
    let all: Vec<&String> = taken.iter().flatten().collect();
    let distinct: HashSet<&String> = all.iter().copied().collect();
    assert_eq!(all.len(), 5000, "every due submission is taken");
    assert_eq!(distinct.len(), 5000, "and none by two claimers");
    assert!(
        taken.iter().filter(|t| !t.is_empty()).count() >= 2,
        "the claimers shared the work: {:?}",
        taken.iter().map(Vec::len).collect::<Vec<_>>()
    );
}

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn worker(store: &str) -> Worker {
    Worker(
        Command::new(cli_bin())
            .args(["work", "--store", store, "--batch", "8"])
            .args(["--lease", "2s", "--timeout", "3s", "--base", "20ms"])
            .args(["--poll", "100ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("oncekey work"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleet_of_three_with_one_killed_makes_one_ticket_per_submission() {
    let Some(url) = pg_database("a_fleet_of_three_with_one_killed_makes_one_ticket_per_submission")
    else {
        return;
    };
    // As many as one ticket list shows (the server gives at most 500), so that every subject
    // is read back.
    const N: usize = 500;
    let server = Server::start();
    let tenant = tenant("fleet");
    let client = client(&url);
    let records: Vec<_> = (0..N)
        .map(|i| {
            client
                .submission(&format!("payout-{i}"))
                .post(&server.tickets_url())
                .header("X-Tenant", &tenant)
                .json(&ticket(&format!("payout {i:04}")))
                .unwrap()
                .record()
                .unwrap()
        })
        .collect();
    let keys: HashSet<String> = records.iter().map(|r| r.key.to_string()).collect();
    enqueue_all(&url, &records);

    let mut fleet: Vec<Worker> = (0..3).map(|_| worker(&url)).collect();
    // Kill one instance once the fleet is well under way, holding leases.
    let start = Instant::now();
    let at_kill = loop {
        let made = server.tickets(&tenant).await;
        if made >= (N / 4) as i64 {
            break made;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the fleet is stuck at {made}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let held_at_kill = rows(
        &url,
        "SELECT count(*) FROM oncekey_pending WHERE lease_owner IS NOT NULL",
    );
    fleet[0].0.kill().expect("SIGKILL");
    let _ = fleet[0].0.wait();
    assert!(
        at_kill < N as i64,
        "the kill landed mid-run ({at_kill} tickets)"
    );

    for (i, w) in fleet.iter_mut().enumerate().skip(1) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            if let Some(status) = w.0.try_wait().unwrap() {
                assert!(status.success(), "worker {i} ended with {status}");
                break;
            }
            assert!(Instant::now() < deadline, "worker {i} did not finish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Every submission: exactly one ticket, none left pending, and no two instances ever
    // sent one submission at once (the server would have answered one of them 409).
    let subjects = server.subjects(&tenant).await;
    assert_eq!(subjects.len(), N, "one ticket per submission");
    let distinct: HashSet<&String> = subjects.iter().collect();
    assert_eq!(distinct.len(), N, "no submission made two tickets");
    assert_eq!(rows(&url, "SELECT count(*) FROM oncekey_pending"), 0);
    let stats = server.stats(&tenant).await;
    assert_eq!(
        stats["in_progress"], 0,
        "no concurrent sends of one key: {stats}"
    );
    assert_eq!(stats["tickets"], N as i64, "{stats}");
    assert_eq!(keys.len(), N);
    eprintln!(
        "fleet: killed one of 3 at {at_kill}/{N} tickets holding {held_at_kill} leases; replays {}",
        stats["replays"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unsure_submission_is_set_aside_from_polls_but_try_again_takes_it_at_once() {
    let Some(url) =
        pg_database("an_unsure_submission_is_set_aside_from_polls_but_try_again_takes_it_at_once")
    else {
        return;
    };
    // Nothing listens on port 9: every attempt fails, and the round ends unsure.
    let client = Client::builder()
        .store(PostgresStore::connect(&url).expect("the store"))
        .retry(oncekey::RetryPolicy {
            attempts: 2,
            base: Duration::from_millis(10),
            cap: Duration::from_millis(20),
            budget: Duration::from_secs(30),
            ..oncekey::RetryPolicy::default()
        })
        .timeout(Duration::from_millis(300))
        .lease(Duration::from_millis(300))
        .build()
        .expect("client");
    let record = client
        .submission("u-1")
        .post("http://127.0.0.1:9/api/tickets")
        .json(&ticket("unsure"))
        .unwrap()
        .record()
        .unwrap();
    enqueue_all(&url, std::slice::from_ref(&record));

    let first = client.resume_due(10).await.unwrap();
    assert_eq!(first.len(), 1);
    let settled = first[0].result.as_ref().unwrap();
    assert_eq!(settled.outcome(), Outcome::Unsure);
    assert_eq!(settled.attempts(), 2);
    // Still stored, free, but not taken by the next polls.
    assert!(client.resume_due(10).await.unwrap().is_empty());
    assert!(client.resume_due(10).await.unwrap().is_empty());
    let pending = client.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].lease, None);
    // Try again takes it at once: a new round with the same key.
    let again = client.try_again("u-1").await.unwrap();
    assert_eq!(again.outcome(), Outcome::Unsure);
    assert_eq!(again.attempts(), 4);
    assert_eq!(again.key(), settled.key());
    // Once set aside long enough (timeout + lease = 600 ms), a poll takes it up again; its
    // round is spent, so it is reported unsure without being sent.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let later = client.resume_due(10).await.unwrap();
    assert_eq!(later.len(), 1);
    let later = later[0].result.as_ref().unwrap();
    assert_eq!(later.outcome(), Outcome::Unsure);
    assert_eq!(later.attempts(), 4, "nothing sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_application_role_that_may_not_create_uses_a_database_already_migrated() {
    // The schema is created by its owner (a deploy's migration step); the application connects
    // with a role that may read and write the tables but not create in the schema, as
    // PostgreSQL 15's public schema has it. Every connect ran CREATE TABLE IF NOT EXISTS,
    // which PostgreSQL refuses such a role even when the table exists.
    let Some(url) = pg_database("an_application_role_that_may_not_create") else {
        return;
    };
    let role = format!("oncekey_app_{}", std::process::id());
    pg_blocking(|| {
        drop(PostgresStore::connect(&url).expect("migrated by the owner"));
        let mut db = postgres::Client::connect(&url, postgres::NoTls).expect("connect");
        db.batch_execute(&format!(
            "CREATE ROLE {role} LOGIN;
             REVOKE CREATE ON SCHEMA public FROM PUBLIC;
             GRANT USAGE ON SCHEMA public TO {role};
             GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role};
             GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {role};"
        ))
        .expect("the application role");
    });
    let app_url = url.replacen("://postgres@", &format!("://{role}@"), 1);
    assert_ne!(app_url, url);
    let store = pg_blocking(|| PostgresStore::connect(&app_url))
        .unwrap_or_else(|e| panic!("the application role connects: {e}"));
    let server = Server::start();
    let tenant = tenant("app-role");
    let client = Client::builder().store(store).build().expect("client");
    let settled = client
        .submission("payout-app")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("through the application role"))
        .unwrap()
        .send()
        .await
        .expect("sent");
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(server.tickets(&tenant).await, 1);
}

/// Ends every other connection to the database at `url` from the server's side, as a
/// PostgreSQL restart or a proxy's idle timeout does, and waits until they are gone.
fn close_other_connections(url: &str) {
    pg_blocking(|| {
        let mut db = postgres::Client::connect(url, postgres::NoTls).expect("connect");
        let others =
            "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()";
        let ended: i64 = db
            .query_one(
                &format!("SELECT count(*) FROM (SELECT pg_terminate_backend(pid) {others}) AS t"),
                &[],
            )
            .expect("pg_terminate_backend")
            .get(0);
        assert!(ended >= 1, "the store held a connection");
        let deadline = Instant::now() + Duration::from_secs(10);
        while db
            .query_one(&format!("SELECT count(*) {others}"), &[])
            .expect("pg_stat_activity")
            .get::<_, i64>(0)
            > 0
        {
            assert!(Instant::now() < deadline, "the connections did not end");
            std::thread::sleep(Duration::from_millis(10));
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn connections_the_server_closed_while_idle_are_replaced_not_failed() {
    // A connection PostgreSQL (or a proxy) closed while it sat idle in the store's pool made
    // the next store call fail: the submission's first step failed, for no reason of its own.
    let Some(url) = pg_database("connections_the_server_closed_while_idle") else {
        return;
    };
    let server = Server::start();
    let tenant = tenant("reconnect");
    let client = client(&url);
    let settled = send(&client, &server, &tenant, "before").await.unwrap();
    assert_eq!(settled.outcome(), Outcome::Succeeded);

    close_other_connections(&url);
    let settled = send(&client, &server, &tenant, "after a restart")
        .await
        .expect("sent on a new connection");
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(settled.attempts(), 1);
    assert_eq!(server.tickets(&tenant).await, 2);
    assert_eq!(rows(&url, "SELECT count(*) FROM oncekey_pending"), 0);

    // A worker's poll (a claim of due submissions, which is never run twice) on a connection
    // found closed before the claim is sent.
    let record = client
        .submission("queued")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("queued"))
        .unwrap()
        .record()
        .unwrap();
    enqueue_all(&url, std::slice::from_ref(&record));
    close_other_connections(&url);
    let done = client
        .resume_due(10)
        .await
        .expect("claimed on a new connection");
    assert_eq!(done.len(), 1);
    let settled = done[0].result.as_ref().unwrap();
    assert_eq!(settled.outcome(), Outcome::Succeeded);
    assert_eq!(settled.key(), &record.key);
    assert_eq!(server.tickets(&tenant).await, 3);
    let mut subjects = server.subjects(&tenant).await;
    subjects.sort();
    assert_eq!(subjects, ["after a restart", "before", "queued"]);
    assert_eq!(rows(&url, "SELECT count(*) FROM oncekey_pending"), 0);
}

/// A record no client can read, written by a foreign writer beside two good due ones: bytes
/// that are not UTF-8 (a `SQL_ASCII` database stores whatever bytes it is given) and a text
/// that is no record. The fleet's workers go on: the good ones are sent, the unreadable ones
/// moved aside into the quarantine (listed, kept byte for byte), and the next poll is not
/// blocked by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unreadable_due_record_is_moved_aside_and_the_others_are_still_resumed() {
    let test = "an_unreadable_due_record_is_moved_aside_and_the_others_are_still_resumed";
    let Some(url) = pg_database_with(test, "ENCODING 'SQL_ASCII' TEMPLATE template0") else {
        return;
    };
    let server = Server::start();
    let tenant = tenant("unreadable-due");
    let client = client(&url);
    let record = |name: &str| ticket_record(&client, &server.tickets_url(), &tenant, name, name);
    enqueue_all(&url, &[record("payout-1"), record("payout-2")]);
    pg_blocking(|| {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.batch_execute(
            r#"INSERT INTO oncekey_pending (name, record) VALUES
                   ('payout-bytes', E'{"v":1,\xff\xfe}'),
                   ('payout-text', '{"v":1,"key":')"#,
        )
        .unwrap();
    });

    // Listed (`oncekey list`), the unreadable ones as such.
    let pending = client.pending().await.expect("the list goes on");
    let unreadable: Vec<&str> = pending
        .iter()
        .filter(|p| p.record.is_err())
        .map(|p| p.name.as_str())
        .collect();
    assert_eq!(
        (pending.len(), unreadable),
        (4, vec!["payout-bytes", "payout-text"])
    );

    // Moved aside, never deleted: listed as quarantined (`oncekey list --quarantined`), kept as
    // they were stored; nothing is pending, and the next polls find nothing, without an error.
    resume_two_good_and_two_unreadable(&client).await;
    assert_eq!(server.subjects(&tenant).await.len(), 2);
    let kept: Vec<(String, Vec<u8>)> = pg_blocking(|| {
        let mut db = postgres::Client::connect(&url, postgres::NoTls).unwrap();
        db.query(
            "SELECT name, convert_to(record, 'SQL_ASCII') FROM oncekey_quarantine ORDER BY name",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
    });
    assert_eq!(
        kept,
        [
            ("payout-bytes".into(), b"{\"v\":1,\xff\xfe}".to_vec()),
            ("payout-text".into(), b"{\"v\":1,\"key\":".to_vec()),
        ]
    );
    assert!(client.pending().await.unwrap().is_empty());
    assert!(client.resume_due(10).await.unwrap().is_empty());
    assert_eq!(server.subjects(&tenant).await.len(), 2, "each sent once");
}
