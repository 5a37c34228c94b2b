//! # The stored record
//!
//! CONTRACT.md section 5: one versioned record per pending submission, written before the first
//! byte is sent and removed only after a definite answer:
//!
//! ```json
//! { "v": 1, "name": "new-ticket", "key": "8e03...", "method": "POST", "url": "/api/tickets",
//!   "headers": [["X-Tenant", "acme"]], "body": "{\"subject\":\"Printer\"}", "encoding": "json",
//!   "startedAt": 1796126400000, "attempts": 2, "roundStartedAt": 1796126400000,
//!   "roundAttempts": 2, "keyLifetimeMs": 86400000, "offlineMs": 0 }
//! ```
//!
//! `body` is the JSON text exactly as first sent, so every retry sends the same bytes; with
//! `encoding: "form"` it is sent form-encoded. `startedAt` and `attempts` count from the first
//! attempt ever, and the key's lifetime (`keyLifetimeMs`) from `startedAt`; `roundStartedAt` and
//! `roundAttempts` from the last "Try again", and the time budget counts from there, less the
//! time spent offline in the round (`offlineMs`, and `offlineSince` while offline). Two fields
//! are there only when the round needs them: `notBefore`, the server's
//! `Retry-After` for the next attempt (ms since the epoch), and `stopped`, the reason the round
//! ended (`"server-said-stop"`, `"retry-after-beyond-cap"`, `"redirected"`, `"budget-spent"` when
//! its next attempt was due past the time budget, or `"stopped"` when the caller stopped it), so
//! that a restart neither sends earlier than the server asked nor sends on its own a round that
//! the server, the budget or the caller ended.
//!
//! # Version 1, still
//!
//! `keyLifetimeMs`, `offlineMs`, `offlineSince`, `notBefore` and `stopped` were added to version 1 without a new
//! version, on purpose. Readers look fields up by name and ignore the ones they do not know, so
//! both directions work: this build reads a record written before them (its key lifetime is the
//! default 24 h, [`DEFAULT_KEY_LIFETIME`], and nothing of its round was offline), and an earlier
//! build reads a record written by this one (it ignores the new fields and goes on as it always
//! did). A version 2 would make every earlier build set aside, as unreadable, a record it could
//! have sent: a tab still running the previous module, or one process of a fleet sharing a store
//! in the middle of a rolling deploy. A new version is for a field whose absence cannot be given
//! a safe meaning.
//!
//! One codec for both targets: [`Record::to_json`] and [`Record::from_json`], written by hand on
//! the core's own JSON reader, so that the browser package carries no serde format (serde_json's
//! code would cost it tens of kilobytes) and the native stores keep the same text. Reading checks
//! the version and every field, so a corrupt, foreign or unknown-version record is an error value
//! that names what is wrong ([`RecordError`]), never a panic.

use super::prelude::*;
use ::core::fmt;

use serde::{Deserialize, Serialize};

use ::core::time::Duration;

use super::body::write_string;
use super::body::{self, BodyError, Fields, Value};
use super::key::Key;
use super::retry::GiveUp;
use super::text::{concat, decimal, push_decimal, quoted};
use super::time::Timestamp;

/// The record version this build reads and writes.
pub const RECORD_VERSION: u32 = 1;

/// The key lifetime of a record written before records kept one: the default 24 h.
pub const DEFAULT_KEY_LIFETIME: Duration = Duration::from_secs(24 * 60 * 60);

/// How the body is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// `application/json`, the body text as it is.
    #[default]
    Json,
    /// `application/x-www-form-urlencoded`, from a flat JSON object (see
    /// [`body::form_encode`]).
    Form,
}

impl Encoding {
    /// The `Content-Type` the body is sent with.
    pub fn content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Form => "application/x-www-form-urlencoded",
        }
    }
}

/// What is sent, on every attempt the same.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// Where to send it.
    pub url: String,
    /// Headers that may be stored (never secrets: drivers add those on every attempt).
    pub headers: Vec<(String, String)>,
    /// The body as JSON text.
    pub body: String,
    /// How the body goes on the wire.
    pub encoding: Encoding,
}

/// Why a request cannot be made.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// The method is not an HTTP token.
    Method(String),
    /// The URL is empty or has white space or control characters.
    Url(String),
    /// A header name is not a token, or its value has a line break or control character.
    Header(String),
    /// The body is not JSON, or (with form encoding) not a flat object.
    Body(BodyError),
}

impl RequestError {
    /// What [`Display`](fmt::Display) writes (built without `fmt`, see `core::text`).
    pub fn message(&self) -> String {
        match self {
            RequestError::Method(m) => quoted(m) + " is not an HTTP method",
            RequestError::Url(u) => quoted(u) + " is not a usable URL",
            RequestError::Header(h) => concat(&["the header ", &quoted(h), " cannot be sent"]),
            RequestError::Body(e) => e.message(),
        }
    }
}

impl From<BodyError> for RequestError {
    fn from(e: BodyError) -> RequestError {
        RequestError::Body(e)
    }
}

/// An HTTP token (RFC 9110 section 5.6.2): what a method or a header name must be.
pub(crate) fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Whether a header can be sent: its name a token, its value free of line breaks and control
/// characters (a tab is allowed).
pub(crate) fn is_sendable_header(name: &str, value: &str) -> bool {
    is_token(name) && !value.chars().any(|c| c.is_control() && c != '\t')
}

impl Request {
    /// A request with a JSON body text, checked: the method is a token, the URL is not empty and
    /// has no white space, the body is JSON.
    pub fn new(
        method: &str,
        url: &str,
        body: &str,
        encoding: Encoding,
    ) -> Result<Request, RequestError> {
        Request::from_owned(method.to_owned(), url.to_owned(), body.to_owned(), encoding)
    }

    /// [`Request::new`] from texts the caller owns and hands over, not copied.
    pub(crate) fn from_owned(
        mut method: String,
        url: String,
        body: String,
        encoding: Encoding,
    ) -> Result<Request, RequestError> {
        method.make_ascii_uppercase();
        let request = Request {
            method,
            url,
            headers: Vec::new(),
            body,
            encoding,
        };
        request.check()?;
        Ok(request)
    }

    /// Adds a header to be stored and sent on every attempt.
    pub fn header(mut self, name: &str, value: &str) -> Result<Request, RequestError> {
        self.push_header(name.to_owned(), value.to_owned())?;
        Ok(self)
    }

    /// [`Request::header`] of a name and value the caller owns and hands over, not copied.
    pub(crate) fn push_header(&mut self, name: String, value: String) -> Result<(), RequestError> {
        if !is_sendable_header(&name, &value) {
            return Err(RequestError::Header(name));
        }
        self.headers.push((name, value));
        Ok(())
    }

    /// The canonical form of the body: what "same body" compares.
    pub fn canonical_body(&self) -> Result<String, BodyError> {
        body::canonical_json(&self.body)
    }

    /// The body as it goes on the wire.
    pub fn wire_body(&self) -> Result<String, BodyError> {
        match self.encoding {
            Encoding::Json => Ok(self.body.clone()),
            Encoding::Form => body::form_encode(&self.body),
        }
    }

    /// The body as it goes on the wire, a JSON body taken rather than copied (an attempt's own
    /// copy of the request, sent once); a form body is encoded from it and left in place.
    pub fn take_wire_body(&mut self) -> Result<String, BodyError> {
        match self.encoding {
            Encoding::Json => Ok(::core::mem::take(&mut self.body)),
            Encoding::Form => body::form_encode(&self.body),
        }
    }

    fn check(&self) -> Result<(), RequestError> {
        if !is_token(&self.method) {
            return Err(RequestError::Method(self.method.clone()));
        }
        if self.url.is_empty()
            || self
                .url
                .chars()
                .any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(RequestError::Url(self.url.clone()));
        }
        for (name, value) in &self.headers {
            if !is_sendable_header(name, value) {
                return Err(RequestError::Header(name.clone()));
            }
        }
        // JSON that parses has a canonical form: building its value or writing it out here would
        // be work thrown away, as would a copy of the body (a form is encoded to see that it can
        // be, which parses it).
        match self.encoding {
            Encoding::Json => body::check(&self.body)?,
            Encoding::Form => drop(body::form_encode(&self.body)?),
        }
        Ok(())
    }
}

/// A pending submission as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The submission's name (the form's or caller's handle).
    pub name: String,
    /// Its key, sent on every attempt.
    pub key: Key,
    /// What is sent.
    pub request: Request,
    /// When the first attempt ever was made.
    pub started_at: Timestamp,
    /// Attempts made so far, all rounds.
    pub attempts: u32,
    /// When the current round (the first, or the last "Try again") began.
    pub round_started_at: Timestamp,
    /// Attempts made in the current round.
    pub round_attempts: u32,
    /// How long the server keeps the key, from `started_at` (see
    /// [`key_deadline`](super::retry::key_deadline)).
    pub key_lifetime: Duration,
    /// Time spent offline in the current round, before `offline_since`: not spent from the
    /// budget.
    pub offline: Duration,
    /// Offline since then, when the platform was offline as this was written.
    pub offline_since: Option<Timestamp>,
    /// The server's `Retry-After` for the next attempt: none is sent before it, across reloads
    /// and restarts (cleared by the attempt, and by "Try again").
    pub not_before: Option<Timestamp>,
    /// The server ended the round ([`GiveUp::by_server`]), its next attempt was due past the
    /// time budget ([`GiveUp::BudgetSpent`]), or the caller stopped it ([`GiveUp::Stopped`]):
    /// a resumed record settles unsure again rather than send on its own;
    /// "Try again", a person's or caller's decision, sends it (and clears this).
    pub stopped: Option<GiveUp>,
}

impl Record {
    /// The last moment an attempt may be sent with this record's key.
    pub fn key_deadline(&self) -> Timestamp {
        super::retry::key_deadline(self.started_at, self.key_lifetime)
    }

    /// Whether no attempt may be sent with this key at `now`: it was sent (a key never sent
    /// cannot have been seen, so its lifetime starts with its first attempt) and `now` is past
    /// [`Record::key_deadline`].
    pub fn is_expired(&self, now: Timestamp) -> bool {
        self.attempts > 0 && now >= self.key_deadline()
    }

    /// When the round's time budget counts from at `now`: its start moved on by the time
    /// spent offline in it.
    pub fn budget_start(&self, now: Timestamp) -> Timestamp {
        let offline_now = self
            .offline_since
            .map_or(Duration::ZERO, |t| now.saturating_since(t));
        self.round_started_at + self.offline + offline_now
    }
}

/// Why a stored record cannot be used. The driver removes it and reports a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unreadable stored submission: {}", self.0)
    }
}

impl ::core::error::Error for RecordError {}

/// The stored fields as read, before they are checked. Every one is optional here so that a
/// missing one is named in the error.
struct Read {
    v: Option<u32>,
    name: Option<String>,
    key: Option<String>,
    method: Option<String>,
    url: Option<String>,
    headers: Vec<(String, String)>,
    body: Option<String>,
    encoding: Encoding,
    started_at: Option<u64>,
    attempts: Option<u32>,
    round_started_at: Option<u64>,
    round_attempts: Option<u32>,
    key_lifetime: Option<u64>,
    offline: Option<u64>,
    offline_since: Option<u64>,
    not_before: Option<u64>,
    stopped: Option<GiveUp>,
}

impl Read {
    fn check(self) -> Result<Record, RecordError> {
        let w = self;
        fn need<T>(v: Option<T>, field: &str) -> Result<T, RecordError> {
            v.ok_or_else(|| RecordError(concat(&["it has no ", &quoted(field)])))
        }
        match w.v {
            Some(RECORD_VERSION) => {}
            Some(v) => {
                return Err(RecordError(concat(&[
                    "it has version ",
                    &decimal(v.into()),
                    "; this oncekey reads version ",
                    &decimal(RECORD_VERSION.into()),
                ])))
            }
            None => return Err(RecordError("it has no version (\"v\")".into())),
        }
        let key = Key::parse(&need(w.key, "key")?)
            .map_err(|e| RecordError(concat(&["its key is unusable: ", &e.message()])))?;
        let request = Request {
            method: need(w.method, "method")?,
            url: need(w.url, "url")?,
            headers: w.headers,
            body: need(w.body, "body")?,
            encoding: w.encoding,
        };
        request
            .check()
            .map_err(|e| RecordError(concat(&["its request is unusable: ", &e.message()])))?;
        let started_at = Timestamp::from_millis(need(w.started_at, "startedAt")?);
        Ok(Record {
            name: need(w.name, "name")?,
            key,
            request,
            started_at,
            attempts: need(w.attempts, "attempts")?,
            round_started_at: w
                .round_started_at
                .map(Timestamp::from_millis)
                .unwrap_or(started_at),
            round_attempts: w.round_attempts.unwrap_or(0),
            key_lifetime: match w.key_lifetime {
                None => DEFAULT_KEY_LIFETIME,
                Some(0) => return Err(RecordError("its \"keyLifetimeMs\" is 0".into())),
                Some(ms) => Duration::from_millis(ms),
            },
            offline: Duration::from_millis(w.offline.unwrap_or(0)),
            offline_since: w.offline_since.map(Timestamp::from_millis),
            not_before: w.not_before.map(Timestamp::from_millis),
            stopped: w.stopped,
        })
    }
}

impl Record {
    /// Whether `text`, as stored, is the record of `key`: its `"key"` member is `key`. Every
    /// string inside a record is written escaped, so a `"key":` with its quotes bare is the
    /// member itself, never part of a body, header or name. Read without parsing: a driver
    /// asks it once per definite answer, before removing what it stored. Text in another
    /// format, or no record at all, is not `key`'s.
    pub fn is_of_key(text: &str, key: &Key) -> bool {
        let mut member = String::with_capacity(10 + key.as_str().len());
        member.push_str("\"key\":");
        write_string(key.as_str(), &mut member);
        text.contains(member.as_str())
    }

    /// The record as JSON text in the shape above.
    pub fn to_json(&self) -> String {
        // Written straight out in canonical form (names sorted, as `Value::to_canonical` would
        // sort them): building a `Value` first costs the browser package its map code. One
        // string, written in place: this is written before every attempt.
        let r = &self.request;
        let mut out = String::with_capacity(320 + r.body.len() + r.url.len() + self.name.len());
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        out.push_str("{\"attempts\":");
        push_decimal(&mut out, self.attempts.into());
        out.push_str(",\"body\":");
        write_string(&r.body, &mut out);
        out.push_str(match r.encoding {
            Encoding::Json => ",\"encoding\":\"json\",\"headers\":[",
            Encoding::Form => ",\"encoding\":\"form\",\"headers\":[",
        });
        for (i, (n, v)) in r.headers.iter().enumerate() {
            out.push_str(if i == 0 { "[" } else { ",[" });
            write_string(n, &mut out);
            out.push(',');
            write_string(v, &mut out);
            out.push(']');
        }
        out.push_str("],\"key\":");
        write_string(self.key.as_str(), &mut out);
        out.push_str(",\"keyLifetimeMs\":");
        push_decimal(&mut out, millis(self.key_lifetime));
        out.push_str(",\"method\":");
        write_string(&r.method, &mut out);
        out.push_str(",\"name\":");
        write_string(&self.name, &mut out);
        if let Some(t) = self.not_before {
            out.push_str(",\"notBefore\":");
            push_decimal(&mut out, t.as_millis());
        }
        out.push_str(",\"offlineMs\":");
        push_decimal(&mut out, millis(self.offline));
        if let Some(t) = self.offline_since {
            out.push_str(",\"offlineSince\":");
            push_decimal(&mut out, t.as_millis());
        }
        out.push_str(",\"roundAttempts\":");
        push_decimal(&mut out, self.round_attempts.into());
        out.push_str(",\"roundStartedAt\":");
        push_decimal(&mut out, self.round_started_at.as_millis());
        out.push_str(",\"startedAt\":");
        push_decimal(&mut out, self.started_at.as_millis());
        if let Some(why) = self.stopped {
            out.push_str(",\"stopped\":\"");
            out.push_str(why.code());
            out.push('"');
        }
        out.push_str(",\"url\":");
        write_string(&r.url, &mut out);
        out.push_str(",\"v\":");
        push_decimal(&mut out, RECORD_VERSION.into());
        out.push('}');
        out
    }

    /// Reads [`Record::to_json`]'s text: a corrupt, foreign or unknown-version record is an
    /// error that names what is wrong.
    pub fn from_json(text: &str) -> Result<Record, RecordError> {
        let value = body::parse(text)
            .map_err(|e| RecordError(concat(&["it is not JSON (", &e.message(), ")"])))?;
        let Value::Object(m) = value else {
            return Err(RecordError("it is not a JSON object".into()));
        };
        fn string(m: &Fields, field: &str) -> Result<Option<String>, RecordError> {
            match m.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(RecordError(concat(&[
                    "its ",
                    &quoted(field),
                    " is not a string",
                ]))),
            }
        }
        fn whole(m: &Fields, field: &str, max: u64) -> Result<Option<u64>, RecordError> {
            match m.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Number(n)) => n
                    .parse::<u64>()
                    .ok()
                    .filter(|n| *n <= max)
                    .map(Some)
                    .ok_or_else(|| {
                        RecordError(concat(&[
                            "its ",
                            &quoted(field),
                            " is not a whole number in range",
                        ]))
                    }),
                Some(_) => Err(RecordError(concat(&[
                    "its ",
                    &quoted(field),
                    " is not a number",
                ]))),
            }
        }
        let headers = match m.get("headers") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| match item {
                    Value::Array(pair) => match pair.as_slice() {
                        [Value::String(n), Value::String(v)] => Ok((n.clone(), v.clone())),
                        _ => Err(RecordError(
                            "its \"headers\" are not [name, value] pairs".into(),
                        )),
                    },
                    _ => Err(RecordError(
                        "its \"headers\" are not [name, value] pairs".into(),
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(RecordError("its \"headers\" is not a list".into())),
        };
        let encoding = match string(&m, "encoding")?.as_deref() {
            None | Some("json") => Encoding::Json,
            Some("form") => Encoding::Form,
            Some(other) => {
                return Err(RecordError(concat(&[
                    "its encoding ",
                    &quoted(other),
                    " is unknown",
                ])))
            }
        };
        // Read in one pass each (one error path, not one per field), in the order the fields
        // are named in the errors.
        const U32: u64 = u32::MAX as u64;
        let v = whole(&m, "v", U32)?;
        let mut texts: [Option<String>; 6] = Default::default();
        for (slot, field) in texts
            .iter_mut()
            .zip(["name", "key", "method", "url", "body", "stopped"])
        {
            *slot = string(&m, field)?;
        }
        let mut wholes = [None; 8];
        let limits = [
            ("startedAt", u64::MAX),
            ("attempts", U32),
            ("roundStartedAt", u64::MAX),
            ("roundAttempts", U32),
            ("keyLifetimeMs", u64::MAX),
            ("offlineMs", u64::MAX),
            ("offlineSince", u64::MAX),
            ("notBefore", u64::MAX),
        ];
        for (slot, (field, max)) in wholes.iter_mut().zip(limits) {
            *slot = whole(&m, field, max)?;
        }
        let [name, key, method, url, body, stopped] = texts;
        let [started_at, attempts, round_started_at, round_attempts, key_lifetime, offline, offline_since, not_before] =
            wholes;
        // A reason this build does not know (a later one's) still means the server ended the
        // round: not sent on its own.
        let stopped = stopped.map(|c| GiveUp::from_code(&c).unwrap_or(GiveUp::ServerSaidStop));
        Read {
            v: v.map(|v| v as u32),
            name,
            key,
            method,
            url,
            headers,
            body,
            encoding,
            started_at,
            attempts: attempts.map(|a| a as u32),
            round_started_at,
            round_attempts: round_attempts.map(|a| a as u32),
            key_lifetime,
            offline,
            offline_since,
            not_before,
            stopped,
        }
        .check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> Record {
        Record {
            name: "new-ticket".into(),
            key: Key::parse("8e03978e-40d5-43e8-bc93-6894a57f9324").unwrap(),
            request: Request::new(
                "post",
                "/api/tickets",
                r#"{"subject":"Printer"}"#,
                Encoding::Json,
            )
            .unwrap()
            .header("X-Tenant", "acme")
            .unwrap(),
            started_at: Timestamp::from_millis(1_796_126_400_000),
            attempts: 2,
            round_started_at: Timestamp::from_millis(1_796_126_400_000),
            round_attempts: 2,
            key_lifetime: DEFAULT_KEY_LIFETIME,
            offline: Duration::ZERO,
            offline_since: None,
            not_before: None,
            stopped: None,
        }
    }

    #[test]
    fn round_trips_in_the_documented_shape() {
        let text = record().to_json();
        for part in [
            r#""v":1"#,
            r#""name":"new-ticket""#,
            r#""key":"8e03978e-40d5-43e8-bc93-6894a57f9324""#,
            r#""method":"POST""#,
            r#""headers":[["X-Tenant","acme"]]"#,
            r#""startedAt":1796126400000"#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert_eq!(Record::from_json(&text).unwrap(), record());
        // Written by earlier versions through serde, with the fields in declaration order, and
        // before records kept a key lifetime: the default 24 h.
        let earlier = r#"{"v":1,"name":"new-ticket","key":"8e03978e-40d5-43e8-bc93-6894a57f9324","method":"POST","url":"/api/tickets","headers":[["X-Tenant","acme"]],"body":"{\"subject\":\"Printer\"}","encoding":"json","startedAt":1796126400000,"attempts":2,"roundStartedAt":1796126400000,"roundAttempts":2}"#;
        assert_eq!(Record::from_json(earlier).unwrap(), record());
        assert_eq!(
            Record::from_json(earlier).unwrap().key_lifetime,
            Duration::from_secs(86_400)
        );
    }

    #[test]
    fn a_record_is_of_its_own_key_only_never_of_one_its_body_or_headers_name() {
        let other = Key::parse("5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a").unwrap();
        let mut r = record();
        assert!(Record::is_of_key(&r.to_json(), &r.key));
        assert!(!Record::is_of_key(&r.to_json(), &other));
        // The other key written in the body, a header and the name, as a key member each.
        let member = r#"{"key":"5f0c3e1a-3b7e-4c1d-9a2b-8e7f6d5c4b3a"}"#;
        r.request = Request::new("post", "/api/tickets", member, Encoding::Json)
            .unwrap()
            .header("X-Note", member)
            .unwrap();
        r.name = member.into();
        let text = r.to_json();
        assert!(text.contains(other.as_str()), "{text}");
        assert!(!Record::is_of_key(&text, &other), "{text}");
        assert!(Record::is_of_key(&text, &r.key));
        assert!(!Record::is_of_key("", &r.key), "no record");
    }

    #[test]
    fn the_lifetime_and_offline_time_are_kept() {
        let mut r = record();
        r.key_lifetime = Duration::from_secs(30 * 60);
        r.offline = Duration::from_millis(1234);
        r.offline_since = Some(Timestamp::from_millis(1_796_126_500_000));
        let text = r.to_json();
        for part in [
            r#""keyLifetimeMs":1800000"#,
            r#""offlineMs":1234"#,
            r#""offlineSince":1796126500000"#,
            r#""v":1"#,
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert_eq!(
            body::canonical_json(&text).unwrap(),
            text,
            "canonical order"
        );
        assert_eq!(Record::from_json(&text).unwrap(), r);
        assert_eq!(
            r.key_deadline(),
            r.started_at + Duration::from_secs(27 * 60)
        );
        // The budget counts from the round's start moved on by the time offline, the current
        // spell included.
        let now = Timestamp::from_millis(1_796_126_510_000);
        assert_eq!(
            r.budget_start(now),
            r.round_started_at + Duration::from_millis(1234) + Duration::from_secs(10)
        );
        let zero = text.replace(r#""keyLifetimeMs":1800000"#, r#""keyLifetimeMs":0"#);
        let err = Record::from_json(&zero).unwrap_err().to_string();
        assert!(err.contains("keyLifetimeMs"), "{err}");
    }

    /// Unreadable records and what their error must say.
    const UNREADABLE: &[(&str, &str)] = &[
        (r#"{"v":2,"key":"k"}"#, "version 2"),
        (r#"{"key":"k"}"#, "no version"),
        (
            r#"{"v":1,"name":"n","method":"POST","url":"/x","body":"{}","startedAt":1,"attempts":0}"#,
            "no \"key\"",
        ),
        (
            r#"{"v":1,"name":"n","key":"a b","method":"POST","url":"/x","body":"{}","startedAt":1,"attempts":0}"#,
            "key is unusable",
        ),
        (
            r#"{"v":1,"name":"n","key":"k","method":"POST","url":"/x","body":"{oops","startedAt":1,"attempts":0}"#,
            "not valid JSON",
        ),
        (
            r#"{"v":1,"name":"n","key":"k","method":"PO ST","url":"/x","body":"{}","startedAt":1,"attempts":0}"#,
            "not an HTTP method",
        ),
    ];

    #[test]
    fn form_bodies_and_quoted_headers_round_trip_in_canonical_form() {
        let mut r = record();
        r.request = Request::new("POST", "/x", r#"{"a":"1 2"}"#, Encoding::Form).unwrap();
        r.request
            .headers
            .push(("X-Tenant".into(), "acme \"quoted\"".into()));
        let ours = r.to_json();
        assert_eq!(Record::from_json(&ours).unwrap(), r);
        assert!(ours.contains(r#""v":1"#), "{ours}");
        // Written in canonical form, as the body comparison would write it, with two headers.
        r.request.headers.push(("X-Two".into(), "2".into()));
        let ours = r.to_json();
        assert_eq!(body::canonical_json(&ours).unwrap(), ours);
        assert_eq!(Record::from_json(&ours).unwrap(), r);
    }

    #[test]
    fn unreadable_records_are_errors_that_say_why() {
        let cases = [
            (
                r#"{"v":1,"name":"n","key":"k","method":"POST","url":"/x","body":"{}","startedAt":1.5,"attempts":0}"#,
                "whole number",
            ),
            (
                r#"{"v":1,"name":"n","key":"k","method":"POST","url":"/x","body":"{}","startedAt":1,"attempts":-1}"#,
                "whole number",
            ),
            (r#"{"v":1,"name":7}"#, "not a string"),
            (r#"{"v":1,"headers":{"a":"b"}}"#, "not a list"),
            ("[1,2]", "not a JSON object"),
            ("{oops", "not JSON"),
            ("", "not JSON"),
        ];
        for (text, expected) in UNREADABLE.iter().copied().chain(cases) {
            let err = Record::from_json(text).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn requests_are_checked() {
        assert!(matches!(
            Request::new("", "/x", "{}", Encoding::Json),
            Err(RequestError::Method(_))
        ));
        assert!(matches!(
            Request::new("POST", "", "{}", Encoding::Json),
            Err(RequestError::Url(_))
        ));
        assert!(matches!(
            Request::new("POST", "/a b", "{}", Encoding::Json),
            Err(RequestError::Url(_))
        ));
        assert!(matches!(
            Request::new("POST", "/x", "{", Encoding::Json),
            Err(RequestError::Body(_))
        ));
        assert!(matches!(
            Request::new("POST", "/x", r#"{"a":{"b":1}}"#, Encoding::Form),
            Err(RequestError::Body(BodyError::NotFlat { .. }))
        ));
        let r = Request::new("POST", "/x", "{}", Encoding::Json).unwrap();
        assert!(matches!(
            r.header("X-A", "a\r\nb"),
            Err(RequestError::Header(_))
        ));
        let mut form =
            Request::new("POST", "/x", r#"{"b":"2","a":"1 2"}"#, Encoding::Form).unwrap();
        assert_eq!(form.wire_body().unwrap(), "a=1+2&b=2");
        // Taken for an attempt: the same bytes; a form's JSON stays, a JSON body is handed over.
        assert_eq!(form.take_wire_body().unwrap(), "a=1+2&b=2");
        assert_eq!(form.body, r#"{"b":"2","a":"1 2"}"#);
        let mut json = Request::new("POST", "/x", r#"{"b": 2}"#, Encoding::Json).unwrap();
        assert_eq!(json.take_wire_body().unwrap(), r#"{"b": 2}"#);
        assert_eq!(json.body, "");
    }
}
