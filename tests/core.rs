//! The core's rules, scenario by scenario, in simulated time: no sockets, no sleeps.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

mod core_support;

use core_support::*;
use oncekey::core::*;

const TICKET: &str =
    r#"{"subject":"Printer on fire","email":"ana@example.com","body":"3rd floor"}"#;

fn started(d: &mut Driver) -> Submission {
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    assert_eq!(
        s.begin(T0, request(TICKET), bytes(1)).unwrap(),
        Begun::Started
    );
    d.drain(&mut s);
    s
}

#[test]
fn a_201_settles_and_the_next_submission_gets_a_new_key() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    assert_eq!(
        d.sent_unstored, 0,
        "key and body are stored before the first send"
    );
    assert_eq!(d.stored.as_ref().unwrap().key, d.last_sent().key);
    let first = d.last_sent().clone();
    s.handle_answer(T0, first.id, &Answer::status(201), 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Succeeded);
    assert!(
        d.stored.is_none(),
        "the record is removed after a definite answer"
    );
    assert_eq!(d.settled.last().unwrap().outcome, Outcome::Succeeded);
    assert_eq!(d.settled.last().unwrap().status, Some(201));

    s.begin(T0 + secs(1), request(TICKET), bytes(2)).unwrap();
    d.drain(&mut s);
    assert_ne!(
        d.last_sent().key,
        first.key,
        "a definite answer spends the key"
    );
}

#[test]
fn every_retry_uses_the_same_key_and_one_ticket_exists() {
    // 503, lost reply (the server did the work), 409, then the replay.
    let mut d = Driver::default();
    let mut server = Server::default();
    let mut s = started(&mut d);
    let mut now = T0;
    let a1 = d.last_sent().clone();
    s.handle_answer(now, a1.id, &Answer::status(503), u32::MAX);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting);
    now = s.poll_timeout().unwrap();
    s.handle_timeout(now);
    d.drain(&mut s);
    let a2 = d.last_sent().clone();
    server.handle(&a2); // committed, but the reply is lost
    s.handle_failure(now, a2.id, Failure::Network, u32::MAX);
    d.drain(&mut s);
    now = s.poll_timeout().unwrap();
    s.handle_timeout(now);
    d.drain(&mut s);
    let a3 = d.last_sent().clone();
    s.handle_answer(now, a3.id, &Answer::status(409), 7);
    d.drain(&mut s);
    now = s.poll_timeout().unwrap();
    s.handle_timeout(now);
    d.drain(&mut s);
    let a4 = d.last_sent().clone();
    let answer = server.handle(&a4);
    s.handle_answer(now, a4.id, &answer, 0);
    d.drain(&mut s);

    let keys: Vec<_> = d.sent.iter().map(|a| a.key.clone()).collect();
    assert_eq!(keys, vec![a1.key.clone(); 4]);
    assert_eq!(
        d.sent.iter().map(|a| a.number).collect::<Vec<_>>(),
        [1, 2, 3, 4]
    );
    assert_eq!(server.tickets.len(), 1, "one ticket exists");
    let settled = d.settled.last().unwrap();
    assert_eq!(
        (settled.outcome, settled.replayed, settled.attempts),
        (Outcome::Succeeded, true, 4)
    );
    assert_eq!(d.sent_unstored, 0);
}

#[test]
fn retry_after_is_honoured() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let a = d.last_sent().clone();
    let busy = Answer::from_response(409, [("Retry-After", "3")], "", "Idempotency-Key");
    s.handle_answer(T0, a.id, &busy, 0);
    d.drain(&mut s);
    assert_eq!(s.poll_timeout(), Some(T0 + secs(3)));
    // Too early: nothing is sent.
    s.handle_timeout(T0 + secs(2));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1);
    s.handle_timeout(T0 + secs(3));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2);
    assert_eq!(d.last_sent().key, a.key);
}

#[test]
fn definite_refusals_are_not_retried_and_free_the_name() {
    for (answer, outcome) in [
        (Answer::status(422), Outcome::Conflict),
        (Answer::status(404), Outcome::Refused),
        (
            Answer::from_response(
                400,
                [],
                r#"{"title":"Idempotency-Key header is missing"}"#,
                "Idempotency-Key",
            ),
            Outcome::Misconfigured,
        ),
        (
            Answer::from_response(
                400,
                [],
                r#"{"title":"subject is empty"}"#,
                "Idempotency-Key",
            ),
            Outcome::Refused,
        ),
    ] {
        let mut d = Driver::default();
        let mut s = started(&mut d);
        let a = d.last_sent().clone();
        s.handle_answer(T0, a.id, &answer, 0);
        d.drain(&mut s);
        assert_eq!(d.settled.last().unwrap().outcome, outcome);
        assert_eq!(s.poll_timeout(), None, "{outcome:?} is never retried");
        assert!(d.stored.is_none());
        // A corrected request goes out under a new key.
        s.begin(T0, request(r#"{"subject":"fixed"}"#), bytes(9))
            .unwrap();
        d.drain(&mut s);
        assert_ne!(d.last_sent().key, a.key);
    }
}

#[test]
fn unsure_after_the_attempts_then_try_again_resends_the_same_key() {
    let mut d = Driver::default();
    let policy = RetryPolicy {
        attempts: 3,
        ..RetryPolicy::default()
    };
    let mut s = Submission::new("new-ticket", policy);
    s.begin(T0, request(TICKET), bytes(1)).unwrap();
    d.drain(&mut s);
    let mut now = T0;
    for _ in 0..3 {
        let a = d.last_sent().clone();
        s.handle_failure(now, a.id, Failure::Timeout, 12345);
        d.drain(&mut s);
        // Unsure, the timer is the key's deadline, a day away: not this test's.
        if let Some(t) = s.poll_timeout().filter(|_| s.state() == State::Waiting) {
            now = t;
            s.handle_timeout(now);
            d.drain(&mut s);
        }
    }
    assert_eq!(s.state(), State::Unsure);
    let settled = d.settled.last().unwrap();
    assert_eq!(
        (settled.outcome, settled.gave_up),
        (Outcome::Unsure, Some(GiveUp::AttemptsSpent))
    );
    assert_eq!(
        d.stored.as_ref().unwrap().attempts,
        3,
        "unsure keeps the record"
    );
    let key = d.last_sent().key.clone();

    s.try_again(now + secs(60)).unwrap();
    d.drain(&mut s);
    assert_eq!(d.last_sent().key, key);
    assert_eq!(d.last_sent().number, 4);
    assert_eq!(d.stored.as_ref().unwrap().round_attempts, 1);
    s.handle_answer(now, d.last_sent().id, &Answer::status(201), 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Succeeded);
}

#[test]
fn the_budget_counts_across_a_restore() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let a = d.last_sent().clone();
    s.handle_failure(T0, a.id, Failure::Network, 0);
    d.drain(&mut s);
    let stored = d.stored.clone().unwrap();

    // A reload 10 minutes later resumes with the same key and body.
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    s2.restore(T0 + secs(600), stored.clone(), true).unwrap();
    d2.drain(&mut s2);
    assert_eq!(s2.state(), State::Sending);
    assert_eq!(d2.last_sent().key, a.key);
    assert_eq!(d2.last_sent().request.body, TICKET);
    assert_eq!(d2.last_sent().number, 2);
    // The budget still counts from the first attempt: one more failure near its end gives up.
    s2.handle_failure(
        T0 + secs(15 * 60),
        d2.last_sent().id,
        Failure::Network,
        u32::MAX,
    );
    d2.drain(&mut s2);
    assert_eq!(s2.state(), State::Unsure);
    assert_eq!(
        d2.settled.last().unwrap().gave_up,
        Some(GiveUp::BudgetSpent)
    );

    // A reload after the budget is spent finds it unsure and does not send by itself.
    let mut d3 = Driver::default();
    let mut s3 = Submission::new("new-ticket", RetryPolicy::default());
    s3.restore(T0 + secs(16 * 60), stored.clone(), true)
        .unwrap();
    d3.drain(&mut s3);
    assert_eq!(s3.state(), State::Unsure);
    assert!(d3.sent.is_empty());
    let settled = d3
        .settled
        .last()
        .expect("a resumed, spent round settles unsure");
    assert_eq!(
        (settled.outcome, settled.gave_up),
        (Outcome::Unsure, Some(GiveUp::BudgetSpent))
    );
    assert_eq!(s3.pending().unwrap().key, a.key);
    // Without resume it is unsure even within the budget.
    let mut s4 = Submission::new("new-ticket", RetryPolicy::default());
    s4.restore(T0 + secs(1), stored, false).unwrap();
    assert_eq!(s4.state(), State::Unsure);
}

#[test]
fn a_record_never_sent_starts_its_budget_when_first_sent() {
    // Enqueued in an outbox an hour ago (no attempt yet), taken up now by a worker: it is sent,
    // not given up as "budget spent", and its clock starts now.
    let enqueued = Record {
        name: "new-ticket".into(),
        key: Key::from_random_bytes([7; 16]),
        request: request(TICKET),
        started_at: T0,
        attempts: 0,
        round_started_at: T0,
        round_attempts: 0,
        key_lifetime: DEFAULT_KEY_LIFETIME,
        offline: std::time::Duration::ZERO,
        offline_since: None,
        not_before: None,
        stopped: None,
    };
    let later = T0 + secs(3600);
    let mut d = Driver::default();
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.restore(later, enqueued.clone(), true).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Sending);
    assert_eq!(d.sent.len(), 1);
    assert_eq!(d.last_sent().key, enqueued.key);
    assert_eq!(d.last_sent().number, 1);
    let stored = d.stored.clone().unwrap();
    assert_eq!((stored.started_at, stored.round_started_at), (later, later));
    // A record that was sent keeps its clock (the_budget_counts_across_a_restore).
    let mut sent = enqueued;
    sent.attempts = 1;
    sent.round_attempts = 1;
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    s2.restore(later, sent, true).unwrap();
    d2.drain(&mut s2);
    assert!(d2.sent.is_empty(), "an old round that was sent stays spent");
    assert_eq!(s2.state(), State::Unsure);
}

#[test]
fn same_body_joins_other_body_is_refused() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let reordered =
        r#"{ "body": "3rd floor", "email": "ana@example.com", "subject": "Printer on fire" }"#;
    assert_eq!(
        s.begin(T0, request(reordered), bytes(2)).unwrap(),
        Begun::Joined
    );
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1, "a double submit sends nothing new");

    let before = d.stored.clone();
    let err = s
        .begin(T0, request(r#"{"subject":"other"}"#), bytes(3))
        .unwrap_err();
    assert!(matches!(
        err,
        BeginError::PendingMismatch {
            differs: "body",
            ..
        }
    ));
    assert!(err.to_string().contains("discard"), "{err}");
    d.drain(&mut s);
    assert_eq!(d.stored, before, "the pending record is untouched");
    assert_eq!(d.sent.len(), 1);

    let other_url = Request::new("POST", "/api/other", TICKET, Encoding::Json).unwrap();
    assert!(matches!(
        s.begin(T0, other_url, bytes(4)),
        Err(BeginError::PendingMismatch { differs: "url", .. })
    ));
    // The same body for another tenant is another submission: refused, not joined (it was
    // joined, and only the first tenant's request was ever sent). Its form encoding too.
    let tenant = |t: &str| request(TICKET).header("X-Tenant", t).unwrap();
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("payout", RetryPolicy::default());
    s2.begin(
        T0,
        tenant("acme").header("X-Region", "eu").unwrap(),
        bytes(6),
    )
    .unwrap();
    d2.drain(&mut s2);
    for (other, differs) in [
        (
            tenant("globex").header("X-Region", "eu").unwrap(),
            "headers",
        ),
        (tenant("acme"), "headers"),
        (
            Request::new("POST", "/api/tickets", TICKET, Encoding::Form)
                .unwrap()
                .header("X-Tenant", "acme")
                .unwrap()
                .header("X-Region", "eu")
                .unwrap(),
            "encoding",
        ),
    ] {
        match s2.begin(T0, other, bytes(7)) {
            Err(BeginError::PendingMismatch { differs: d, .. }) => assert_eq!(d, differs),
            other => panic!("{differs}: {other:?}"),
        }
    }
    // Names in another case and order: the same request, joined.
    let same = request(TICKET)
        .header("x-region", "eu")
        .unwrap()
        .header("x-tenant", "acme")
        .unwrap();
    assert_eq!(s2.begin(T0, same, bytes(8)).unwrap(), Begun::Joined);
    d2.drain(&mut s2);
    assert_eq!(d2.sent.len(), 1);

    // Unsure, the same body again counts as Try again.
    s.handle_answer(
        T0,
        d.last_sent().id,
        &Answer::from_response(503, [("x-should-retry", "false")], "", "k"),
        0,
    );
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    assert_eq!(
        d.settled.last().unwrap().gave_up,
        Some(GiveUp::ServerSaidStop)
    );
    assert_eq!(
        s.begin(T0, request(TICKET), bytes(5)).unwrap(),
        Begun::Resumed
    );
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2);
    assert_eq!(d.sent[0].key, d.sent[1].key);
}

#[test]
fn discard_forgets_and_a_late_answer_is_ignored() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let a = d.last_sent().clone();
    s.discard();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Idle);
    assert!(d.stored.is_none());
    s.begin(T0, request(TICKET), bytes(2)).unwrap();
    d.drain(&mut s);
    let b = d.last_sent().clone();
    assert_ne!(a.key, b.key, "a discard means a new key next time");
    // The abandoned attempt's answer arrives: ignored.
    s.handle_answer(T0, a.id, &Answer::status(201), 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Sending);
    assert!(d.stored.is_some());
    assert!(s.try_again(T0).is_ok());
    let mut idle = Submission::new("x", RetryPolicy::default());
    assert_eq!(idle.try_again(T0), Err(StateError::NothingPending));
}

#[test]
fn restore_checks_the_record_belongs_here() {
    let mut d = Driver::default();
    let s = started(&mut d);
    let record = s.pending().unwrap().clone();
    let mut other = Submission::new("feedback", RetryPolicy::default());
    assert!(matches!(
        other.restore(T0, record.clone(), true),
        Err(StateError::OtherName(_))
    ));
    let mut busy = Submission::new("new-ticket", RetryPolicy::default());
    busy.begin(T0, request("{}"), bytes(7)).unwrap();
    assert!(matches!(
        busy.restore(T0, record, true),
        Err(StateError::AlreadyPending(_))
    ));
}

#[test]
fn a_caller_key_is_used_as_given() {
    let ns = uuid::Uuid::from_u128(7);
    let key = Key::derive(&ns, "withdrawal-77");
    let mut d = Driver::default();
    let mut s = Submission::new("payout-77", RetryPolicy::default());
    s.begin(T0, request("{}"), NewKey::Given(key.clone()))
        .unwrap();
    d.drain(&mut s);
    assert_eq!(d.last_sent().key, key);
    // The same body with the same key joins; with another given key it is another submission,
    // refused while this one is pending, and nothing is sent.
    assert_eq!(
        s.begin(T0, request("{}"), NewKey::Given(key.clone())),
        Ok(Begun::Joined)
    );
    let other = Key::derive(&ns, "withdrawal-78");
    assert!(matches!(
        s.begin(T0, request("{}"), NewKey::Given(other)),
        Err(BeginError::PendingMismatch { differs: "key", key: k }) if k == key
    ));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1);
}

#[test]
fn many_lossy_submissions_make_one_ticket_each() {
    // 200 intended submissions through a network that loses half the replies and fails a third
    // of the requests before the work: each ends with exactly one ticket.
    let mut server = Server::default();
    let mut step = 0u32;
    let mut unsure_rounds = 0;
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for n in 0..200u32 {
        let body = format!(r#"{{"subject":"ticket {n}"}}"#);
        let mut d = Driver::default();
        let mut s = Submission::new("t", RetryPolicy::default());
        let mut seed = [0u8; 16];
        seed[..4].copy_from_slice(&n.to_le_bytes());
        s.begin(T0, request(&body), NewKey::Random(seed)).unwrap();
        d.drain(&mut s);
        let mut now = T0;
        while s.state().is_pending() {
            step += 1;
            if s.state() == State::Unsure {
                // Retries ran out: the person presses "Try again" a minute later.
                now = now + secs(60);
                s.try_again(now).unwrap();
                unsure_rounds += 1;
            } else if let Some(t) = s.poll_timeout() {
                now = t;
                s.handle_timeout(now);
            } else {
                let a = d.last_sent().clone();
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                if rng % 3 == 0 {
                    s.handle_answer(
                        now,
                        a.id,
                        &Answer::status(503),
                        step.wrapping_mul(2654435761),
                    );
                } else {
                    let answer = server.handle(&a);
                    if (rng >> 8) % 2 == 0 {
                        s.handle_failure(now, a.id, Failure::Network, step.wrapping_mul(40503));
                    } else {
                        s.handle_answer(now, a.id, &answer, 0);
                    }
                }
            }
            d.drain(&mut s);
            assert!(step < 100_000, "no livelock");
        }
        assert_eq!(s.state(), State::Succeeded, "submission {n}");
    }
    assert_eq!(server.tickets.len(), 200);
    assert!(unsure_rounds > 0, "the schedule also exercised Try again");
    let mut bodies: Vec<_> = server.tickets.iter().map(|t| t.1.clone()).collect();
    bodies.sort();
    bodies.dedup();
    assert_eq!(bodies.len(), 200, "no ticket twice");
}

// The key's lifetime (CONTRACT.md section 2): no attempt past it, less the margin.

const DAY: u64 = 24 * 3600;

/// A submission of three attempts a round, left unsure at about `T0 + 1 s` with its key.
fn unsure(d: &mut Driver, policy: RetryPolicy) -> (Submission, Key) {
    let mut s = Submission::new("new-ticket", policy);
    s.begin(T0, request(TICKET), bytes(1)).unwrap();
    d.drain(&mut s);
    for _ in 0..3 {
        let a = d.last_sent().clone();
        s.handle_failure(T0, a.id, Failure::Network, 0);
        d.drain(&mut s);
        if s.state() == State::Waiting {
            s.handle_timeout(T0);
            d.drain(&mut s);
        }
    }
    assert_eq!(s.state(), State::Unsure);
    let key = d.last_sent().key.clone();
    (s, key)
}

fn three() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        ..RetryPolicy::default()
    }
}

#[test]
fn a_try_again_a_day_later_settles_expired_without_sending() {
    let mut d = Driver::default();
    let mut server = Server::default();
    let (mut s, key) = unsure(&mut d, three());
    server.handle(d.last_sent()); // the ticket was made; nobody can know
    let sent = d.sent.len();

    s.try_again(T0 + secs(DAY)).unwrap();
    d.drain(&mut s);
    assert_eq!(
        d.sent.len(),
        sent,
        "nothing is sent with a key past its lifetime"
    );
    assert_eq!(s.state(), State::Expired);
    let settled = d.settled.last().unwrap();
    assert_eq!((settled.outcome, &settled.key), (Outcome::Expired, &key));
    assert!(!settled.outcome.is_definite());
    assert_eq!(d.stored.as_ref().map(|r| &r.key), Some(&key), "kept");
    assert_eq!(d.forgets, 0);
    assert_eq!(server.tickets.len(), 1);

    // Nothing goes on with it: not "Try again", not the same body begun again.
    assert_eq!(
        s.try_again(T0 + secs(DAY + 1)),
        Err(StateError::Expired(key.clone()))
    );
    let again = s.begin(T0 + secs(DAY + 1), request(TICKET), bytes(2));
    assert!(
        matches!(&again, Err(BeginError::Expired { key: k }) if *k == key),
        "{again:?}"
    );
    assert!(again.unwrap_err().to_string().contains("check"));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), sent);
    let last = d.changes.last().unwrap();
    assert_eq!((last.state, last.waiting_for), (State::Expired, None));
}

#[test]
fn the_margin_is_kept_before_the_lifetime_ends() {
    // 24 h less 5 minutes: a Try again one millisecond before sends, at the deadline it does not.
    let deadline = T0 + secs(DAY - 5 * 60);
    for (at, sends) in [
        (deadline + std::time::Duration::from_millis(0), false),
        (Timestamp::from_millis(deadline.as_millis() - 1), true),
    ] {
        let mut d = Driver::default();
        let (mut s, key) = unsure(&mut d, three());
        assert_eq!(d.stored.as_ref().unwrap().key_deadline(), deadline);
        let sent = d.sent.len();
        s.try_again(at).unwrap();
        d.drain(&mut s);
        assert_eq!(d.sent.len() > sent, sends, "at {at:?}");
        if sends {
            assert_eq!(d.last_sent().key, key);
        } else {
            assert_eq!(s.state(), State::Expired);
        }
    }
}

#[test]
fn a_restore_past_the_lifetime_settles_expired_unsent() {
    for resume in [true, false] {
        let mut d = Driver::default();
        let (_, key) = unsure(&mut d, three());
        let stored = d.stored.clone().unwrap();
        let sent = d.sent.len();

        let mut s = Submission::new("new-ticket", RetryPolicy::default());
        s.restore(T0 + secs(DAY), stored.clone(), resume).unwrap();
        d.drain(&mut s);
        assert_eq!(d.sent.len(), sent, "resume {resume}: nothing sent");
        assert_eq!(s.state(), State::Expired);
        assert_eq!(d.settled.last().unwrap().outcome, Outcome::Expired);
        assert_eq!(s.pending().unwrap().key, key, "kept, with its key");

        // The same record an hour earlier is unsure (its round is spent), and a Try again
        // sends it with its key.
        let mut s = Submission::new("new-ticket", RetryPolicy::default());
        s.restore(T0 + secs(DAY - 3600), stored, resume).unwrap();
        s.try_again(T0 + secs(DAY - 3600)).unwrap();
        d.drain(&mut s);
        assert_eq!(d.sent.len(), sent + 1);
        assert_eq!(d.last_sent().key, key);
    }
}

#[test]
fn the_record_keeps_its_lifetime_and_a_shorter_policy_wins() {
    // Sent to a server that keeps keys 30 minutes (Qonto): 27 minutes usable.
    let qonto = RetryPolicy {
        key_lifetime: secs(30 * 60),
        budget: secs(10 * 60),
        ..three()
    };
    let mut d = Driver::default();
    let (_, _) = unsure(&mut d, qonto);
    let stored = d.stored.clone().unwrap();
    assert_eq!(stored.key_lifetime, secs(30 * 60));
    let text = stored.to_json();
    assert!(text.contains(r#""keyLifetimeMs":1800000"#), "{text}");
    let read = Record::from_json(&text).unwrap();

    // Restored by a process with the default policy: the record's 30 minutes still hold.
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.restore(T0 + secs(28 * 60), read.clone(), true).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);

    // A record sent under 24 h, restored where the policy now says 30 minutes: 30 minutes.
    let mut d = Driver::default();
    let (_, _) = unsure(&mut d, three());
    let mut s = Submission::new("new-ticket", qonto);
    s.restore(T0 + secs(28 * 60), d.stored.clone().unwrap(), true)
        .unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);
}

#[test]
fn the_lifetime_is_checked_before_every_attempt() {
    // Ten minutes of lifetime (one of margin): a retry due past 9 minutes is never sent.
    let short = RetryPolicy {
        key_lifetime: secs(600),
        budget: secs(300),
        ..three()
    };
    // 1. A retry that would fall past the deadline expires at once.
    let mut d = Driver::default();
    let (mut s, key) = unsure(&mut d, short);
    let now = T0 + secs(9 * 60 - 20);
    s.try_again(now).unwrap();
    d.drain(&mut s);
    assert_eq!(d.last_sent().key, key, "still inside: sent");
    let sent = d.sent.len();
    let busy = Answer::from_response(409, [("Retry-After", "30")], "", "Idempotency-Key");
    s.handle_answer(now, d.last_sent().id, &busy, 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);
    assert_eq!(d.sent.len(), sent);

    // 2. Waiting for a retry when the deadline comes: the timer is the deadline, and it expires.
    let mut d = Driver::default();
    let (mut s, _) = unsure(&mut d, short);
    let now = T0 + secs(9 * 60 - 1);
    s.try_again(now).unwrap();
    d.drain(&mut s);
    s.handle_failure(now, d.last_sent().id, Failure::Network, u32::MAX);
    d.drain(&mut s);
    let sent = d.sent.len();
    if s.state() == State::Waiting {
        let t = s.poll_timeout().unwrap();
        assert!(t <= T0 + secs(9 * 60));
        s.handle_timeout(T0 + secs(9 * 60));
        d.drain(&mut s);
    }
    assert_eq!(s.state(), State::Expired);
    assert_eq!(d.sent.len(), sent);

    // 3. Unsure and left alone: it turns expired at the deadline, which is its timer.
    let mut d = Driver::default();
    let (mut s, _) = unsure(&mut d, short);
    assert_eq!(s.poll_timeout(), Some(T0 + secs(9 * 60)));
    s.handle_timeout(T0 + secs(9 * 60));
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);
    assert_eq!(d.settled.last().unwrap().outcome, Outcome::Expired);
}

#[test]
fn send_as_new_makes_a_new_key_for_the_same_body() {
    let mut d = Driver::default();
    let mut server = Server::default();
    let (mut s, old) = unsure(&mut d, three());
    s.try_again(T0 + secs(DAY)).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);
    let sent = d.sent.len();

    // Given the old key back, it refuses: a deliberate new key is the point.
    let now = T0 + secs(DAY + 60);
    assert_eq!(
        s.send_as_new(now, NewKey::Given(old.clone())),
        Err(StateError::SameKey(old.clone()))
    );
    s.send_as_new(now, bytes(9)).unwrap();
    d.drain(&mut s);
    let a = d.last_sent().clone();
    assert_eq!(d.sent.len(), sent + 1);
    assert_ne!(a.key, old, "a new key");
    assert_eq!(a.request.body, TICKET, "the same body");
    assert_eq!(a.number, 1, "counted afresh");
    let stored = d.stored.as_ref().unwrap();
    assert_eq!(
        (&stored.key, stored.started_at),
        (&a.key, now),
        "the record is replaced"
    );
    assert_eq!(d.sent_unstored, 0);
    // While it is being sent, it is not sent as new again.
    assert_eq!(
        s.send_as_new(now, bytes(10)),
        Err(StateError::StillSending(a.key.clone()))
    );
    let answer = server.handle(&a);
    s.handle_answer(now, a.id, &answer, 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Succeeded);
    assert_eq!(d.settled.last().unwrap().key, a.key);
    assert!(
        d.sent[sent..].iter().all(|x| x.key != old),
        "the old key is never sent again"
    );
    assert_eq!(
        Submission::new("x", RetryPolicy::default()).send_as_new(now, bytes(1)),
        Err(StateError::NothingPending)
    );
}

// Offline (CONTRACT.md section 2): no attempt, nothing of the limit or the budget spent.

#[test]
fn offline_spends_nothing_and_back_online_sends_at_once_with_the_same_key() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let a = d.last_sent().clone();
    s.handle_online(T0 + secs(1), false);
    s.handle_failure(T0 + secs(1), a.id, Failure::Network, u32::MAX);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting);
    let c = d.changes.last().unwrap();
    assert_eq!(c.waiting_for, Some(WaitingFor::Online), "{c:?}");
    assert_eq!(c.next_attempt_at, None);
    let stored = d.stored.as_ref().unwrap();
    assert_eq!(
        stored.round_attempts, 0,
        "the failed attempt was given back"
    );
    assert_eq!(
        stored.offline_since,
        Some(T0 + secs(1)),
        "the spell is stored"
    );

    // An hour offline, timers firing: nothing is sent, the round does not end.
    let mut now = T0 + secs(1);
    for _ in 0..60 {
        now = now + secs(60);
        s.handle_timeout(now);
        d.drain(&mut s);
    }
    assert_eq!((d.sent.len(), s.state()), (1, State::Waiting));
    assert!(d.settled.is_empty());

    s.handle_online(now, true);
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2, "sent at once");
    assert_eq!(d.last_sent().key, a.key);
    let stored = d.stored.as_ref().unwrap();
    assert_eq!(stored.round_attempts, 1);
    assert_eq!(
        stored.offline,
        secs(3600),
        "an hour offline, kept out of the budget"
    );
    // A 503 now is retried: the hour offline did not spend the 15 minutes.
    s.handle_answer(now, d.last_sent().id, &Answer::status(503), 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting);
    assert_eq!(
        d.changes.last().unwrap().waiting_for,
        Some(WaitingFor::Timer(s.poll_timeout().unwrap()))
    );
}

#[test]
fn begun_offline_it_is_stored_and_sent_when_back_online() {
    let mut d = Driver::default();
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.handle_online(T0, false);
    assert!(!s.is_online());
    assert_eq!(
        s.begin(T0, request(TICKET), bytes(1)).unwrap(),
        Begun::Started
    );
    d.drain(&mut s);
    assert!(d.sent.is_empty());
    assert!(d.stored.is_some(), "stored before anything is sent");
    assert_eq!(s.poll_timeout(), None, "never sent: no deadline, no timer");
    // Two days offline: the key was never sent, so it has not started to age.
    let back = T0 + secs(2 * DAY);
    s.handle_online(back, true);
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1);
    assert_eq!(d.stored.as_ref().unwrap().started_at, back);
    assert_eq!(d.sent_unstored, 0);
}

#[test]
fn offline_time_stays_out_of_the_budget_across_a_reload() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    s.handle_failure(T0, d.last_sent().id, Failure::Network, 0);
    d.drain(&mut s);
    s.handle_online(T0 + secs(10), false);
    d.drain(&mut s);
    let stored = d.stored.clone().unwrap();

    // Reloaded 20 minutes later, still offline: it waits, it does not give up.
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.handle_online(T0 + secs(20 * 60), false);
    s.restore(T0 + secs(20 * 60), stored, true).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting);
    assert_eq!(
        d.changes.last().unwrap().waiting_for,
        Some(WaitingFor::Online)
    );
    assert_eq!(d.sent.len(), 1);

    // Online 30 minutes in: sent at once; its round has spent 10 s of its 15 minutes.
    let now = T0 + secs(30 * 60);
    s.handle_online(now, true);
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2);
    let r = d.stored.clone().unwrap();
    assert_eq!(r.offline, secs(30 * 60 - 10));
    assert_eq!(r.budget_start(now), T0 + secs(30 * 60 - 10));
    s.handle_failure(now, d.last_sent().id, Failure::Network, 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting, "not BudgetSpent");

    // The same record restored online (the reload came back online): the spell ended then.
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    let mut offline = r.clone();
    offline.offline = std::time::Duration::ZERO;
    offline.offline_since = Some(T0 + secs(10));
    s2.restore(T0 + secs(20 * 60), offline, true).unwrap();
    d2.drain(&mut s2);
    assert_eq!(d2.sent.len(), 1, "resumed, its budget not spent");
    assert_eq!(d2.stored.unwrap().offline, secs(20 * 60 - 10));
}

#[test]
fn retry_after_still_holds_when_back_online() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let busy = Answer::from_response(409, [("Retry-After", "20")], "", "Idempotency-Key");
    s.handle_answer(T0, d.last_sent().id, &busy, 0);
    s.handle_online(T0 + secs(1), false);
    d.drain(&mut s);
    assert_eq!(
        d.changes.last().unwrap().waiting_for,
        Some(WaitingFor::Online)
    );
    s.handle_online(T0 + secs(5), true);
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1, "the server asked for 20 s");
    assert_eq!(
        d.changes.last().unwrap().waiting_for,
        Some(WaitingFor::Timer(T0 + secs(20)))
    );
    s.handle_timeout(T0 + secs(20));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2);
}

#[test]
fn a_try_again_offline_waits_for_the_connection() {
    let mut d = Driver::default();
    let (mut s, key) = unsure(&mut d, three());
    s.handle_online(T0 + secs(5), false);
    s.try_again(T0 + secs(6)).unwrap();
    d.drain(&mut s);
    let sent = d.sent.len();
    assert_eq!(s.state(), State::Waiting);
    assert_eq!(d.stored.as_ref().unwrap().round_attempts, 0);

    // Reloaded an hour later, online: its round never sent, so it begins now, with no spell
    // offline to carry (it would otherwise be an hour of budget for nothing).
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", three());
    let later = T0 + secs(3600);
    s2.restore(later, d.stored.clone().unwrap(), true).unwrap();
    d2.drain(&mut s2);
    let r = d2.stored.unwrap();
    assert_eq!((r.offline, r.offline_since), (secs(0), None));
    assert_eq!(r.budget_start(later), later);
    assert_eq!(d2.sent.len(), 1);

    s.handle_online(T0 + secs(60), true);
    d.drain(&mut s);
    assert_eq!(d.sent.len(), sent + 1);
    assert_eq!(d.last_sent().key, key);
}

#[test]
fn a_stopped_submission_keeps_its_key_ignores_the_abandoned_answer_and_try_again_resends_it() {
    // The caller aborted while the attempt was under way (its reply held): the server did the
    // work, the answer comes too late to count, and "Try again" replays it under the same key.
    let mut d = Driver::default();
    let mut server = Server::default();
    let mut s = started(&mut d);
    let a1 = d.last_sent().clone();
    s.stop();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    assert_eq!(s.poll_timeout(), Some(s.pending().unwrap().key_deadline()));
    assert!(d.settled.is_empty(), "the caller who stopped knows");
    assert_eq!(d.stored.as_ref().unwrap().key, a1.key, "still stored");
    let late = server.handle(&a1);
    s.handle_answer(T0 + secs(1), a1.id, &late, 0);
    d.drain(&mut s);
    assert_eq!(
        s.state(),
        State::Unsure,
        "the abandoned attempt's answer is ignored"
    );
    s.try_again(T0 + secs(2)).unwrap();
    d.drain(&mut s);
    let a2 = d.last_sent().clone();
    assert_eq!(a2.key, a1.key);
    let answer = server.handle(&a2);
    s.handle_answer(T0 + secs(2), a2.id, &answer, 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Succeeded);
    assert!(d.settled.last().unwrap().replayed);
    assert_eq!(server.tickets.len(), 1);
    // Waiting for a retry, stop cancels it too; unsure or idle, it does nothing.
    let mut s = started(&mut d);
    let a = d.last_sent().clone();
    s.handle_answer(T0, a.id, &Answer::status(503), 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Waiting);
    s.stop();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    let sent = d.sent.len();
    s.handle_timeout(T0 + secs(60));
    s.stop();
    d.drain(&mut s);
    assert_eq!((s.state(), d.sent.len()), (State::Unsure, sent));
}

#[test]
fn a_redirect_not_followed_is_unsure_with_the_key_kept_never_refused() {
    // A POST answered with a redirect the native client does not follow: it may well have
    // been carried out (a framework's POST-redirect-GET answers 302). It was `refused` ("not
    // carried out"), the record forgotten, and the caller's next send drew a new key for the
    // same ticket. (A 303 is the answer itself: succeeded.)
    // A new submission's first attempt answered `status` with `header`.
    let answered = |status: u16, header: (&str, &str)| {
        let mut d = Driver::default();
        let mut s = Submission::new("new-ticket", RetryPolicy::default());
        s.begin(T0, request(TICKET), bytes(1)).unwrap();
        d.drain(&mut s);
        let answer = Answer::from_response(status, [header], "", "k");
        s.handle_answer(T0, d.last_sent().id, &answer, 0);
        d.drain(&mut s);
        (d, s)
    };
    let location = ("location", "/api/tickets/7");
    for status in [301, 302, 307, 308] {
        let (mut d, mut s) = answered(status, location);
        assert_eq!(s.state(), State::Unsure, "{status}");
        let settled = d.settled.last().unwrap();
        assert_eq!(
            (settled.outcome, settled.gave_up),
            (Outcome::Unsure, Some(GiveUp::Redirected)),
            "{status}"
        );
        assert_eq!(d.sent.len(), 1, "not retried on its own");
        assert!(d.stored.is_some(), "the record is kept, with its key");
        let key = d.last_sent().key.clone();
        s.try_again(T0 + secs(1)).unwrap();
        d.drain(&mut s);
        assert_eq!(d.last_sent().key, key, "Try again: the same key");
    }
    let (d, s) = answered(303, location);
    assert_eq!(s.state(), State::Succeeded, "303: see the answer there");
    assert!(d.stored.is_none(), "settled: the record removed");
    // A server that says to retry is retried.
    let (_, s) = answered(307, ("x-should-retry", "true"));
    assert_eq!(s.state(), State::Waiting);
}

#[test]
fn a_restart_does_not_send_on_its_own_what_the_server_stopped() {
    // The server said not to retry, or redirected, or asked for a wait beyond the cap: a
    // restart with automatic resume took the stored record up and sent it again at once (the
    // round was not spent), and `resume --wait` did so once a second, with no backoff.
    let stops = [
        (("x-should-retry", "false"), 503, GiveUp::ServerSaidStop),
        (("location", "/api/tickets/7"), 302, GiveUp::Redirected),
        (("retry-after", "3600"), 503, GiveUp::RetryAfterBeyondCap),
    ];
    for (header, status, why) in stops {
        let mut d = Driver::default();
        let mut s = started(&mut d);
        let first = d.last_sent().clone();
        let answer = Answer::from_response(status, [header], "", "Idempotency-Key");
        s.handle_answer(T0, first.id, &answer, 0);
        d.drain(&mut s);
        assert_eq!(d.settled.last().unwrap().gave_up, Some(why), "{why:?}");
        let stored = d.stored.clone().expect("kept, with its key");
        assert_eq!(stored.stopped, Some(why), "written down: {why:?}");
        // Through the stored text, as a store keeps it.
        let stored = Record::from_json(&stored.to_json()).unwrap();
        for restart in 1..=3 {
            let mut d2 = Driver::default();
            let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
            s2.restore(T0 + secs(restart), stored.clone(), true)
                .unwrap();
            d2.drain(&mut s2);
            assert!(
                d2.sent.is_empty(),
                "{why:?}: restart {restart} sent nothing"
            );
            assert_eq!(s2.state(), State::Unsure);
            let settled = d2.settled.last().expect("settles unsure again, with why");
            assert_eq!(
                (settled.outcome, settled.gave_up),
                (Outcome::Unsure, Some(why))
            );
            // Try again is a person's (or caller's) decision: the same key, and the mark is
            // cleared from the record it writes first; never earlier than the server's
            // Retry-After, though.
            s2.try_again(T0 + secs(10)).unwrap();
            d2.drain(&mut s2);
            if why == GiveUp::RetryAfterBeyondCap {
                // Nor waiting longer than the cap: unsure again, until the wait left is within.
                assert!(d2.sent.is_empty(), "not before the server's time");
                assert_eq!(s2.state(), State::Unsure);
                s2.try_again(T0 + secs(3590)).unwrap();
                d2.drain(&mut s2);
                assert!(d2.sent.is_empty(), "not before the server's time");
                assert_eq!(s2.poll_timeout(), Some(T0 + secs(3600)));
                s2.handle_timeout(T0 + secs(3600));
                d2.drain(&mut s2);
            }
            assert_eq!(d2.sent.len(), 1);
            assert_eq!(d2.last_sent().key, first.key);
            assert_eq!(d2.stored.as_ref().unwrap().stopped, None);
        }
    }
}

#[test]
fn a_restart_does_not_send_on_its_own_a_round_whose_next_attempt_was_due_past_its_budget() {
    // The round ended because its next attempt was due past the time budget: by the server's
    // Retry-After, or by the delay drawn. Nothing in the record showed it, so a restart with
    // automatic resume sent it again (after the budget, at the server's time; or at once, and
    // `resume --wait` once a second).
    let budget = RetryPolicy {
        budget: secs(60),
        ..RetryPolicy::default()
    };
    let ms = std::time::Duration::from_millis;
    // (how, Retry-After, answered at, jitter, restarted at)
    for (how, retry_after, answered, jitter, restart) in [
        (
            "the server's Retry-After",
            Some("25"),
            secs(40),
            0,
            secs(41),
        ),
        ("the delay drawn", None, ms(59_800), u32::MAX, ms(59_900)),
    ] {
        let mut d = Driver::default();
        let mut s = Submission::new("new-ticket", budget);
        s.begin(T0, request(TICKET), bytes(1)).unwrap();
        d.drain(&mut s);
        let first = d.last_sent().clone();
        let headers: Vec<(&str, &str)> = retry_after
            .map(|r| ("Retry-After", r))
            .into_iter()
            .collect();
        let busy = Answer::from_response(503, headers, "", "Idempotency-Key");
        s.handle_answer(T0 + answered, first.id, &busy, jitter);
        d.drain(&mut s);
        assert_eq!(
            d.settled.last().unwrap().gave_up,
            Some(GiveUp::BudgetSpent),
            "{how}"
        );
        let stored = Record::from_json(&d.stored.clone().unwrap().to_json()).unwrap();
        assert_eq!(
            stored.stopped,
            Some(GiveUp::BudgetSpent),
            "{how}: written down"
        );
        let mut d2 = Driver::default();
        let mut s2 = Submission::new("new-ticket", budget);
        s2.restore(T0 + restart, stored, true).unwrap();
        d2.drain(&mut s2);
        assert_eq!(s2.state(), State::Unsure, "{how}");
        s2.handle_timeout(T0 + secs(66));
        d2.drain(&mut s2);
        assert!(
            d2.sent.is_empty(),
            "{how}: nothing sent, at once or at the server's time"
        );
        let settled = d2.settled.last().expect("settles unsure again, saying why");
        assert_eq!(settled.gave_up, Some(GiveUp::BudgetSpent), "{how}");
        // "Try again" sends it, with the same key, as a new round.
        s2.try_again(T0 + secs(70)).unwrap();
        d2.drain(&mut s2);
        assert_eq!(d2.sent.len(), 1, "{how}");
        assert_eq!(d2.last_sent().key, first.key, "{how}");
        assert_eq!(d2.stored.as_ref().unwrap().stopped, None, "{how}");
    }
}

#[test]
fn a_restart_does_not_send_on_its_own_what_the_caller_stopped() {
    // The caller stopped waiting (an abort) while a retry was due: the submission stays pending
    // for "Try again". A reload with automatic resume sent it at once, though nobody had asked
    // for it again.
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let first = d.last_sent().clone();
    s.handle_answer(T0, first.id, &Answer::status(503), 0);
    d.drain(&mut s);
    s.stop();
    d.drain(&mut s);
    let stored = d.stored.clone().expect("kept, with its key");
    assert_eq!(stored.stopped, Some(GiveUp::Stopped), "written down");
    let stored = Record::from_json(&stored.to_json()).unwrap();
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    s2.restore(T0 + secs(5), stored, true).unwrap();
    d2.drain(&mut s2);
    assert!(d2.sent.is_empty(), "nothing sent on its own");
    assert_eq!(s2.state(), State::Unsure);
    let settled = d2.settled.last().expect("settles unsure again, with why");
    assert_eq!(
        (settled.outcome, settled.gave_up),
        (Outcome::Unsure, Some(GiveUp::Stopped))
    );
    s2.try_again(T0 + secs(10)).unwrap();
    d2.drain(&mut s2);
    assert_eq!(d2.sent.len(), 1);
    assert_eq!(d2.last_sent().key, first.key, "the same key");
    assert_eq!(
        d2.stored.as_ref().unwrap().stopped,
        None,
        "cleared by Try again"
    );
}

#[test]
fn a_restart_during_a_retry_after_waits_until_the_time_the_server_gave() {
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let first = d.last_sent().clone();
    let busy = Answer::from_response(503, [("Retry-After", "20")], "", "Idempotency-Key");
    s.handle_answer(T0, first.id, &busy, 0);
    d.drain(&mut s);
    let stored = d.stored.clone().unwrap();
    assert_eq!(
        stored.not_before,
        Some(T0 + secs(20)),
        "written before the wait"
    );
    let stored = Record::from_json(&stored.to_json()).unwrap();

    // A crash 5 s in; the restart resumes the same record twice over (two restarts).
    for _ in 0..2 {
        let mut d2 = Driver::default();
        let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
        s2.restore(T0 + secs(5), stored.clone(), true).unwrap();
        d2.drain(&mut s2);
        assert!(d2.sent.is_empty(), "not before the server's time");
        assert_eq!(s2.state(), State::Waiting);
        assert_eq!(s2.poll_timeout(), Some(T0 + secs(20)));
        s2.handle_timeout(T0 + secs(19));
        d2.drain(&mut s2);
        assert!(d2.sent.is_empty());
        s2.handle_timeout(T0 + secs(20));
        d2.drain(&mut s2);
        assert_eq!(d2.sent.len(), 1);
        assert_eq!(
            (d2.last_sent().key.clone(), d2.last_sent().number),
            (first.key.clone(), 2)
        );
        assert_eq!(
            d2.stored.as_ref().unwrap().not_before,
            None,
            "spent by the attempt"
        );
    }
    // After the time, a restart sends at once.
    let mut d3 = Driver::default();
    let mut s3 = Submission::new("new-ticket", RetryPolicy::default());
    s3.restore(T0 + secs(21), stored.clone(), true).unwrap();
    d3.drain(&mut s3);
    assert_eq!(d3.sent.len(), 1);
    // Restored offline, it waits for the connection, and then still for the server's time.
    let mut d4 = Driver::default();
    let mut s4 = Submission::new("new-ticket", RetryPolicy::default());
    s4.handle_online(T0 + secs(1), false);
    s4.restore(T0 + secs(1), stored, true).unwrap();
    d4.drain(&mut s4);
    assert_eq!(s4.state(), State::Waiting);
    s4.handle_online(T0 + secs(2), true);
    d4.drain(&mut s4);
    assert!(d4.sent.is_empty(), "back online before the server's time");
    assert_eq!(s4.poll_timeout(), Some(T0 + secs(20)));
}

#[test]
fn try_again_and_the_same_body_again_wait_for_the_server_s_retry_after() {
    // "Try again" (a person's, or the form kit's resume after a reload) and the same request
    // sent again (the native client's recovery) started a new round at once: sent before the
    // Retry-After the server gave.
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let first = d.last_sent().clone();
    let busy = Answer::from_response(429, [("Retry-After", "20")], "", "Idempotency-Key");
    s.handle_answer(T0, first.id, &busy, 0);
    d.drain(&mut s);
    s.stop();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    s.try_again(T0 + secs(1)).unwrap();
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1, "not before the server's time");
    assert_eq!(s.state(), State::Waiting);
    assert_eq!(s.poll_timeout(), Some(T0 + secs(20)));
    s.handle_timeout(T0 + secs(20));
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 2);
    assert_eq!(d.last_sent().key, first.key);

    // The same body again, from a record taken up unsure (its Retry-After stored).
    let mut d = Driver::default();
    let mut s = started(&mut d);
    let busy = Answer::from_response(503, [("Retry-After", "20")], "", "Idempotency-Key");
    s.handle_answer(T0, d.last_sent().id, &busy, 0);
    d.drain(&mut s);
    let stored = d.stored.clone().unwrap();
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    s2.restore(T0 + secs(2), stored, false).unwrap();
    assert_eq!(
        s2.begin(T0 + secs(3), request(TICKET), bytes(9)).unwrap(),
        Begun::Resumed
    );
    d2.drain(&mut s2);
    assert!(d2.sent.is_empty(), "not before the server's time");
    assert_eq!(s2.poll_timeout(), Some(T0 + secs(20)));
}

#[test]
fn try_again_waits_for_the_retry_after_of_the_answer_that_ended_the_round() {
    // The answer that ended the round (its last attempt, a wait past the budget or the cap)
    // gave a Retry-After; it was not written down, so "Try again" sent at once.
    let one = RetryPolicy {
        attempts: 1,
        ..RetryPolicy::default()
    };
    let short_budget = RetryPolicy {
        budget: secs(60),
        ..RetryPolicy::default()
    };
    // (why, policy, answered at, Retry-After): the default cap is 30 s.
    for (why, policy, answered, retry_after) in [
        ("the round's last attempt", one, 30, 20u64),
        ("past the budget", short_budget, 40, 25),
        ("past the cap", RetryPolicy::default(), 30, 120),
    ] {
        let mut d = Driver::default();
        let mut s = Submission::new("new-ticket", policy);
        s.begin(T0, request(TICKET), bytes(1)).unwrap();
        d.drain(&mut s);
        let first = d.last_sent().clone();
        let asked = retry_after.to_string();
        let busy = Answer::from_response(
            503,
            [("Retry-After", asked.as_str())],
            "",
            "Idempotency-Key",
        );
        s.handle_answer(T0 + secs(answered), first.id, &busy, 0);
        d.drain(&mut s);
        assert_eq!(s.state(), State::Unsure, "{why}");
        let wanted = T0 + secs(answered + retry_after);
        assert_eq!(
            d.stored.as_ref().unwrap().not_before,
            Some(wanted),
            "{why}: written down, for a reload or restart"
        );
        s.try_again(T0 + secs(answered + 1)).unwrap();
        d.drain(&mut s);
        assert_eq!(d.sent.len(), 1, "{why}: not before the server's time");
        if retry_after - 1 > policy.cap.as_secs() {
            // Nor waiting longer than the cap: unsure again, saying why, until the wait left
            // is within it.
            assert_eq!(s.state(), State::Unsure, "{why}");
            let settled = d.settled.last().unwrap();
            assert_eq!(settled.gave_up, Some(GiveUp::RetryAfterBeyondCap), "{why}");
            s.try_again(T0 + secs(answered + retry_after - 10)).unwrap();
            d.drain(&mut s);
            assert_eq!(d.sent.len(), 1, "{why}: not before the server's time");
        }
        assert_eq!(s.state(), State::Waiting, "{why}");
        assert_eq!(s.poll_timeout(), Some(wanted), "{why}");
        s.handle_timeout(wanted);
        d.drain(&mut s);
        assert_eq!(d.sent.len(), 2, "{why}");
        assert_eq!(d.last_sent().key, first.key, "{why}");
    }
}

/// A submission whose one answer, at T0 + 1 s, asked for `retry_after` seconds beyond the cap
/// (30 s): unsure, with nothing more sent.
fn asked_beyond_the_cap(d: &mut Driver, retry_after: &str) -> Submission {
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.begin(T0, request(TICKET), bytes(1)).unwrap();
    d.drain(&mut s);
    let first = d.last_sent().clone();
    let busy = Answer::from_response(503, [("Retry-After", retry_after)], "", "Idempotency-Key");
    s.handle_answer(T0 + secs(1), first.id, &busy, 0);
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    s
}

#[test]
fn a_try_again_offline_never_waits_longer_than_the_cap_online_or_after_a_reload() {
    // Pressed offline, Try again began a round waiting for the connection, with the
    // server's hour still in its record: back online, or reloaded with resume, it waited
    // that hour (the form locked), longer than the cap.
    let mut d = Driver::default();
    let mut s = asked_beyond_the_cap(&mut d, "3600");
    s.handle_online(T0 + secs(2), false);
    s.try_again(T0 + secs(3)).unwrap();
    d.drain(&mut s);
    assert_eq!(
        s.state(),
        State::Unsure,
        "unsure again at once, offline too"
    );
    let gave_up = d.settled.last().unwrap().gave_up;
    assert_eq!(gave_up, Some(GiveUp::RetryAfterBeyondCap));
    s.handle_online(T0 + secs(4), true);
    d.drain(&mut s);
    assert_eq!(
        s.state(),
        State::Unsure,
        "back online: still unsure, not waiting"
    );
    // A reload with resume finds the round the server ended: unsure again, nothing sent.
    let stored = d.stored.clone().unwrap();
    assert_eq!(stored.stopped, Some(GiveUp::RetryAfterBeyondCap));
    let mut d2 = Driver::default();
    let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
    s2.restore(T0 + secs(5), stored, true).unwrap();
    d2.drain(&mut s2);
    assert_eq!(s2.state(), State::Unsure);
    assert!(d2.sent.is_empty() && d.sent.len() == 1, "nothing more sent");
}

#[test]
fn a_retry_after_longer_than_the_key_s_life_leaves_try_again_unsure_not_expired() {
    // A 503 asking for two days (a quota): Try again a second later settled expired a key
    // with a day of life left, which a reload then showed unsure again.
    let mut d = Driver::default();
    let mut s = asked_beyond_the_cap(&mut d, "172800");
    s.try_again(T0 + secs(2)).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Unsure);
    let settled = d.settled.last().unwrap();
    assert_eq!(
        (settled.outcome, settled.gave_up),
        (Outcome::Unsure, Some(GiveUp::RetryAfterBeyondCap))
    );
    assert_eq!(d.sent.len(), 1, "nothing more sent");
}

#[test]
fn try_again_past_the_key_s_lifetime_expires_whatever_the_server_asked_for() {
    // A Retry-After far beyond the cap, and Try again a day later (a tab asleep, its timer
    // not fired): the wait beyond the cap was judged first, and it came back unsure, offering
    // Try again for a key past its lifetime, where it must be expired (Send as new).
    let mut d = Driver::default();
    let mut s = asked_beyond_the_cap(&mut d, "400000");
    s.try_again(T0 + secs(25 * 3600)).unwrap();
    d.drain(&mut s);
    assert_eq!(s.state(), State::Expired);
    assert_eq!(d.settled.last().unwrap().outcome, Outcome::Expired);
    assert_eq!(d.sent.len(), 1, "nothing more sent");
}

#[test]
fn a_record_whose_first_attempt_is_in_the_future_is_not_sent() {
    // A startedAt far ahead (a corrupt record, or a clock far off) pushed the key's deadline
    // past any now: the key was never expired, whatever its age.
    let mut d = Driver::default();
    let s = started(&mut d);
    drop(s);
    let mut stored = d.stored.clone().unwrap();
    for ahead in [secs(DAY), secs(3600), secs(u32::MAX.into())] {
        stored.started_at = T0 + ahead;
        let stored = Record::from_json(&stored.to_json()).unwrap();
        let mut d2 = Driver::default();
        let mut s2 = Submission::new("new-ticket", RetryPolicy::default());
        s2.restore(T0, stored, true).unwrap();
        d2.drain(&mut s2);
        assert!(d2.sent.is_empty(), "{ahead:?} ahead: nothing sent");
        assert_eq!(s2.state(), State::Expired, "{ahead:?}");
    }
    // A few minutes ahead (fleet clocks differ a little): sent as usual.
    stored.started_at = T0 + secs(120);
    let mut d3 = Driver::default();
    let mut s3 = Submission::new("new-ticket", RetryPolicy::default());
    s3.restore(T0, stored, true).unwrap();
    d3.drain(&mut s3);
    assert_eq!(d3.sent.len(), 1);
}

#[test]
fn a_discard_or_a_stop_before_the_driver_took_the_attempt_sends_nothing() {
    // The driver had not taken the Send yet (blocked on an IndexedDB write, or in a listener
    // of the change that began it): a discard left it queued, the discarded key went out, and
    // the next submission's new key made the request twice.
    let mut d = Driver::default();
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.begin(T0, request(TICKET), bytes(1)).unwrap();
    s.discard();
    d.drain(&mut s);
    assert!(d.sent.is_empty(), "the discarded attempt is not sent");
    assert!(d.stored.is_none());
    s.begin(T0, request(TICKET), bytes(2)).unwrap();
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1, "the next submission, once");

    // Stopped (an abort) before it was taken: not sent; pending, and Try again sends it.
    let mut d = Driver::default();
    let mut s = Submission::new("new-ticket", RetryPolicy::default());
    s.begin(T0, request(TICKET), bytes(3)).unwrap();
    s.stop();
    d.drain(&mut s);
    assert!(d.sent.is_empty(), "the stopped attempt is not sent");
    assert_eq!(s.state(), State::Unsure);
    let key = d.stored.as_ref().expect("kept").key.clone();
    s.try_again(T0 + secs(1)).unwrap();
    d.drain(&mut s);
    assert_eq!(d.sent.len(), 1);
    assert_eq!(d.last_sent().key, key);
}
