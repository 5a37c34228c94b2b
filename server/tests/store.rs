//! The claim as a lease, at the store's level, on SQLite and on PostgreSQL: a holder whose
//! lease was taken over cannot complete, and its work is rolled back with the refused
//! completion. Requests carry this host's clock, as the route's do, and leases run out as time
//! passes: PostgreSQL judges them by its own clock (on this host too).

mod common;

use std::future::Future;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use oncekey_server::store::{
    ClaimRequest, Claimed, Counts, KeyClaim, NewTicket, Store, StoreError, Stored,
};

/// How long a test claim's lease lasts, in milliseconds.
const LEASE: i64 = 1000;

/// This host's clock, in Unix milliseconds.
fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Waits `ms` milliseconds: time passing, for leases and receipts to run out.
async fn wait(ms: i64) {
    tokio::time::sleep(Duration::from_millis(ms as u64)).await;
}

fn claim_request(token: i64, now: i64, fingerprint: &[u8]) -> ClaimRequest {
    ClaimRequest {
        tenant: "t".into(),
        key: "k".into(),
        fingerprint: fingerprint.to_vec(),
        token,
        now,
        lease_until: now + LEASE,
        expired_before: 0,
    }
}

/// Asserts that `found` is another request's live lease, as a request at `now` sees it: ending
/// after `now`, and at most one lease from it.
fn assert_held(found: &KeyClaim, now: i64) {
    match found {
        KeyClaim::InProgress { lease_until } => assert!(
            *lease_until > now && *lease_until <= now + LEASE,
            "a lease until {lease_until}, seen at {now}"
        ),
        other => panic!("the key is not held: {other:?}"),
    }
}

fn ticket() -> NewTicket {
    NewTicket {
        tenant: "t".into(),
        subject: "s".into(),
        body: "b".into(),
        email: "a@b.c".into(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
        attachments: Vec::new(),
    }
}

/// Runs `test` on a SQLite store in memory.
async fn on_sqlite<F: Future<Output = ()>>(test: impl FnOnce(Store) -> F) {
    let (store, writer) = Store::open(":memory:").unwrap();
    test(store.clone()).await;
    store.stop();
    writer.join();
}

/// Runs `test` on a PostgreSQL store in a fresh database, or says it is skipped.
async fn on_postgres<F: Future<Output = ()>>(name: &str, test: impl FnOnce(Store) -> F) {
    let Some(db) = common::pg::fresh(name) else {
        return;
    };
    let (store, writer) = Store::open_with(&db.url, 2).unwrap();
    test(store.clone()).await;
    store.stop();
    writer.join();
}

/// A test on both backends: `name::sqlite` and `name::postgres`.
macro_rules! on_both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn sqlite() {
                super::on_sqlite(super::$name).await;
            }

            #[tokio::test]
            async fn postgres() {
                super::on_postgres(
                    concat!("store::", stringify!($name), "::postgres"),
                    super::$name,
                )
                .await;
            }
        }
    };
}

/// Inserts the ticket and completes the claim in one job, as the route does.
async fn work(store: &Store, c: ClaimRequest) -> Result<i64, StoreError> {
    store
        .run(move |tx| {
            let t = tx.insert_ticket(&ticket(), Some(&c.key))?;
            let answer = Stored {
                status: 201,
                content_type: "application/json".into(),
                body: format!("{{\"id\":{}}}", t.id).into_bytes(),
            };
            tx.complete(&c, &answer, Some(t.id), c.now)?;
            Ok(t.id)
        })
        .await
}

async fn claim(store: &Store, c: &ClaimRequest) -> KeyClaim {
    let c = c.clone();
    store.run(move |tx| tx.claim(&c)).await.unwrap()
}

async fn counts(store: &Store) -> Counts {
    store.run(|tx| tx.counts("t")).await.unwrap()
}

on_both!(an_expired_lease_is_taken_over_and_the_old_holder_cannot_complete);
async fn an_expired_lease_is_taken_over_and_the_old_holder_cannot_complete(store: Store) {
    let a = claim_request(1, now(), b"fp");
    assert!(matches!(
        claim(&store, &a).await,
        KeyClaim::Taken { took_over: false }
    ));
    // Within A's lease, B is told to wait.
    let early = claim_request(2, now(), b"fp");
    assert_held(&claim(&store, &early).await, early.now);
    // After it, B takes the key over.
    wait(LEASE + 100).await;
    let b = claim_request(2, now(), b"fp");
    assert!(matches!(
        claim(&store, &b).await,
        KeyClaim::Taken { took_over: true }
    ));
    // A wakes up and tries to finish: refused, and its ticket is rolled back.
    assert!(matches!(
        work(&store, a.clone()).await,
        Err(StoreError::LostLease)
    ));
    assert_eq!(counts(&store).await.tickets, 0);
    // A's release (a 5xx path) does not free B's claim.
    store.run(move |tx| tx.release(&a)).await.unwrap();
    assert_eq!(counts(&store).await.processing, 1);
    let id = work(&store, b).await.unwrap();
    let after = counts(&store).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (1, 1, 0));
    // Later requests get the stored answer, or a conflict for another body.
    match claim(&store, &claim_request(3, now(), b"fp")).await {
        KeyClaim::Done(stored) => assert_eq!(stored.body, format!("{{\"id\":{id}}}").into_bytes()),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        claim(&store, &claim_request(4, now(), b"other")).await,
        KeyClaim::Conflict
    ));
}

on_both!(a_receipt_older_than_its_ttl_is_forgotten);
async fn a_receipt_older_than_its_ttl_is_forgotten(store: Store) {
    const TTL: i64 = 1000;
    let keeping = |token| {
        let mut c = claim_request(token, now(), b"fp");
        c.expired_before = c.now - TTL;
        c
    };
    let sweep = |store: &Store| {
        let t = now();
        let store = store.clone();
        async move { store.run(move |tx| tx.sweep(t, t - TTL)).await.unwrap() }
    };
    let first = keeping(1);
    claim(&store, &first).await;
    work(&store, first).await.unwrap();
    // Within its time to live, the receipt answers and stays.
    assert!(matches!(
        claim(&store, &keeping(2)).await,
        KeyClaim::Done(_)
    ));
    assert_eq!(sweep(&store).await, 0);
    wait(TTL + 100).await;
    let later = keeping(2);
    assert!(matches!(
        claim(&store, &later).await,
        KeyClaim::Taken { took_over: false }
    ));
    // The renewed claim is this request's: it completes.
    work(&store, later).await.unwrap();
    wait(TTL + 100).await;
    assert_eq!(sweep(&store).await, 1);
    assert_eq!(counts(&store).await.receipts, 0);
}

on_both!(a_failed_job_rolls_back_alone);
async fn a_failed_job_rolls_back_alone(store: Store) {
    let ok = store.run(|tx| tx.insert_ticket(&ticket(), None));
    let aborted = store.run(|tx| {
        tx.insert_ticket(&ticket(), None)?;
        Err::<(), _>(StoreError::Aborted)
    });
    let (ok, aborted) = tokio::join!(ok, aborted);
    assert!(ok.is_ok());
    assert!(matches!(aborted, Err(StoreError::Aborted)));
    assert_eq!(counts(&store).await.tickets, 1);
}

on_both!(claim_then_work_commits_the_claim_then_the_work);
async fn claim_then_work_commits_the_claim_then_the_work(store: Store) {
    let c = claim_request(1, now(), b"fp");
    let k = c.clone();
    let worked = store
        .claim_then(c.clone(), move |tx| {
            // The claim is already committed and visible when the work runs.
            assert_eq!(tx.counts(&k.tenant)?.processing, 1);
            let t = tx.insert_ticket(&ticket(), Some(&k.key))?;
            let answer = Stored {
                status: 201,
                content_type: "application/json".into(),
                body: b"{}".to_vec(),
            };
            tx.complete(&k, &answer, Some(t.id), k.now)?;
            Ok(t.id)
        })
        .await
        .unwrap();
    assert!(matches!(
        worked,
        Claimed::Worked {
            took_over: false,
            result: Ok(_)
        }
    ));
    let again = store
        .claim_then(claim_request(2, now(), b"fp"), |_| Ok(0))
        .await
        .unwrap();
    assert!(matches!(again, Claimed::Not(KeyClaim::Done(_))));
    // Work that fails is rolled back alone; its claim stays until its lease ends.
    let mut failing = claim_request(3, now(), b"fp");
    failing.key = "other".into();
    let f = failing.clone();
    let failed = store
        .claim_then(failing, move |tx| {
            tx.insert_ticket(&ticket(), Some(&f.key))?;
            Err::<(), _>(StoreError::Aborted)
        })
        .await
        .unwrap();
    assert!(matches!(
        failed,
        Claimed::Worked {
            result: Err(StoreError::Aborted),
            ..
        }
    ));
    let after = counts(&store).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (1, 1, 1));
}

on_both!(a_work_that_does_not_complete_leaves_its_claim_held);
/// A work that ends without completing keeps the key's claim (until its lease ends), and one
/// that gives its claim up leaves the key free: as with a claim written before the work.
async fn a_work_that_does_not_complete_leaves_its_claim_held(store: Store) {
    let held = claim_request(1, now(), b"fp");
    let worked = store.claim_then(held, |_| Ok(())).await.unwrap();
    assert!(matches!(worked, Claimed::Worked { result: Ok(()), .. }));
    assert_eq!(counts(&store).await.processing, 1);
    let other = claim_request(2, now(), b"fp");
    assert_held(&claim(&store, &other).await, other.now);
    let mut given_up = claim_request(3, now(), b"fp");
    given_up.key = "other".into();
    let g = given_up.clone();
    store
        .claim_then(given_up, move |tx| tx.release(&g))
        .await
        .unwrap();
    let mut retry = claim_request(4, now(), b"fp");
    retry.key = "other".into();
    assert!(matches!(
        claim(&store, &retry).await,
        KeyClaim::Taken { took_over: false }
    ));
}

on_both!(another_claim_on_the_key_inside_its_work_finds_it_held);
/// Inside a claim's work, another request's claim on the same key finds it held, as it would
/// if the claim had been written before the work; the key keeps one receipt.
async fn another_claim_on_the_key_inside_its_work_finds_it_held(store: Store) {
    let ours = claim_request(1, now(), b"fp");
    let theirs = claim_request(2, now(), b"fp");
    let at = theirs.now;
    let worked = store
        .claim_then(ours, move |tx| tx.claim(&theirs))
        .await
        .unwrap();
    match worked {
        Claimed::Worked {
            result: Ok(found), ..
        } => assert_held(&found, at),
        other => panic!("{other:?}"),
    }
    let after = counts(&store).await;
    assert_eq!((after.receipts, after.processing), (0, 1));
}

on_both!(a_released_claim_frees_the_key_for_the_retry);
async fn a_released_claim_frees_the_key_for_the_retry(store: Store) {
    let a = claim_request(1, now(), b"fp");
    claim(&store, &a).await;
    store.run_light(move |tx| tx.release(&a)).await.unwrap();
    assert_eq!(counts(&store).await.processing, 0);
    // Well within A's lease, the retry is not told to wait: nothing was done, it does the work.
    assert!(matches!(
        claim(&store, &claim_request(2, now(), b"fp")).await,
        KeyClaim::Taken { took_over: false }
    ));
}

on_both!(many_claimers_of_one_key_take_turns);
/// Concurrent claims on one key (on PostgreSQL, from several connections at once): one is
/// granted, the others wait their turn and see it held, or done.
async fn many_claimers_of_one_key_take_turns(store: Store) {
    let mut tasks = Vec::new();
    for token in 0..40 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let c = claim_request(token, now(), b"fp");
            let k = c.clone();
            store
                .claim_then(c, move |tx| {
                    let t = tx.insert_ticket(&ticket(), Some(&k.key))?;
                    let answer = Stored {
                        status: 201,
                        content_type: "application/json".into(),
                        body: b"{}".to_vec(),
                    };
                    tx.complete(&k, &answer, Some(t.id), k.now)
                })
                .await
                .unwrap()
        }));
    }
    let mut worked = 0;
    for task in tasks {
        match task.await.unwrap() {
            Claimed::Worked { result, .. } => {
                result.unwrap();
                worked += 1;
            }
            Claimed::Not(KeyClaim::InProgress { .. } | KeyClaim::Done(_)) => {}
            Claimed::Not(other) => panic!("{other:?}"),
        }
    }
    assert_eq!(worked, 1);
    let after = counts(&store).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (1, 1, 0));
}

/// Nothing here is specific to a backend but the opening.
#[test]
fn a_newer_sqlite_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let path = path.to_str().unwrap();
    {
        let conn = rusqlite::Connection::open(path).unwrap();
        conn.execute_batch("PRAGMA user_version = 7").unwrap();
    }
    let err = Store::open(path).unwrap_err().to_string();
    assert!(err.contains("schema version 7"), "{err}");
    assert!(err.contains("newer"), "{err}");
}

on_both!(attachments_are_written_and_rolled_back_with_their_ticket);
async fn attachments_are_written_and_rolled_back_with_their_ticket(store: Store) {
    let with_file = |bytes: &[u8]| NewTicket {
        attachments: vec![oncekey_server::store::NewAttachment {
            name: "a.bin".into(),
            media_type: "application/octet-stream".into(),
            bytes: bytes.to_vec(),
            sha256: vec![1; 32],
        }],
        ..ticket()
    };
    // A completion that finds its lease taken over rolls the ticket back, its file with it.
    let lost = with_file(b"lost");
    let a = claim_request(1, now(), b"fp");
    claim(&store, &a).await;
    wait(LEASE + 100).await;
    assert!(matches!(
        claim(&store, &claim_request(2, now(), b"fp")).await,
        KeyClaim::Taken { took_over: true }
    ));
    let rolled_back = store
        .run(move |tx| {
            let t = tx.insert_ticket(&lost, Some(&a.key))?;
            let answer = Stored {
                status: 201,
                content_type: "application/json".into(),
                body: b"{}".to_vec(),
            };
            tx.complete(&a, &answer, Some(t.id), a.now)?;
            Ok(t.id)
        })
        .await;
    assert!(matches!(rolled_back, Err(StoreError::LostLease)));
    let kept = with_file(b"kept");
    let id = store
        .run(move |tx| tx.insert_ticket(&kept, None))
        .await
        .unwrap()
        .id;
    let listed = store.run(|tx| tx.list_tickets("t", 10)).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].attachments.len(), 1);
    assert_eq!(listed[0].attachments[0].size, 4);
    assert_eq!(listed[0].attachments[0].sha256, "01".repeat(32));
    let file = store
        .run(move |tx| tx.attachment("t", id, 0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(file.bytes, b"kept");
    // Only the kept ticket's file is in the table: the rolled back one left none.
    for n in [1, -1] {
        assert!(store
            .run(move |tx| tx.attachment("t", id, n))
            .await
            .unwrap()
            .is_none());
    }
    assert!(store
        .run(move |tx| tx.attachment("t", id - 1, 0))
        .await
        .unwrap()
        .is_none());
    assert!(store
        .run(move |tx| tx.attachment("other", id, 0))
        .await
        .unwrap()
        .is_none());
}

/// Ten minutes, in milliseconds: how far a server's clock is off in the fleet below.
const TEN_MINUTES: i64 = 10 * 60 * 1000;

/// Servers of a fleet on one PostgreSQL database whose clocks disagree: one right, one ten
/// minutes ahead, one ten minutes behind. Each request carries its server's clock, as the
/// route's do (`--receipt-ttl 5m` here). Claims, receipts and sweeps are judged by the
/// database's clock: the server ahead never does a live claim's work a second time, nor
/// forgets or sweeps a young receipt; a claim or receipt truly run out is still taken over or
/// swept, by any of them. (SQLite is one host's: its requests share a clock.)
#[tokio::test]
async fn servers_whose_clocks_disagree_judge_claims_by_the_databases_clock() {
    let Some(db) = common::pg::fresh(
        "store::servers_whose_clocks_disagree_judge_claims_by_the_databases_clock",
    ) else {
        return;
    };
    let [(right, w1), (ahead, w2), (behind, w3)] =
        [(); 3].map(|()| Store::open_with(&db.url, 2).unwrap());
    let fast = || now() + TEN_MINUTES;
    let slow = || now() - TEN_MINUTES;
    const TTL: i64 = 5 * 60 * 1000;
    let request = |key: &str, token: i64, now: i64, lease: i64| ClaimRequest {
        tenant: "t".into(),
        key: key.into(),
        fingerprint: b"fp".to_vec(),
        token,
        now,
        lease_until: now + lease,
        expired_before: now - TTL,
    };
    let sweep = |store: &Store, now: i64, ttl: i64| {
        let store = store.clone();
        async move { store.run(move |tx| tx.sweep(now, now - ttl)).await.unwrap() }
    };

    // The right server claims payout-77 for two seconds; the one ahead is told it is in
    // progress (its 409), the lease shown on its own clock.
    let held = request("payout-77", 1, now(), 2000);
    assert!(matches!(
        claim(&right, &held).await,
        KeyClaim::Taken { took_over: false }
    ));
    let early = request("payout-77", 2, fast(), 60_000);
    match claim(&ahead, &early).await {
        KeyClaim::InProgress { lease_until } => assert!(
            lease_until > early.now && lease_until <= early.now + 2000,
            "shown on the server ahead's clock: {lease_until} at {}",
            early.now
        ),
        other => panic!("the server ahead took a live claim: {other:?}"),
    }
    // The server behind claims payout-78 for a minute: the right server does not take it.
    let its = request("payout-78", 3, slow(), 60_000);
    assert!(matches!(
        claim(&behind, &its).await,
        KeyClaim::Taken { took_over: false }
    ));
    match claim(&right, &request("payout-78", 4, now(), 60_000)).await {
        KeyClaim::InProgress { .. } => {}
        other => panic!("the server behind's claim was taken: {other:?}"),
    }
    // payout-77 completes, its lease never taken; the server ahead replays it, and its sweep
    // keeps it: not five minutes old by the database's clock.
    let id = work(&right, held).await.unwrap();
    match claim(&ahead, &request("payout-77", 5, fast(), 60_000)).await {
        KeyClaim::Done(stored) => {
            assert_eq!(stored.body, format!("{{\"id\":{id}}}").into_bytes())
        }
        other => panic!("the server ahead forgot a young receipt: {other:?}"),
    }
    assert_eq!(
        sweep(&ahead, fast(), TTL).await,
        0,
        "the server ahead swept"
    );

    // The right server dies holding payout-79 for half a second: once that truly ran out, the
    // server ahead takes it over, and the dead one's completion is refused.
    let dead = request("payout-79", 6, now(), 500);
    assert!(matches!(
        claim(&right, &dead).await,
        KeyClaim::Taken { took_over: false }
    ));
    wait(700).await;
    let takeover = request("payout-79", 7, fast(), 60_000);
    assert!(matches!(
        claim(&ahead, &takeover).await,
        KeyClaim::Taken { took_over: true }
    ));
    assert!(matches!(
        work(&right, dead).await,
        Err(StoreError::LostLease)
    ));
    work(&ahead, takeover).await.unwrap();
    let after = counts(&right).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (2, 2, 1));
    // Receipts older than the server behind's time to live (half a second here) are swept by
    // it: payout-77, -78 and -79, made more than 700 ms ago.
    assert_eq!(sweep(&behind, slow(), 500).await, 3);
    for (store, writer) in [(right, w1), (ahead, w2), (behind, w3)] {
        store.stop();
        writer.join();
    }
}

/// Before, on SQLite the ticket list was a job of the writer thread, the one that claims keys
/// and commits tickets: a long list held up every ticket meanwhile. It is read on a connection
/// of its own: a list is answered while the writer is busy.
#[tokio::test]
async fn on_a_sqlite_file_a_ticket_list_does_not_wait_for_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tickets.db");
    let (store, writer) = Store::open(path.to_str().unwrap()).unwrap();
    store
        .run(|tx| tx.insert_ticket(&ticket(), None).map(drop))
        .await
        .unwrap();
    // A job that holds the writer thread until told to go on.
    let (go, wait) = std::sync::mpsc::channel::<()>();
    let (holding, held) = tokio::sync::oneshot::channel();
    let busy = tokio::spawn({
        let store = store.clone();
        let job = move |_: &mut dyn oncekey_server::store::Tx| {
            let _ = holding.send(());
            Ok(wait.recv().ok())
        };
        async move { store.run_light(job).await }
    });
    held.await.unwrap();
    let listed = tokio::time::timeout(Duration::from_secs(5), store.list_tickets("t".into(), 10))
        .await
        .expect("listed while the writer is busy")
        .unwrap();
    assert_eq!(listed.len(), 1);
    go.send(()).unwrap();
    busy.await.unwrap().unwrap();
    store.stop();
    writer.join();
}
