//! Every row of the server's side of the contract, over real HTTP on 127.0.0.1.

mod common;

use std::time::Duration;

use common::{send, send_until_definite, Answer, Desk, TICKET};
use oncekey_server::Config;

#[tokio::test]
async fn a_first_request_creates_the_ticket() {
    let desk = Desk::start("create").await;
    let answer = send(desk.post(Some("k-create"), TICKET)).await;
    assert_eq!(answer.status, 201);
    assert!(!answer.replayed);
    assert_eq!(answer.content_type, "application/json");
    let ticket = answer.json();
    assert_eq!(ticket["subject"], "Printer on fire");
    assert_eq!(ticket["body"], "Third floor, again.");
    assert_eq!(ticket["email"], "ada@example.com");
    assert!(ticket["id"].is_i64());
    assert!(ticket["createdAt"].as_str().unwrap().ends_with('Z'));
    assert_eq!(desk.tickets().await, vec![ticket]);
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("receipts").await, 1);
}

#[tokio::test]
async fn a_missing_key_is_a_400_naming_the_header_and_does_nothing() {
    let desk = Desk::start("missing-key").await;
    let answer = send(desk.post(None, TICKET)).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.content_type, "application/problem+json");
    let problem = answer.json();
    assert_eq!(problem["status"], 400);
    assert!(problem["type"].is_string() && problem["title"].is_string());
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("Idempotency-Key"));
    assert_eq!(answer.invalid_names(), ["Idempotency-Key"]);
    assert_eq!(desk.stat("tickets").await, 0);
    assert_eq!(desk.stat("receipts").await, 0);
}

#[tokio::test]
async fn a_malformed_key_is_a_400_naming_the_header() {
    let desk = Desk::start("bad-key").await;
    let long = "k".repeat(256);
    for bad in ["\"unfinished", "\"\"", "a\tb", long.as_str()] {
        let answer = send(desk.post(Some(bad), TICKET)).await;
        assert_eq!(answer.status, 400, "{bad:?}");
        assert_eq!(answer.content_type, "application/problem+json");
        assert_eq!(answer.invalid_names(), ["Idempotency-Key"], "{bad:?}");
    }
    let twice = desk
        .post(Some("one"), TICKET)
        .header("Idempotency-Key", "two");
    assert_eq!(send(twice).await.invalid_names(), ["Idempotency-Key"]);
    assert_eq!(desk.stat("tickets").await, 0);
}

#[tokio::test]
async fn a_repeat_gets_the_first_answer_byte_for_byte() {
    let desk = Desk::start("replay").await;
    let first = send(desk.post(Some("k-replay"), TICKET)).await;
    assert_eq!(first.status, 201);
    for _ in 0..3 {
        let again = send(desk.post(Some("k-replay"), TICKET)).await;
        assert_eq!(again.status, 201);
        assert!(again.replayed);
        assert_eq!(again.content_type, first.content_type);
        assert_eq!(again.body, first.body);
    }
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("replays").await, 3);
}

#[tokio::test]
async fn bare_and_structured_field_keys_are_the_same_key() {
    let desk = Desk::start("sf-string").await;
    let first = send(desk.post(Some("k-sf"), TICKET)).await;
    let quoted = send(desk.post(Some("\"k-sf\""), TICKET)).await;
    assert!(quoted.replayed);
    assert_eq!(quoted.body, first.body);
    assert_eq!(desk.stat("tickets").await, 1);
}

/// The IETF draft defines Idempotency-Key as an RFC 8941 string Item, which may carry
/// parameters. Before, `"k-param";p=1` was refused as a malformed key (a 400 naming the
/// header); its parameters are now checked and ignored, and anything else after the string is
/// still a 400.
#[tokio::test]
async fn a_structured_field_key_with_parameters_is_the_same_key() {
    let desk = Desk::start("sf-params").await;
    let first = send(desk.post(Some("\"k-param\";p=1"), TICKET)).await;
    assert_eq!(
        first.status,
        201,
        "{}",
        String::from_utf8_lossy(&first.body)
    );
    for same in ["k-param", "\"k-param\"", "\"k-param\";q=\"x\";r=?1"] {
        let again = send(desk.post(Some(same), TICKET)).await;
        assert!(again.replayed, "{same}");
        assert_eq!(again.body, first.body, "{same}");
    }
    for bad in ["\"k-param\" x", "\"k-param\";P=1", "\"k-param\";p="] {
        let answer = send(desk.post(Some(bad), TICKET)).await;
        assert_eq!(answer.status, 400, "{bad}");
        assert_eq!(answer.invalid_names(), ["Idempotency-Key"], "{bad}");
    }
    assert_eq!(desk.stat("tickets").await, 1);
}

#[tokio::test]
async fn the_same_fields_in_another_order_or_as_a_form_are_the_same_body() {
    let desk = Desk::start("normalized").await;
    let first = send(desk.post(Some("k-norm"), TICKET)).await;
    let reordered = r#"{ "email": "ada@example.com", "body": "Third floor, again.",
        "subject": "Printer on fire" }"#;
    let again = send(desk.post(Some("k-norm"), reordered)).await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    let form = desk.post_form(
        Some("k-norm"),
        "subject=Printer+on+fire&email=ada%40example.com&body=Third+floor%2C+again.",
    );
    let as_form = send(form).await;
    assert!(as_form.replayed);
    assert_eq!(as_form.body, first.body);
    assert_eq!(desk.stat("tickets").await, 1);
}

#[tokio::test]
async fn a_form_body_creates_a_ticket() {
    let desk = Desk::start("form").await;
    let form = desk.request(
        "/api/tickets",
        &desk.tenant,
        Some("k-form"),
        "application/x-www-form-urlencoded; charset=UTF-8",
        "subject=Hi&body=&email=b%40c.de",
    );
    let answer = send(form).await;
    assert_eq!(answer.status, 201);
    assert_eq!(answer.json()["email"], "b@c.de");
    assert_eq!(answer.json()["body"], "");
}

#[tokio::test]
async fn the_same_key_with_another_body_is_a_422_and_changes_nothing() {
    let desk = Desk::start("conflict").await;
    let first = send(desk.post(Some("k-conflict"), TICKET)).await;
    let other = TICKET.replace("Third floor", "Fourth floor");
    let answer = send(desk.post(Some("k-conflict"), &other)).await;
    assert_eq!(answer.status, 422);
    assert!(!answer.replayed);
    assert_eq!(answer.content_type, "application/problem+json");
    let problem = answer.json();
    assert_eq!(problem["status"], 422);
    assert!(problem["detail"].as_str().unwrap().contains("different"));
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("conflicts").await, 1);
    // The key still answers its own body.
    let again = send(desk.post(Some("k-conflict"), TICKET)).await;
    assert_eq!(again.body, first.body);
}

async fn refused(desk: &Desk, key: &str, body: &str) -> Answer {
    let answer = send(desk.post(Some(key), body)).await;
    assert_eq!(answer.status, 400, "{body}");
    assert_eq!(answer.content_type, "application/problem+json");
    assert_eq!(answer.json()["status"], 400);
    answer
}

#[tokio::test]
async fn invalid_fields_are_400s_that_name_each_field() {
    let desk = Desk::start("invalid").await;
    let empty = r#"{"subject":"  ","body":"x","email":"ada@example.com"}"#;
    assert_eq!(
        refused(&desk, "k1", empty).await.invalid_names(),
        ["subject"]
    );
    let long = format!(
        r#"{{"subject":"{}","body":"x","email":"ada@example.com"}}"#,
        "é".repeat(201)
    );
    let answer = refused(&desk, "k2", &long).await;
    assert_eq!(answer.invalid_names(), ["subject"]);
    assert!(answer.json()["detail"].as_str().unwrap().contains("200"));
    let exactly_200 = format!(
        r#"{{"subject":"{}","body":"x","email":"ada@example.com"}}"#,
        "é".repeat(200)
    );
    assert_eq!(send(desk.post(Some("k3"), &exactly_200)).await.status, 201);
    let bad_email = r#"{"subject":"s","body":"x","email":"ada.example.com"}"#;
    assert_eq!(
        refused(&desk, "k4", bad_email).await.invalid_names(),
        ["email"]
    );
    let both = r#"{"subject":"","body":"x","email":"nope"}"#;
    assert_eq!(
        refused(&desk, "k5", both).await.invalid_names(),
        ["subject", "email"]
    );
    let missing = r#"{"subject":"s"}"#;
    assert_eq!(
        refused(&desk, "k6", missing).await.invalid_names(),
        ["body", "email"]
    );
    let wrong_type = r#"{"subject":7,"body":"x","email":"ada@example.com"}"#;
    assert_eq!(
        refused(&desk, "k7", wrong_type).await.invalid_names(),
        ["subject"]
    );
    assert_eq!(
        refused(&desk, "k8", "{not json").await.invalid_names(),
        ["body"]
    );
    assert_eq!(
        refused(&desk, "k9", "[1,2]").await.invalid_names(),
        ["body"]
    );
    let text = desk.request(
        "/api/tickets",
        &desk.tenant,
        Some("k10"),
        "text/plain",
        "hello",
    );
    assert_eq!(send(text).await.invalid_names(), ["Content-Type"]);
    // A NUL (which PostgreSQL's text refuses: a 503 on every retry) or another control
    // character is bad input, named; a multi-line body with a tab is not.
    let nul = r#"{"subject":"a\u0000b","body":"x","email":"ada@example.com"}"#;
    let answer = refused(&desk, "k11", nul).await;
    assert_eq!(answer.invalid_names(), ["subject"]);
    assert!(answer.json()["detail"].as_str().unwrap().contains("U+0000"));
    let bell = r#"{"subject":"s","body":"ring \u0007","email":"ada@example.com"}"#;
    assert_eq!(refused(&desk, "k12", bell).await.invalid_names(), ["body"]);
    let lines = r#"{"subject":"s","body":"line 1\r\nline 2\tend","email":"ada@example.com"}"#;
    assert_eq!(send(desk.post(Some("k13"), lines)).await.status, 201);
    assert_eq!(desk.stat("tickets").await, 2);
}

/// Before, the request's media type was quoted whole (Debug-formatted) in its stored `400`;
/// now a problem document quotes at most 40 characters of what the client sent.
#[tokio::test]
async fn a_long_content_type_is_quoted_cut_short_in_its_400() {
    let desk = Desk::start("long-content-type").await;
    let media = format!("text/{}", "x".repeat(8000));
    let request = desk.request("/api/tickets", &desk.tenant, Some("k1"), &media, "hello");
    let answer = send(request).await;
    assert_eq!(answer.invalid_names(), ["Content-Type"]);
    let reason = &answer.json()["invalid-params"][0]["reason"];
    let quoted = format!("\"text/{}...\"", "x".repeat(35));
    assert!(reason.as_str().unwrap().ends_with(&quoted), "{reason}");
    assert!(
        answer.body.len() < 1024,
        "a {} byte answer",
        answer.body.len()
    );
}

#[tokio::test]
async fn a_body_over_64_kib_is_a_413() {
    let desk = Desk::start("too-large").await;
    let body = format!(
        r#"{{"subject":"s","body":"{}","email":"ada@example.com"}}"#,
        "x".repeat(64 * 1024)
    );
    let answer = send(desk.post(Some("k-large"), &body)).await;
    assert_eq!(answer.status, 413);
    assert_eq!(answer.content_type, "application/problem+json");
    assert_eq!(answer.invalid_names(), ["body"]);
    assert!(answer.json()["detail"].as_str().unwrap().contains("65536"));
    assert_eq!(desk.stat("tickets").await, 0);
}

#[tokio::test]
async fn a_refusal_is_stored_and_refused_again_not_created() {
    let desk = Desk::start("refusal-replay").await;
    let empty = r#"{"subject":"","body":"x","email":"ada@example.com"}"#;
    let first = refused(&desk, "k-refused", empty).await;
    assert!(!first.replayed);
    let again = refused(&desk, "k-refused", empty).await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    // Not JSON at all is stored too: the same bytes are refused again.
    let first = refused(&desk, "k-garbage", "{oops").await;
    let again = refused(&desk, "k-garbage", "{oops").await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
    // A correct body under a refused key is another body: 422, never a ticket.
    assert_eq!(send(desk.post(Some("k-refused"), TICKET)).await.status, 422);
    assert_eq!(desk.stat("tickets").await, 0);
    assert_eq!(desk.stat("receipts").await, 2);
}

#[tokio::test]
async fn a_key_in_progress_is_a_409_with_retry_after() {
    let desk = Desk::start("in-progress").await;
    let slow = desk
        .post(Some("k-slow"), TICKET)
        .header("X-Fault", "delay=400");
    let first = tokio::spawn(send(slow));
    desk.wait_for_stat("processing", 1).await;
    let second = send(desk.post(Some("k-slow"), TICKET)).await;
    assert_eq!(second.status, 409);
    assert_eq!(second.retry_after.as_deref(), Some("1"));
    assert_eq!(second.content_type, "application/problem+json");
    let first = first.await.unwrap();
    assert_eq!(first.status, 201);
    let third = send(desk.post(Some("k-slow"), TICKET)).await;
    assert!(third.replayed);
    assert_eq!(third.body, first.body);
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("in_progress").await, 1);
}

async fn one_key_many_senders(desk: &Desk, fault: Option<&str>) {
    let key = "k-stampede";
    let mut tasks = Vec::new();
    for _ in 0..100 {
        let mut request = desk.post(Some(key), TICKET);
        if let Some(fault) = fault {
            request = request.header("X-Fault", fault);
        }
        tasks.push(tokio::spawn(send(request)));
    }
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let created: Vec<_> = answers
        .iter()
        .filter(|a| a.status == 201 && !a.replayed)
        .collect();
    assert_eq!(created.len(), 1, "exactly one request did the work");
    for a in &answers {
        match a.status {
            201 => assert_eq!(a.body, created[0].body),
            409 => assert_eq!(a.retry_after.as_deref(), Some("1")),
            other => panic!("unexpected {other}: {}", String::from_utf8_lossy(&a.body)),
        }
    }
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.tickets().await.len(), 1);
}

#[tokio::test]
async fn a_hundred_concurrent_requests_with_one_key_make_one_ticket() {
    let desk = Desk::start("stampede").await;
    one_key_many_senders(&desk, None).await;
}

#[tokio::test]
async fn a_hundred_concurrent_slow_requests_with_one_key_make_one_ticket() {
    let desk = Desk::start("stampede-slow").await;
    one_key_many_senders(&desk, Some("delay=100")).await;
    assert!(desk.stat("in_progress").await > 0);
}

#[tokio::test]
async fn a_dropped_reply_then_a_retry_makes_one_ticket() {
    let desk = Desk::start("drop-reply").await;
    let lost = desk
        .post(Some("k-drop"), TICKET)
        .header("X-Fault", "drop-reply")
        .send()
        .await;
    let error = lost.expect_err("a transport error, not a status");
    assert!(!error.is_status());
    // The work was committed before the connection was closed.
    assert_eq!(desk.stat("tickets").await, 1);
    let retry = send(desk.post(Some("k-drop"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(retry.replayed);
    let listed = desk.tickets().await;
    assert_eq!(listed.len(), 1);
    assert_eq!(retry.json(), listed[0]);
}

#[tokio::test]
async fn offline_closes_the_connection_and_does_nothing() {
    let desk = Desk::start("offline").await;
    for path_key in [Some("k-offline"), None] {
        let lost = match path_key {
            Some(k) => desk.post(Some(k), TICKET),
            None => desk.post_to("/api/plain/tickets", None, TICKET),
        }
        .header("X-Fault", "offline")
        .send()
        .await;
        let error = lost.expect_err("a transport error, not a status");
        assert!(!error.is_status());
    }
    assert_eq!(desk.stat("tickets").await, 0, "nothing was done");
    assert_eq!(desk.stat("receipts").await, 0);
    let retry = send(desk.post(Some("k-offline"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed, "the retry does the work");
    assert_eq!(desk.stat("tickets").await, 1);
}

#[tokio::test]
async fn fail_before_is_a_503_that_stores_nothing() {
    let desk = Desk::start("fail-before").await;
    let failed = send(
        desk.post(Some("k-fail"), TICKET)
            .header("X-Fault", "fail-before"),
    )
    .await;
    assert_eq!(failed.status, 503);
    assert_eq!(desk.stat("receipts").await, 0);
    assert_eq!(desk.stat("processing").await, 0);
    let retry = send(desk.post(Some("k-fail"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed, "the retry does the work");
    assert_eq!(desk.stat("tickets").await, 1);
}

#[tokio::test]
async fn a_crash_before_commit_leaves_nothing_and_its_lease_is_taken_over() {
    let desk = Desk::start("crash").await;
    let crashed = desk
        .post(Some("k-crash"), TICKET)
        .header("X-Fault", "crash-before-commit")
        .send()
        .await;
    assert!(crashed.is_err(), "the connection is closed with no answer");
    assert_eq!(desk.stat("tickets").await, 0);
    // The dead request's claim holds until its lease (300 ms here) ends; then a retry takes it.
    let retry = send_until_definite(|| desk.post(Some("k-crash"), TICKET)).await;
    assert_eq!(retry.status, 201);
    assert!(!retry.replayed);
    assert_eq!(desk.stat("tickets").await, 1);
    assert_eq!(desk.stat("takeovers").await, 1);
    assert!(send(desk.post(Some("k-crash"), TICKET)).await.replayed);
}

#[tokio::test]
async fn faults_are_ignored_unless_the_server_enables_them() {
    let desk = Desk::with("no-faults", Config::default()).await;
    let answer = send(
        desk.post(Some("k-nf"), TICKET)
            .header("X-Fault", "drop-reply"),
    )
    .await;
    assert_eq!(answer.status, 201);
    assert_eq!(desk.stat("faults").await, 0);
}

#[tokio::test]
async fn an_unknown_fault_is_a_400_naming_x_fault() {
    let desk = Desk::start("unknown-fault").await;
    let answer = send(desk.post(Some("k-uf"), TICKET).header("X-Fault", "explode")).await;
    assert_eq!(answer.status, 400);
    assert_eq!(answer.invalid_names(), ["X-Fault"]);
}

#[tokio::test]
async fn tenants_never_share_a_key_or_see_each_others_tickets() {
    let desk = Desk::start("tenant-a").await;
    let other = common::tenant_name("tenant-b");
    let a = send(desk.post(Some("shared-key"), TICKET)).await;
    let b = send(desk.request(
        "/api/tickets",
        &other,
        Some("shared-key"),
        "application/json",
        TICKET,
    ))
    .await;
    assert_eq!((a.status, b.status), (201, 201));
    assert!(!b.replayed);
    assert_ne!(a.json()["id"], b.json()["id"]);
    assert_eq!(desk.tickets().await, vec![a.json()]);
    assert_eq!(desk.stat("tickets").await, 1);
    let b_stats: serde_json::Value = desk
        .client
        .get(desk.url("/api/stats"))
        .header("X-Tenant", &other)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b_stats["tickets"], 1);
    assert_eq!(b_stats["tenant"], other.as_str());
}

#[tokio::test]
async fn the_plain_route_makes_a_ticket_every_time() {
    let desk = Desk::start("plain").await;
    for _ in 0..3 {
        let answer = send(desk.post_to("/api/plain/tickets", Some("ignored"), TICKET)).await;
        assert_eq!(answer.status, 201);
        assert!(!answer.replayed);
    }
    assert_eq!(desk.stat("tickets").await, 3);
    assert_eq!(desk.stat("receipts").await, 0);
    let invalid = send(desk.post_to("/api/plain/tickets", None, r#"{"subject":""}"#)).await;
    assert_eq!(invalid.status, 400);
    let lost = desk
        .post_to("/api/plain/tickets", None, TICKET)
        .header("X-Fault", "drop-reply")
        .send()
        .await;
    assert!(lost.is_err());
    assert_eq!(
        desk.stat("tickets").await,
        4,
        "the plain route's lost reply still made one"
    );
}

#[tokio::test]
async fn without_the_key_check_every_request_makes_a_ticket() {
    let config = Config {
        key_check: false,
        ..Config::default()
    };
    let desk = Desk::with("no-key-check", config).await;
    for key in [None, Some("same"), Some("same")] {
        assert_eq!(send(desk.post(key, TICKET)).await.status, 201);
    }
    assert_eq!(desk.stat("tickets").await, 3);
}

#[tokio::test]
async fn receipts_expire_after_their_ttl() {
    let config = Config {
        receipt_ttl: Duration::from_millis(200),
        lease: Duration::from_millis(100),
        sweep_every: Duration::from_millis(20),
        ..Config::default()
    };
    let desk = Desk::with("ttl", config).await;
    let first = send(desk.post(Some("k-ttl"), TICKET)).await;
    assert_eq!(first.status, 201);
    desk.wait_for_stat("receipts", 0).await;
    // The key is forgotten: the same request now makes a second ticket.
    let again = send(desk.post(Some("k-ttl"), TICKET)).await;
    assert_eq!(again.status, 201);
    assert!(!again.replayed);
    assert_eq!(desk.stat("tickets").await, 2);
}

#[tokio::test]
async fn the_ticket_list_is_newest_first_and_limited() {
    let desk = Desk::start("list").await;
    for i in 0..5 {
        let body = TICKET.replace("Printer on fire", &format!("Ticket {i}"));
        assert_eq!(
            send(desk.post(Some(&format!("k{i}")), &body)).await.status,
            201
        );
    }
    let listed = desk.tickets().await;
    let subjects: Vec<_> = listed
        .iter()
        .map(|t| t["subject"].as_str().unwrap())
        .collect();
    assert_eq!(
        subjects,
        ["Ticket 4", "Ticket 3", "Ticket 2", "Ticket 1", "Ticket 0"]
    );
    let two: Vec<serde_json::Value> = desk
        .client
        .get(desk.url("/api/tickets?limit=2"))
        .header("X-Tenant", &desk.tenant)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(two.len(), 2);
}

/// Before, an answer stopped counting as in flight once hyper had taken its body's last frame
/// (the ticket list is one frame), while megabytes of it still waited on the socket: a client
/// that paused longer than --keep-alive-timeout mid-answer was cut, short of it, though a slow
/// answer never counts as idle and only --send-timeout (30 s here) may end it.
/// `GET /api/tickets` with this query, for the desk's tenant.
async fn list(desk: &Desk, query: &str) -> Answer {
    let request = desk
        .client
        .get(desk.url(&format!("/api/tickets{query}")))
        .header("X-Tenant", &desk.tenant);
    send(request).await
}

/// Before, a list gave up to 10,000 tickets (a cap written nowhere), each with a text of up to
/// 64 Ki characters, built whole in memory; now at most 500, 100 by default.
#[tokio::test]
async fn a_ticket_list_gives_at_most_500_tickets() {
    let desk = Desk::start("list-cap").await;
    for _ in 0..17 {
        let burst: Vec<_> = (0..30)
            .map(|_| tokio::spawn(send(desk.post_to("/api/plain/tickets", None, TICKET))))
            .collect();
        for created in burst {
            assert_eq!(created.await.unwrap().status, 201);
        }
    }
    let ids = |answer: &Answer| -> Vec<i64> {
        assert_eq!(answer.status, 200);
        let listed: Vec<serde_json::Value> = serde_json::from_slice(&answer.body).unwrap();
        listed.iter().map(|t| t["id"].as_i64().unwrap()).collect()
    };
    let most = ids(&list(&desk, "?limit=10000").await);
    assert_eq!(most.len(), 500);
    assert!(most.windows(2).all(|w| w[0] > w[1]), "newest first");
    assert_eq!(ids(&list(&desk, "?limit=500").await), most);
    assert_eq!(ids(&list(&desk, "").await), most[..100]);
}

/// Before, a list's answer was held outside --upload-memory: with the budget full (an upload
/// holding it), lists were still built and sent. It now reserves its length, as a download
/// does: `503` with `Retry-After: 1`, and the list once the room is back.
#[tokio::test]
async fn a_ticket_list_counts_against_the_memory_budget() {
    use tokio::io::AsyncWriteExt;
    let config = Config {
        max_body: 65_536,
        max_upload: 65_536,
        upload_memory: Some(65_536),
        ..Config::default()
    };
    let desk = Desk::with("list-budget", config).await;
    assert_eq!(send(desk.post(Some("k1"), TICKET)).await.status, 201);
    // An upload that declares the whole budget and sends 10 bytes of it.
    let mut upload = tokio::net::TcpStream::connect(desk.server.addr())
        .await
        .unwrap();
    let head = format!(
        "POST /api/plain/tickets HTTP/1.1\r\nHost: t\r\nX-Tenant: {}\r\nContent-Type: application/json\r\nContent-Length: 65536\r\n\r\n{{\"subject\"",
        desk.tenant
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    let mut busy = None;
    for _ in 0..500 {
        let answer = list(&desk, "").await;
        if answer.status == 503 {
            busy = Some(answer);
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let busy = busy.expect("a 503 while the upload holds the budget");
    assert_eq!(busy.retry_after.as_deref(), Some("1"));
    assert_eq!(busy.content_type, "application/problem+json");
    drop(upload);
    for _ in 0..500 {
        let answer = list(&desk, "").await;
        if answer.status == 200 {
            assert_eq!(answer.json().as_array().unwrap().len(), 1);
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("no list once the upload went away");
}

#[tokio::test]
async fn a_large_answer_paused_longer_than_the_keep_alive_timeout_is_whole() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = Config {
        keep_alive_timeout: Duration::from_secs(1),
        send_timeout: Duration::from_secs(30),
        ..Config::default()
    };
    let desk = Desk::with("paused-answer", config).await;
    // 150 tickets of 60,000 characters: a list of 9 MB, more than the socket buffers of a
    // client with a 16 KiB receive buffer that reads nothing take.
    let text = "a".repeat(60_000);
    for i in 0..150 {
        let body = format!(r#"{{"subject":"s{i}","body":"{text}","email":"a@b.co"}}"#);
        let created = send(desk.post_to("/api/plain/tickets", None, &body)).await;
        assert_eq!(created.status, 201);
    }
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(16 * 1024).unwrap();
    let mut stream = socket.connect(desk.server.addr()).await.unwrap();
    let request = format!(
        "GET /api/tickets?limit=150 HTTP/1.1\r\nHost: t\r\nX-Tenant: {}\r\n\r\n",
        desk.tenant
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // Three keep-alive timeouts without reading a byte, then everything until the connection
    // closes (once idle, after the answer).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut heard = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut heard))
        .await
        .expect("the answer within 30 s")
        .expect("the answer, not a reset");
    let end = heard.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&heard[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("a Content-Length")
        .trim()
        .parse()
        .unwrap();
    assert!(length > 9_000_000, "{head}");
    assert_eq!(heard.len() - end, length, "the whole answer");
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&heard[end..]).unwrap();
    assert_eq!(listed.len(), 150);
}

#[tokio::test]
async fn random_faults_still_make_one_ticket_per_submission() {
    let config = Config {
        fault_rate: 0.5,
        seed: 7,
        lease: Duration::from_millis(200),
        ..Config::default()
    };
    let desk = Desk::with("chaos", config).await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let body = TICKET.replace("Printer on fire", &format!("Chaos {i}"));
        let request = desk.post(Some(&format!("chaos-{i}")), &body);
        tasks.push(tokio::spawn(send_until_definite(move || {
            request.try_clone().unwrap()
        })));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap().status, 201);
    }
    assert_eq!(desk.stat("tickets").await, 20);
    assert!(desk.stat("faults").await > 0);
    let mut subjects: Vec<_> = desk
        .tickets()
        .await
        .iter()
        .map(|t| t["subject"].as_str().unwrap().to_owned())
        .collect();
    subjects.sort();
    subjects.dedup();
    assert_eq!(subjects.len(), 20);
}

/// Before, --lease and --receipt-ttl had no upper bound: a huge one overflowed the claim's
/// arithmetic (`now + lease`), and every keyed request failed with no answer. Past its bound
/// (1 day, 365 days) each now stops the server at start, naming the flag; at the bounds keyed
/// requests work.
#[tokio::test]
async fn a_lease_or_receipt_ttl_past_its_bound_stops_the_server_at_start() {
    use oncekey_server::{MAX_LEASE, MAX_RECEIPT_TTL};
    let huge = Duration::from_secs(300_000_000 * 365 * 86_400);
    let second = Duration::from_secs(1);
    let cases = [
        ("--lease", huge, huge),
        ("--receipt-ttl", MAX_LEASE, huge),
        ("--lease", MAX_LEASE + second, MAX_RECEIPT_TTL),
        ("--receipt-ttl", MAX_LEASE, MAX_RECEIPT_TTL + second),
    ];
    for (flag, lease, receipt_ttl) in cases {
        let config = Config {
            lease,
            receipt_ttl,
            ..Config::default()
        };
        let Err(refused) = oncekey_server::start(config).await else {
            panic!("the server started with --lease {lease:?} --receipt-ttl {receipt_ttl:?}");
        };
        let text = refused.to_string();
        assert!(text.contains(&format!("{flag} must be at most")), "{text}");
    }
    let config = Config {
        lease: MAX_LEASE,
        receipt_ttl: MAX_RECEIPT_TTL,
        ..Config::default()
    };
    let desk = Desk::with("longest-lease", config).await;
    let first = send(desk.post(Some("k1"), TICKET)).await;
    assert_eq!(first.status, 201);
    let again = send(desk.post(Some("k1"), TICKET)).await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
}

/// Before, the refusals the router made rather than a handler were not problem documents, as
/// CONTRACT.md section 6 and the README promise: a `limit` that is not a number was axum's
/// plain-text `400`, a method a route does not take an empty `405`, an unknown path an empty
/// `404` (and an attachment path that is not UTF-8 a plain-text `400`).
#[tokio::test]
async fn the_routers_own_refusals_are_problem_documents() {
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "<!doctype html>").unwrap();
    let with_www = Desk::with(
        "router-refusals-www",
        Config {
            www: Some(www.path().to_owned()),
            ..Config::default()
        },
    )
    .await;
    let desk = Desk::start("router-refusals").await;
    let ask = |desk: &Desk, method: reqwest::Method, path: &str| {
        desk.client
            .request(method, desk.url(path))
            .header("X-Tenant", &desk.tenant)
    };
    for bad in ["ten", "-1", "", "1.5", "%31"] {
        let answer = send(ask(
            &desk,
            reqwest::Method::GET,
            &format!("/api/tickets?limit={bad}"),
        ))
        .await;
        assert_eq!(answer.status, 400, "limit={bad}");
        assert_eq!(
            answer.content_type, "application/problem+json",
            "limit={bad}"
        );
        assert_eq!(answer.invalid_names(), ["limit"], "limit={bad}");
    }
    let ok = send(ask(&desk, reqwest::Method::GET, "/api/tickets?x=1&limit=3")).await;
    assert_eq!(ok.status, 200);
    let cases = [
        (&desk, reqwest::Method::DELETE, "/api/tickets", 405),
        (&desk, reqwest::Method::PUT, "/api/stats", 405),
        (&desk, reqwest::Method::GET, "/api/plain/tickets", 405),
        (&desk, reqwest::Method::GET, "/api/nothing", 404),
        (
            &desk,
            reqwest::Method::GET,
            "/api/tickets/%FF/attachments/0",
            404,
        ),
        (&with_www, reqwest::Method::GET, "/api/nothing", 404),
    ];
    for (desk, method, path, status) in cases {
        let response = ask(desk, method.clone(), path).send().await.unwrap();
        let allow = response.headers().get("allow").cloned();
        let answer = Answer::read(response).await;
        assert_eq!(answer.status, status, "{method} {path}");
        assert_eq!(
            answer.content_type, "application/problem+json",
            "{method} {path}"
        );
        assert_eq!(answer.json()["status"], status, "{method} {path}");
        assert_eq!(
            allow.is_some(),
            status == 405,
            "{method} {path}: Allow {allow:?}"
        );
    }
    // The demo's files are still served.
    let page = send(ask(&with_www, reqwest::Method::GET, "/")).await;
    assert_eq!(page.status, 200);
}

#[tokio::test]
async fn a_committed_ticket_survives_a_graceful_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("desk.db").to_str().unwrap().to_owned();
    let config = Config {
        db: db.clone(),
        ..Config::default()
    };
    let desk = Desk::with("restart", config.clone()).await;
    let first = send(desk.post(Some("k-restart"), TICKET)).await;
    desk.server.shutdown().await;
    let desk2 = Desk::with("restart", config).await;
    let again = send(desk2.request(
        "/api/tickets",
        &desk.tenant,
        Some("k-restart"),
        "application/json",
        TICKET,
    ))
    .await;
    assert!(again.replayed);
    assert_eq!(again.body, first.body);
}

#[tokio::test]
async fn an_unknown_path_posted_under_www_is_a_problem_document() {
    // With --www, a path of no route asked with POST got ServeDir's own empty 405.
    let www = tempfile::tempdir().unwrap();
    std::fs::write(www.path().join("index.html"), "<!doctype html>").unwrap();
    let desk = Desk::with(
        "review-www-post",
        Config {
            www: Some(www.path().to_owned()),
            ..Config::default()
        },
    )
    .await;
    let response = desk
        .client
        .post(desk.url("/api/nothing"))
        .header("X-Tenant", &desk.tenant)
        .send()
        .await
        .unwrap();
    let answer = Answer::read(response).await;
    assert_eq!(
        (answer.status, answer.content_type.as_str()),
        (404, "application/problem+json")
    );
}

#[tokio::test]
async fn a_private_temporary_database_lists_its_tickets() {
    // --db "": the list's reader connection opened another, empty database, and every list
    // was a 503 (no such table).
    let desk = Desk::with(
        "review-db-empty",
        Config {
            db: String::new(),
            ..Config::default()
        },
    )
    .await;
    let made = send(desk.post(
        Some("k-1"),
        r#"{"subject":"s","body":"b","email":"a@b.co"}"#,
    ))
    .await;
    assert_eq!(made.status, 201);
    let listed = list(&desk, "").await;
    assert_eq!(listed.status, 200, "{:?}", listed.json());
}
