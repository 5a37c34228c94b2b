//! # What an answer means
//!
//! The one classifier of the crate: CONTRACT.md section 2 as code. A driver turns what it received
//! into an [`Answer`] (status, the headers that matter, whether a `400` names the key) or a
//! [`Failure`] (no answer at all), and [`classify`] says whether the outcome is definite, whether
//! to retry, and not before when.
//!
//! | answer | verdict |
//! |---|---|
//! | 2xx | [`Outcome::Succeeded`], `replayed` when the server says so |
//! | 409 | retry (the server is still working on this key), after `Retry-After` if given |
//! | 408, 425, 429, 500-599 | retry: not known, or not done yet |
//! | network error, timeout, lost connection | retry: unknown |
//! | 422 | [`Outcome::Conflict`]: the server holds this key for another body; never retried |
//! | 400 naming the idempotency key | [`Outcome::Misconfigured`]: nothing was done; a setup error |
//! | other 4xx | [`Outcome::Refused`]: the request was not carried out |
//!
//! The contract's table is silent on redirects that reach the classifier (the native client
//! follows no `303`, `301` or `302` after a `POST`, nor any to another origin; `fetch` follows
//! them itself). A `303` is the server's answer to the request, given elsewhere (RFC 9110,
//! 15.4.4: a `POST` answered "see other" was carried out): [`Outcome::Succeeded`]. Any other
//! 3xx is no answer about the request, which may or may not have been carried out:
//! [`Outcome::Unsure`] ([`GiveUp::Redirected`]), its key kept, never `refused` (which would let
//! the corrected resend go under a new key).
//!
//! Nor is it on a 1xx given as the final answer (a `101` to a `POST` that asked for no upgrade,
//! from a broken server or middlebox): an interim status says nothing of whether the request was
//! carried out, so it is retried with the same key, as a 5xx is, never `refused`.
//!
//! A server hint overrides the status on anything but a 2xx: `Stripe-Should-Retry` or
//! `x-should-retry: false` stops retries (a retryable status then ends [`Outcome::Unsure`]), `true`
//! allows them.

use ::core::time::Duration;

use super::retry::GiveUp;
use super::time::{parse_http_date, Timestamp};

/// The final outcome of a submission, as the caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A 2xx: definite. Make a new key next time.
    Succeeded,
    /// A 4xx other than the ones below: definite, the request was not carried out.
    Refused,
    /// A 422: the server holds this key for another body. A bug, reported loudly, not retried.
    Conflict,
    /// A 400 that names the idempotency key: definite (nothing was done), a setup error.
    Misconfigured,
    /// Retries stopped (attempts, budget, or the server said stop), or a redirect that was not
    /// followed, before a definite answer. The submission stays stored, with its key, for "Try
    /// again" or a deliberate discard.
    Unsure,
    /// The key is past its lifetime (less the safety margin, see [`retry`](super::retry)) with no
    /// definite answer: it may or may not have been done, and nothing more is sent with it. The
    /// submission stays stored until the caller checks and chooses "send as new" (a deliberate
    /// new key, [`Submission::send_as_new`](super::Submission::send_as_new)) or a discard.
    Expired,
}

impl Outcome {
    /// The contract's word for it: `succeeded`, `refused`, `conflict`, `misconfigured`,
    /// `unsure`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Refused => "refused",
            Outcome::Conflict => "conflict",
            Outcome::Misconfigured => "misconfigured",
            Outcome::Unsure => "unsure",
            Outcome::Expired => "expired",
        }
    }

    /// Whether the outcome is definite: the server's answer settles it and the key is spent.
    /// [`Outcome::Unsure`] and [`Outcome::Expired`] are not: nobody knows whether it was done.
    pub fn is_definite(self) -> bool {
        !self.keeps_record()
    }

    /// Whether the submission stays stored, with its key, after this outcome: unsure (for "Try
    /// again") and expired (for "send as new"), until then or a discard.
    pub fn keeps_record(self) -> bool {
        matches!(self, Outcome::Unsure | Outcome::Expired)
    }
}

/// When the server asked us to come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryAfter {
    /// After this long (delta-seconds, or `retry-after-ms`).
    Delay(Duration),
    /// Not before this time (an HTTP-date).
    At(Timestamp),
    /// After this long and not before this time: a delay and a date were both given (which of
    /// the two is later depends on when it is read).
    Both(Duration, Timestamp),
}

impl RetryAfter {
    /// Reads a `Retry-After` value: delta-seconds or an HTTP-date. A malformed value is `None`
    /// (and ignored, as if absent).
    pub fn parse(value: &str) -> Option<RetryAfter> {
        let value = value.trim();
        if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            // Huge values saturate; the retry policy's cap decides what to do with them.
            let secs = value.parse::<u64>().unwrap_or(u64::MAX);
            return Some(RetryAfter::Delay(Duration::from_secs(secs)));
        }
        parse_http_date(value).map(RetryAfter::At)
    }

    /// Reads a `retry-after-ms` value: a non-negative number of milliseconds, maybe with a
    /// fraction.
    pub fn parse_ms(value: &str) -> Option<RetryAfter> {
        let value = value.trim();
        let (whole, frac) = value.split_once('.').unwrap_or((value, "0"));
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !digits(whole) || !digits(frac) {
            return None;
        }
        let ms = whole.parse::<u64>().unwrap_or(u64::MAX);
        // Round a fraction up: never earlier than the server said.
        let ms = if frac.bytes().any(|b| b != b'0') {
            ms.saturating_add(1)
        } else {
            ms
        };
        Some(RetryAfter::Delay(Duration::from_millis(ms)))
    }

    /// The earliest time a retry may start, seen from `now`.
    pub fn not_before(self, now: Timestamp) -> Timestamp {
        match self {
            RetryAfter::Delay(d) => now + d,
            RetryAfter::At(t) => t.max(now),
            RetryAfter::Both(d, t) => (now + d).max(t),
        }
    }
}

/// What an HTTP answer says, reduced to what the contract looks at.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Answer {
    /// The status code.
    pub status: u16,
    /// `retry-after-ms` or `Retry-After`, the later of two delays.
    pub retry_after: Option<RetryAfter>,
    /// `Stripe-Should-Retry` or `x-should-retry`, when `true` or `false`.
    pub should_retry: Option<bool>,
    /// `Idempotent-Replayed: true` or `x-idempotency-status: replayed`.
    pub replayed: bool,
    /// For a 400: its problem details name the idempotency key (it was missing or malformed).
    pub names_key: bool,
}

impl Answer {
    /// An answer with this status and no headers that matter.
    pub fn status(status: u16) -> Answer {
        Answer {
            status,
            ..Answer::default()
        }
    }

    /// Reads an answer from its status, its headers (names in any case) and, for a `400`, its
    /// body text, which is searched for the key header's name (`key_header`) or the word
    /// "idempotency" to tell a key problem from any other bad request.
    pub fn from_response<'a>(
        status: u16,
        headers: impl IntoIterator<Item = (&'a str, &'a str)>,
        body: &str,
        key_header: &str,
    ) -> Answer {
        let mut answer = Answer::status(status);
        let mut retry_after = None;
        let mut retry_after_ms = None;
        for (name, value) in headers {
            let value = value.trim();
            // A malformed value is ignored, not taken for "none": an earlier good one stands.
            if name.eq_ignore_ascii_case("retry-after") {
                retry_after = later(retry_after, RetryAfter::parse(value));
            } else if name.eq_ignore_ascii_case("retry-after-ms") {
                retry_after_ms = later(retry_after_ms, RetryAfter::parse_ms(value));
            } else if name.eq_ignore_ascii_case("stripe-should-retry")
                || name.eq_ignore_ascii_case("x-should-retry")
            {
                answer.should_retry = match value {
                    v if v.eq_ignore_ascii_case("true") => Some(true),
                    v if v.eq_ignore_ascii_case("false") => Some(false),
                    _ => answer.should_retry,
                };
            } else if name.eq_ignore_ascii_case("idempotent-replayed") {
                answer.replayed |= value.eq_ignore_ascii_case("true") || value == "?1";
            } else if name.eq_ignore_ascii_case("x-idempotency-status") {
                answer.replayed |= value.eq_ignore_ascii_case("replayed");
            }
        }
        // Both: never earlier than either says (`retry-after-ms` is the precise one,
        // `Retry-After` its whole seconds rounded up).
        answer.retry_after = later(retry_after_ms, retry_after);
        if status == 400 {
            let body = body.to_ascii_lowercase();
            let header = key_header.to_ascii_lowercase();
            answer.names_key = contains(&body, &header) || contains(&body, "idempotency");
        }
        answer
    }
}

/// Of two server hints (a header given twice, or both headers), what is never earlier than
/// either: the longer of two delays, the later of two dates, and a delay with a date kept both
/// ([`RetryAfter::Both`]: which is later depends on when it is read).
fn later(a: Option<RetryAfter>, b: Option<RetryAfter>) -> Option<RetryAfter> {
    let parts = |h: Option<RetryAfter>| match h {
        None => (None, None),
        Some(RetryAfter::Delay(d)) => (Some(d), None),
        Some(RetryAfter::At(t)) => (None, Some(t)),
        Some(RetryAfter::Both(d, t)) => (Some(d), Some(t)),
    };
    let ((da, ta), (db, tb)) = (parts(a), parts(b));
    // `None` orders before any `Some`: the one given wins.
    match (da.max(db), ta.max(tb)) {
        (Some(d), Some(t)) => Some(RetryAfter::Both(d, t)),
        (Some(d), None) => Some(RetryAfter::Delay(d)),
        (None, Some(t)) => Some(RetryAfter::At(t)),
        (None, None) => None,
    }
}

/// Whether `needle` (not empty) occurs in `haystack`: a plain scan, as `str::contains` brings
/// a two-way searcher and its panic messages into the browser package.
fn contains(haystack: &str, needle: &str) -> bool {
    !needle.is_empty()
        && haystack
            .as_bytes()
            .windows(needle.len())
            .any(|w| w == needle.as_bytes())
}

/// No answer at all: the outcome is unknown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The connection failed or was lost before a complete answer.
    Network,
    /// The attempt took longer than the per-attempt timeout and was abandoned.
    Timeout,
}

/// What to do about an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The outcome is settled; `replayed` is true when the server said it replayed an earlier
    /// answer.
    Definite {
        /// The outcome.
        outcome: Outcome,
        /// Whether the server replayed a stored answer.
        replayed: bool,
    },
    /// Not known or not done yet: send again with the same key, not before `retry_after`.
    Retry {
        /// The server's `Retry-After`, if it gave one.
        retry_after: Option<RetryAfter>,
    },
    /// Not definite, and not to be sent again on its own (why): the submission is
    /// [`Outcome::Unsure`], its key kept for "Try again".
    Stop(GiveUp),
}

/// The answer table of CONTRACT.md section 2.
pub fn classify(answer: &Answer) -> Verdict {
    let status = answer.status;
    let by_status = match status {
        // 303: the answer to the request, to be seen elsewhere (see the module docs).
        200..=299 | 303 => {
            return Verdict::Definite {
                outcome: Outcome::Succeeded,
                replayed: answer.replayed,
            }
        }
        // Another redirect, not followed: no answer about the request (see the module docs).
        // Not sent again on its own, nothing will have changed; unsure, unless the server
        // says to retry (the hint below).
        300..=399 if answer.should_retry != Some(true) => return Verdict::Stop(GiveUp::Redirected),
        // A status of no HTTP class (an intermediary's 999, a 0), or an interim 1xx given as
        // the answer, says nothing of the request: as a 5xx (RFC 9110 section 15), not a
        // refusal that would free the name for a new key.
        409 | 408 | 425 | 429 | 500.. | 0..=199 => None,
        422 => Some(Outcome::Conflict),
        400 if answer.names_key => Some(Outcome::Misconfigured),
        _ => Some(Outcome::Refused),
    };
    let retry = Verdict::Retry {
        retry_after: answer.retry_after,
    };
    match (by_status, answer.should_retry) {
        (_, Some(true)) => retry,
        (None, Some(false)) => Verdict::Stop(GiveUp::ServerSaidStop),
        (None, None) => retry,
        (Some(outcome), _) => Verdict::Definite {
            outcome,
            replayed: answer.replayed,
        },
    }
}

/// A transport failure is always "unknown": retry with the same key.
pub fn classify_failure(_failure: Failure) -> Verdict {
    Verdict::Retry { retry_after: None }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn definite(outcome: Outcome) -> Verdict {
        Verdict::Definite {
            outcome,
            replayed: false,
        }
    }
    const RETRY: Verdict = Verdict::Retry { retry_after: None };

    #[test]
    fn every_row_of_the_table() {
        for s in [200, 201, 202, 204, 299] {
            assert_eq!(
                classify(&Answer::status(s)),
                definite(Outcome::Succeeded),
                "{s}"
            );
        }
        for s in [
            409,
            408,
            425,
            429,
            500,
            502,
            503,
            504,
            599,
            600,
            999,
            u16::MAX,
            0,
            99,
            100,
            101,
            199,
        ] {
            assert_eq!(classify(&Answer::status(s)), RETRY, "{s}");
        }
        assert_eq!(classify(&Answer::status(422)), definite(Outcome::Conflict));
        for s in [400, 401, 403, 404, 405, 410, 413, 415, 418, 451, 499] {
            assert_eq!(
                classify(&Answer::status(s)),
                definite(Outcome::Refused),
                "{s}"
            );
        }
        // A 303 is the answer, seen elsewhere; another redirect not followed says nothing of
        // the request: unsure.
        assert_eq!(classify(&Answer::status(303)), definite(Outcome::Succeeded));
        for s in [300, 301, 302, 304, 307, 308, 399] {
            assert_eq!(
                classify(&Answer::status(s)),
                Verdict::Stop(GiveUp::Redirected),
                "{s}"
            );
        }
        assert_eq!(classify_failure(Failure::Network), RETRY);
        assert_eq!(classify_failure(Failure::Timeout), RETRY);
    }

    #[test]
    fn a_400_naming_the_key_is_misconfigured() {
        let problem =
            r#"{"type":"about:blank","title":"Missing Idempotency-Key header","status":400}"#;
        let a = Answer::from_response(
            400,
            [("content-type", "application/problem+json")],
            problem,
            "Idempotency-Key",
        );
        assert_eq!(classify(&a), definite(Outcome::Misconfigured));
        let custom = Answer::from_response(
            400,
            [],
            r#"{"detail":"bad x-request-key"}"#,
            "X-Request-Key",
        );
        assert_eq!(classify(&custom), definite(Outcome::Misconfigured));
        let field = Answer::from_response(
            400,
            [],
            r#"{"detail":"subject is empty"}"#,
            "Idempotency-Key",
        );
        assert_eq!(classify(&field), definite(Outcome::Refused));
        // Only a 400 is read that way.
        let other = Answer::from_response(404, [], "no idempotency here", "Idempotency-Key");
        assert_eq!(classify(&other), definite(Outcome::Refused));
    }

    #[test]
    fn replays_are_recognised_both_ways() {
        for h in [
            ("Idempotent-Replayed", "true"),
            ("x-idempotency-status", "replayed"),
            ("idempotent-replayed", "?1"),
        ] {
            let a = Answer::from_response(201, [h], "", "Idempotency-Key");
            assert_eq!(
                classify(&a),
                Verdict::Definite {
                    outcome: Outcome::Succeeded,
                    replayed: true
                },
                "{h:?}"
            );
        }
        let a = Answer::from_response(
            201,
            [("Idempotent-Replayed", "false")],
            "",
            "Idempotency-Key",
        );
        assert!(!a.replayed);
    }

    #[test]
    fn hints_override_the_status() {
        for name in ["Stripe-Should-Retry", "x-should-retry"] {
            let stop = Answer::from_response(503, [(name, "false")], "", "Idempotency-Key");
            assert_eq!(
                classify(&stop),
                Verdict::Stop(GiveUp::ServerSaidStop),
                "{name}"
            );
            let go = Answer::from_response(400, [(name, "true")], "", "Idempotency-Key");
            assert_eq!(classify(&go), RETRY, "{name}");
            let refused = Answer::from_response(404, [(name, "false")], "", "Idempotency-Key");
            assert_eq!(classify(&refused), definite(Outcome::Refused));
            // A 2xx is a 2xx whatever the hint.
            let ok = Answer::from_response(200, [(name, "true")], "", "Idempotency-Key");
            assert_eq!(classify(&ok), definite(Outcome::Succeeded));
        }
        let junk = Answer::from_response(503, [("x-should-retry", "maybe")], "", "Idempotency-Key");
        assert_eq!(classify(&junk), RETRY);
    }

    #[test]
    fn retry_after_in_both_forms_and_malformed() {
        let now = Timestamp::from_millis(784_111_000_000);
        let secs = Answer::from_response(503, [("Retry-After", "7")], "", "k");
        assert_eq!(
            secs.retry_after,
            Some(RetryAfter::Delay(Duration::from_secs(7)))
        );
        assert_eq!(
            secs.retry_after.unwrap().not_before(now),
            now + Duration::from_secs(7)
        );
        let date = Answer::from_response(
            429,
            [("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT")],
            "",
            "k",
        );
        assert_eq!(
            date.retry_after.unwrap().not_before(now),
            Timestamp::from_millis(784_111_777_000)
        );
        // A date in the past means "now".
        let past = RetryAfter::At(Timestamp::from_millis(5));
        assert_eq!(past.not_before(now), now);
        let dates = Answer::from_response(
            429,
            [
                ("retry-after", "Sun, 06 Nov 1994 08:49:37 GMT"),
                ("retry-after", "Sun, 06 Nov 1994 08:49:30 GMT"),
            ],
            "",
            "k",
        );
        assert_eq!(dates.retry_after, date.retry_after, "the later date");
        let ms = Answer::from_response(
            429,
            [("retry-after-ms", "1500.2"), ("Retry-After", "1")],
            "",
            "k",
        );
        assert_eq!(
            ms.retry_after,
            Some(RetryAfter::Delay(Duration::from_millis(1501)))
        );
        // The two disagree: never earlier than either. A malformed repeat leaves a good one,
        // and a shorter repeat a longer one.
        for headers in [
            [("retry-after-ms", "1500"), ("Retry-After", "9")],
            [("Retry-After", "9"), ("retry-after", "soon")],
            [("Retry-After", "9"), ("retry-after", "2")],
            [("retry-after-ms", "9000"), ("retry-after-ms", "10")],
        ] {
            let a = Answer::from_response(503, headers, "", "k");
            let want = RetryAfter::Delay(Duration::from_secs(9));
            assert_eq!(a.retry_after, Some(want), "{headers:?}");
        }
        for bad in ["-1", "1.5", "soon", "", "Sun, 06 Nov 1994"] {
            let a = Answer::from_response(503, [("Retry-After", bad)], "", "k");
            assert_eq!(a.retry_after, None, "{bad:?}");
            assert_eq!(classify(&a), RETRY);
        }
        // A delay and a date: never earlier than either, whichever is later when it is read.
        let both = Answer::from_response(
            503,
            [
                ("retry-after-ms", "5000"),
                ("Retry-After", "Sun, 06 Nov 1994 08:49:37 GMT"),
            ],
            "",
            "k",
        )
        .retry_after
        .unwrap();
        assert_eq!(both.not_before(now), now + Duration::from_secs(777));
        let later_now = now + Duration::from_secs(776);
        assert_eq!(
            both.not_before(later_now),
            later_now + Duration::from_secs(5)
        );
        assert_eq!(RetryAfter::parse_ms("-5"), None);
        assert_eq!(
            RetryAfter::parse("99999999999999999999999"),
            Some(RetryAfter::Delay(Duration::from_secs(u64::MAX)))
        );
    }
}
