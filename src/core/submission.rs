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
//! ```
//!
//! The driver feeds events in ([`Submission::begin`], [`Submission::handle_answer`],
//! [`Submission::handle_failure`], [`Submission::handle_timeout`], [`Submission::try_again`],
//! [`Submission::discard`], [`Submission::restore`]), each with `now` and, where a delay may be
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

use super::prelude::*;
use alloc::collections::VecDeque;

use super::answer::{classify, classify_failure, Answer, Failure, Outcome, RetryAfter, Verdict};
use super::body::BodyError;
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
        }
    }

    /// Whether a submission is pending: its outcome is unknown and its record is stored.
    pub fn is_pending(self) -> bool {
        matches!(self, State::Sending | State::Waiting | State::Unsure)
    }

    fn of(outcome: Outcome) -> State {
        match outcome {
            Outcome::Succeeded => State::Succeeded,
            Outcome::Refused => State::Refused,
            Outcome::Conflict => State::Conflict,
            Outcome::Misconfigured => State::Misconfigured,
            Outcome::Unsure => State::Unsure,
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

/// A change of state, for the caller (`onChange`, form status, logs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The new state.
    pub state: State,
    /// The pending key, or the key just settled.
    pub key: Option<Key>,
    /// Attempts made so far.
    pub attempts: u32,
    /// When the next attempt is due (in [`State::Waiting`]).
    pub next_attempt_at: Option<Timestamp>,
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
    /// is durable before carrying out the next action.
    Persist(Record),
    /// Send this attempt.
    Send(Attempt),
    /// Remove the stored record: the outcome is definite, or the submission was discarded.
    Forget,
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
pub enum BeginError {
    /// Another submission is pending under this name, with another body, method, URL or given
    /// key. Resume it ("Try again") or discard it first.
    PendingMismatch {
        /// The pending key.
        key: Key,
        /// What differs: `"body"`, `"method"`, `"url"` or `"key"` (a given key that is not the
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
            BeginError::Body(e) => e.message(),
        }
    }
}

/// Why [`Submission::try_again`] or [`Submission::restore`] could not act.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateError {
    /// Nothing is pending.
    NothingPending,
    /// Another submission is already pending here (restore).
    AlreadyPending(Key),
    /// The record belongs to another name (restore).
    OtherName(String),
    /// The record's body is not JSON (restore).
    Unreadable(BodyError),
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
    actions: VecDeque<Action>,
}

#[derive(Debug)]
struct Pending {
    record: Record,
    canonical: String,
    in_flight: Option<AttemptId>,
    wake_at: Option<Timestamp>,
    last_status: Option<u16>,
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
            actions: VecDeque::new(),
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
        let canonical = request.canonical_body().map_err(BeginError::Body)?;
        if let Some(p) = &self.pending {
            let differs = if p.canonical != canonical {
                Some("body")
            } else if p.record.request.method != request.method {
                Some("method")
            } else if p.record.request.url != request.url {
                Some("url")
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
            return Ok(match self.state {
                State::Unsure => {
                    self.new_round(now);
                    Begun::Resumed
                }
                _ => Begun::Joined,
            });
        }
        let key = match key {
            NewKey::Random(bytes) => Key::from_random_bytes(bytes),
            NewKey::Given(key) => key,
        };
        self.pending = Some(Pending {
            record: Record {
                name: self.name.clone(),
                key,
                request,
                started_at: now,
                attempts: 0,
                round_started_at: now,
                round_attempts: 0,
            },
            canonical,
            in_flight: None,
            wake_at: None,
            last_status: None,
        });
        self.send_next();
        Ok(Begun::Started)
    }

    /// Takes up a record found in storage at start-up. The submission is [`State::Unsure`], or,
    /// with `resume`, sends its next attempt at once (unless its round's attempts or budget are
    /// already spent: then it settles [`Outcome::Unsure`] with the reason).
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
        let canonical = record
            .request
            .canonical_body()
            .map_err(StateError::Unreadable)?;
        let mut record = record;
        if record.round_attempts == 0 {
            // Never sent in this round (a record enqueued in an outbox): its round, and its
            // budget, begin now, not while it waited in a queue.
            record.round_started_at = now;
            if record.attempts == 0 {
                record.started_at = now;
            }
        }
        self.pending = Some(Pending {
            record,
            canonical,
            in_flight: None,
            wake_at: None,
            last_status: None,
        });
        let spent = {
            let r = &self.pending.as_ref().expect("just set").record;
            if r.round_attempts >= self.policy.attempts {
                Some(GiveUp::AttemptsSpent)
            } else if now > r.round_started_at + self.policy.budget {
                Some(GiveUp::BudgetSpent)
            } else {
                None
            }
        };
        match (resume, spent) {
            (true, None) => self.send_next(),
            // Asked to resume, but its round was spent before the restart: it settles unsure
            // at once, so a caller waiting on it hears why.
            (true, Some(why)) => self.give_up(why),
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
            Verdict::Stop => self.give_up(GiveUp::ServerSaidStop),
        }
    }

    /// Attempt `id` ended without an answer.
    pub fn handle_failure(&mut self, now: Timestamp, id: AttemptId, failure: Failure, jitter: u32) {
        if !self.take_in_flight(id) {
            return;
        }
        match classify_failure(failure) {
            Verdict::Retry { retry_after } => self.schedule(now, retry_after, jitter),
            Verdict::Definite { outcome, replayed } => self.settle(outcome, replayed),
            Verdict::Stop => self.give_up(GiveUp::ServerSaidStop),
        }
    }

    /// The time from [`Submission::poll_timeout`] has come: send the attempt that is due.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        if self.state != State::Waiting {
            return;
        }
        match self.pending.as_ref().and_then(|p| p.wake_at) {
            Some(at) if now >= at => self.send_next(),
            _ => {}
        }
    }

    /// "Try again": resend the pending submission with the same key and body, in a new round of
    /// retries (fresh attempt limit and budget). While waiting, sends at once; while sending,
    /// does nothing.
    pub fn try_again(&mut self, now: Timestamp) -> Result<(), StateError> {
        match self.state {
            _ if self.pending.is_none() => Err(StateError::NothingPending),
            State::Sending => Ok(()),
            _ => {
                self.new_round(now);
                Ok(())
            }
        }
    }

    /// The person chose to drop the unconfirmed submission: forget the record; the next
    /// submission gets a new key. An attempt still under way is abandoned (its answer ignored;
    /// the driver should abort it).
    pub fn discard(&mut self) {
        if let Some(p) = self.pending.take() {
            self.last_key = Some(p.record.key);
            self.last_attempts = p.record.attempts;
            self.state = State::Idle;
            self.actions.push_back(Action::Forget);
            self.changed();
        }
    }

    /// The next action for the driver, in order.
    pub fn poll_action(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// When to call [`Submission::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match self.state {
            State::Waiting => self.pending.as_ref().and_then(|p| p.wake_at),
            _ => None,
        }
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
        if let Some(p) = &mut self.pending {
            p.record.round_started_at = now;
            p.record.round_attempts = 0;
        }
        self.send_next();
    }

    fn send_next(&mut self) {
        let Some(p) = &mut self.pending else { return };
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
        self.actions.push_back(Action::Persist(p.record.clone()));
        self.actions.push_back(Action::Send(attempt));
        self.state = State::Sending;
        self.changed();
    }

    fn schedule(&mut self, now: Timestamp, retry_after: Option<RetryAfter>, jitter: u32) {
        let Some(p) = &mut self.pending else { return };
        let r = &p.record;
        match self.policy.next(
            now,
            r.round_started_at,
            r.round_attempts,
            retry_after,
            jitter,
        ) {
            Next::At(at) => {
                p.wake_at = Some(at);
                self.state = State::Waiting;
                self.changed();
            }
            Next::GiveUp(why) => self.give_up(why),
        }
    }

    fn give_up(&mut self, why: GiveUp) {
        let Some(p) = &self.pending else { return };
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
        self.actions.push_back(Action::Settled(settled));
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
        self.last_key = Some(p.record.key);
        self.last_attempts = p.record.attempts;
        self.state = State::of(outcome);
        self.actions.push_back(Action::Forget);
        self.changed();
        self.actions.push_back(Action::Settled(settled));
    }

    fn changed(&mut self) {
        let (key, attempts, next_attempt_at) = match &self.pending {
            Some(p) => (
                Some(p.record.key.clone()),
                p.record.attempts,
                p.wake_at.filter(|_| self.state == State::Waiting),
            ),
            None => (self.last_key.clone(), self.last_attempts, None),
        };
        self.actions.push_back(Action::Changed(Change {
            state: self.state,
            key,
            attempts,
            next_attempt_at,
        }));
    }
}
