//! Property tests of the core: random sequences of answers, failures, timers, restores, discards
//! and "Try again", with the contract's promises checked after every step.
#![cfg(not(all(target_arch = "wasm32", any(target_os = "unknown", target_os = "none"))))]

mod core_support;

use std::collections::HashSet;
use std::time::Duration;

use core_support::*;
use oncekey::core::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Step {
    /// Begin with one of three bodies (0 and 3 mean the same, with keys in another order).
    Begin(u8),
    /// The outstanding attempt gets this status, maybe with `Retry-After` seconds.
    Answer(u16, Option<u8>),
    /// The outstanding attempt fails without an answer.
    Fail(bool),
    /// Time passes up to the next due attempt, and the timer fires.
    Timer,
    /// Time passes.
    Wait(u32),
    /// The page reloads (or the process restarts): a fresh submission restores the record.
    Restore(bool),
    TryAgain,
    Discard,
}

const BODIES: [&str; 4] = [
    r#"{"subject":"a","n":1}"#,
    r#"{"subject":"b"}"#,
    r#"{"subject":"c","tags":[1,2]}"#,
    r#"{"n":1.0,"subject":"a"}"#,
];

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0u8..4).prop_map(Step::Begin),
        3 => (
            prop::sample::select(vec![200u16, 201, 400, 404, 408, 409, 422, 425, 429, 500, 503]),
            prop::option::of(0u8..40)
        )
            .prop_map(|(s, r)| Step::Answer(s, r)),
        2 => any::<bool>().prop_map(Step::Fail),
        3 => Just(Step::Timer),
        1 => (0u32..2_000_000).prop_map(Step::Wait),
        1 => any::<bool>().prop_map(Step::Restore),
        1 => Just(Step::TryAgain),
        1 => Just(Step::Discard),
    ]
}

fn policy() -> RetryPolicy {
    RetryPolicy {
        attempts: 5,
        base: Duration::from_millis(200),
        cap: Duration::from_secs(30),
        budget: Duration::from_secs(120),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn the_contract_holds_after_every_step(steps in prop::collection::vec(step(), 1..60), seed in any::<u32>()) {
        let mut s = Submission::new("form", policy());
        let mut d = Driver::default();
        let mut now = T0;
        let mut jitter = seed;
        let mut fresh = 0u8;
        // The key of the pending submission, as the driver last saw it sent.
        let mut pending_key: Option<Key> = None;
        let mut used_keys: HashSet<Key> = HashSet::new();
        // The attempt a request is out for (cleared by its answer, a discard or a reload).
        let mut outstanding: Option<Attempt> = None;

        for step in steps {
            jitter = jitter.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let sent_before = d.sent.len();
            let settled_before = d.settled.len();
            let mut retry_after = None;
            match step {
                Step::Begin(b) => {
                    fresh = fresh.wrapping_add(1);
                    let _ = s.begin(now, request(BODIES[b as usize]), bytes(fresh));
                }
                Step::Answer(status, ra) => {
                    if let Some(a) = outstanding.take() {
                        let answer = match ra {
                            Some(secs) => {
                                retry_after = Some(Duration::from_secs(u64::from(secs)));
                                Answer::from_response(status, [("Retry-After", secs.to_string().as_str())], "", "Idempotency-Key")
                            }
                            None => Answer::status(status),
                        };
                        s.handle_answer(now, a.id, &answer, jitter);
                    }
                }
                Step::Fail(timeout) => {
                    if let Some(a) = outstanding.take() {
                        let f = if timeout { Failure::Timeout } else { Failure::Network };
                        s.handle_failure(now, a.id, f, jitter);
                    }
                }
                Step::Timer => {
                    if let Some(t) = s.poll_timeout() {
                        now = now.max(t);
                    }
                    s.handle_timeout(now);
                }
                Step::Wait(ms) => now = now + Duration::from_millis(u64::from(ms)),
                Step::Restore(resume) => {
                    // The page is gone, and with it any request it had out.
                    outstanding = None;
                    s = Submission::new("form", policy());
                    if let Some(r) = d.stored.clone() {
                        s.restore(now, r.clone(), resume).unwrap();
                        prop_assert_eq!(&s.pending().unwrap().key, &r.key);
                        prop_assert_eq!(&s.pending().unwrap().request, &r.request);
                    }
                }
                Step::TryAgain => {
                    let _ = s.try_again(now);
                }
                Step::Discard => {
                    outstanding = None;
                    s.discard();
                }
            }
            d.drain(&mut s);

            // Key and body are stored before every send.
            prop_assert_eq!(d.sent_unstored, 0);
            // At most one attempt is ever out.
            let new_sends = &d.sent[sent_before..];
            prop_assert!(new_sends.len() <= 1, "two sends in one step");
            if let Some(a) = new_sends.first() {
                prop_assert!(outstanding.is_none(), "a second attempt while one is out");
                outstanding = Some(a.clone());
                // The key never changes while pending; a new one is never an old one.
                match &pending_key {
                    Some(k) => prop_assert_eq!(&a.key, k),
                    None => {
                        prop_assert!(used_keys.insert(a.key.clone()), "a spent key was reused");
                        pending_key = Some(a.key.clone());
                    }
                }
            }
            for settled in &d.settled[settled_before..] {
                if settled.outcome.is_definite() {
                    prop_assert_eq!(Some(&settled.key), pending_key.as_ref());
                    pending_key = None;
                }
            }
            if matches!(step, Step::Discard) {
                pending_key = None;
            }
            // Storage and state agree: pending exactly when a record is stored, with its key.
            prop_assert_eq!(s.state().is_pending(), d.stored.is_some());
            if let (Some(r), Some(k)) = (&d.stored, &pending_key) {
                prop_assert_eq!(&r.key, k);
            }
            // No delay is shorter than Retry-After or longer than the cap.
            if let Some(at) = s.poll_timeout() {
                let delay = at.saturating_since(now);
                prop_assert!(delay <= policy().cap, "delay {:?} over the cap", delay);
                if let Some(ra) = retry_after {
                    prop_assert!(delay >= ra, "delay {:?} under Retry-After {:?}", delay, ra);
                }
            }
            // A record restored after any step resumes with the same key and body.
            if let Some(r) = &d.stored {
                let mut other = Submission::new("form", policy());
                let mut od = Driver::default();
                other.restore(now, r.clone(), true).unwrap();
                od.drain(&mut other);
                if let Some(a) = od.sent.first() {
                    prop_assert_eq!(&a.key, &r.key);
                    prop_assert_eq!(&a.request.body, &r.request.body);
                    prop_assert_eq!(od.sent_unstored, 0);
                }
            }
        }
    }

    #[test]
    fn canonical_json_ignores_key_order_and_is_stable(
        map in prop::collection::btree_map("[a-z]{1,6}", prop_oneof![
            any::<i64>().prop_map(|n| n.to_string()),
            "[a-zA-Z0-9 ]{0,8}".prop_map(|s| format!("{s:?}")),
            Just("null".to_owned()),
            (any::<i32>(), 1u8..6).prop_map(|(m, e)| format!("{m}e-{e}")),
        ], 0..8),
        rotate in any::<usize>()
    ) {
        let mut pairs: Vec<_> = map.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
        let forward = format!("{{{}}}", pairs.join(","));
        let len = pairs.len().max(1);
        pairs.rotate_left(rotate % len);
        pairs.reverse();
        let shuffled = format!("{{ {} }}", pairs.join(" , "));
        let a = oncekey::core::body::canonical_json(&forward).unwrap();
        let b = oncekey::core::body::canonical_json(&shuffled).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(oncekey::core::body::canonical_json(&a).unwrap(), a);
    }

    #[test]
    fn no_text_makes_the_parsers_panic(text in "\\PC{0,40}", raw in prop::collection::vec(any::<u8>(), 0..40)) {
        let _ = oncekey::core::body::canonical_json(&text);
        let _ = oncekey::core::body::form_decode(&text);
        let lossy = String::from_utf8_lossy(&raw);
        let _ = oncekey::core::body::canonical_json(&lossy);
        let _ = Key::from_header_value(&lossy);
        let _ = RetryAfter::parse(&lossy);
        let _ = RetryAfter::parse_ms(&lossy);
        let _ = oncekey::core::time::parse_http_date(&lossy);
        let _ = Record::from_json(&text);
        let _ = Record::from_json(&lossy);
        let _ = oncekey::core::body::form_encode(&text);
        let _ = Answer::from_response(400, [("retry-after", text.as_str()), ("idempotent-replayed", &lossy)], &lossy, &text);
    }

    /// Stored records as a page or a server may find them: a good record with some fields
    /// changed to any kind of JSON value, or left out. Reading one gives a record or an error,
    /// never a panic, and a record that reads writes back to the same record.
    #[test]
    fn no_stored_record_makes_the_reader_panic(
        changed in prop::collection::vec((0usize..12, json_value()), 0..4),
        dropped in prop::collection::vec(0usize..12, 0..2),
    ) {
        const NAMES: [&str; 12] = [
            "v", "name", "key", "method", "url", "headers", "body", "encoding", "startedAt",
            "attempts", "roundStartedAt", "roundAttempts",
        ];
        let mut values: Vec<String> = [
            "1", "\"t\"", "\"8e03978e-40d5-43e8-bc93-6894a57f9324\"", "\"POST\"", "\"/x\"",
            "[[\"X-A\",\"1\"]]", "\"{\\\"a\\\":1}\"", "\"json\"", "1700000000000", "2",
            "1700000000500", "1",
        ]
        .map(String::from)
        .to_vec();
        for (i, v) in &changed {
            values[*i] = v.clone();
        }
        let members: Vec<String> = (0..NAMES.len())
            .filter(|i| !dropped.contains(i))
            .map(|i| format!("{:?}:{}", NAMES[i], values[i]))
            .collect();
        let text = format!("{{{}}}", members.join(","));
        let untouched = changed.is_empty() && dropped.is_empty();
        match Record::from_json(&text) {
            Ok(record) => prop_assert_eq!(Record::from_json(&record.to_json()), Ok(record)),
            Err(e) => prop_assert!(!untouched, "the good record does not read: {e}"),
        }
    }

    /// Answers as a server may send them: any status, headers and body. Reading one never panics.
    #[test]
    fn no_answer_makes_the_reader_panic(
        status in any::<u16>(),
        headers in prop::collection::vec(("[a-zA-Z-]{0,20}", "\\PC{0,30}"), 0..6),
        body in "\\PC{0,60}",
    ) {
        let _ = Answer::from_response(
            status,
            headers.iter().map(|(n, v)| (n.as_str(), v.as_str())),
            &body,
            "Idempotency-Key",
        );
    }
}

/// A JSON value of any kind, with the strings and numbers a stored record holds, or not.
fn json_value() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("1.5e3".to_owned()),
        Just("1".to_owned()),
        Just("\"POST\"".to_owned()),
        Just("\"/api/tickets\"".to_owned()),
        Just("\"8e03978e-40d5-43e8-bc93-6894a57f9324\"".to_owned()),
        Just("\"json\"".to_owned()),
        Just("\"form\"".to_owned()),
        Just("\"{\\\"subject\\\":1}\"".to_owned()),
        "\\PC{0,12}".prop_map(|s| format!("{s:?}")),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(|items| format!("[{}]", items.join(",")))
    })
}
