//! # The help desk's API
//!
//! `POST /api/tickets` follows CONTRACT.md section 6: a claim on (tenant, key) is a lease taken in
//! its own transaction; the ticket and the receipt's answer are written in one transaction, and
//! only if the lease is still this request's; a 5xx releases the claim and is never stored.
//! `POST /api/plain/tickets` is the same form with no key check: every request makes a ticket.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use oncekey::core::body::{self as canonical, Value};
use oncekey::core::key::DEFAULT_KEY_HEADER;
use oncekey::Key;
use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use crate::faults::{Fault, RandomFaults};
use crate::store::{Claim, ClaimRequest, Claimed, Failure, NewTicket, Store, Stored, Tx};

/// The largest request body read unless configured otherwise (`--max-body`), in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest subject, in characters.
pub const MAX_SUBJECT: usize = 200;
/// The longest email address, in characters.
pub const MAX_EMAIL: usize = 254;
/// The longest tenant name, in bytes.
pub const MAX_TENANT: usize = 64;

const PROBLEM_JSON: &str = "application/problem+json";
const JSON: &str = "application/json";

/// Everything a request needs.
#[derive(Debug)]
pub struct App {
    pub(crate) store: Store,
    pub(crate) faults: bool,
    pub(crate) random_faults: Option<RandomFaults>,
    pub(crate) lease: Duration,
    pub(crate) receipt_ttl: Duration,
    pub(crate) key_check: bool,
    pub(crate) max_body: usize,
    pub(crate) body_read_timeout: Duration,
    pub(crate) counters: Mutex<HashMap<String, Counters>>,
    pub(crate) next_token: AtomicI64,
}

/// Closes the request's connection without an answer when cancelled (`drop-reply`,
/// `crash-before-commit`). The accept loop puts one in every request's extensions.
#[derive(Debug, Clone, Default)]
pub struct ConnectionAbort(pub CancellationToken);

/// Counts kept in memory per tenant, since the server started.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counters {
    /// Tickets created by this process.
    pub created: u64,
    /// Answers replayed from a receipt.
    pub replays: u64,
    /// `422`: the key was used with another body.
    pub conflicts: u64,
    /// `409`: the key's first request was still being processed.
    pub in_progress: u64,
    /// `400` for a missing or malformed key.
    pub missing_keys: u64,
    /// `400` for invalid ticket input (stored on keyed requests).
    pub invalid: u64,
    /// Expired leases taken over.
    pub takeovers: u64,
    /// Completions refused because the lease had been taken over.
    pub lost_leases: u64,
    /// Faults applied.
    pub faults: u64,
    /// Answers of `500` and above.
    pub errors: u64,
}

impl App {
    fn count(&self, tenant: &str, f: impl FnOnce(&mut Counters)) {
        let mut all = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        f(all.entry(tenant.to_owned()).or_default());
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

// ---------------------------------------------------------------------------------------------
// Problem details (RFC 9457)

/// One invalid field of a request.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct InvalidParam {
    /// The field (or header) name.
    pub name: String,
    /// Why it is refused.
    pub reason: String,
}

#[derive(Debug, Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(rename = "invalid-params", skip_serializing_if = "Vec::is_empty")]
    invalid_params: Vec<InvalidParam>,
}

/// A problem document as a stored answer.
fn problem(
    status: StatusCode,
    slug: &str,
    title: &str,
    detail: &str,
    invalid: Vec<InvalidParam>,
) -> Stored {
    let doc = Problem {
        kind: format!("urn:oncekey:problem:{slug}"),
        title,
        status: status.as_u16(),
        detail,
        invalid_params: invalid,
    };
    Stored {
        status: status.as_u16(),
        content_type: PROBLEM_JSON.to_owned(),
        body: serde_json::to_vec(&doc).unwrap_or_default(),
    }
}

fn respond(answer: &Stored) -> Response {
    let mut response = Response::new(Body::from(answer.body.clone()));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = HeaderValue::from_str(&answer.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

fn param(name: &str, reason: impl Into<String>) -> InvalidParam {
    InvalidParam {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

fn unavailable(detail: &str) -> Response {
    let mut r = respond(&problem(
        StatusCode::SERVICE_UNAVAILABLE,
        "unavailable",
        "Service unavailable",
        detail,
        vec![],
    ));
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

// ---------------------------------------------------------------------------------------------
// Reading a request

/// The tenant named by `X-Tenant`, `public` by default.
fn tenant(headers: &HeaderMap) -> Result<String, Stored> {
    let Some(value) = headers.get("x-tenant") else {
        return Ok("public".to_owned());
    };
    match value.to_str() {
        Ok(t)
            if !t.is_empty()
                && t.len() <= MAX_TENANT
                && t.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            Ok(t.to_owned())
        }
        _ => Err(problem(
            StatusCode::BAD_REQUEST,
            "invalid-tenant",
            "Invalid X-Tenant header",
            &format!("X-Tenant must be 1 to {MAX_TENANT} visible ASCII characters"),
            vec![param("X-Tenant", "not 1 to 64 visible ASCII characters")],
        )),
    }
}

/// The fault this request suffers, if faults are on.
fn fault(app: &App, headers: &HeaderMap) -> Result<Option<Fault>, Stored> {
    if !app.faults {
        return Ok(None);
    }
    match headers.get("x-fault").map(|v| v.to_str()) {
        None => Ok(app.random_faults.as_ref().and_then(RandomFaults::draw)),
        Some(Ok(v)) => Fault::parse(v).map(Some).map_err(|why| {
            problem(
                StatusCode::BAD_REQUEST,
                "unknown-fault",
                "Unknown X-Fault",
                &why,
                vec![param("X-Fault", why.clone())],
            )
        }),
        Some(Err(_)) => Err(problem(
            StatusCode::BAD_REQUEST,
            "unknown-fault",
            "Unknown X-Fault",
            "X-Fault is not text",
            vec![param("X-Fault", "not text")],
        )),
    }
}

/// The key of a keyed request; the `400` names the header, so clients can tell a setup error.
fn key(headers: &HeaderMap) -> Result<Key, Stored> {
    let mut values = headers.get_all(DEFAULT_KEY_HEADER).iter();
    let reason = match (values.next(), values.next()) {
        (None, _) => {
            "the header is missing; this route requires one key per intended submission".to_owned()
        }
        (Some(_), Some(_)) => "the header is given more than once".to_owned(),
        (Some(v), None) => match v.to_str() {
            Err(_) => "the header value is not visible ASCII".to_owned(),
            Ok(s) => match Key::from_header_value(s) {
                Ok(key) => return Ok(key),
                Err(e) => e.to_string(),
            },
        },
    };
    let missing = headers.get(DEFAULT_KEY_HEADER).is_none();
    Err(problem(
        StatusCode::BAD_REQUEST,
        if missing {
            "idempotency-key-missing"
        } else {
            "idempotency-key-malformed"
        },
        if missing {
            "Missing Idempotency-Key header"
        } else {
            "Malformed Idempotency-Key header"
        },
        &format!("Idempotency-Key: {reason}"),
        vec![param(DEFAULT_KEY_HEADER, reason.clone())],
    ))
}

/// A ticket request read and checked: its fingerprint, and the ticket or the `400` to give.
struct Submission {
    fingerprint: Vec<u8>,
    ticket: Result<NewTicket, Stored>,
}

fn fingerprint(text: &[u8]) -> Vec<u8> {
    Sha256::digest(text).to_vec()
}

/// Reads a ticket from a JSON or form body. The fingerprint is of the canonical JSON, so a JSON
/// and a form submission of the same fields match, and key order never matters; a body that
/// cannot be read is fingerprinted as its bytes, and its `400` is stored like any answer.
fn read_ticket(tenant: &str, headers: &HeaderMap, bytes: &[u8]) -> Submission {
    let invalid = |name: &str, reason: String| Submission {
        fingerprint: fingerprint(bytes),
        ticket: Err(problem(
            StatusCode::BAD_REQUEST,
            "invalid-ticket",
            "Invalid ticket",
            &format!("{name}: {reason}"),
            vec![param(name, reason.clone())],
        )),
    };
    let media = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let Ok(text) = std::str::from_utf8(bytes) else {
        return invalid("body", "the body is not UTF-8 text".into());
    };
    let parsed = if media == JSON || media.ends_with("+json") {
        // What canonical_json(text) does, keeping the parsed value for the field checks.
        canonical::parse(text).map(|v| (v.to_canonical(), v))
    } else if media == "application/x-www-form-urlencoded" {
        canonical::form_decode(text).and_then(|c| Ok((c.clone(), canonical::parse(&c)?)))
    } else {
        return invalid(
            "Content-Type",
            format!("the body must be application/json or application/x-www-form-urlencoded, not {media:?}"),
        );
    };
    let (canonical, value) = match parsed {
        Ok(c) => c,
        Err(e) => return invalid("body", e.to_string()),
    };
    let fingerprint = fingerprint(canonical.as_bytes());
    let Value::Object(fields) = value else {
        return Submission {
            fingerprint,
            ticket: Err(problem(
                StatusCode::BAD_REQUEST,
                "invalid-ticket",
                "Invalid ticket",
                "body: a ticket is an object with subject, body and email",
                vec![param(
                    "body",
                    "a ticket is an object with subject, body and email",
                )],
            )),
        };
    };
    let mut errors = Vec::new();
    let mut text_field = |name: &str| match fields.get(name) {
        Some(Value::String(s)) => Some(s.clone()),
        None => {
            errors.push(param(name, "is required"));
            None
        }
        Some(_) => {
            errors.push(param(name, "must be a string"));
            None
        }
    };
    let (subject, body, email) = (
        text_field("subject"),
        text_field("body"),
        text_field("email"),
    );
    if let Some(subject) = &subject {
        let len = subject.chars().count();
        if subject.trim().is_empty() {
            errors.push(param("subject", "must not be empty"));
        } else if len > MAX_SUBJECT {
            errors.push(param(
                "subject",
                format!("is {len} characters long; at most {MAX_SUBJECT} are allowed"),
            ));
        }
    }
    if let Some(email) = &email {
        if let Err(why) = check_email(email) {
            errors.push(param("email", why));
        }
    }
    let ticket = match (subject, body, email) {
        (Some(subject), Some(body), Some(email)) if errors.is_empty() => Ok(NewTicket {
            tenant: tenant.to_owned(),
            subject,
            body,
            email,
            created_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        }),
        _ => {
            let detail = errors
                .iter()
                .map(|e| format!("{}: {}", e.name, e.reason))
                .collect::<Vec<_>>()
                .join("; ");
            Err(problem(
                StatusCode::BAD_REQUEST,
                "invalid-ticket",
                "Invalid ticket",
                &detail,
                errors,
            ))
        }
    };
    Submission {
        fingerprint,
        ticket,
    }
}

/// A plain check: one `@`, something before it, a dotted domain after it, no white space.
fn check_email(email: &str) -> Result<(), String> {
    if email.chars().count() > MAX_EMAIL {
        return Err(format!("is longer than {MAX_EMAIL} characters"));
    }
    let (local, domain) = email
        .split_once('@')
        .ok_or_else(|| "is not an email address (no @)".to_owned())?;
    let ok = !local.is_empty()
        && !domain.contains('@')
        && domain.contains('.')
        && !domain.starts_with('.')
        && !domain.ends_with('.')
        && !email.chars().any(|c| c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err("is not an email address".to_owned())
    }
}

/// The request's body: `413` above the limit (`--max-body`), `408` when it does not arrive within
/// the body read timeout (a body shorter than its `Content-Length` that never ends), `400` when it
/// cannot be read (bad chunked encoding). The last two close the connection: what is left of the
/// body cannot be told from the next request.
async fn read_body(app: &App, headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    let limit = app.max_body;
    let too_large = || {
        respond(&problem(
            StatusCode::PAYLOAD_TOO_LARGE,
            "body-too-large",
            "Request body too large",
            &format!("body: is larger than {limit} bytes"),
            vec![param("body", format!("is larger than {limit} bytes"))],
        ))
    };
    let closing = |status: StatusCode, slug: &str, title: &str, reason: String| {
        let mut r = respond(&problem(
            status,
            slug,
            title,
            &format!("body: {reason}"),
            vec![param("body", reason.clone())],
        ));
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        r
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(app.body_read_timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let e = e.into_inner();
            if e.is::<http_body_util::LengthLimitError>() {
                Err(too_large())
            } else {
                Err(closing(
                    StatusCode::BAD_REQUEST,
                    "body-unreadable",
                    "Request body unreadable",
                    format!("could not be read: {e}"),
                ))
            }
        }
        Err(_) => Err(closing(
            StatusCode::REQUEST_TIMEOUT,
            "body-timeout",
            "Request body timeout",
            format!(
                "did not arrive within {}",
                humantime::format_duration(app.body_read_timeout)
            ),
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The routes

/// What the request's task decided.
enum Outcome {
    Answer(Response),
    /// Close the connection without an answer.
    CloseConnection,
}

async fn finish(outcome: Outcome, abort: &ConnectionAbort) -> Response {
    match outcome {
        Outcome::Answer(r) => r,
        Outcome::CloseConnection => {
            abort.0.cancel();
            // The accept loop drops the connection; this future is dropped with it.
            std::future::pending::<()>().await;
            unreachable!()
        }
    }
}

/// For both ticket routes: counts a request's fault, and answers the ones that strike before
/// any work (`fail-before`: 503; `offline`: the connection closed). `None`: go on.
async fn fault_before_work(
    app: &App,
    tenant: &str,
    key: Option<&str>,
    fault: Option<Fault>,
    abort: &ConnectionAbort,
) -> Option<Response> {
    let fault = fault?;
    app.count(tenant, |c| c.faults += 1);
    let key = key.unwrap_or("-");
    match fault {
        Fault::FailBefore => {
            tracing::info!(%tenant, key, "fault fail-before: 503");
            Some(unavailable(
                "fault injected: fail-before (nothing was done)",
            ))
        }
        Fault::Offline => {
            tracing::info!(%tenant, key, "fault offline: closing the connection, nothing done");
            Some(finish(Outcome::CloseConnection, abort).await)
        }
        _ => None,
    }
}

/// `POST /api/tickets`: keyed, unless the server runs with `--no-key-check`.
pub async fn create_ticket(
    State(app): State<Arc<App>>,
    abort: Option<Extension<ConnectionAbort>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let abort = abort.map(|e| e.0).unwrap_or_default();
    if !app.key_check {
        return plain(app, headers, body, abort).await;
    }
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let fault = match fault(&app, &headers) {
        Ok(f) => f,
        Err(problem) => return respond(&problem),
    };
    let key = match key(&headers) {
        Ok(k) => k,
        Err(problem) => {
            app.count(&tenant, |c| c.missing_keys += 1);
            return respond(&problem);
        }
    };
    if let Some(early) = fault_before_work(&app, &tenant, Some(key.short()), fault, &abort).await {
        return early;
    }
    let bytes = match read_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    let submission = read_ticket(&tenant, &headers, &bytes);
    // The work runs in its own task, so a client that hangs up cannot cut it between claim and
    // completion.
    let task = tokio::spawn(keyed(app, tenant, key, submission, fault));
    let outcome = task.await.unwrap_or_else(|e| {
        tracing::error!("request task failed: {e}");
        Outcome::Answer(unavailable("internal error"))
    });
    finish(outcome, &abort).await
}

async fn keyed(
    app: Arc<App>,
    tenant: String,
    key: Key,
    submission: Submission,
    fault: Option<Fault>,
) -> Outcome {
    let now = now_ms();
    let held_for = match fault {
        Some(Fault::Delay(d)) => app.lease + d,
        _ => app.lease,
    };
    let claim = ClaimRequest {
        tenant: tenant.clone(),
        key: key.as_str().to_owned(),
        fingerprint: submission.fingerprint,
        token: app.next_token.fetch_add(1, Ordering::Relaxed),
        now,
        lease_until: now + ms(held_for),
        expired_before: now - ms(app.receipt_ttl),
    };
    let crash = fault == Some(Fault::CrashBeforeCommit);
    let c = claim.clone();
    let ticket = submission.ticket;
    // The ticket and the receipt's answer, in one transaction, if the lease is still ours.
    let work = move |tx: &mut dyn Tx| {
        let (answer, ticket_id) = match &ticket {
            Ok(new) => {
                let ticket = tx.insert_ticket(new, Some(&c.key))?;
                let answer = Stored {
                    status: 201,
                    content_type: JSON.to_owned(),
                    body: serde_json::to_vec(&ticket).unwrap_or_default(),
                };
                (answer, Some(ticket.id))
            }
            Err(refusal) => (refusal.clone(), None),
        };
        tx.complete(&c, &answer, ticket_id, now_ms())?;
        if crash {
            return Err(Failure::Aborted);
        }
        Ok((answer, ticket_id))
    };
    let short = key.short().to_owned();
    let (found, done) = match fault {
        // Held answers claim, wait while holding the lease, then work.
        Some(Fault::Delay(d)) => match app.store.claim(claim.clone()).await {
            Ok(Claim::Taken { took_over }) => {
                tokio::time::sleep(d).await;
                (
                    Ok(Claim::Taken { took_over }),
                    Some(app.store.run(work).await),
                )
            }
            other => (other, None),
        },
        // Otherwise the writer goes on from the claim to the work itself.
        _ => match app.store.claim_then(claim.clone(), work).await {
            Ok(Claimed::Worked { took_over, result }) => {
                (Ok(Claim::Taken { took_over }), Some(result))
            }
            Ok(Claimed::Not(found)) => (Ok(found), None),
            Err(e) => (Err(e), None),
        },
    };
    match found {
        Err(e) => {
            tracing::error!(%tenant, key = %short, "claim failed: {e}");
            app.count(&tenant, |c| c.errors += 1);
            return Outcome::Answer(unavailable("the store is unavailable; retry"));
        }
        Ok(Claim::Conflict) => {
            tracing::info!(%tenant, key = %short, "422: key reused with another body");
            app.count(&tenant, |c| c.conflicts += 1);
            return Outcome::Answer(respond(&problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency-Key reused with another body",
                "This Idempotency-Key was first used with a different request body. A key belongs to one intended submission; make a new key for a new one.",
                vec![param(DEFAULT_KEY_HEADER, "already used with a different body")],
            )));
        }
        Ok(Claim::InProgress { .. }) => {
            tracing::info!(%tenant, key = %short, "409: key in progress");
            app.count(&tenant, |c| c.in_progress += 1);
            return Outcome::Answer(in_progress());
        }
        Ok(Claim::Done(stored)) => {
            tracing::info!(%tenant, key = %short, status = stored.status, "replay");
            app.count(&tenant, |c| c.replays += 1);
            let mut r = respond(&stored);
            r.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            return Outcome::Answer(r);
        }
        Ok(Claim::Taken { took_over }) => {
            if took_over {
                tracing::info!(%tenant, key = %short, "took over an expired lease");
                app.count(&tenant, |c| c.takeovers += 1);
            }
        }
    }
    let done = done.unwrap_or(Err(Failure::NotCommitted));
    match done {
        Ok((answer, ticket_id)) => {
            tracing::info!(%tenant, key = %short, status = answer.status, ?ticket_id, "done");
            app.count(&tenant, |c| {
                if ticket_id.is_some() {
                    c.created += 1
                } else {
                    c.invalid += 1
                }
            });
            if fault == Some(Fault::DropReply) {
                tracing::info!(%tenant, key = %short, "fault drop-reply: committed, closing the connection");
                return Outcome::CloseConnection;
            }
            Outcome::Answer(respond(&answer))
        }
        Err(Failure::Aborted) => {
            tracing::info!(%tenant, key = %short, "fault crash-before-commit: rolled back, closing the connection; the claim stays until its lease ends");
            Outcome::CloseConnection
        }
        Err(Failure::LostLease) => {
            tracing::warn!(%tenant, key = %short, "lease was taken over; work rolled back");
            app.count(&tenant, |c| c.lost_leases += 1);
            Outcome::Answer(in_progress())
        }
        Err(e) => {
            tracing::error!(%tenant, key = %short, "completion failed: {e}");
            app.count(&tenant, |c| c.errors += 1);
            // A 5xx is never stored: give the key back so the retry does the work.
            let _ = app.store.run_light(move |tx| tx.release(&claim)).await;
            Outcome::Answer(unavailable("the ticket could not be stored; retry"))
        }
    }
}

/// `409` with `Retry-After: 1`: the holder usually finishes well before its lease ends, and a
/// crashed holder's lease is taken over by the first retry after it ends.
fn in_progress() -> Response {
    let mut r = respond(&problem(
        StatusCode::CONFLICT,
        "idempotency-key-in-progress",
        "Request in progress",
        "A request with this Idempotency-Key is still being processed; retry after the delay in Retry-After.",
        vec![],
    ));
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// `POST /api/plain/tickets`: the same form with no key check; every request makes a ticket.
pub async fn create_plain_ticket(
    State(app): State<Arc<App>>,
    abort: Option<Extension<ConnectionAbort>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let abort = abort.map(|e| e.0).unwrap_or_default();
    plain(app, headers, body, abort).await
}

async fn plain(app: Arc<App>, headers: HeaderMap, body: Body, abort: ConnectionAbort) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let fault = match fault(&app, &headers) {
        Ok(f) => f,
        Err(problem) => return respond(&problem),
    };
    if let Some(early) = fault_before_work(&app, &tenant, None, fault, &abort).await {
        return early;
    }
    let bytes = match read_body(&app, &headers, body).await {
        Ok(b) => b,
        Err(refusal) => return refusal,
    };
    let new = match read_ticket(&tenant, &headers, &bytes).ticket {
        Ok(t) => t,
        Err(refusal) => {
            app.count(&tenant, |c| c.invalid += 1);
            return respond(&refusal);
        }
    };
    let task = tokio::spawn(async move {
        if let Some(Fault::Delay(d)) = fault {
            tokio::time::sleep(d).await;
        }
        let crash = fault == Some(Fault::CrashBeforeCommit);
        let done = app
            .store
            .run(move |tx| {
                let ticket = tx.insert_ticket(&new, None)?;
                if crash {
                    return Err(Failure::Aborted);
                }
                Ok(ticket)
            })
            .await;
        match done {
            Ok(ticket) => {
                app.count(&tenant, |c| c.created += 1);
                if fault == Some(Fault::DropReply) {
                    return Outcome::CloseConnection;
                }
                let mut r = (StatusCode::CREATED, axum::Json(ticket)).into_response();
                r.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
                Outcome::Answer(r)
            }
            Err(Failure::Aborted) => Outcome::CloseConnection,
            Err(e) => {
                tracing::error!(%tenant, "plain ticket failed: {e}");
                app.count(&tenant, |c| c.errors += 1);
                Outcome::Answer(unavailable("the ticket could not be stored; retry"))
            }
        }
    });
    let outcome = task
        .await
        .unwrap_or_else(|_| Outcome::Answer(unavailable("internal error")));
    finish(outcome, &abort).await
}

/// `?limit=N` for the ticket list.
#[derive(Debug, serde::Deserialize)]
pub struct ListQuery {
    limit: Option<i64>,
}

/// `GET /api/tickets`: the tenant's tickets, newest first (100 unless `?limit=N`, at most 10000).
pub async fn list_tickets(
    State(app): State<Arc<App>>,
    Query(q): Query<ListQuery>,
    headers: HeaderMap,
) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let limit = q.limit.unwrap_or(100).clamp(0, 10_000);
    match app
        .store
        .run_light(move |tx| tx.list_tickets(&tenant, limit))
        .await
    {
        Ok(tickets) => axum::Json(tickets).into_response(),
        Err(e) => {
            tracing::error!("listing tickets failed: {e}");
            unavailable("the store is unavailable; retry")
        }
    }
}

#[derive(Debug, Serialize)]
struct Stats {
    tenant: String,
    /// Tickets in the database.
    tickets: i64,
    /// Completed receipts in the database.
    receipts: i64,
    /// Receipts whose work is under way, or whose holder died before its lease ended.
    processing: i64,
    #[serde(flatten)]
    counters: Counters,
}

/// `GET /api/stats`: counts for the tenant.
pub async fn stats(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let t = tenant.clone();
    match app.store.run_light(move |tx| tx.counts(&t)).await {
        Ok(counts) => {
            let counters = app
                .counters
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&tenant)
                .copied()
                .unwrap_or_default();
            axum::Json(Stats {
                tenant,
                tickets: counts.tickets,
                receipts: counts.receipts,
                processing: counts.processing,
                counters,
            })
            .into_response()
        }
        Err(e) => {
            tracing::error!("stats failed: {e}");
            unavailable("the store is unavailable; retry")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json_headers(ct: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_str(ct).unwrap());
        h
    }

    #[test]
    fn json_and_form_of_the_same_fields_share_a_fingerprint() {
        let a = read_ticket(
            "t",
            &json_headers("application/json; charset=utf-8"),
            br#"{"subject":"Printer","body":"On fire","email":"a@b.c"}"#,
        );
        let b = read_ticket(
            "t",
            &json_headers("application/x-www-form-urlencoded"),
            b"email=a%40b.c&body=On+fire&subject=Printer",
        );
        assert_eq!(a.fingerprint, b.fingerprint);
        assert!(a.ticket.is_ok() && b.ticket.is_ok());
    }

    #[test]
    fn emails_are_checked_plainly() {
        assert!(check_email("a@b.c").is_ok());
        for bad in ["", "a", "@b.c", "a@b", "a@@b.c", "a b@c.d", "a@.c", "a@c."] {
            assert!(check_email(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_missing_key_names_the_header() {
        let problem = key(&HeaderMap::new()).unwrap_err();
        let text = String::from_utf8(problem.body).unwrap();
        assert!(text.contains("Idempotency-Key"), "{text}");
        assert_eq!(problem.status, 400);
    }
}
