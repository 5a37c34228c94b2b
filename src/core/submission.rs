//! # A submission and its states
//!
//! CONTRACT.md section 3, as a sans-IO state machine:
//!
//! ```text
//! idle --submit--> sending --answer--> succeeded | refused | conflict | misconfigured   (definite)
//!                    |  ^
//!           no answer|  |retry due (same key)
//!                    v  |
//!                  waiting --budget spent--> unsure --try again--> sending
//!                                              \--discard--> idle (new key next time)
//!
//! sending | waiting | unsure --key past its lifetime--> expired --send as new--> sending (new key)
//!                                                          \--discard--> idle
//! ```
//!
//! The driver feeds events in ([`Submission::begin`], [`Submission::handle_answer`],
//! [`Submission::handle_failure`], [`Submission::handle_timeout`], [`Submission::try_again`],
//! [`Submission::discard`], [`Submission::stop`], [`Submission::restore`]), each with `now` and, where a delay may be
//! drawn, a random `jitter`. It then drains [`Submission::poll_action`] and carries the actions out
//! **in order**: a [`Action::Persist`] always comes before the [`Action::Send`] it covers, so key
//! and body are stored before the first byte is sent. [`Submission::poll_timeout`] says when to
//! call [`Submission::handle_timeout`].
//!
//! The key is made once, in [`Submission::begin`], from random bytes the driver hands in (or a key
//! the caller derived), and is kept until a definite answer or a discard. The same body begun
//! again while pending goes on with the pending key: it joins an attempt under way, and counts as
//! "Try again" when unsure. Another body is refused ([`BeginError::PendingMismatch`]) and nothing
//! changes. At most one attempt is outstanding; an answer to any other attempt is ignored.
//!
//! # The key's lifetime
//!
//! Before **every** attempt (the first, a retry, the first after a restore, a "Try again") the
//! submission checks its key against the record's deadline ([`Record::key_deadline`]: its first
//! attempt plus the key lifetime, less the safety margin of [`retry`](super::retry)). Past it,
//! nothing is sent: the submission settles [`Outcome::Expired`] and stays stored, in
//! [`State::Expired`], until the caller has checked whether it was done and calls
//! [`Submission::send_as_new`] (the same request under a deliberate new key) or
//! [`Submission::discard`]. A retry that would fall past the deadline expires at once, and a
//! waiting or unsure submission expires when its deadline comes ([`Submission::poll_timeout`]
//! names it). A restored record keeps the lifetime it was sent under, or the policy's when that is
//! shorter.
//!
//! # Offline
//!
//! [`Submission::handle_online`] is the platform's word on the connection (`navigator.onLine`
//! and its events, or a native health check). While offline no attempt is sent: a submission
//! that would send waits in [`State::Waiting`] with [`WaitingFor::Online`], an attempt that fails
//! meanwhile gives its attempt back, and the time offline is not spent from the round's budget
//! (it is kept in the record, so this holds across a reload). Back online, a waiting submission
//! sends at once with the same key, unless the server's `Retry-After` still asks for later. The
//! key's lifetime runs on while offline: the server's clock does not stop.

use super::prelude::*;
use ::core::time::Duration;
use alloc::collections::VecDeque;

use super::answer::{classify, classify_failure, Answer, Failure, Outcome, RetryAfter, Verdict};
use super::body::{self, BodyError};
use super::key::Key;
use super::record::{Record, Request};
use super::retry::{GiveUp, Next, RetryPolicy};
use super::text::{concat, quoted};
use super::time::Timestamp;

/// Where a submission is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// Nothing pending.
    Idle,
    /// An attempt is under way.
    Sending,
    /// No answer yet; the next attempt is due at [`Submission::poll_timeout`].
    Waiting,
    /// Retries stopped without a definite answer. Stored, locked, waiting for "Try again" or a
    /// discard.
    Unsure,
    /// Definite: 2xx.
    Succeeded,
    /// Definite: refused (a 4xx).
    Refused,
    /// Definite: 422, the key is held for another body.
    Conflict,
    /// Definite: 400 naming the key, a setup error.
    Misconfigured,
    /// The key is past its lifetime without a definite answer: stored, locked, nothing more is
    /// sent with it; waiting for "send as new" or a discard.
    Expired,
}

impl State {
    /// The contract's word for the state.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Idle => "idle",
            State::Sending => "sending",
            State::Waiting => "waiting",
            State::Unsure => "unsure",
            State::Succeeded => "succeeded",
            State::Refused => "refused",
            State::Conflict => "conflict",
            State::Misconfigured => "misconfigured",
            State::Expired => "expired",
        }
    }

    /// Whether a submission is pending: its outcome is unknown and its record is stored
    /// (sending, waiting, unsure, expired).
    pub fn is_pending(self) -> bool {
        matches!(
            self,
            State::Sending | State::Waiting | State::Unsure | State::Expired
        )
    }

    fn of(outcome: Outcome) -> State {
        match outcome {
            Outcome::Succeeded => State::Succeeded,
            Outcome::Refused => State::Refused,
            Outcome::Conflict => State::Conflict,
            Outcome::Misconfigured => State::Misconfigured,
            Outcome::Unsure => State::Unsure,
            Outcome::Expired => State::Expired,
        }
    }
}

/// Tells one attempt from another, so a late answer to an abandoned attempt is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttemptId(u64);

/// One attempt to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Pass this back with the answer or failure.
    pub id: AttemptId,
    /// The attempt's number, counting every attempt of the submission from 1.
    pub number: u32,
    /// The submission's key.
    pub key: Key,
    /// What to send.
    pub request: Request,
}

/// Why a waiting submission waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WaitingFor {
    /// A retry is due at this time.
    Timer(Timestamp),
    /// The platform is offline: the next attempt goes as soon as it is back online.
    Online,
}

/// A change of state, for the caller (`onChange`, form status, logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The new state.
    pub state: State,
    /// The pending key, or the key just settled.
    pub key: Option<Key>,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due (in [`State::Waiting`] on a timer).
    pub next_attempt_at: Option<Timestamp>,
    /// In [`State::Waiting`]: what it waits for, a retry's time or the connection.
    pub waiting_for: Option<WaitingFor>,
    /// While pending: the last moment an attempt may be sent with the key.
    pub key_deadline: Option<Timestamp>,
}

/// How a submission ended, or why its retries stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The outcome.
    pub outcome: Outcome,
    /// The last status received, if any.
    pub status: Option<u16>,
    /// The server replayed a stored answer.
    pub replayed: bool,
    /// The key the submission was sent with.
    pub key: Key,
    /// Attempts made.
    pub attempts: u32,
    /// For [`Outcome::Unsure`]: why retries stopped.
    pub gave_up: Option<GiveUp>,
}

/// What the driver must do, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Write this record to storage (replacing the submission's previous one) and make sure it
    /// is durable before carrying out the next action. The record is given as the text that is
    /// stored ([`Record::to_json`]; [`Submission::pending`] is the record itself): every driver
    /// writes that text, and a copy of the record for each attempt would only be made to be
    /// written out and dropped.
    Persist(String),
    /// Send this attempt.
    Send(Attempt),
    /// Remove the stored record of this key: the outcome is definite, or the submission was
    /// discarded. A record of another key found in its place is another writer's (another tab
    /// on `localStorage`, say) and stays.
    Forget(Key),
    /// The state changed.
    Changed(Change),
    /// The submission settled (definite) or its retries stopped (unsure): answer the caller.
    Settled(Settled),
}

/// How a [`Submission::begin`] went on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begun {
    /// A new submission with a new key; its first attempt is in the actions.
    Started,
    /// The same body is already being sent or waiting: nothing new is sent, wait for it.
    Joined,
    /// The same body was unsure: this counts as "Try again" with the pending key.
    Resumed,
}

/// Why a [`Submission::begin`] was refused. Nothing was stored or sent.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BeginError {
    /// The pending submission's key is past its lifetime ([`State::Expired`]): whatever the body,
    /// nothing is sent until the caller has checked whether it was done and chosen
    /// [`Submission::send_as_new`] or [`Submission::discard`].
    Expired {
        /// The expired key.
        key: Key,
    },
    /// Another submission is pending under this name, with another body, method, URL, stored
    /// headers, encoding or given key. Resume it ("Try again") or discard it first.
    PendingMismatch {
        /// The pending key.
        key: Key,
        /// What differs: `"body"`, `"method"`, `"url"`, `"headers"` (the stored ones, names in
        /// any case and order aside), `"encoding"` or `"key"` (a given key that is not the
        /// pending one).
        differs: &'static str,
    },
    /// The body is not JSON.
    Body(BodyError),
}

impl BeginError {
    /// What [`Display`](::core::fmt::Display) writes (built without `fmt`, see `core::text`).
    pub fn message(&self) -> String {
        match self {
            BeginError::PendingMismatch { key, differs } => concat(&[
                "a submission with another ",
                differs,
                " is still pending under key ",
                key.short(),
                "; try it again or discard it before sending a new one",
            ]),
            BeginError::Expired { key } => concat(&[
                "the submission pending under key ",
                key.short(),
                " is past its key's lifetime and may or may not have been done; check, then send it as new or discard it",
            ]),
            BeginError::Body(e) => e.message(),
        }
    }
}

/// Why [`Submission::try_again`] or [`Submission::restore`] could not act.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StateError {
    /// Nothing is pending.
    NothingPending,
    /// Another submission is already pending here (restore).
    AlreadyPending(Key),
    /// The record belongs to another name (restore).
    OtherName(String),
    /// The record's body is not JSON (restore).
    Unreadable(BodyError),
    /// The pending key is past its lifetime ("Try again"): send it as new or discard it.
    Expired(Key),
    /// An attempt is under way or due ("send as new"): only an unsure or expired submission is
    /// sent as new.
    StillSending(Key),
    /// "Send as new" was given the pending key itself.
    SameKey(Key),
}

impl StateError {
    /// What [`Display`](::core::fmt::Display) writes (built without `fmt`, see `core::text`).
    pub fn message(&self) -> String {
        match self {
            StateError::NothingPending => "no submission is pending".to_owned(),
            StateError::AlreadyPending(k) => {
                concat(&["a submission is already pending under key ", k.short()])
            }
            StateError::OtherName(n) => {
                concat(&["the record belongs to the submission ", &quoted(n)])
            }
            StateError::Unreadable(e) => concat(&["the record cannot be resumed: ", &e.message()]),
            StateError::Expired(k) => concat(&[
                "the key ",
                k.short(),
                " is past its lifetime: nothing more is sent with it; check whether it was done, then send it as new or discard it",
            ]),
            StateError::StillSending(k) => concat(&[
                "the submission under key ",
                k.short(),
                " is still being sent; only an unsure or expired one is sent as new",
            ]),
            StateError::SameKey(k) => concat(&[
                "sending as new needs a new key, not the pending ",
                k.short(),
            ]),
        }
    }
}

/// Where the key of a new submission comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewKey {
    /// 16 bytes from the platform CSPRNG: a UUID v4.
    Random([u8; 16]),
    /// A key the caller made or derived ([`Key::derive`]).
    Given(Key),
}

impl NewKey {
    /// The key itself.
    fn into_key(self) -> Key {
        match self {
            NewKey::Random(bytes) => Key::from_random_bytes(bytes),
            NewKey::Given(key) => key,
        }
    }
}

/// One named submission: its pending record, its state and the actions it asks for.
#[derive(Debug)]
pub struct Submission {
    name: String,
    policy: RetryPolicy,
    state: State,
    pending: Option<Pending>,
    last_key: Option<Key>,
    last_attempts: u32,
    next_id: u64,
    online: bool,
    actions: VecDeque<Action>,
    /// How many [`Action::Settled`] it has asked for.
    settlements: u64,
}

#[derive(Debug)]
struct Pending {
    /// The record. Its body's canonical form ("same body") is written out only when another
    /// begin of the name is compared with it: most submissions never meet another.
    record: Record,
    in_flight: Option<AttemptId>,
    wake_at: Option<Timestamp>,
    last_status: Option<u16>,
}

/// What the key's lifetime and the server's last `Retry-After` (the record's `notBefore`) say
/// of sending now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ServerWait {
    /// Nothing holds it back.
    None,
    /// Not before this time, within the cap and the key's lifetime.
    Until(Timestamp),
    /// The time left is beyond the cap: waited for by nobody (CONTRACT.md section 2).
    BeyondCap,
    /// The key is past its lifetime, or will be by the server's time: it can never be sent.
    PastDeadline,
}

impl Pending {
    fn new(record: Record) -> Pending {
        Pending {
            record,
            in_flight: None,
            wake_at: None,
            last_status: None,
        }
    }
}

/// The same stored headers: each (name in any case, value) as many times in both, in any
/// order. Headers are few; no sort (it would cost the browser package its sort code).
fn same_headers(a: &[(String, String)], b: &[(String, String)]) -> bool {
    let count = |list: &[(String, String)], (name, value): &(String, String)| {
        list.iter()
            .filter(|(n, v)| n.eq_ignore_ascii_case(name) && v == value)
            .count()
    };
    a.len() == b.len() && a.iter().all(|h| count(a, h) == count(b, h))
}

impl Submission {
    /// A submission named `name` (the form's or caller's handle), idle.
    pub fn new(name: &str, policy: RetryPolicy) -> Submission {
        Submission {
            name: name.to_owned(),
            policy,
            state: State::Idle,
            pending: None,
            last_key: None,
            last_attempts: 0,
            next_id: 0,
            settlements: 0,
            online: true,
            actions: VecDeque::new(),
        }
    }

    /// Whether the platform was last said to be online (it is, until told otherwise).
    pub fn is_online(&self) -> bool {
        self.online
    }

    /// In [`State::Waiting`]: what the submission waits for, a retry's time or the connection.
    pub fn waiting_for(&self) -> Option<WaitingFor> {
        let p = self
            .pending
            .as_ref()
            .filter(|_| self.state == State::Waiting)?;
        Some(match p.wake_at {
            Some(at) if self.online => WaitingFor::Timer(at),
            _ => WaitingFor::Online,
        })
    }

    /// When the next attempt is due: in [`State::Waiting`] on a timer, else none (not the key's
    /// deadline, which [`Submission::poll_timeout`] also gives).
    pub fn next_attempt_at(&self) -> Option<Timestamp> {
        match self.waiting_for() {
            Some(WaitingFor::Timer(at)) => Some(at),
            _ => None,
        }
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The retry policy.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// The current state.
    pub fn state(&self) -> State {
        self.state
    }

    /// The pending record, if a submission is pending.
    pub fn pending(&self) -> Option<&Record> {
        self.pending.as_ref().map(|p| &p.record)
    }

    /// The attempt under way, if any.
    pub fn in_flight(&self) -> Option<AttemptId> {
        self.pending.as_ref().and_then(|p| p.in_flight)
    }

    /// Begins the intended submission of `request`. See the module docs for what happens when one
    /// is already pending.
    pub fn begin(
        &mut self,
        now: Timestamp,
        request: Request,
        key: NewKey,
    ) -> Result<Begun, BeginError> {
        let Some(p) = &self.pending else {
            // Checked, not written out: see `Pending`.
            body::check(&request.body).map_err(BeginError::Body)?;
            self.start(now, request, key.into_key());
            return Ok(Begun::Started);
        };
        let canonical = request.canonical_body().map_err(BeginError::Body)?;
        if self.state == State::Expired {
            return Err(BeginError::Expired {
                key: p.record.key.clone(),
            });
        }
        // The pending body was checked when it began or was restored.
        let differs = if p.record.request.canonical_body().ok() != Some(canonical) {
            Some("body")
        } else if p.record.request.method != request.method {
            Some("method")
        } else if p.record.request.url != request.url {
            Some("url")
        } else if !same_headers(&p.record.request.headers, &request.headers) {
            // Another tenant's or account's request, say: another submission.
            Some("headers")
        } else if p.record.request.encoding != request.encoding {
            Some("encoding")
        } else if matches!(&key, NewKey::Given(k) if *k != p.record.key) {
            // A caller's derived key names one submission: another one is another.
            Some("key")
        } else {
            None
        };
        if let Some(differs) = differs {
            return Err(BeginError::PendingMismatch {
                key: p.record.key.clone(),
                differs,
            });
        }
        Ok(match self.state {
            State::Unsure => {
                self.new_round(now);
                Begun::Resumed
            }
            _ => Begun::Joined,
        })
    }

    /// "Send as new": the person (or caller) checked an expired or unsure submission and means
    /// to send the same request again, deliberately, as a new one. Its record is replaced by one
    /// with a new key (the lifetime and budget counting afresh) and the first attempt is sent.
    /// Refused while an attempt is under way or due, and with the pending key itself.
    pub fn send_as_new(&mut self, now: Timestamp, key: NewKey) -> Result<(), StateError> {
        let Some(p) = &self.pending else {
            return Err(StateError::NothingPending);
        };
        let old = p.record.key.clone();
        if !matches!(self.state, State::Unsure | State::Expired) {
            return Err(StateError::StillSending(old));
        }
        let key = match key {
            NewKey::Random(bytes) => Key::from_random_bytes(bytes),
            NewKey::Given(k) if k == old => return Err(StateError::SameKey(old)),
            NewKey::Given(k) => k,
        };
        let p = self.pending.take().expect("checked above");
        self.last_key = Some(old);
        self.last_attempts = p.record.attempts;
        self.start(now, p.record.request, key);
        Ok(())
    }

    fn start(&mut self, now: Timestamp, request: Request, key: Key) {
        let record = Record {
            name: self.name.clone(),
            key,
            request,
            started_at: now,
            attempts: 0,
            round_started_at: now,
            round_attempts: 0,
            key_lifetime: self.policy.key_lifetime,
            offline: Duration::ZERO,
            offline_since: None,
            not_before: None,
            stopped: None,
        };
        self.pending = Some(Pending::new(record));
        self.send_next(now);
    }

    /// Takes up a record found in storage at start-up. The submission is [`State::Unsure`], or,
    /// with `resume`, sends its next attempt at once (unless its round's attempts or budget are
    /// already spent, or the server ended the round ([`Record::stopped`]): then it settles
    /// [`Outcome::Unsure`] with the reason; and not before a `Retry-After` the server gave
    /// ([`Record::not_before`]): it waits until then). A record whose key is
    /// past its lifetime settles [`Outcome::Expired`] either way, unsent. Call
    /// [`Submission::handle_online`] first when the platform is offline.
    pub fn restore(
        &mut self,
        now: Timestamp,
        record: Record,
        resume: bool,
    ) -> Result<(), StateError> {
        if record.name != self.name {
            return Err(StateError::OtherName(record.name));
        }
        if let Some(p) = &self.pending {
            if p.record.key == record.key {
                return Ok(());
            }
            return Err(StateError::AlreadyPending(p.record.key.clone()));
        }
        body::check(&record.request.body).map_err(StateError::Unreadable)?;
        let mut record = record;
        if record.round_attempts == 0 {
            // Never sent in this round (a record enqueued in an outbox): its round, and its
            // budget, begin now, not while it waited in a queue.
            record.round_started_at = now;
            record.offline = Duration::ZERO;
            record.offline_since = None;
            if record.attempts == 0 {
                record.started_at = now;
            }
        }
        // Kept as it was sent, unless the caller now says the server keeps keys for less.
        record.key_lifetime = record.key_lifetime.min(self.policy.key_lifetime);
        // Offline when written: that spell lasted until now, or still does.
        match (record.offline_since, self.online) {
            (Some(since), true) => {
                record.offline += now.saturating_since(since);
                record.offline_since = None;
            }
            (None, false) => record.offline_since = Some(now),
            _ => {}
        }
        // A first attempt later than now (beyond the margin a fleet's clocks may differ by) is
        // a record whose time cannot be trusted, corrupt or written by a clock far ahead: its
        // key's deadline is unknown, so nothing more is sent with it (a far future `startedAt`
        // never expired, and was sent for ever).
        let from_the_future =
            record.attempts > 0 && record.started_at > now + super::retry::KEY_MARGIN_CAP;
        let expired = record.is_expired(now) || from_the_future;
        let spent = if let Some(why) = record.stopped {
            Some(why)
        } else if record.round_attempts >= self.policy.attempts {
            Some(GiveUp::AttemptsSpent)
        } else if now > record.budget_start(now) + self.policy.budget {
            Some(GiveUp::BudgetSpent)
        } else {
            None
        };
        self.pending = Some(Pending::new(record));
        if expired {
            self.expire();
            return Ok(());
        }
        match (resume, spent) {
            // The server's Retry-After, given before the restart, still holds.
            (true, None) => match self.server_wait(now) {
                ServerWait::BeyondCap => self.give_up(GiveUp::RetryAfterBeyondCap, false),
                ServerWait::PastDeadline => self.expire(),
                ServerWait::Until(t) if self.online => self.wait_until(t, false),
                _ => self.send_next(now),
            },
            // Asked to resume, but its round was spent before the restart: it settles unsure
            // at once, so a caller waiting on it hears why.
            (true, Some(why)) => self.give_up(why, false),
            (false, _) => {
                self.state = State::Unsure;
                self.changed();
            }
        }
        Ok(())
    }

    /// An answer to attempt `id` arrived. `jitter` is a uniform random draw for the backoff.
    pub fn handle_answer(&mut self, now: Timestamp, id: AttemptId, answer: &Answer, jitter: u32) {
        if !self.take_in_flight(id) {
            return;
        }
        if let Some(p) = &mut self.pending {
            p.last_status = Some(answer.status);
        }
        match classify(answer) {
            Verdict::Definite { outcome, replayed } => self.settle(outcome, replayed),
            Verdict::Retry { retry_after } => self.schedule(now, retry_after, jitter),
            Verdict::Stop(why) => self.give_up(why, false),
        }
    }

    /// Attempt `id` ended without an answer.
    pub fn handle_failure(&mut self, now: Timestamp, id: AttemptId, failure: Failure, jitter: u32) {
        if !self.take_in_flight(id) {
            return;
        }
        if !self.online {
            // Failed because the platform is offline: it gives its attempt back and waits.
            if let Some(p) = &mut self.pending {
                p.record.round_attempts = p.record.round_attempts.saturating_sub(1);
            }
            self.wait_online(true);
            return;
        }
        match classify_failure(failure) {
            Verdict::Retry { retry_after } => self.schedule(now, retry_after, jitter),
            Verdict::Definite { outcome, replayed } => self.settle(outcome, replayed),
            Verdict::Stop(why) => self.give_up(why, false),
        }
    }

    /// The time from [`Submission::poll_timeout`] has come: send the attempt that is due, or
    /// settle [`Outcome::Expired`] when the key's deadline has passed.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let Some(p) = &self.pending else { return };
        match self.state {
            State::Waiting | State::Unsure if p.record.is_expired(now) => self.expire(),
            State::Waiting if self.online => match p.wake_at {
                Some(at) if now >= at => self.send_next(now),
                _ => {}
            },
            _ => {}
        }
    }

    /// The platform says it is offline (`false`) or back online (`true`). Offline, nothing is
    /// sent and nothing of the attempt limit or the budget is spent; the spell is written to the
    /// record (a [`Action::Persist`]), so a reload keeps it out of the budget too. Back online,
    /// a waiting submission sends at once with the same key (unless the server's `Retry-After`
    /// asks for later). Allowed in any state; idle, it only sets what the next submission finds.
    pub fn handle_online(&mut self, now: Timestamp, online: bool) {
        if self.online == online {
            return;
        }
        self.online = online;
        let state = self.state;
        let Some(p) = &mut self.pending else { return };
        if !matches!(state, State::Sending | State::Waiting | State::Unsure) {
            return;
        }
        if !online {
            p.record.offline_since = Some(now);
            self.actions.push_back(Action::Persist(p.record.to_json()));
            if state == State::Waiting {
                self.changed();
            }
            return;
        }
        if let Some(since) = p.record.offline_since.take() {
            p.record.offline += now.saturating_since(since);
        }
        if state != State::Waiting {
            self.actions.push_back(Action::Persist(p.record.to_json()));
            return;
        }
        match self.server_wait(now) {
            ServerWait::BeyondCap => self.give_up(GiveUp::RetryAfterBeyondCap, false),
            ServerWait::PastDeadline => self.expire(),
            ServerWait::Until(t) => self.wait_until(t, true),
            ServerWait::None => self.send_next(now),
        }
    }

    /// "Try again": resend the pending submission with the same key and body, in a new round of
    /// retries (fresh attempt limit and budget). While waiting, sends at once (but not before a
    /// `Retry-After` the server gave: then at that time); while sending, does nothing.
    pub fn try_again(&mut self, now: Timestamp) -> Result<(), StateError> {
        match (&self.pending, self.state) {
            (None, _) => Err(StateError::NothingPending),
            (Some(p), State::Expired) => Err(StateError::Expired(p.record.key.clone())),
            (_, State::Sending) => Ok(()),
            _ => {
                self.new_round(now);
                Ok(())
            }
        }
    }

    /// The caller stopped waiting (an `AbortSignal`, a cancelled task): an attempt under way is
    /// abandoned (its answer ignored; the driver should abort it) and no retry is due. The
    /// submission stays pending with its key and record, [`State::Unsure`], until "Try again"
    /// (the same key) or a discard: stopping never makes a new key. Only while sending or
    /// waiting; nothing is settled (the caller who stopped knows).
    pub fn stop(&mut self) {
        if !matches!(self.state, State::Sending | State::Waiting) {
            return;
        }
        let Some(p) = &mut self.pending else { return };
        p.in_flight = None;
        p.wake_at = None;
        // An attempt the driver has not taken yet is not sent at all (a driver blocked on a
        // write, or a listener that stopped it, had it still queued).
        self.actions.retain(|a| !matches!(a, Action::Send(_)));
        if p.record.stopped.is_none() {
            // Written down, as a round the server ended is: a reload or restart that resumes on
            // its own does not send what the caller stopped; it waits for "Try again".
            p.record.stopped = Some(GiveUp::Stopped);
            self.actions.push_back(Action::Persist(p.record.to_json()));
        }
        self.state = State::Unsure;
        self.changed();
    }

    /// The person chose to drop the unconfirmed submission: forget the record; the next
    /// submission gets a new key. An attempt still under way is abandoned (its answer ignored;
    /// the driver should abort it).
    pub fn discard(&mut self) {
        if let Some(p) = self.pending.take() {
            self.state = State::Idle;
            // An attempt the driver has not taken yet is not sent: sent after the discard, its
            // request could be carried out beside the next submission's, under a new key. Nor is
            // a write of the record about to be forgotten.
            self.actions
                .retain(|a| !matches!(a, Action::Send(_) | Action::Persist(_)));
            self.actions.push_back(Action::Forget(p.record.key.clone()));
            self.last_key = Some(p.record.key);
            self.last_attempts = p.record.attempts;
            self.changed();
        }
    }

    /// How many [`Action::Settled`] it has asked for so far, polled or not. A driver that keeps
    /// callers waiting notes it when one begins to wait: a settlement already asked for then
    /// (still queued behind the change a listener is hearing) is a round before theirs.
    pub fn settlements(&self) -> u64 {
        self.settlements
    }

    /// The next action for the driver, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`Submission::handle_timeout`]: the retry that is due, or the key's deadline
    /// while waiting offline or unsure (it may be days away: clamp the timer to what the platform
    /// can arm, and call again).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let p = self.pending.as_ref()?;
        // A key never sent has no deadline yet.
        let deadline = (p.record.attempts > 0).then(|| p.record.key_deadline());
        match self.state {
            State::Waiting => match p.wake_at {
                Some(at) if self.online => Some(deadline.map_or(at, |d| at.min(d))),
                _ => deadline,
            },
            State::Unsure => deadline,
            _ => None,
        }
    }

    /// The platform is offline: wait for it to be back, writing down what changed.
    fn wait_online(&mut self, persist: bool) {
        let Some(p) = &mut self.pending else { return };
        p.wake_at = None;
        if persist {
            self.actions.push_back(Action::Persist(p.record.to_json()));
        }
        self.state = State::Waiting;
        self.changed();
    }

    fn expire(&mut self) {
        let Some(p) = &mut self.pending else { return };
        p.in_flight = None;
        p.wake_at = None;
        let settled = Settled {
            outcome: Outcome::Expired,
            status: p.last_status,
            replayed: false,
            key: p.record.key.clone(),
            attempts: p.record.attempts,
            gave_up: None,
        };
        self.state = State::Expired;
        self.changed();
        self.settled(settled);
    }

    fn take_in_flight(&mut self, id: AttemptId) -> bool {
        match &mut self.pending {
            Some(p) if p.in_flight == Some(id) => {
                p.in_flight = None;
                true
            }
            _ => false,
        }
    }

    fn new_round(&mut self, now: Timestamp) {
        // Past the key's lifetime (its timer not fired yet: a tab asleep), it expires, whatever
        // the server asked for. A Retry-After the server gave still holds, deliberate as a new
        // round is: never earlier than it said, and never a wait longer than the cap
        // (CONTRACT.md section 2). While the time left is beyond the cap, it is unsure again at
        // once, as the answer that asked for it made it, offline too. Either way nothing
        // begins and nothing is written.
        let wait = self.server_wait(now);
        match wait {
            ServerWait::PastDeadline => return self.expire(),
            ServerWait::BeyondCap => return self.give_up(GiveUp::RetryAfterBeyondCap, false),
            _ => {}
        }
        let online = self.online;
        if let Some(p) = &mut self.pending {
            p.record.round_started_at = now;
            p.record.round_attempts = 0;
            p.record.offline = Duration::ZERO;
            p.record.offline_since = (!online).then_some(now);
            p.record.stopped = None;
        }
        match wait {
            // Offline, `send_next` waits for the connection, and `handle_online` for this time.
            ServerWait::Until(t) if online => self.wait_until(t, true),
            _ => self.send_next(now),
        }
    }

    /// What the key's lifetime and the server's last `Retry-After` say of sending the pending
    /// submission at `now`, judged in that order.
    fn server_wait(&self, now: Timestamp) -> ServerWait {
        let Some(p) = &self.pending else {
            return ServerWait::None;
        };
        if p.record.is_expired(now) {
            return ServerWait::PastDeadline;
        }
        match p.record.not_before.filter(|t| *t > now) {
            None => ServerWait::None,
            Some(t) if t.saturating_since(now) > self.policy.cap => ServerWait::BeyondCap,
            Some(t) if t > p.record.key_deadline() => ServerWait::PastDeadline,
            Some(t) => ServerWait::Until(t),
        }
    }

    /// Waits for the server's time `t` ([`ServerWait::Until`]), writing the record first when
    /// it changed (`persist`).
    fn wait_until(&mut self, t: Timestamp, persist: bool) {
        let Some(p) = &mut self.pending else { return };
        p.wake_at = Some(t);
        if persist {
            self.actions.push_back(Action::Persist(p.record.to_json()));
        }
        self.state = State::Waiting;
        self.changed();
    }

    /// Sends the next attempt, unless the key is past its lifetime (then it expires) or the
    /// platform is offline (then it waits for the connection).
    fn send_next(&mut self, now: Timestamp) {
        let Some(p) = &mut self.pending else { return };
        if p.record.is_expired(now) {
            return self.expire();
        }
        if !self.online {
            if p.record.offline_since.is_none() {
                p.record.offline_since = Some(now);
            }
            return self.wait_online(true);
        }
        if p.record.attempts == 0 {
            // The key's lifetime and the budget count from the first attempt, not from a wait
            // offline before it.
            p.record.started_at = now;
            p.record.round_started_at = now;
            p.record.offline = Duration::ZERO;
        }
        p.record.not_before = None;
        self.next_id += 1;
        let id = AttemptId(self.next_id);
        p.record.attempts = p.record.attempts.saturating_add(1);
        p.record.round_attempts = p.record.round_attempts.saturating_add(1);
        p.in_flight = Some(id);
        p.wake_at = None;
        let attempt = Attempt {
            id,
            number: p.record.attempts,
            key: p.record.key.clone(),
            request: p.record.request.clone(),
        };
        self.actions.push_back(Action::Persist(p.record.to_json()));
        self.actions.push_back(Action::Send(attempt));
        self.state = State::Sending;
        self.changed();
    }

    fn schedule(&mut self, now: Timestamp, retry_after: Option<RetryAfter>, jitter: u32) {
        // The server's time, written down whether the round goes on or ends: a restart, and a
        // "Try again", honour it too (see `new_round`).
        let asked = retry_after.map(|h| h.not_before(now)).filter(|t| *t > now);
        let Some(p) = &mut self.pending else { return };
        let r = &p.record;
        match self.policy.next(
            now,
            r.budget_start(now),
            r.round_attempts,
            retry_after,
            jitter,
        ) {
            // It could never be sent: it expires now rather than at the deadline.
            Next::At(at) if at > r.key_deadline() => self.expire(),
            Next::At(at) => {
                p.wake_at = Some(at);
                p.record.not_before = asked;
                if asked.is_some() {
                    // The server's wait outlives this process: a restart honours it too.
                    self.actions.push_back(Action::Persist(p.record.to_json()));
                }
                self.state = State::Waiting;
                self.changed();
            }
            Next::GiveUp(why) => {
                p.record.not_before = asked;
                self.give_up(why, asked.is_some())
            }
        }
    }

    /// Ends the round unsure; `changed`: the record changed since it was last written.
    fn give_up(&mut self, why: GiveUp, changed: bool) {
        let Some(p) = &mut self.pending else { return };
        let stopped = why.written() && p.record.stopped != Some(why);
        if stopped {
            // Written down, so that a restart does not send on its own what the server stopped,
            // or a round whose next attempt was due past its budget.
            p.record.stopped = Some(why);
        }
        if stopped || changed {
            self.actions.push_back(Action::Persist(p.record.to_json()));
        }
        let settled = Settled {
            outcome: Outcome::Unsure,
            status: p.last_status,
            replayed: false,
            key: p.record.key.clone(),
            attempts: p.record.attempts,
            gave_up: Some(why),
        };
        self.state = State::Unsure;
        self.changed();
        self.settled(settled);
    }

    fn settle(&mut self, outcome: Outcome, replayed: bool) {
        let Some(p) = self.pending.take() else { return };
        let settled = Settled {
            outcome,
            status: p.last_status,
            replayed,
            key: p.record.key.clone(),
            attempts: p.record.attempts,
            gave_up: None,
        };
        self.actions.push_back(Action::Forget(p.record.key.clone()));
        self.last_key = Some(p.record.key);
        self.last_attempts = p.record.attempts;
        self.state = State::of(outcome);
        self.changed();
        self.settled(settled);
    }

    fn settled(&mut self, settled: Settled) {
        self.settlements += 1;
        self.actions.push_back(Action::Settled(settled));
    }

    fn changed(&mut self) {
        let change = match &self.pending {
            Some(p) => Change {
                state: self.state,
                key: Some(p.record.key.clone()),
                attempts: p.record.attempts,
                next_attempt_at: self.next_attempt_at(),
                waiting_for: self.waiting_for(),
                key_deadline: (p.record.attempts > 0).then(|| p.record.key_deadline()),
            },
            None => Change {
                state: self.state,
                key: self.last_key.clone(),
                attempts: self.last_attempts,
                next_attempt_at: None,
                waiting_for: None,
                key_deadline: None,
            },
        };
        self.actions.push_back(Action::Changed(change));
    }
}

if_native! {
    impl Submission {
        /// [`Submission::begin`] of a request made by [`Request::new`] (or the crate's own
        /// constructor of it), which checked its body already: a new submission does not read the
        /// body again. The driver's fast path for a send that finds nothing pending.
        pub(crate) fn begin_checked(
            &mut self,
            now: Timestamp,
            request: Request,
            key: NewKey,
        ) -> Result<Begun, BeginError> {
            if self.pending.is_some() {
                return self.begin(now, request, key);
            }
            self.start(now, request, key.into_key());
            Ok(Begun::Started)
        }
    }
}
