//! # The core, for `browser.js`
//!
//! The one class this wasm module exports: a [`Submission`] with a narrow, string-shaped face,
//! so that the driver in `browser.js` can carry out its actions in the page. Everything the
//! contract decides stays here, in the core: whether and when to retry, what a status means,
//! the key, the record's format and check, "same body" and the form encoding. JavaScript keeps
//! the page's side: storage, `fetch`, timers, promises and listeners.
//!
//! Values cross as numbers and strings. An action is a string whose first character says which:
//!
//! | action | text |
//! |---|---|
//! | persist | `P` + the record's JSON |
//! | send | `S` + id, number, key, method, URL, content type, headers, body ([`Machine::poll`]) |
//! | forget | `F` |
//! | changed | `C` + state, attempts, next attempt at (or `-1`), key (or nothing) |
//! | settled | `D` + outcome, status (or nothing), attempts, replayed (`1`/`0`), why it gave up, key |
//!
//! fields separated by `\n`. States and outcomes are the indexes of their words in `browser.js`'s
//! `STATES` and `OUTCOMES` (`state_index` and `outcome_index` below).

use crate::prelude::*;
use wasm_bindgen::prelude::*;

use crate::core::body::{self, Fields, Value};
use crate::core::text::{concat, decimal, quoted};
use crate::core::{
    Action, Answer, AttemptId, BeginError, Begun, Encoding, Failure, NewKey, Outcome, Record,
    Request, RequestError, RetryPolicy, State, Submission, Timestamp,
};

/// A submission, as `browser.js`'s `Submitter` drives it. Not part of the package's API.
#[wasm_bindgen(js_name = Core, skip_typescript)]
#[derive(Debug)]
pub struct Machine {
    core: Submission,
    /// The key header's name, which a `400`'s details may name.
    key_header: String,
    /// The attempt under way, and the id `browser.js` knows it by.
    attempt: Option<(u32, AttemptId)>,
    sent: u32,
    /// Fields merged into the JSON object body of every attempt, in memory only.
    secrets: Fields,
}

fn millis(ms: f64) -> ::core::time::Duration {
    ::core::time::Duration::from_millis(ms as u64)
}

fn at(now: f64) -> Timestamp {
    Timestamp::from_millis(now as u64)
}

/// The state's index in `browser.js`'s `STATES`.
fn state_index(state: State) -> u8 {
    match state {
        State::Idle => 0,
        State::Sending => 1,
        State::Waiting => 2,
        State::Unsure => 3,
        State::Succeeded => 4,
        State::Refused => 5,
        State::Conflict => 6,
        State::Misconfigured => 7,
    }
}

/// The outcome's index in `browser.js`'s `OUTCOMES`.
fn outcome_index(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Succeeded => "0",
        Outcome::Refused => "1",
        Outcome::Conflict => "2",
        Outcome::Misconfigured => "3",
        Outcome::Unsure => "4",
    }
}

#[wasm_bindgen(js_class = Core)]
impl Machine {
    /// A submission named `name`, idle. Throws the policy's problem (without `options.`) when
    /// the retry policy cannot work.
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: &str,
        key_header: String,
        attempts: u32,
        base: f64,
        cap: f64,
        budget: f64,
    ) -> Result<Machine, JsValue> {
        let policy = RetryPolicy {
            attempts,
            base: millis(base),
            cap: millis(cap),
            budget: millis(budget),
        };
        policy
            .validate()
            .map_err(|e| JsValue::from_str(e.message()))?;
        Ok(Machine {
            core: Submission::new(name, policy),
            key_header,
            attempt: None,
            sent: 0,
            secrets: Fields::new(),
        })
    }

    /// Takes up a stored record; returns why it cannot be (then the caller removes it).
    pub fn restore(&mut self, now: f64, text: &str, resume: bool) -> Option<String> {
        let record = match Record::from_json(text) {
            Ok(record) => record,
            Err(e) => return Some(e.0),
        };
        if record.name != self.core.name() {
            return Some("it belongs to ".to_owned() + &quoted(&record.name));
        }
        self.core
            .restore(at(now), record, resume)
            .err()
            .map(|e| e.message())
    }

    /// Begins the submission of `body` (JSON text) with a key made from `random` (16 bytes).
    /// Returns `S` when a new submission started, `J` when it joined or resumed the pending one,
    /// or a refusal: its kind (`o` an option, `b` the body, `p` another body pending) and why.
    pub fn begin(
        &mut self,
        now: f64,
        method: &str,
        url: &str,
        body: &str,
        form: bool,
        random: &[u8],
    ) -> String {
        let (encoding, cannot) = match form {
            false => (Encoding::Json, "bthe body cannot be sent: "),
            true => (Encoding::Form, "bthe body cannot be sent as a form: "),
        };
        let request = match Request::new(method, url, body, encoding) {
            Ok(request) => request,
            Err(RequestError::Body(b)) => return concat(&[cannot, &b.message()]),
            Err(other) => return "o".to_owned() + &other.message(),
        };
        let mut key = [0u8; 16];
        for (k, r) in key.iter_mut().zip(random) {
            *k = *r;
        }
        match self.core.begin(at(now), request, NewKey::Random(key)) {
            Ok(Begun::Started) => "S".to_owned(),
            Ok(_) => "J".to_owned(),
            Err(e @ BeginError::PendingMismatch { .. }) => "p".to_owned() + &e.message(),
            Err(BeginError::Body(b)) => "bthe body cannot be sent: ".to_owned() + &b.message(),
        }
    }

    /// "Try again"; returns why not when nothing is pending.
    #[wasm_bindgen(js_name = tryAgain)]
    pub fn try_again(&mut self, now: f64) -> Option<String> {
        self.core.try_again(at(now)).err().map(|e| e.message())
    }

    /// Drops the pending submission (the person chose to).
    pub fn discard(&mut self) {
        self.core.discard();
    }

    /// The timer fired.
    pub fn timeout(&mut self, now: f64) {
        self.core.handle_timeout(at(now));
    }

    /// The answer to the attempt known as `id`: its status, its headers as `name:value` lines,
    /// its text.
    /// An answer to an attempt no longer under way (a discard) is ignored: returns false.
    pub fn answer(
        &mut self,
        now: f64,
        id: u32,
        status: u16,
        headers: &str,
        text: &str,
        jitter: u32,
    ) -> bool {
        let Some(attempt) = self.current(id) else {
            return false;
        };
        let answer = Answer::from_response(
            status,
            headers.split('\n').filter_map(|line| line.split_once(':')),
            text,
            &self.key_header,
        );
        self.core.handle_answer(at(now), attempt, &answer, jitter);
        true
    }

    /// No answer to the attempt known as `id`: the network failed, or (`timeout`) the timer fired.
    /// Ignored, returning false, when that attempt is no longer under way.
    pub fn failure(&mut self, now: f64, id: u32, timeout: bool, jitter: u32) -> bool {
        let Some(attempt) = self.current(id) else {
            return false;
        };
        let failure = if timeout {
            Failure::Timeout
        } else {
            Failure::Network
        };
        self.core.handle_failure(at(now), attempt, failure, jitter);
        true
    }

    /// When to call [`Machine::timeout`], in ms since the epoch, or -1.
    pub fn deadline(&self) -> f64 {
        self.core
            .poll_timeout()
            .map_or(-1.0, |t| t.as_millis() as f64)
    }

    /// The state's index.
    pub fn state(&self) -> u8 {
        state_index(self.core.state())
    }

    /// The pending record: key, attempts and start (ms) on a line each, then the body's JSON.
    pub fn pending(&self) -> Option<String> {
        let r = self.core.pending()?;
        Some(concat(&[
            r.key.as_str(),
            "\n",
            &decimal(r.attempts.into()),
            "\n",
            &decimal(r.started_at.as_millis()),
            "\n",
            &r.request.body,
        ]))
    }

    /// Fields (a JSON object's text) merged into every attempt's JSON object body from now on,
    /// never stored; dropped when the submission is forgotten. Returns why not, when they are
    /// not a JSON object.
    #[wasm_bindgen(js_name = setSecrets)]
    pub fn set_secrets(&mut self, fields: &str) -> Option<String> {
        match body::parse(fields) {
            Ok(Value::Object(fields)) => {
                self.secrets = fields;
                None
            }
            Ok(_) => Some("secret fields must be an object of names to values".to_owned()),
            Err(e) => Some(e.message()),
        }
    }

    /// The next action, as text (see the module docs), or nothing.
    ///
    /// A send is `S` and the lines: the number [`Machine::answer`] and [`Machine::failure`] know
    /// the attempt by, its number among the submission's attempts, the key, the method, the URL, the
    /// content type, the stored headers as `name:value` joined by `\r` (names are tokens and
    /// values have no control characters but tabs), and last the body on the wire: `1` and the
    /// body, or `0` when the body cannot be sent (a secret the encoding cannot carry), which
    /// fails like the network.
    pub fn poll(&mut self) -> Option<String> {
        let text = match self.core.poll_action()? {
            Action::Persist(record) => "P".to_owned() + &record.to_json(),
            Action::Send(attempt) => {
                self.sent = self.sent.wrapping_add(1);
                self.attempt = Some((self.sent, attempt.id));
                let r = &attempt.request;
                let mut headers = String::new();
                for (name, value) in &r.headers {
                    if !headers.is_empty() {
                        headers.push('\r');
                    }
                    headers.extend([name.as_str(), ":", value.as_str()]);
                }
                let body = match self.wire_body(r) {
                    Ok(body) => "1".to_owned() + &body,
                    Err(_) => "0".to_owned(),
                };
                concat(&[
                    "S",
                    &decimal(self.sent.into()),
                    "\n",
                    &decimal(attempt.number.into()),
                    "\n",
                    attempt.key.as_str(),
                    "\n",
                    &r.method,
                    "\n",
                    &r.url,
                    "\n",
                    r.encoding.content_type(),
                    "\n",
                    &headers,
                    "\n",
                    &body,
                ])
            }
            Action::Forget => {
                self.secrets = Fields::new();
                "F".to_owned()
            }
            Action::Changed(c) => concat(&[
                "C",
                &decimal(state_index(c.state).into()),
                "\n",
                &decimal(c.attempts.into()),
                "\n",
                &c.next_attempt_at
                    .map_or("-1".to_owned(), |t| decimal(t.as_millis())),
                "\n",
                c.key.as_ref().map_or("", |k| k.as_str()),
            ]),
            Action::Settled(s) => concat(&[
                "D",
                outcome_index(s.outcome),
                "\n",
                &s.status.map_or(String::new(), |s| decimal(s.into())),
                "\n",
                &decimal(s.attempts.into()),
                "\n",
                if s.replayed { "1" } else { "0" },
                "\n",
                s.gave_up.map_or("", |g| g.as_str()),
                "\n",
                s.key.as_str(),
            ]),
        };
        Some(text)
    }
}

impl Machine {
    /// The attempt known as `id`, if it is the one under way.
    fn current(&self, id: u32) -> Option<AttemptId> {
        let (known, attempt) = self.attempt?;
        (known == id && self.core.in_flight() == Some(attempt)).then_some(attempt)
    }

    /// The body as it goes on the wire, with the secrets merged into its JSON object body (the
    /// same on every attempt).
    fn wire_body(&self, request: &Request) -> Result<String, body::BodyError> {
        if self.secrets.is_empty() {
            return request.wire_body();
        }
        let Value::Object(mut fields) = body::parse(&request.body)? else {
            return request.wire_body();
        };
        for (name, value) in self.secrets.iter() {
            fields.insert(name.to_owned(), value.clone());
        }
        Request {
            body: Value::Object(fields).to_canonical(),
            ..request.clone()
        }
        .wire_body()
    }
}

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// Hands `browser.js` the class it drives.
    fn provide(core: Machine);
}

/// Makes the [`Submitter`](crate::Submitter) usable: hands `browser.js` the core it drives. The
/// npm package does this when it starts (`await init()`), and [`Submitter::new`](crate::Submitter::new)
/// does it for Rust programs; calling it again is harmless.
pub fn install() {
    if let Ok(machine) = Machine::new("", String::new(), 1, 1.0, 1.0, 1.0) {
        provide(machine);
    }
}
