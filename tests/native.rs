//! The native client against the reference server over loopback, with faults: what a user
//! checks is the server's ticket count for the tenant and the keys it was sent.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

mod support;

use std::sync::Arc;
use std::time::Duration;

use oncekey::{Client, Key, MemoryStore, Outcome, RetryPolicy, SqliteStore, Store};
use support::*;

const NS: uuid::Uuid = uuid::Uuid::from_u128(0x6f6e_6365_6b65_7900_8000_0000_0000_00aa);

fn all_same(keys: &[Key]) -> bool {
    keys.windows(2).all(|w| w[0] == w[1])
}

#[tokio::test]
async fn a_503_is_retried_with_the_same_key_and_makes_one_ticket() {
    let server = Server::start();
    let tenant = tenant("503");
    let plan = Plan::new();
    plan.fault("t", 1, "fail-before");
    plan.fault("t", 2, "fail-before");
    let client = client(&plan);
    let s = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    assert_eq!(s.status(), Some(201));
    assert_eq!(s.attempts(), 3);
    let keys = plan.keys("t");
    assert_eq!(keys.len(), 3);
    assert!(all_same(&keys), "{keys:?}");
    assert_eq!(&keys[0], s.key());
    assert_eq!(server.tickets(&tenant).await, 1);
    assert_eq!(server.stats(&tenant).await["faults"], 2);
    let ticket: serde_json::Value = s.json().unwrap();
    assert_eq!(ticket["subject"], "t");
    assert!(
        client.pending().await.unwrap().is_empty(),
        "removed after a definite answer"
    );
}

#[tokio::test]
async fn a_dropped_reply_is_retried_and_the_server_replays() {
    let server = Server::start();
    let tenant = tenant("drop");
    let plan = Plan::new();
    plan.fault("t", 1, "drop-reply");
    let client = client(&plan);
    let s = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    assert!(
        s.replayed(),
        "the second attempt is answered from the receipt"
    );
    assert_eq!(s.attempts(), 2);
    assert!(all_same(&plan.keys("t")));
    assert_eq!(server.tickets(&tenant).await, 1);
    assert_eq!(server.stats(&tenant).await["replays"], 1);
}

#[tokio::test]
async fn a_timeout_then_409_with_retry_after_keeps_the_key_and_waits() {
    let server = Server::start();
    let tenant = tenant("timeout");
    let plan = Plan::new();
    // The first attempt outlives the client's timeout; the server holds the key meanwhile, so
    // the second attempt gets 409 with Retry-After: 1.
    plan.fault("t", 1, "delay=1000");
    let client = Client::builder()
        .store(MemoryStore::new())
        .retry(fast())
        .timeout(Duration::from_millis(300))
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let s = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    let sent = plan.sent.lock().unwrap().clone();
    assert!(sent.len() >= 3, "timeout, 409, then the answer: {sent:?}");
    assert!(all_same(&plan.keys("t")));
    let stats = server.stats(&tenant).await;
    assert!(stats["in_progress"].as_i64().unwrap() >= 1, "{stats}");
    assert_eq!(server.tickets(&tenant).await, 1);
    // Retry-After: 1 was honoured: the attempt after the 409 came at least a second later
    // (with a 20 ms backoff base it would otherwise come within 40 ms).
    let gap = sent[2].3 - sent[1].3;
    assert!(gap >= Duration::from_millis(990), "{gap:?}");
}

#[tokio::test]
async fn retry_after_on_a_503_is_honoured() {
    // The reference server sends Retry-After only with its 409; a stub says it with a 503.
    let stub = Stub::start(vec![(503, vec![("retry-after", "1")])]).await;
    let plan = Plan::new();
    let client = client(&plan);
    let s = client
        .submission("r")
        .post(&format!("{}/x", stub.url))
        .json(&ticket("r"))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded);
    let sent = plan.sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 2);
    assert!(sent[1].3 - sent[0].3 >= Duration::from_millis(990));
    assert!(all_same(&plan.keys("r")));
}

#[tokio::test]
async fn a_status_of_no_http_class_is_retried_with_the_same_key_not_refused() {
    // An intermediary's 999 was a definite refusal: the record was forgotten, and the caller's
    // next send of the same payout drew a new key.
    let stub = Stub::start(vec![(999, vec![]), (999, vec![("retry-after-ms", "30")])]).await;
    let plan = Plan::new();
    let client = client(&plan);
    let s = client
        .submission("odd")
        .post(&format!("{}/x", stub.url))
        .json(&ticket("odd"))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded);
    assert_eq!(s.attempts(), 3);
    let keys = stub.keys();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");
}

#[tokio::test]
async fn a_422_is_a_conflict_and_is_not_retried() {
    let server = Server::start();
    let tenant = tenant("422");
    let plan = Plan::new();
    let client = client(&plan);
    let key = Key::derive(&NS, "reused");
    let first = client
        .submission("a")
        .key(key.clone())
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("a"))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(first.outcome(), Outcome::Succeeded);
    let second = client
        .submission("b")
        .key(key.clone())
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("another body"))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(second.outcome(), Outcome::Conflict, "{second}");
    assert_eq!(second.status(), Some(422));
    assert_eq!(plan.attempts("b"), 1, "never retried");
    assert_eq!(server.tickets(&tenant).await, 1);
    assert!(client.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn refused_and_misconfigured_are_definite() {
    let server = Server::start();
    let tenant = tenant("4xx");
    let plan = Plan::new();
    let client = client(&plan);
    let s = client
        .submission("empty")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&serde_json::json!({"subject": "", "body": "", "email": "nope"}))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Refused, "{s}");
    assert_eq!(plan.attempts("empty"), 1);

    // A key sent under another header name: the server says the Idempotency-Key is missing.
    let wrong = Client::builder()
        .store(MemoryStore::new())
        .retry(fast())
        .key_header("X-Request-Key")
        .build()
        .unwrap();
    let s = send(&wrong, &server, &tenant, "m").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Misconfigured, "{s}");
    assert_eq!(server.tickets(&tenant).await, 0);
}

#[tokio::test]
async fn unsure_keeps_the_record_a_mismatch_is_refused_and_the_same_body_goes_on() {
    unsure_then_mismatch_then_the_same_body(MemoryStore::new()).await;
}

/// The same on SqliteStore, where a send's claim and first save are one call
/// (`StoreCall::ClaimSave`): one that finds the record saves nothing and goes on with it.
#[tokio::test]
async fn on_sqlite_unsure_keeps_the_record_a_mismatch_is_refused_and_the_same_body_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("pending.db")).unwrap();
    unsure_then_mismatch_then_the_same_body(store).await;
}

async fn unsure_then_mismatch_then_the_same_body(store: impl Store) {
    let server = Server::start();
    let tenant = tenant("mismatch");
    let plan = Plan::new();
    plan.always("t", "fail-before");
    let client = Client::builder()
        .store(store)
        .retry(RetryPolicy {
            attempts: 2,
            ..fast()
        })
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let s = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure, "{s}");
    assert_eq!(s.attempts(), 2);
    let pending = client.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(&pending[0].record.as_ref().unwrap().key, s.key());

    // Another body under the same name: refused locally, nothing sent.
    let before = plan.attempts("t");
    let e = client
        .submission("t")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("something else"))
        .unwrap()
        .send()
        .await
        .unwrap_err();
    assert!(e.is_pending_mismatch(), "{e:?}");
    assert_eq!(e.key(), Some(s.key()));
    assert!(e.to_string().contains("nothing was sent"), "{e}");
    assert_eq!(plan.attempts("t"), before, "nothing was sent");
    // A different derived key for the pending name is a mismatch too.
    let e = client
        .submission("t")
        .key(Key::derive(&NS, "other"))
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("t"))
        .unwrap()
        .send()
        .await
        .unwrap_err();
    assert!(e.is_pending_mismatch(), "{e:?}");
    assert_eq!(plan.attempts("t"), before);

    // The same body (keys in another order) goes on with the pending key: "Try again".
    plan.clear();
    let again = client
        .submission("t")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&serde_json::json!({
            "email": "ana@example.com",
            "body": "The printer on the 3rd floor is on fire.",
            "subject": "t",
        }))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(again.outcome(), Outcome::Succeeded, "{again}");
    assert_eq!(again.key(), s.key());
    assert_eq!(again.attempts(), 3);
    assert_eq!(server.tickets(&tenant).await, 1);
}

#[tokio::test]
async fn a_spent_round_stays_unsure_on_resume_until_try_again() {
    let server = Server::start();
    let tenant = tenant("spent");
    let plan = Plan::new();
    plan.always("t", "fail-before");
    let client = Client::builder()
        .store(MemoryStore::new())
        .retry(RetryPolicy {
            attempts: 2,
            ..fast()
        })
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let s = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure);
    plan.clear();
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 1);
    let r = resumed[0].result.as_ref().unwrap();
    assert_eq!(r.outcome(), Outcome::Unsure, "{r}");
    assert_eq!(plan.attempts("t"), 2, "a spent round is not sent by resume");
    let s2 = client.try_again("t").await.unwrap();
    assert_eq!(s2.outcome(), Outcome::Succeeded, "{s2}");
    assert_eq!(s2.key(), s.key());
    assert_eq!(server.tickets(&tenant).await, 1);
}

#[tokio::test]
async fn an_unsure_submission_is_set_aside_from_polls_in_memory_and_on_sqlite() {
    // `resume_due` (and `oncekey work`, which polls it until nothing is found) took an unsure
    // submission up again at once after each poll: the loop never ended. Set aside for as long
    // as a lease lasts, as PostgresStore does; try_again takes it at once.
    let dir = tempfile::tempdir().unwrap();
    let stores: [Arc<dyn Store>; 2] = [
        Arc::new(MemoryStore::new()),
        Arc::new(SqliteStore::open(dir.path().join("pending.db")).unwrap()),
    ];
    for store in stores {
        // Nothing listens on port 9: every attempt fails, and the round ends unsure.
        let client = Client::builder()
            .shared_store(store.clone())
            .retry(RetryPolicy {
                attempts: 2,
                ..fast()
            })
            .timeout(Duration::from_millis(500))
            .lease(Duration::from_millis(500))
            .build()
            .unwrap();
        let first = client
            .submission("u-1")
            .post("http://127.0.0.1:9/api/tickets")
            .json(&ticket("unsure"))
            .unwrap()
            .send()
            .await
            .unwrap();
        assert_eq!(first.outcome(), Outcome::Unsure);
        assert!(client.resume_due(10).await.unwrap().is_empty(), "{store:?}");
        assert!(client.resume_due(10).await.unwrap().is_empty(), "{store:?}");
        let pending = client.pending().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].lease, None, "free for a claim by name");
        let again = client.try_again("u-1").await.unwrap();
        assert_eq!(again.outcome(), Outcome::Unsure);
        assert_eq!(again.key(), first.key());
        assert_eq!(again.attempts(), 4);
        assert!(client.resume_due(10).await.unwrap().is_empty(), "{store:?}");
        // Once set aside long enough (timeout + lease = 1 s), a poll takes it up: its round is
        // spent, so it is reported unsure without being sent.
        tokio::time::sleep(Duration::from_millis(1200)).await;
        let later = client.resume_due(10).await.unwrap();
        assert_eq!(later.len(), 1, "{store:?}");
        let later = later[0].result.as_ref().unwrap();
        assert_eq!(later.outcome(), Outcome::Unsure);
        assert_eq!(later.attempts(), 4, "nothing sent");
        assert!(client.resume_due(10).await.unwrap().is_empty(), "{store:?}");
    }
}

#[test]
fn a_claim_by_name_ends_a_set_aside_time() {
    // A submission set aside for a day (unsure), then claimed by name ("Try again") by a process
    // that dies: once its lease has run out, the next poll takes it up, not a day later.
    use oncekey::{Claim, Lease, Timestamp};
    let dir = tempfile::tempdir().unwrap();
    let stores: [Arc<dyn Store>; 2] = [
        Arc::new(MemoryStore::new()),
        Arc::new(SqliteStore::open(dir.path().join("pending.db")).unwrap()),
    ];
    let t0 = Timestamp::from_millis(1_000_000_000);
    let at = |s: u64| t0 + Duration::from_secs(s);
    let lease = |owner: &str, until| Lease {
        owner: owner.to_owned(),
        until,
    };
    for store in stores {
        let claimed = store.claim("n", &lease("a", at(10)), t0).unwrap();
        assert_eq!(claimed, Claim::Taken(None));
        assert!(store.save("n", "{}", &lease("a", at(10))).unwrap());
        store.defer("n", "a", at(86_400)).unwrap();
        let polled = store.claim_due(&lease("w", at(20)), at(1), 10).unwrap();
        assert!(polled.is_empty(), "{store:?}: set aside");
        let claimed = store.claim("n", &lease("b", at(5)), at(1)).unwrap();
        assert_eq!(claimed, Claim::Taken(Some("{}".into())));
        let polled = store.claim_due(&lease("w", at(20)), at(6), 10).unwrap();
        assert_eq!(polled.len(), 1, "{store:?}: b's lease ran out");
    }
}

#[tokio::test]
async fn a_discarded_record_nobody_can_read_is_moved_aside_not_deleted() {
    // An operator discards a name whose record no client can read (another writer's version,
    // or damaged): it was deleted, where every other path moves such a record aside for
    // someone to look at (CONTRACT.md section 5).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    let unreadable = [
        (
            "payout-77",
            "{\"v\":2,\"note\":\"written by something newer\"}",
        ),
        ("payout-78", "{\"v\":1,\"key\":"),
    ];
    for store in [
        Arc::new(MemoryStore::new()) as Arc<dyn Store>,
        Arc::new(SqliteStore::open(&path).unwrap()),
    ] {
        for (name, record) in unreadable {
            let lease = oncekey::Lease {
                owner: "other".into(),
                until: oncekey::Timestamp::from_millis(1),
            };
            store
                .claim(name, &lease, oncekey::Timestamp::from_millis(0))
                .unwrap();
            store.save(name, record, &lease).unwrap();
            store.release(name, "other").unwrap();
        }
        let client = Client::builder()
            .shared_store(store.clone())
            .build()
            .unwrap();
        for (name, _) in unreadable {
            assert!(
                client.discard(name).await.unwrap(),
                "{name}: one was stored"
            );
        }
        assert!(
            client.pending().await.unwrap().is_empty(),
            "the names are free"
        );
        let moved = client.quarantined().await.unwrap();
        let kept: Vec<_> = moved
            .iter()
            .map(|q| (q.name.as_str(), q.record.as_str()))
            .collect();
        assert_eq!(kept, unreadable, "kept as they were stored");
    }
}

#[tokio::test]
async fn discard_is_refused_while_this_client_is_sending_it() {
    // discard() claimed the lease (its own client's) and removed the record while the attempt
    // was out: the flight's next save failed as if another client had taken it over, and a new
    // send of the name drew a new key while the first request could still be carried out.
    let server = Server::start();
    let tenant = tenant("discard-sending");
    let plan = Plan::new();
    plan.fault("t", 1, "delay=1000");
    let client = Client::builder()
        .store(MemoryStore::new())
        .retry(fast())
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let (settled, refused) = tokio::join!(send(&client, &server, &tenant, "t"), async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        client.discard("t").await
    });
    let e = refused.expect_err("refused while it is being sent");
    assert!(e.to_string().contains("is still being sent"), "{e}");
    let settled = settled.unwrap();
    assert_eq!(settled.outcome(), Outcome::Succeeded, "{settled}");
    assert_eq!(plan.attempts("t"), 1);
    assert_eq!(server.tickets(&tenant).await, 1);
    // Settled: nothing left to discard.
    assert!(!client.discard("t").await.unwrap());
}

#[tokio::test]
async fn a_send_started_while_this_client_discards_waits_for_the_discard() {
    // The discard holds the name: a send of it started meanwhile (the same caller, at once)
    // waits, then finds nothing stored and goes under a new key. Checked first and claimed
    // after, the send slipped in between: it took the unsure record up under its old key, and
    // the discard's removal then took the record from under it.
    let server = Server::start();
    let tenant = tenant("discard-then-send");
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan::new();
    plan.fault("t", 1, "fail-before");
    let client = Client::builder()
        .store(SqliteStore::open(dir.path().join("pending.db")).unwrap())
        .retry(RetryPolicy {
            attempts: 1,
            ..fast()
        })
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let unsure = send(&client, &server, &tenant, "t").await.unwrap();
    assert_eq!(unsure.outcome(), Outcome::Unsure);
    plan.clear();
    let (discarded, sent) = tokio::join!(client.discard("t"), send(&client, &server, &tenant, "t"));
    assert!(discarded.unwrap(), "the unsure record was there to discard");
    let sent = sent.unwrap();
    assert_eq!(sent.outcome(), Outcome::Succeeded, "{sent}");
    assert_ne!(
        sent.key(),
        unsure.key(),
        "sent as a new submission, after the discard"
    );
    assert_eq!(server.tickets(&tenant).await, 1);
    assert!(client.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_same_message_twice_three_times_and_concurrently_makes_one_ticket() {
    let server = Server::start();
    let tenant = tenant("dup");
    let key = Key::derive(&NS, "withdrawal-77");
    let url = server.tickets_url();
    let go = |client: Client, name: &'static str| {
        let (key, url, tenant) = (key.clone(), url.clone(), tenant.clone());
        async move {
            client
                .submission(name)
                .key(key)
                .post(&url)
                .header("X-Tenant", &tenant)
                .json(&ticket("payout 77"))
                .unwrap()
                .send()
                .await
                .unwrap()
        }
    };
    let plan = Plan::new();
    // Twice through one client, three times through separate ones (separate processes with
    // separate stores, the same derived key).
    let c = client(&plan);
    let first = go(c.clone(), "p").await;
    let second = go(c.clone(), "p").await;
    assert!(!first.replayed() && second.replayed());
    for _ in 0..3 {
        let s = go(client(&plan), "p").await;
        assert_eq!(s.outcome(), Outcome::Succeeded);
        assert!(s.replayed());
    }
    assert_eq!(server.tickets(&tenant).await, 1);

    // Concurrently, a new message: three clients with their own stores at once, the first
    // attempts slow so that the others meet the key in progress (409) and wait for it.
    let key2 = Key::derive(&NS, "withdrawal-78");
    let plan2 = Plan::new();
    plan2.fault("q", 1, "delay=300");
    let runs = (0..3).map(|_| {
        let client = client(&plan2);
        let (key2, url, tenant) = (key2.clone(), url.clone(), tenant.clone());
        tokio::spawn(async move {
            client
                .submission("q")
                .key(key2)
                .post(&url)
                .header("X-Tenant", &tenant)
                .json(&ticket("payout 78"))
                .unwrap()
                .send()
                .await
                .unwrap()
        })
    });
    let results: Vec<_> = futures_join(runs.collect()).await;
    for s in &results {
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        assert_eq!(s.key(), &key2);
    }
    assert_eq!(server.tickets(&tenant).await, 2);
    assert!(plan2.keys("q").iter().all(|k| *k == key2));

    // Concurrently within one client: the later sends join the first, one request in all.
    let plan3 = Plan::new();
    plan3.fault("j", 1, "delay=200");
    let c = client(&plan3);
    let joins: Vec<_> = (0..3)
        .map(|_| {
            let c = c.clone();
            let (url, tenant) = (url.clone(), tenant.clone());
            tokio::spawn(async move {
                c.submission("j")
                    .post(&url)
                    .header("X-Tenant", &tenant)
                    .json(&ticket("joined"))
                    .unwrap()
                    .send()
                    .await
                    .unwrap()
            })
        })
        .collect();
    let joined = futures_join(joins).await;
    assert!(joined.iter().all(|s| s.key() == joined[0].key()));
    assert_eq!(plan3.attempts("j"), 1, "joined, not sent again");
    assert_eq!(server.tickets(&tenant).await, 3);
}

/// Within one client a name has one live submission while in flight: the same message sent
/// again (twice, three times, at once, while its attempt is under way or while it waits to
/// retry) joins it, and another body is refused locally, with the pending key, sending nothing.
#[tokio::test]
async fn one_client_joins_the_same_message_in_flight_and_refuses_another_body() {
    let go = |c: &Client, url: &str, tenant: &str, subject: &'static str, reordered: bool| {
        let (c, url, tenant) = (c.clone(), url.to_owned(), tenant.to_owned());
        tokio::spawn(async move {
            let body = if reordered {
                // The same meaning with the members in another order.
                serde_json::json!({
                    "email": "ana@example.com",
                    "body": "The printer on the 3rd floor is on fire.",
                    "subject": subject,
                })
            } else {
                ticket(subject)
            };
            c.submission("f")
                .post(&url)
                .header("X-Tenant", &tenant)
                .json(&body)
                .unwrap()
                .send()
                .await
        })
    };

    // While the attempt is under way (the server takes 300 ms).
    let server = Server::start();
    let tenant = tenant("in-flight");
    let url = server.tickets_url();
    let plan = Plan::new();
    plan.fault("f", 1, "delay=300");
    let c = client(&plan);
    let first = go(&c, &url, &tenant, "once", false);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let twice = go(&c, &url, &tenant, "once", true);
    let thrice = go(&c, &url, &tenant, "once", false);
    let e = go(&c, &url, &tenant, "another", false)
        .await
        .unwrap()
        .unwrap_err();
    assert!(e.is_pending_mismatch(), "{e:?}");
    assert!(e.to_string().contains("nothing was sent"), "{e}");
    let settled: Vec<_> = futures_join(vec![first, twice, thrice])
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    for s in &settled {
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        assert_eq!(s.key(), settled[0].key());
    }
    assert_eq!(
        e.key(),
        Some(settled[0].key()),
        "refused with the pending key"
    );
    assert_eq!(plan.attempts("f"), 1, "joined, not sent again");
    assert_eq!(server.tickets(&tenant).await, 1);
    assert_eq!(server.subjects(&tenant).await, ["once"]);
    assert!(c.pending().await.unwrap().is_empty());

    // While it waits to retry: a 503 asks for a second's pause, which the joined calls keep.
    let stub = Stub::start(vec![(503, vec![("retry-after", "1")])]).await;
    let c = client(&Plan::new());
    let first = go(&c, &stub.url, "t", "once", false);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        stub.seen.lock().unwrap().len(),
        1,
        "the 503 came, the retry is due later"
    );
    let twice = go(&c, &stub.url, "t", "once", true);
    let thrice = go(&c, &stub.url, "t", "once", false);
    let e = go(&c, &stub.url, "t", "another", false)
        .await
        .unwrap()
        .unwrap_err();
    assert!(e.is_pending_mismatch(), "{e:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        stub.seen.lock().unwrap().len(),
        1,
        "joining sent nothing early"
    );
    let settled: Vec<_> = futures_join(vec![first, twice, thrice])
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .collect();
    let seen = stub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "one retry for all three");
    let keys: Vec<_> = seen.iter().map(|h| h["idempotency-key"].clone()).collect();
    assert_eq!(keys[0], keys[1]);
    for s in &settled {
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        assert_eq!(s.attempts(), 2, "{s}");
        assert_eq!(s.key().as_str(), keys[0].to_str().unwrap());
    }
    assert_eq!(e.key(), Some(settled[0].key()));
}

async fn futures_join<T: Send + 'static>(tasks: Vec<tokio::task::JoinHandle<T>>) -> Vec<T> {
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test]
async fn secrets_are_sent_on_every_attempt_and_never_stored() {
    const TOKEN: &str = "Bearer sk_live_ThisMustNeverBeStored";
    const SIGNATURE: &str = "sig_ThisMustNeverBeStoredEither";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    // Two unanswered attempts (the stub hangs up with 503s), then a restart.
    let stub = Stub::start(vec![(503, vec![]), (503, vec![])]).await;
    let build = || {
        Client::builder()
            .store(SqliteStore::open(&path).unwrap())
            .retry(RetryPolicy {
                attempts: 2,
                ..fast()
            })
            .secret_header("Authorization", TOKEN)
            .secret_header_name("X-Signature")
            .header_provider(|_: &oncekey::Outgoing<'_>| {
                let mut h = reqwest::header::HeaderMap::new();
                h.insert("x-signature", SIGNATURE.parse().unwrap());
                h
            })
            .build()
            .unwrap()
    };
    let client = build();
    let s = client
        .submission("pay")
        .post(&format!("{}/payouts", stub.url))
        .header("X-Tenant", "acme")
        .json(&serde_json::json!({"amount": 1200}))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure);
    // A secret given as a stored header is refused.
    let e = client
        .submission("other")
        .post(&format!("{}/payouts", stub.url))
        .header("Cookie", "session=abc")
        .json(&serde_json::json!({}))
        .unwrap()
        .send()
        .await
        .unwrap_err();
    assert!(e.is_request() && e.to_string().contains("secret"), "{e}");
    drop(client);

    let mut bytes = Vec::new();
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        bytes.extend(std::fs::read(entry.unwrap().path()).unwrap());
    }
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains(s.key().as_str()),
        "the record (its key) is in the files"
    );
    assert!(text.contains("acme"), "safe headers are stored");
    assert!(!text.contains("sk_live_ThisMustNeverBeStored"));
    assert!(!text.contains("ThisMustNeverBeStoredEither"));

    // After the restart the secrets are added again from the new client's configuration (its
    // round was spent, so resume leaves it unsure and "Try again" sends it).
    let client = build();
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(
        resumed[0].result.as_ref().unwrap().outcome(),
        Outcome::Unsure
    );
    let again = client.try_again("pay").await.unwrap();
    assert_eq!(again.outcome(), Outcome::Succeeded, "{again}");
    let seen = stub.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for h in &seen {
        assert_eq!(h["authorization"], TOKEN);
        assert_eq!(h["x-signature"], SIGNATURE);
        assert_eq!(h["x-tenant"], "acme");
        assert_eq!(h["idempotency-key"], s.key().as_str());
    }
}

#[tokio::test]
async fn two_clients_on_one_store_never_send_one_submission_at_once() {
    let server = Server::start();
    let tenant = tenant("lease");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let plan = Plan::new();
    plan.fault("n", 1, "delay=400");
    let make = |plan: &Arc<Plan>| {
        Client::builder()
            .store(SqliteStore::open(&path).unwrap())
            .retry(fast())
            .header_provider(plan.provider())
            .build()
            .unwrap()
    };
    let (a, b) = (make(&plan), make(&plan));
    let url = server.tickets_url();
    let t = tenant.clone();
    let first = tokio::spawn(async move {
        a.submission("n")
            .post(&url)
            .header("X-Tenant", &t)
            .json(&ticket("n"))
            .unwrap()
            .send()
            .await
    });
    // Wait until A's attempt is on the wire.
    while plan.attempts("n") == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let e = send(&b, &server, &tenant, "n").await.unwrap_err();
    assert!(e.is_busy(), "{e:?}");
    let resumed = b.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 1);
    assert!(resumed[0].result.as_ref().unwrap_err().is_busy());
    let s = first.await.unwrap().unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded);
    assert_eq!(plan.attempts("n"), 1, "B sent nothing");
    let stats = server.stats(&tenant).await;
    assert_eq!(
        stats["in_progress"], 0,
        "never two requests in flight: {stats}"
    );
    assert_eq!(stats["tickets"], 1);
    assert!(b.resume_pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_dead_clients_lease_runs_out_and_another_takes_its_submission_over() {
    let server = Server::start();
    let tenant = tenant("takeover");
    let store = MemoryStore::new();
    // A "process" that stored its record, took its lease and died before sending.
    let key = Key::derive(&NS, "dead");
    let now = oncekey::Timestamp::from_millis(now_ms());
    let record = sent_once(&server.tickets_url(), &tenant, "d", key.clone(), now);
    let lease = oncekey::Lease {
        owner: "dead-process".into(),
        // Long enough that a loaded machine still finds it held at the first resume.
        until: oncekey::Timestamp::from_millis(now_ms() + 1500),
    };
    store
        .claim("d", &lease, oncekey::Timestamp::from_millis(now_ms()))
        .unwrap();
    assert!(store.save("d", &record.to_json(), &lease).unwrap());
    let client = Client::builder()
        .store(store.clone())
        .retry(fast())
        .build()
        .unwrap();
    let r = client.resume_pending().await.unwrap();
    assert!(r[0].result.as_ref().unwrap_err().is_busy());
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let r = client.resume_pending().await.unwrap();
    let s = r[0].result.as_ref().unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    assert_eq!(s.key(), &key);
    assert_eq!(s.attempts(), 2);
    assert_eq!(server.tickets(&tenant).await, 1);
    assert!(store.list().unwrap().is_empty());
}

#[tokio::test]
async fn a_corrupt_store_file_and_an_unreadable_record_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"this is not a database, just text that is long enough ".repeat(100),
    )
    .unwrap();
    let e = SqliteStore::open(&junk).unwrap_err();
    assert!(e.is_corrupt(), "{e:?}");
    assert!(e.to_string().contains("junk.db"), "{e}");

    let server = Server::start();
    let tenant = tenant("unreadable");
    let path = dir.path().join("pending.db");
    let plan = Plan::new();
    plan.always("good", "fail-before");
    let client = Client::builder()
        .store(SqliteStore::open(&path).unwrap())
        .retry(RetryPolicy {
            attempts: 1,
            ..fast()
        })
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let s = send(&client, &server, &tenant, "good").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure);
    // Another record is damaged behind the store's back.
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute(
        "INSERT INTO oncekey_pending (name, record) VALUES ('bad', '{\"v\":1,\"key\":')",
        [],
    )
    .unwrap();
    drop(raw);
    plan.clear();
    let client = Client::builder()
        .store(SqliteStore::open(&path).unwrap())
        .retry(fast())
        .build()
        .unwrap();
    let mut resumed = client.resume_pending().await.unwrap();
    resumed.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(resumed.len(), 2);
    let e = resumed[0].result.as_ref().unwrap_err();
    assert_eq!(resumed[0].name, "bad");
    assert!(e.is_unreadable_record(), "{e:?}");
    assert!(e.to_string().contains("\"bad\""), "{e}");
    // The good one was usable: resumed with its key, and done.
    let good = resumed[1].result.as_ref().unwrap();
    assert_eq!(good.outcome(), Outcome::Succeeded, "{good}");
    assert_eq!(good.key(), s.key());
    assert_eq!(server.tickets(&tenant).await, 1);
    // The bad one was moved aside, never deleted: out of the pending ones, kept in the
    // quarantine as it was stored, with the reason; the name is free for a new submission.
    assert!(e.to_string().contains("quarantine"), "{e}");
    assert!(client.pending().await.unwrap().is_empty());
    let moved = client.quarantined().await.unwrap();
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].name, "bad");
    assert_eq!(moved[0].record, "{\"v\":1,\"key\":");
    assert!(moved[0].reason.contains("not JSON"), "{}", moved[0].reason);
    let raw = rusqlite::Connection::open(&path).unwrap();
    let kept: String = raw
        .query_row("SELECT record FROM oncekey_quarantine", [], |r| r.get(0))
        .unwrap();
    assert_eq!(kept, moved[0].record);
    drop(raw);
    let s = send(&client, &server, &tenant, "bad").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    assert_eq!(server.tickets(&tenant).await, 2);
    assert_eq!(client.quarantined().await.unwrap().len(), 1, "still kept");

    // A record another name's row holds (copied by hand) is moved aside too.
    let raw = rusqlite::Connection::open(&path).unwrap();
    let good = Client::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap()
        .submission("elsewhere")
        .post(&server.tickets_url())
        .json(&ticket("x"))
        .unwrap()
        .record()
        .unwrap();
    raw.execute(
        "INSERT INTO oncekey_pending (name, record) VALUES ('copied', ?1)",
        [good.to_json()],
    )
    .unwrap();
    drop(raw);
    let resumed = client.resume_pending().await.unwrap();
    let e = resumed[0].result.as_ref().unwrap_err();
    assert!(
        e.is_unreadable_record() && e.to_string().contains("belongs to"),
        "{e}"
    );
    assert_eq!(client.quarantined().await.unwrap().len(), 2);
    assert!(client.pending().await.unwrap().is_empty());
    assert_eq!(server.tickets(&tenant).await, 2, "nothing sent for it");

    // Bytes that are not UTF-8 (a blob), in the record's structure or inside a string of its
    // body: moved aside as they are, not a store error at every claim of the name (which left
    // it neither resumable, nor discardable, nor moved aside), and never read with replacement
    // characters (a changed body would have been sent under its key).
    let in_string = Client::builder()
        .store(MemoryStore::new())
        .build()
        .unwrap()
        .submission("in-string")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("MARKER"))
        .unwrap()
        .record()
        .unwrap()
        .to_json()
        .replace("MARKER", "\u{1}")
        .into_bytes()
        .into_iter()
        .map(|b| if b == 1 { 0xff } else { b })
        .collect::<Vec<u8>>();
    let blobs = [
        ("bytes", b"{\"v\":1,\xff\xfe}".to_vec()),
        ("in-string", in_string),
    ];
    let raw = rusqlite::Connection::open(&path).unwrap();
    for (name, blob) in &blobs {
        raw.execute(
            "INSERT INTO oncekey_pending (name, record) VALUES (?1, ?2)",
            rusqlite::params![name, blob],
        )
        .unwrap();
    }
    drop(raw);
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 2);
    for r in &resumed {
        let e = r.result.as_ref().unwrap_err();
        assert!(e.is_unreadable_record(), "{}: {e}", r.name);
    }
    assert_eq!(client.quarantined().await.unwrap().len(), 4);
    assert!(client.pending().await.unwrap().is_empty());
    assert_eq!(server.tickets(&tenant).await, 2, "nothing sent for them");
    let raw = rusqlite::Connection::open(&path).unwrap();
    for (name, blob) in &blobs {
        let kept: Vec<u8> = raw
            .query_row(
                "SELECT record FROM oncekey_quarantine WHERE name = ?1",
                [name],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(&kept, blob, "{name} kept byte for byte");
    }
}

/// `resume_due` (`oncekey work`) on SQLite with records no client can read, written by a
/// foreign writer beside two good due ones: bytes that are not UTF-8 (a blob) and a text that
/// is no record. The good ones are sent, the unreadable ones moved aside into the quarantine
/// (listed, kept as they were stored), and the next poll is not blocked by them.
#[tokio::test]
async fn an_unreadable_due_record_on_sqlite_is_moved_aside_and_the_others_are_still_resumed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    let server = Server::start();
    let tenant = tenant("unreadable-due");
    let client = Client::builder()
        .store(SqliteStore::open(&path).unwrap())
        .retry(fast())
        .build()
        .unwrap();
    let record =
        |name: &str| ticket_record(&client, &server.tickets_url(), &tenant, name, name).to_json();
    let bytes = b"{\"v\":1,\xff\xfe}".to_vec();
    let raw = rusqlite::Connection::open(&path).unwrap();
    for name in ["payout-1", "payout-2"] {
        raw.execute(
            "INSERT INTO oncekey_pending (name, record) VALUES (?1, ?2)",
            [name, &record(name)],
        )
        .unwrap();
    }
    raw.execute(
        "INSERT INTO oncekey_pending (name, record) VALUES ('payout-bytes', ?1), ('payout-text', ?2)",
        rusqlite::params![bytes, "{\"v\":1,\"key\":"],
    )
    .unwrap();
    drop(raw);

    resume_two_good_and_two_unreadable(&client).await;
    let raw = rusqlite::Connection::open(&path).unwrap();
    let kept: Vec<u8> = raw
        .query_row(
            "SELECT record FROM oncekey_quarantine WHERE name = 'payout-bytes'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(kept, bytes, "kept byte for byte");
    drop(raw);
    assert!(client.pending().await.unwrap().is_empty());
    assert!(client.resume_due(10).await.unwrap().is_empty());
    assert_eq!(server.tickets(&tenant).await, 2, "each sent once");
}

#[tokio::test]
async fn a_client_needs_a_store_and_a_working_policy() {
    let e = Client::builder().build().unwrap_err();
    assert!(e.is_builder() && e.to_string().contains("store"), "{e}");
    let e = Client::builder()
        .store(MemoryStore::new())
        .retry(RetryPolicy {
            attempts: 0,
            ..RetryPolicy::default()
        })
        .build()
        .unwrap_err();
    assert!(
        e.is_builder() && e.to_string().contains("retry.attempts"),
        "{e}"
    );
    // "No timeout" written as Duration::MAX panicked at the first attempt (its deadline
    // overflowed): refused here, naming the bound.
    for (timeout, lease) in [
        (Duration::MAX, Duration::from_secs(30)),
        (Duration::from_secs(30), Duration::MAX),
        (Duration::from_secs(86_401), Duration::from_secs(30)),
    ] {
        let e = Client::builder()
            .store(MemoryStore::new())
            .timeout(timeout)
            .lease(lease)
            .build()
            .unwrap_err();
        assert!(
            e.is_builder() && e.to_string().contains("at most 1 day"),
            "{e}"
        );
    }
    let c = Client::builder()
        .store(MemoryStore::new())
        .timeout(Duration::from_secs(86_400))
        .build()
        .unwrap();
    let e = c
        .submission("x")
        .post("ftp://example.com/")
        .send()
        .await
        .unwrap_err();
    assert!(e.is_request(), "{e}");
    let e = c
        .submission("x")
        .json_text("{oops")
        .post("http://127.0.0.1:9/")
        .send()
        .await
        .unwrap_err();
    assert!(e.is_request(), "{e}");
}

#[tokio::test]
async fn a_record_restored_past_its_key_lifetime_is_not_sent_and_settles_expired() {
    let server = Server::start();
    let tenant = tenant("expired");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    // Left a day and a minute ago (24 h is the default lifetime; 5 minutes of margin).
    let store = SqliteStore::open(&path).unwrap();
    let key = left_behind(
        &store,
        &server.tickets_url(),
        &tenant,
        "old",
        Duration::from_secs(24 * 3600 + 60),
    );
    // And one left 23 h 50 min ago: inside the lifetime and its margin, it is resumed.
    let young = left_behind(
        &store,
        &server.tickets_url(),
        &tenant,
        "young",
        Duration::from_secs(23 * 3600 + 50 * 60),
    );
    drop(store);

    // The restart: a new client on the same file.
    let plan = Plan::new();
    let client = Client::builder()
        .store(SqliteStore::open(&path).unwrap())
        .retry(fast())
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let resumed = client.resume_pending().await.unwrap();
    let by = |n: &str| {
        resumed
            .iter()
            .find(|r| r.name == n)
            .map(|r| r.result.as_ref().unwrap())
            .unwrap()
    };
    let old = by("old");
    assert_eq!(old.outcome(), Outcome::Expired, "{old}");
    assert_eq!(old.key(), &key);
    assert_eq!(old.status(), None);
    assert_eq!(
        plan.attempts("old"),
        0,
        "nothing is sent with a key past its lifetime"
    );
    // The young one went out (unsure: its round's budget was spent before the restart; its
    // Try again sends it, with its key).
    let y = client.try_again("young").await.unwrap();
    assert_eq!((y.outcome(), y.key()), (Outcome::Succeeded, &young), "{y}");
    assert_eq!(
        server.tickets(&tenant).await,
        1,
        "the server saw only the young one"
    );

    // Still stored, with its key: neither resume, Try again nor the same send goes on with it.
    let pending = client.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].record.as_ref().unwrap().key, key);
    let again = client.try_again("old").await.unwrap();
    assert_eq!(again.outcome(), Outcome::Expired);
    let resent = client
        .submission("old")
        .post(&server.tickets_url())
        .header("X-Tenant", &tenant)
        .json(&ticket("old"))
        .unwrap()
        .send()
        .await
        .unwrap();
    assert_eq!(resent.outcome(), Outcome::Expired, "{resent}");
    assert_eq!(plan.attempts("old"), 0);
    assert_eq!(server.tickets(&tenant).await, 1);

    // Checked (no ticket "old" exists): sent as new, deliberately, under a new key.
    assert!(!server.subjects(&tenant).await.contains(&"old".to_owned()));
    let new = client.send_as_new("old").await.unwrap();
    assert_eq!(new.outcome(), Outcome::Succeeded, "{new}");
    assert_ne!(new.key(), &key, "a new key");
    assert_eq!(plan.keys("old"), vec![new.key().clone()]);
    assert_eq!(server.tickets(&tenant).await, 2);
    assert!(client.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn the_key_lifetime_is_the_clients_and_a_shorter_one_ends_a_submission_early() {
    // A server that keeps keys 2 s: usable for 1.8 s. Every attempt fails before the work, the
    // round ends unsure; past the lifetime, a Try again sends nothing and settles expired.
    let server = Server::start();
    let tenant = tenant("lifetime");
    let plan = Plan::new();
    plan.always("short", "fail-before");
    let client = Client::builder()
        .store(MemoryStore::new())
        .retry(RetryPolicy {
            attempts: 2,
            // The server's fail-before asks for a second (Retry-After: 1).
            budget: Duration::from_millis(1500),
            ..fast()
        })
        .key_lifetime(Duration::from_secs(2))
        .header_provider(plan.provider())
        .build()
        .unwrap();
    let s = send(&client, &server, &tenant, "short").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure, "{s}");
    assert_eq!(plan.attempts("short"), 2, "{s}");
    tokio::time::sleep(Duration::from_millis(1900)).await;
    let s = client.try_again("short").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Expired, "{s}");
    assert_eq!(plan.attempts("short"), 2, "nothing more was sent");
    assert_eq!(server.tickets(&tenant).await, 0);

    // A budget the lifetime cannot hold is a setup error that names both.
    let e = Client::builder()
        .store(MemoryStore::new())
        .key_lifetime(Duration::from_secs(60))
        .build()
        .unwrap_err();
    assert!(
        e.is_builder() && e.to_string().contains("key lifetime"),
        "{e}"
    );
}

/// The settlement does not wait for its record's removal (a store answering from a thread of its
/// own takes the removal in its order and syncs it with a later write), yet whatever comes after
/// finds it gone: a listing at once, the same message sent again at once (a new submission, so
/// a new key and a second ticket, not the old key resumed and replayed), and a process opening
/// the file once the client is closed.
#[tokio::test]
async fn after_a_definite_answer_nothing_that_follows_finds_the_record() {
    let server = Server::start();
    let tenant = tenant("forget");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    let plan = Plan::new();
    let c = client_on(Arc::new(SqliteStore::open(&path).unwrap()), &plan);
    for round in 1..=3 {
        let s = send(&c, &server, &tenant, "again").await.unwrap();
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        assert!(
            !s.replayed(),
            "round {round}: a new submission, not a replay"
        );
        assert!(
            c.pending().await.unwrap().is_empty(),
            "round {round}: nothing pending once settled"
        );
    }
    let keys = plan.keys("again");
    assert_eq!(keys.len(), 3, "{keys:?}");
    assert!(
        keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        "a new key each time: {keys:?}"
    );
    assert_eq!(server.tickets(&tenant).await, 3);
    drop(c);
    let reopened = SqliteStore::open(&path).unwrap();
    assert!(
        reopened.list().unwrap().is_empty(),
        "the removals were written when the client closed"
    );
}

/// A memory store with tweaks a test turns on: it answers from a thread of its own and holds
/// every removal back until released (`holds_removals`), or its listing still names a
/// submission another process settled (and removed) after the listing was made
/// (`lists_gone`).
#[derive(Default)]
struct Tweaked {
    inner: MemoryStore,
    holds_removals: bool,
    lists_gone: Option<&'static str>,
    held: std::sync::Mutex<Vec<(oncekey::StoreCall, oncekey::StoreReply)>>,
    /// Blocks (as a store across the network does, `PostgresStore`), and each removal waits
    /// until [`Tweaked::open_removals`], telling `removing` when it begins.
    blocks_removals: bool,
    removals_open: (std::sync::Mutex<bool>, std::sync::Condvar),
    removing: tokio::sync::Notify,
}

impl std::fmt::Debug for Tweaked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tweaked")
    }
}

impl Tweaked {
    fn held(&self) -> usize {
        self.held.lock().unwrap().len()
    }

    fn release(&self) {
        for (call, reply) in self.held.lock().unwrap().drain(..) {
            reply(call.run(&self.inner));
        }
    }

    fn open_removals(&self) {
        *self.removals_open.0.lock().unwrap() = true;
        self.removals_open.1.notify_all();
    }
}

impl Store for Tweaked {
    fn claim(
        &self,
        name: &str,
        lease: &oncekey::Lease,
        now: oncekey::Timestamp,
    ) -> Result<oncekey::Claim, oncekey::BoxError> {
        self.inner.claim(name, lease, now)
    }
    fn save(
        &self,
        name: &str,
        record: &str,
        lease: &oncekey::Lease,
    ) -> Result<bool, oncekey::BoxError> {
        self.inner.save(name, record, lease)
    }
    fn renew(&self, name: &str, lease: &oncekey::Lease) -> Result<bool, oncekey::BoxError> {
        self.inner.renew(name, lease)
    }
    fn remove(&self, name: &str, owner: &str) -> Result<bool, oncekey::BoxError> {
        if self.blocks_removals {
            self.removing.notify_one();
            let (open, changed) = &self.removals_open;
            let _open = changed
                .wait_while(open.lock().unwrap(), |open| !*open)
                .unwrap();
        }
        self.inner.remove(name, owner)
    }
    fn release(&self, name: &str, owner: &str) -> Result<(), oncekey::BoxError> {
        self.inner.release(name, owner)
    }
    fn list(&self) -> Result<Vec<oncekey::Listed>, oncekey::BoxError> {
        let mut listed = self.inner.list()?;
        if let Some(name) = self.lists_gone {
            listed.push(oncekey::Listed {
                name: name.into(),
                record: String::new(),
                lease: None,
            });
        }
        Ok(listed)
    }
    fn blocks(&self) -> bool {
        self.blocks_removals
    }
    fn starts(&self) -> bool {
        self.holds_removals
    }
    fn start(&self, call: oncekey::StoreCall, reply: oncekey::StoreReply) {
        if matches!(call, oncekey::StoreCall::Remove { .. }) {
            self.held.lock().unwrap().push((call, reply));
        } else {
            reply(call.run(&self.inner));
        }
    }
}

/// A store that blocks (`PostgresStore`, a store of one's own) and is slow to remove the record
/// of a definite answer: the answer reaches the caller without waiting for the removal, so a
/// caller that stops waiting then (its deadline, a dropped handler) has it, instead of sending
/// the same message again under a new key: one payment. A new submission of the name made
/// meanwhile waits for the removal, and goes out under a key of its own.
#[tokio::test]
async fn a_caller_that_stops_waiting_while_a_blocking_store_removes_the_record_has_its_answer() {
    let server = Server::start();
    let tenant = tenant("slow-removal");
    let store = Arc::new(Tweaked {
        blocks_removals: true,
        ..Tweaked::default()
    });
    // Opened however the test ends: a runtime waits for its blocked store calls as it ends.
    struct OpenAtEnd(Arc<Tweaked>);
    impl Drop for OpenAtEnd {
        fn drop(&mut self) {
            self.0.open_removals();
        }
    }
    let _open = OpenAtEnd(store.clone());
    let plan = Plan::new();
    let c = client_on(store.clone(), &plan);
    let sent = send(&c, &server, &tenant, "pay");
    tokio::pin!(sent);
    // The caller's deadline passes as soon as the store begins to remove the record.
    let settled = tokio::select! {
        biased;
        s = &mut sent => Some(s.unwrap()),
        () = store.removing.notified() => None,
    };
    let told = settled.is_some();
    let again = spawn_send(&c, &server, &tenant, "pay");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(told, "the caller had its answer before the removal ended");
    assert!(
        !again.is_finished(),
        "the name's next send waits for the removal"
    );
    assert_eq!(plan.attempts("pay"), 1);
    store.open_removals();
    let next = tokio::time::timeout(Duration::from_secs(20), again)
        .await
        .expect("the name's next send goes on once the removal ended")
        .unwrap()
        .unwrap();
    let s = settled.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    // Sent again once the answer was the caller's: a new submission, under a new key.
    assert_eq!(next.outcome(), Outcome::Succeeded, "{next}");
    assert_ne!(next.key(), s.key());
    assert!(!next.replayed());
    assert_eq!(server.tickets(&tenant).await, 2);
    assert!(c.pending().await.unwrap().is_empty());
}

/// A runtime that ends as soon as its send returned (a command line's, `oncekey send` on
/// PostgreSQL): the removal of the record, left to run after the settlement went out, is carried
/// out all the same, and nothing is left pending after a definite answer.
#[test]
fn a_runtime_that_ends_after_its_send_still_removes_the_record_from_a_blocking_store() {
    let server = Server::start();
    let tenant = tenant("runtime-ends");
    let store = Arc::new(Tweaked {
        blocks_removals: true,
        ..Tweaked::default()
    });
    store.open_removals();
    let plan = Plan::new();
    for name in ["first", "second", "third"] {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let s = runtime.block_on(async {
            let c = client_on(store.clone(), &plan);
            send(&c, &server, &tenant, name).await.unwrap()
        });
        drop(runtime);
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        let left = store.inner.list().unwrap();
        assert!(left.is_empty(), "{name}: left pending: {left:?}");
    }
}

#[tokio::test]
async fn the_settlement_does_not_wait_for_the_records_removal() {
    let server = Server::start();
    let tenant = tenant("no-wait");
    let store = Arc::new(Tweaked {
        holds_removals: true,
        ..Tweaked::default()
    });
    let plan = Plan::new();
    let c = client_on(store.clone(), &plan);
    // Awaited, the held removal would keep the settlement back for good.
    let s = tokio::time::timeout(Duration::from_secs(30), send(&c, &server, &tenant, "quick"))
        .await
        .expect("settled while the store still held the removal")
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    assert_eq!(server.tickets(&tenant).await, 1);
    assert_eq!(store.held(), 1, "the removal was started");
    assert_eq!(c.pending().await.unwrap().len(), 1, "not yet carried out");
    store.release();
    assert!(c.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_submission_settled_elsewhere_after_the_listing_is_not_a_failure_of_resume() {
    // Two `oncekey resume` at once, or `resume --wait` while the holder settles: the name is
    // listed, then gone when its turn comes. Resume reported "nothing is stored" as a failure
    // of that name, and the command line exited 1.
    let server = Server::start();
    let tenant = tenant("gone");
    let store = Arc::new(Tweaked {
        lists_gone: Some("settled-elsewhere"),
        ..Tweaked::default()
    });
    let plan = Plan::new();
    let client = client_on(store.clone(), &plan);
    plan.always("left", "fail-before");
    let left = send(&client, &server, &tenant, "left").await.unwrap();
    assert_eq!(left.outcome(), Outcome::Unsure, "{left}");
    plan.clear();
    let resumed = client.resume_pending().await.unwrap();
    let names: Vec<&str> = resumed.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["left"], "one result per submission still stored");
    assert!(resumed[0].result.is_ok(), "{:?}", resumed[0].result);
    // "Try again" of a name with nothing stored is still the caller's error.
    let none = client.try_again("settled-elsewhere").await.unwrap_err();
    assert!(none.is_request() && none.is_not_stored(), "{none}");
    assert!(none.to_string().contains("nothing is stored"), "{none}");
}

#[tokio::test]
async fn a_discard_is_synced_before_it_is_answered() {
    // CONTRACT.md section 5: only a removal after a definite answer may ride a later sync. A
    // discard lost in a power cut brought back a submission that was dropped on purpose, and the
    // next `oncekey resume` sent it, beside whatever was sent in its place under a new key.
    let server = Server::start();
    let tenant = tenant("discard-synced");
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap());
    let plan = Plan::new();
    plan.always("drop-me", "fail-before");
    let client = client_on(store.clone(), &plan);
    let s = send(&client, &server, &tenant, "drop-me").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Unsure, "{s}");
    // Nothing else is written after it: a removal left in the open transaction stays unsynced.
    let before = store.syncs();
    assert!(client.discard("drop-me").await.unwrap());
    assert!(
        store.syncs() > before,
        "the discard was answered with no sync of the removal ({before} syncs before and after)"
    );
    assert!(client.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_stored_record_whose_url_cannot_be_sent_is_moved_aside_and_named() {
    // A record put in the store by another writer (an outbox's enqueue, a hand-made Record)
    // with a URL no attempt can go to: every attempt failed as a "network error", the round
    // was spent, and the submission ended unsure, the URL never named.
    let store = Arc::new(MemoryStore::new());
    for (name, url) in [("relative", "/api/tickets"), ("ftp", "ftp://127.0.0.1/x")] {
        left_behind(&*store, url, "t", name, Duration::from_secs(1));
    }
    let plan = Plan::new();
    let client = client_on(store.clone(), &plan);
    let resumed = client.resume_pending().await.unwrap();
    assert_eq!(resumed.len(), 2);
    for r in &resumed {
        let e = r.result.as_ref().expect_err("nothing can be sent");
        assert!(e.is_unreadable_record(), "{}: {e}", r.name);
        assert!(e.to_string().contains("cannot be sent"), "{}: {e}", r.name);
    }
    assert_eq!(plan.attempts("relative") + plan.attempts("ftp"), 0);
    // Moved aside for an operator, as it was stored; the names are free.
    assert!(client.pending().await.unwrap().is_empty());
    assert_eq!(quarantined_names(&client).await, ["ftp", "relative"]);
}

#[tokio::test]
async fn every_attempt_finds_its_record_stored_before_it_is_sent() {
    // CONTRACT.md section 1: key and body are written before the first byte is sent, and each
    // retry's count before it goes. The header provider runs as an attempt is about to go: the
    // store is read then, in memory and on SQLite (whose first record rides the claim's commit).
    let server = Server::start();
    let dir = tempfile::tempdir().unwrap();
    for store in [
        Arc::new(MemoryStore::new()) as Arc<dyn Store>,
        Arc::new(SqliteStore::open(dir.path().join("s.db")).unwrap()),
    ] {
        let tenant = tenant("stored-first");
        let plan = Plan::new();
        plan.fault("t", 1, "fail-before");
        plan.fault("t", 2, "drop-reply");
        let faults = plan.provider();
        let problems: Arc<std::sync::Mutex<Vec<String>>> = Arc::default();
        let (seen, found) = (store.clone(), problems.clone());
        let provider = move |o: &oncekey::Outgoing<'_>| {
            let listed = seen.list().unwrap();
            let stored = listed
                .iter()
                .find(|l| l.name == o.name)
                .map(|l| oncekey::core::Record::from_json(&l.record).unwrap());
            match stored {
                Some(r) if r.key == *o.key && r.attempts == o.attempt => {}
                other => found.lock().unwrap().push(format!(
                    "attempt {} of {}: stored {:?}",
                    o.attempt,
                    o.key,
                    other.map(|r| (r.key, r.attempts))
                )),
            }
            oncekey::HeaderProvider::headers(&faults, o)
        };
        let client = Client::builder()
            .shared_store(store.clone())
            .retry(fast())
            .header_provider(provider)
            .build()
            .unwrap();
        let s = send(&client, &server, &tenant, "t").await.unwrap();
        assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
        assert_eq!(s.attempts(), 3);
        assert_eq!(*problems.lock().unwrap(), Vec::<String>::new());
        assert_eq!(server.tickets(&tenant).await, 1);
    }
}

/// A caller that stops waiting mid-attempt (a deadline of its own, or an axum handler dropped
/// because its client went away) drops the send's future: the submission stays stored with its
/// key, and goes on under that key, once: on memory and on SQLite, in the same client at once
/// (the same message again, twice at once; `resume_pending`; `try_again`), and in another
/// client on the file (another process) once the lease has run out.
#[tokio::test]
async fn a_send_dropped_mid_attempt_stays_pending_and_the_same_message_goes_on_under_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pending.db");
    for (store, label) in [
        (Arc::new(MemoryStore::new()) as Arc<dyn Store>, "memory"),
        (Arc::new(SqliteStore::open(&path).unwrap()), "sqlite"),
    ] {
        let server = Server::start();
        let tenant = tenant("dropped");
        let plan = Plan::new();
        // The server takes 400 ms over the first attempt; the caller does not wait for it.
        plan.fault("pay", 1, "delay=400");
        let c = client_on(store.clone(), &plan);
        give_up_mid_attempt(&c, &server, &tenant, "pay", &plan).await;
        let pending = c.pending().await.unwrap();
        assert_eq!(pending.len(), 1, "{label}: still stored: {pending:?}");
        let stored = pending[0].record.as_ref().unwrap();
        assert_eq!(stored.key, plan.keys("pay")[0], "{label}");

        // The same message again, twice at once: one submission, under the first key.
        let (a, b) = tokio::time::timeout(Duration::from_secs(20), async {
            tokio::join!(
                send(&c, &server, &tenant, "pay"),
                send(&c, &server, &tenant, "pay")
            )
        })
        .await
        .expect("the same message again settles: no call waits on the dropped send");
        for s in [a.unwrap(), b.unwrap()] {
            assert_eq!(s.outcome(), Outcome::Succeeded, "{label}: {s}");
            assert_eq!(s.key(), &plan.keys("pay")[0], "{label}");
        }
        let keys = plan.keys("pay");
        assert!(all_same(&keys), "{label}: {keys:?}");
        assert_eq!(server.tickets(&tenant).await, 1, "{label}");
        assert!(c.pending().await.unwrap().is_empty(), "{label}");

        // Dropped again, then found by the same client's resume and by Try again.
        for (name, resume) in [("pay-2", true), ("pay-3", false)] {
            plan.fault(name, 1, "delay=400");
            give_up_mid_attempt(&c, &server, &tenant, name, &plan).await;
            let s = if resume {
                let resumed = c.resume_pending().await.unwrap();
                assert_eq!(resumed.len(), 1, "{label}");
                resumed.into_iter().next().unwrap().result.unwrap()
            } else {
                c.try_again(name).await.unwrap()
            };
            assert_eq!(s.outcome(), Outcome::Succeeded, "{label} {name}: {s}");
            assert!(all_same(&plan.keys(name)), "{label} {name}");
            assert_eq!(s.key(), &plan.keys(name)[0], "{label} {name}");
        }
        assert_eq!(server.tickets(&tenant).await, 3, "{label}");
        assert!(c.pending().await.unwrap().is_empty(), "{label}");
    }

    // Another client on the file (another process) finds the lease held until it runs out (it
    // covers the dropped send's attempt, which may still be at the server, and then the
    // lease's time), and then takes the submission up with its key.
    let server = Server::start();
    let tenant = tenant("dropped-other");
    let plan = Plan::new();
    plan.fault("payout", 1, "delay=400");
    let (timeout, lease) = (Duration::from_millis(500), Duration::from_millis(600));
    let on_file = |plan: &Arc<Plan>| {
        Client::builder()
            .shared_store(Arc::new(
                SqliteStore::open(dir.path().join("other.db")).unwrap(),
            ))
            .retry(fast())
            .timeout(timeout)
            .lease(lease)
            .header_provider(plan.provider())
            .build()
            .unwrap()
    };
    let first = on_file(&plan);
    give_up_mid_attempt(&first, &server, &tenant, "payout", &plan).await;
    let other = on_file(&plan);
    let busy = send(&other, &server, &tenant, "payout").await.unwrap_err();
    assert!(busy.is_busy(), "{busy:?}");
    assert!(busy.to_string().contains("nothing was sent"), "{busy}");
    tokio::time::sleep(timeout + lease).await;
    let s = send(&other, &server, &tenant, "payout").await.unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    let keys = plan.keys("payout");
    assert!(all_same(&keys), "{keys:?}");
    assert_eq!(s.key(), &keys[0]);
    assert_eq!(server.tickets(&tenant).await, 1);
    assert!(other.pending().await.unwrap().is_empty());
}

/// Sends `name` and stops waiting once its first attempt is out (the server holds it longer):
/// the send's future is dropped mid-attempt, as a caller's deadline or a dropped handler does.
async fn give_up_mid_attempt(c: &Client, server: &Server, tenant: &str, name: &str, plan: &Plan) {
    let mut sent = Box::pin(send(c, server, tenant, name));
    let attempt_out = async {
        while plan.attempts(name) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::select! {
        s = &mut sent => panic!("{name} settled before its caller gave up: {s:?}"),
        () = attempt_out => {}
    }
    drop(sent);
}

/// Two calls of one message in one client (a person's double click reaching two handlers): the
/// second joins the first. When the first's caller stops waiting (its handler dropped), the
/// second goes on by itself, under the same key, and settles: one ticket.
#[tokio::test]
async fn a_joined_send_whose_leader_is_dropped_goes_on_under_the_same_key() {
    let server = Server::start();
    let tenant = tenant("leader-dropped");
    let plan = Plan::new();
    plan.fault("j", 1, "delay=400");
    let c = client(&plan);
    let leader = spawn_send(&c, &server, &tenant, "j");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let joined = spawn_send(&c, &server, &tenant, "j");
    tokio::time::sleep(Duration::from_millis(50)).await;
    leader.abort();
    let s = tokio::time::timeout(Duration::from_secs(20), joined)
        .await
        .expect("the joined call goes on, not left waiting")
        .unwrap()
        .unwrap();
    assert_eq!(s.outcome(), Outcome::Succeeded, "{s}");
    let keys = plan.keys("j");
    assert!(all_same(&keys), "{keys:?}");
    assert_eq!(server.tickets(&tenant).await, 1);
    assert!(c.pending().await.unwrap().is_empty());
}
