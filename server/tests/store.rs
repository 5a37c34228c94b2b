//! The claim as a lease, at the store's level: a holder whose lease was taken over cannot
//! complete, and its work is rolled back with the refused completion.

use oncekey_server::store::{
    self, Claim, ClaimRequest, Claimed, Failure, NewTicket, Store, Stored,
};

fn claim_request(token: i64, now: i64, fingerprint: &[u8]) -> ClaimRequest {
    ClaimRequest {
        tenant: "t".into(),
        key: "k".into(),
        fingerprint: fingerprint.to_vec(),
        token,
        now,
        lease_until: now + 1000,
        expired_before: 0,
    }
}

fn ticket() -> NewTicket {
    NewTicket {
        tenant: "t".into(),
        subject: "s".into(),
        body: "b".into(),
        email: "a@b.c".into(),
        created_at: "2026-01-01T00:00:00.000Z".into(),
    }
}

/// Inserts the ticket and completes the claim in one job, as the route does.
async fn work(store: &Store, c: ClaimRequest) -> Result<i64, Failure> {
    store
        .run(move |conn| {
            let t = store::insert_ticket(conn, &ticket(), Some(&c.key))?;
            let answer = Stored {
                status: 201,
                content_type: "application/json".into(),
                body: format!("{{\"id\":{}}}", t.id).into_bytes(),
            };
            store::complete(conn, &c, &answer, Some(t.id), c.now)?;
            Ok(t.id)
        })
        .await
}

async fn claim(store: &Store, c: &ClaimRequest) -> Claim {
    let c = c.clone();
    store.run(move |conn| store::claim(conn, &c)).await.unwrap()
}

async fn counts(store: &Store) -> store::Counts {
    store.run(|conn| store::counts(conn, "t")).await.unwrap()
}

#[tokio::test]
async fn an_expired_lease_is_taken_over_and_the_old_holder_cannot_complete() {
    let (store, writer) = Store::open(":memory:").unwrap();
    let a = claim_request(1, 1_000, b"fp");
    assert!(matches!(
        claim(&store, &a).await,
        Claim::Taken { took_over: false }
    ));
    // Within A's lease, B is told to wait.
    let early = claim_request(2, 1_500, b"fp");
    assert!(matches!(
        claim(&store, &early).await,
        Claim::InProgress { lease_until: 2_000 }
    ));
    // After it, B takes the key over.
    let b = claim_request(2, 2_500, b"fp");
    assert!(matches!(
        claim(&store, &b).await,
        Claim::Taken { took_over: true }
    ));
    // A wakes up and tries to finish: refused, and its ticket is rolled back.
    assert!(matches!(
        work(&store, a.clone()).await,
        Err(Failure::LostLease)
    ));
    assert_eq!(counts(&store).await.tickets, 0);
    // A's release (a 5xx path) does not free B's claim.
    store
        .run(move |conn| store::release(conn, &a))
        .await
        .unwrap();
    assert_eq!(counts(&store).await.processing, 1);
    let id = work(&store, b).await.unwrap();
    let after = counts(&store).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (1, 1, 0));
    // Later requests get the stored answer, or a conflict for another body.
    match claim(&store, &claim_request(3, 3_000, b"fp")).await {
        Claim::Done(stored) => assert_eq!(stored.body, format!("{{\"id\":{id}}}").into_bytes()),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        claim(&store, &claim_request(4, 3_000, b"other")).await,
        Claim::Conflict
    ));
    store.stop();
    writer.join();
}

#[tokio::test]
async fn a_receipt_older_than_its_ttl_is_forgotten() {
    let (store, writer) = Store::open(":memory:").unwrap();
    let first = claim_request(1, 1_000, b"fp");
    claim(&store, &first).await;
    work(&store, first).await.unwrap();
    let mut later = claim_request(2, 90_000, b"fp");
    later.expired_before = 50_000;
    assert!(matches!(
        claim(&store, &later).await,
        Claim::Taken { took_over: false }
    ));
    assert_eq!(
        store.run(|conn| store::sweep(conn, 100_000)).await.unwrap(),
        1
    );
    assert_eq!(counts(&store).await.receipts, 0);
    store.stop();
    writer.join();
}

#[tokio::test]
async fn a_failed_job_rolls_back_alone() {
    let (store, writer) = Store::open(":memory:").unwrap();
    let ok = store.run(|conn| store::insert_ticket(conn, &ticket(), None));
    let aborted = store.run(|conn| {
        store::insert_ticket(conn, &ticket(), None)?;
        Err::<(), _>(Failure::Aborted)
    });
    let (ok, aborted) = tokio::join!(ok, aborted);
    assert!(ok.is_ok());
    assert!(matches!(aborted, Err(Failure::Aborted)));
    assert_eq!(counts(&store).await.tickets, 1);
    store.stop();
    writer.join();
}

#[tokio::test]
async fn claim_then_work_commits_the_claim_then_the_work() {
    let (store, writer) = Store::open(":memory:").unwrap();
    let c = claim_request(1, 1_000, b"fp");
    let k = c.clone();
    let worked = store
        .claim_then(c.clone(), move |conn| {
            // The claim is already committed and visible when the work runs.
            let state: String = conn.query_row(
                "SELECT state FROM receipts WHERE tenant = ?1 AND key = ?2",
                [&k.tenant, &k.key],
                |r| r.get(0),
            )?;
            assert_eq!(state, "processing");
            let t = store::insert_ticket(conn, &ticket(), Some(&k.key))?;
            let answer = Stored {
                status: 201,
                content_type: "application/json".into(),
                body: b"{}".to_vec(),
            };
            store::complete(conn, &k, &answer, Some(t.id), k.now)?;
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
        .claim_then(claim_request(2, 1_100, b"fp"), |_| Ok(0))
        .await
        .unwrap();
    assert!(matches!(again, Claimed::Not(Claim::Done(_))));
    // Work that fails is rolled back alone; its claim stays until its lease ends.
    let failing = claim_request(3, 1_000, b"fp");
    let mut failing = failing;
    failing.key = "other".into();
    let f = failing.clone();
    let failed = store
        .claim_then(failing, move |conn| {
            store::insert_ticket(conn, &ticket(), Some(&f.key))?;
            Err::<(), _>(Failure::Aborted)
        })
        .await
        .unwrap();
    assert!(matches!(
        failed,
        Claimed::Worked {
            result: Err(Failure::Aborted),
            ..
        }
    ));
    let after = counts(&store).await;
    assert_eq!((after.tickets, after.receipts, after.processing), (1, 1, 1));
    store.stop();
    writer.join();
}

#[tokio::test]
async fn a_released_claim_frees_the_key_for_the_retry() {
    let (store, writer) = Store::open(":memory:").unwrap();
    let a = claim_request(1, 1_000, b"fp");
    claim(&store, &a).await;
    store
        .run_light(move |conn| store::release(conn, &a))
        .await
        .unwrap();
    assert_eq!(counts(&store).await.processing, 0);
    // Well within A's lease, the retry is not told to wait: nothing was done, it does the work.
    assert!(matches!(
        claim(&store, &claim_request(2, 1_001, b"fp")).await,
        Claim::Taken { took_over: false }
    ));
    store.stop();
    writer.join();
}
