//! # When to try again
//!
//! Backoff without a hint is exponential with full jitter:
//! `delay = random(0, min(cap, base * 2^n))` for the n-th retry, the random draw handed in.
//! A server's `Retry-After` is honoured: never retry earlier than it says, and never wait longer
//! than the cap (a `Retry-After` beyond the cap ends the round instead). Retries stop when the
//! attempt limit or the time budget is spent; the budget counts from the round's first attempt,
//! across reloads and restarts, because it is stored in the record.
//!
//! The defaults, and why:
//! - `base` 500 ms: a lost reply on a good connection is retried within half a second.
//! - `cap` 30 s: a person watching a locked form should not wait longer than that between tries.
//! - `attempts` 8: with the cap, the full jittered schedule spends about a minute on average.
//! - `budget` 15 minutes: long enough to ride out a tunnel, a train or a server deploy, and far
//!   inside the usual 24 h for which servers keep keys (about 1 % of the usable lifetime).
//! - `key_lifetime` 24 h: the time a typical server keeps a key (Stripe, Checkout.com, our
//!   reference server). Set it to your server's: Qonto keeps keys 30 minutes, Svix 12 hours,
//!   Adyen at least 31 days.
//!
//! # The key's lifetime
//!
//! A server forgets a key after its lifetime; an attempt sent with a forgotten key may do the
//! work a second time. So no attempt is ever sent later than [`key_deadline`]: the
//! submission's first attempt (`startedAt`, kept in the record across reloads, restarts and "Try
//! again") plus the lifetime, less a safety margin of [`key_margin`] = min(10 % of the lifetime,
//! 5 minutes). The margin covers the clocks of client and server disagreeing, the attempt's own
//! time in transit and at the server before it looks the key up, and servers that sweep expired
//! keys early: 5 minutes for 24 h, 3 minutes for Qonto's 30 minutes. A submission that reaches
//! the deadline without a definite answer is [`Outcome::Expired`](super::Outcome::Expired).
//!
//! # Offline
//!
//! Time the platform spends offline is not spent from the budget: the round's budget counts from
//! `roundStartedAt` moved on by the time spent offline in the round (see
//! [`Submission::handle_online`](super::Submission::handle_online)). The key's lifetime does not
//! stop while offline: the server's clock runs on.

use ::core::time::Duration;

use super::answer::RetryAfter;
use super::time::Timestamp;

/// How retries are spaced and when they stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in one round, the first included. At least 1.
    pub attempts: u32,
    /// The ceiling of the first retry's random delay.
    pub base: Duration,
    /// No delay is longer than this.
    pub cap: Duration,
    /// No attempt starts later than this after the round's first attempt, time offline not
    /// counted.
    pub budget: Duration,
    /// How long the server keeps a key, counted from the submission's first attempt: no attempt
    /// is sent after it, less [`key_margin`] (`keyLifetimeMs` in the browser).
    pub key_lifetime: Duration,
}

/// The longest safety margin kept before a key's lifetime ends.
pub const KEY_MARGIN_CAP: Duration = Duration::from_secs(5 * 60);

/// The safety margin kept before a key's `lifetime` ends: min(10 % of it, 5 minutes).
pub fn key_margin(lifetime: Duration) -> Duration {
    (lifetime / 10).min(KEY_MARGIN_CAP)
}

/// The last moment an attempt may be sent with a key first sent at `started_at` and kept by the
/// server for `lifetime`: `started_at + lifetime - key_margin(lifetime)`.
pub fn key_deadline(started_at: Timestamp, lifetime: Duration) -> Timestamp {
    started_at + (lifetime - key_margin(lifetime))
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            attempts: 8,
            base: Duration::from_millis(500),
            cap: Duration::from_secs(30),
            budget: Duration::from_secs(15 * 60),
            key_lifetime: super::record::DEFAULT_KEY_LIFETIME,
        }
    }
}

/// A retry policy that cannot work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError(&'static str);

impl PolicyError {
    /// What [`Display`](::core::fmt::Display) writes: the setting and what is wrong with it.
    pub fn message(&self) -> &'static str {
        self.0
    }
}

/// Why a round of retries ended without a definite answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GiveUp {
    /// The attempt limit is reached.
    AttemptsSpent,
    /// The next attempt would start after the time budget.
    BudgetSpent,
    /// The server asked for a wait longer than the cap.
    RetryAfterBeyondCap,
    /// The server said not to retry (`Stripe-Should-Retry: false`).
    ServerSaidStop,
    /// The server answered with a redirect, which was not followed (the request may have been
    /// carried out).
    Redirected,
    /// The caller stopped waiting (an `AbortSignal`, [`Submission::stop`]); the submission stays
    /// pending for "Try again".
    ///
    /// [`Submission::stop`]: super::submission::Submission::stop
    Stopped,
}

impl GiveUp {
    /// Every reason, in the order of the enum.
    const ALL: [GiveUp; 6] = [
        GiveUp::AttemptsSpent,
        GiveUp::BudgetSpent,
        GiveUp::RetryAfterBeyondCap,
        GiveUp::ServerSaidStop,
        GiveUp::Redirected,
        GiveUp::Stopped,
    ];

    /// The server ended the round (it said not to retry, asked for a longer wait than the cap,
    /// or redirected): unlike a spent round, nothing in the record shows it, so it is stored
    /// ([`Record::stopped`](super::record::Record::stopped)) and a restart does not send it on
    /// its own.
    pub fn by_server(self) -> bool {
        matches!(
            self,
            GiveUp::RetryAfterBeyondCap | GiveUp::ServerSaidStop | GiveUp::Redirected
        )
    }

    /// The reason is written in the record ([`Record::stopped`](super::record::Record::stopped)),
    /// as nothing else there shows it, so that a restart does not send it on its own: the server
    /// ended the round ([`GiveUp::by_server`]), or its next attempt was due past the time budget
    /// (a `Retry-After`, or the delay drawn, decided that, and the clock alone does not yet show
    /// it). A round spent by its attempts shows in the record's attempt count; the caller's stop
    /// is written when the caller stops.
    pub fn written(self) -> bool {
        self.by_server() || self == GiveUp::BudgetSpent
    }

    /// The reason as the stored record writes it.
    pub fn code(self) -> &'static str {
        match self {
            GiveUp::AttemptsSpent => "attempts-spent",
            GiveUp::BudgetSpent => "budget-spent",
            GiveUp::RetryAfterBeyondCap => "retry-after-beyond-cap",
            GiveUp::ServerSaidStop => "server-said-stop",
            GiveUp::Redirected => "redirected",
            GiveUp::Stopped => "stopped",
        }
    }

    /// The reason [`GiveUp::code`] wrote, or `None`.
    pub fn from_code(code: &str) -> Option<GiveUp> {
        GiveUp::ALL.into_iter().find(|g| g.code() == code)
    }

    /// A short phrase for people.
    pub fn as_str(self) -> &'static str {
        match self {
            GiveUp::AttemptsSpent => "attempts spent",
            GiveUp::BudgetSpent => "time budget spent",
            GiveUp::RetryAfterBeyondCap => "server asked to wait longer than the cap",
            GiveUp::ServerSaidStop => "server said not to retry",
            GiveUp::Redirected => "server answered with a redirect, not followed",
            GiveUp::Stopped => "the caller stopped it",
        }
    }
}

/// The next step after an attempt without a definite answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Send the next attempt at this time.
    At(Timestamp),
    /// Stop this round: the submission is unsure.
    GiveUp(GiveUp),
}

impl RetryPolicy {
    /// Checks that the policy can work: at least one attempt, a non-zero base, a cap not below
    /// the base, a non-zero budget, and a key lifetime whose usable part (less [`key_margin`])
    /// holds the budget: a round that outlives its key could never be finished.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if self.attempts == 0 {
            return Err(PolicyError("retry.attempts must be at least 1"));
        }
        if self.base.is_zero() {
            return Err(PolicyError("retry.base must be more than 0"));
        }
        if self.cap < self.base {
            return Err(PolicyError("retry.cap must not be below retry.base"));
        }
        if self.budget.is_zero() {
            return Err(PolicyError("retry.budget must be more than 0"));
        }
        if self.key_lifetime.is_zero() {
            return Err(PolicyError("the key lifetime must be more than 0"));
        }
        if self.budget > self.key_lifetime - key_margin(self.key_lifetime) {
            return Err(PolicyError(
                "retry.budget must fit in the key lifetime less its safety margin (min(10 %, 5 min)); shorten the budget or set the server's real key lifetime",
            ));
        }
        Ok(())
    }

    /// The full-jitter delay before retry number `retry` (0 for the first retry): `jitter` is a
    /// uniform random `u32`, scaled onto `0..=min(cap, base * 2^retry)`.
    pub fn backoff(&self, retry: u32, jitter: u32) -> Duration {
        let ceiling = self
            .base
            .checked_mul(1u32.checked_shl(retry).unwrap_or(u32::MAX))
            .unwrap_or(self.cap)
            .min(self.cap);
        // At most 2^32 - 1 ms (49 days), so the product fits in a u64: no u128 division, which
        // would add a helper to the browser package.
        let ceiling_ms = u64::try_from(ceiling.as_millis())
            .unwrap_or(u64::MAX)
            .min(u64::from(u32::MAX));
        let ms = ceiling_ms * u64::from(jitter) / u64::from(u32::MAX);
        Duration::from_millis(ms)
    }

    /// After attempt `attempts` of a round that began at `round_started_at` (moved on by the time
    /// spent offline) came back without a definite answer at `now`: when to send the next one,
    /// or why not to. The key's lifetime is the submission's to check.
    pub fn next(
        &self,
        now: Timestamp,
        round_started_at: Timestamp,
        attempts: u32,
        retry_after: Option<RetryAfter>,
        jitter: u32,
    ) -> Next {
        if attempts >= self.attempts {
            return Next::GiveUp(GiveUp::AttemptsSpent);
        }
        let mut delay = self.backoff(attempts.saturating_sub(1), jitter);
        if let Some(hint) = retry_after {
            let asked = hint.not_before(now).saturating_since(now);
            if asked > self.cap {
                return Next::GiveUp(GiveUp::RetryAfterBeyondCap);
            }
            delay = delay.max(asked);
        }
        let at = now + delay;
        if at > round_started_at + self.budget {
            return Next::GiveUp(GiveUp::BudgetSpent);
        }
        Next::At(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_jitter_spans_zero_to_the_ceiling() {
        let p = RetryPolicy::default();
        assert_eq!(p.backoff(0, 0), Duration::ZERO);
        assert_eq!(p.backoff(0, u32::MAX), Duration::from_millis(500));
        assert_eq!(p.backoff(3, u32::MAX), Duration::from_millis(4000));
        assert_eq!(p.backoff(10, u32::MAX), Duration::from_secs(30));
        assert_eq!(p.backoff(200, u32::MAX), Duration::from_secs(30));
        assert_eq!(p.backoff(1, u32::MAX / 2), Duration::from_millis(499));
    }

    #[test]
    fn attempts_and_budget_end_the_round() {
        let p = RetryPolicy {
            attempts: 3,
            ..RetryPolicy::default()
        };
        let t0 = Timestamp::from_millis(1_000_000);
        assert!(matches!(p.next(t0, t0, 1, None, 0), Next::At(_)));
        assert!(matches!(p.next(t0, t0, 2, None, 0), Next::At(_)));
        assert_eq!(
            p.next(t0, t0, 3, None, 0),
            Next::GiveUp(GiveUp::AttemptsSpent)
        );
        let late = t0 + Duration::from_millis(15 * 60 * 1000 - 100);
        assert_eq!(
            p.next(late, t0, 1, None, u32::MAX),
            Next::GiveUp(GiveUp::BudgetSpent)
        );
        assert_eq!(p.next(late, t0, 1, None, 0), Next::At(late));
    }

    #[test]
    fn retry_after_is_a_floor_and_the_cap_a_ceiling() {
        let p = RetryPolicy::default();
        let t0 = Timestamp::from_millis(1_000_000);
        let hint = RetryAfter::Delay(Duration::from_secs(5));
        assert_eq!(
            p.next(t0, t0, 1, Some(hint), 0),
            Next::At(t0 + Duration::from_secs(5))
        );
        let far = RetryAfter::Delay(Duration::from_secs(31));
        assert_eq!(
            p.next(t0, t0, 1, Some(far), 0),
            Next::GiveUp(GiveUp::RetryAfterBeyondCap)
        );
        let date = RetryAfter::At(t0 + Duration::from_secs(2));
        assert_eq!(
            p.next(t0, t0, 1, Some(date), 0),
            Next::At(t0 + Duration::from_secs(2))
        );
    }

    #[test]
    fn bad_policies_name_the_setting() {
        let zero = RetryPolicy {
            attempts: 0,
            ..RetryPolicy::default()
        };
        assert!(zero
            .validate()
            .unwrap_err()
            .to_string()
            .contains("retry.attempts"));
        let inverted = RetryPolicy {
            cap: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        assert!(inverted
            .validate()
            .unwrap_err()
            .to_string()
            .contains("retry.cap"));
        assert!(RetryPolicy::default().validate().is_ok());
        let outlived = RetryPolicy {
            key_lifetime: Duration::from_secs(10 * 60),
            ..RetryPolicy::default()
        };
        let err = outlived.validate().unwrap_err().to_string();
        assert!(
            err.contains("retry.budget") && err.contains("key lifetime"),
            "{err}"
        );
        let no_lifetime = RetryPolicy {
            key_lifetime: Duration::ZERO,
            ..RetryPolicy::default()
        };
        assert!(no_lifetime.validate().is_err());
    }

    #[test]
    fn the_margin_is_a_tenth_up_to_five_minutes() {
        let min = |m: u64| Duration::from_secs(m * 60);
        assert_eq!(key_margin(min(24 * 60)), min(5));
        assert_eq!(key_margin(min(30)), min(3));
        assert_eq!(key_margin(min(50)), min(5));
        assert_eq!(
            key_margin(Duration::from_millis(1000)),
            Duration::from_millis(100)
        );
        let t0 = Timestamp::from_millis(1_000_000);
        assert_eq!(key_deadline(t0, min(30)), t0 + min(27));
    }

    #[test]
    fn the_default_budget_sits_well_inside_the_default_lifetime() {
        // A whole round, Try again included, must not come near the key's end: the default
        // budget is under 2 % of the usable lifetime, and so are the attempts at the cap.
        let p = RetryPolicy::default();
        let usable = p.key_lifetime - key_margin(p.key_lifetime);
        assert!(p.budget * 50 <= usable, "{:?} vs {usable:?}", p.budget);
        assert!(p.cap * p.attempts * 50 <= usable);
    }
}
