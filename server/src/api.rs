//! # The help desk's API
//!
//! The routes, each a few lines over the layers that do the work:
//!
//! - `POST /api/tickets`: the tickets handler (`tickets`) under the idempotency layer
//!   (`idempotency`, CONTRACT.md section 6), wrapped by the faults
//!   (`faults`); with `--no-key-check`, the handler alone.
//! - `POST /api/plain/tickets`: the tickets handler alone: every request makes a ticket.
//! - `GET /api/tickets`, `GET /api/stats`: a tenant's tickets (at most [`MAX_LIST`], their
//!   answer held within `--upload-memory` while it is sent), and counts for the tests.
//! - `GET /api/tickets/{id}/attachments/{n}`: the bytes of a ticket's file `n` (0-based, in
//!   the order of the ticket's `attachments`), held in memory within `--upload-memory` like an
//!   upload's (`budget`).

use std::collections::HashMap;
use std::sync::atomic::AtomicI64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::budget::{BodyBudget, Reserved};
use crate::faults::{self, finish, RandomFaults};
use crate::idempotency::{self, Keyed};
pub use crate::problem::InvalidParam;
use crate::problem::{param, problem, respond, unavailable, JSON};
use crate::store::{File, Store, StoreError, Stored, Tx};
use crate::tickets::{self, read_body, read_request, tenant};
pub use crate::tickets::{
    MAX_ATTACHMENTS, MAX_BODY, MAX_EMAIL, MAX_FILE_NAME, MAX_MEDIA_TYPE, MAX_SUBJECT, MAX_TENANT,
    MAX_UPLOAD, MAX_UPLOAD_CAP,
};

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
    pub(crate) max_upload: usize,
    /// `--upload-memory`: the bytes of bodies held at once, uploads and downloads.
    pub(crate) bodies: BodyBudget,
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
    /// The largest body read for this request: `--max-upload` for a multipart one (a ticket
    /// with files), `--max-body` for any other.
    pub(crate) fn body_limit(&self, headers: &HeaderMap) -> usize {
        if tickets::is_multipart(headers) {
            self.max_upload
        } else {
            self.max_body
        }
    }

    pub(crate) fn count(&self, tenant: &str, f: impl FnOnce(&mut Counters)) {
        let mut all = self.counters.lock().unwrap_or_else(|e| e.into_inner());
        count_in(&mut all, tenant, f);
    }
}

/// The most tenants whose counts are kept (`GET /api/stats`). Any request names its tenant,
/// so the counts would otherwise grow by one entry for every name a client makes up; beyond
/// this many, a tenant not counted yet is not counted (its stats say 0).
pub const MAX_COUNTED_TENANTS: usize = 10_000;

fn count_in(all: &mut HashMap<String, Counters>, tenant: &str, f: impl FnOnce(&mut Counters)) {
    if let Some(counters) = all.get_mut(tenant) {
        return f(counters);
    }
    if all.len() < MAX_COUNTED_TENANTS {
        f(all.entry(tenant.to_owned()).or_default());
    }
}

/// What a request's task decided.
pub(crate) enum Reply {
    /// Answer this.
    Answer(Response),
    /// Close the connection without an answer (a fault).
    CloseConnection,
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
    let fault = match faults::read(&app, &headers) {
        Ok(f) => f,
        Err(problem) => return respond(&problem),
    };
    let key = match idempotency::key(&headers) {
        Ok(k) => k,
        Err(problem) => {
            app.count(&tenant, |c| c.missing_keys += 1);
            return respond(&problem);
        }
    };
    if let Some(early) = faults::before_work(&app, &tenant, Some(key.short()), fault) {
        return finish(early, &abort).await;
    }
    let limit = app.body_limit(&headers);
    // Read before the key is claimed: a body refused here (413, 503, 408) leaves no claim.
    let (bytes, reserved) =
        match read_body(&headers, body, limit, app.body_read_timeout, &app.bodies).await {
            Ok(b) => b,
            Err(refusal) => return refusal,
        };
    let request = read_request(&tenant, &headers, bytes).await;
    let keyed = Keyed {
        tenant,
        key,
        fingerprint: request.fingerprint,
    };
    let ticket = request.ticket;
    // The ticket, or the refusal to store in the receipt like any answer.
    let work = move |tx: &mut dyn Tx, key: &str| match &ticket {
        Ok(new) => tickets::create(tx, new, Some(key)).map(|(answer, id)| (answer, Some(id))),
        Err(refusal) => Ok((refusal.clone(), None)),
    };
    // The work runs in its own task, so a client that hangs up cannot cut it between claim and
    // completion.
    let task = tokio::spawn(async move {
        // The body's room is given back once the ticket holding its bytes is stored.
        let _reserved = reserved;
        idempotency::once(&app, keyed, fault, work).await
    });
    let reply = task.await.unwrap_or_else(|e| {
        tracing::error!("request task failed: {e}");
        Reply::Answer(unavailable("internal error"))
    });
    finish(reply, &abort).await
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
    let fault = match faults::read(&app, &headers) {
        Ok(f) => f,
        Err(problem) => return respond(&problem),
    };
    if let Some(early) = faults::before_work(&app, &tenant, None, fault) {
        return finish(early, &abort).await;
    }
    let limit = app.body_limit(&headers);
    let (bytes, reserved) =
        match read_body(&headers, body, limit, app.body_read_timeout, &app.bodies).await {
            Ok(b) => b,
            Err(refusal) => return refusal,
        };
    let new = match read_request(&tenant, &headers, bytes).await.ticket {
        Ok(t) => t,
        Err(refusal) => {
            app.count(&tenant, |c| c.invalid += 1);
            return respond(&refusal);
        }
    };
    let task = tokio::spawn(async move {
        let _reserved = reserved;
        if let Some(d) = faults::hold(fault) {
            tokio::time::sleep(d).await;
        }
        let done = app
            .store
            .run(move |tx| {
                let created = tickets::create(tx, &new, None)?;
                faults::before_commit(fault)?;
                Ok(created)
            })
            .await;
        match done {
            Ok((answer, _)) => {
                app.count(&tenant, |c| c.created += 1);
                faults::after_work(fault, &tenant, "-", respond(&answer))
            }
            Err(StoreError::Aborted) => Reply::CloseConnection,
            Err(e) => {
                tracing::error!(%tenant, "plain ticket failed: {e}");
                app.count(&tenant, |c| c.errors += 1);
                Reply::Answer(unavailable("the ticket could not be stored; retry"))
            }
        }
    });
    let reply = task
        .await
        .unwrap_or_else(|_| Reply::Answer(unavailable("internal error")));
    finish(reply, &abort).await
}

/// The tickets a list gives unless `?limit=N` says otherwise.
pub const DEFAULT_LIST: i64 = 100;
/// The most tickets one list gives (a larger `?limit=N` gives this many): each may hold a text
/// of 64 Ki characters, and the list is built whole in memory.
pub const MAX_LIST: i64 = 500;

/// The ticket list's `?limit=N`, read by hand so that a bad one is a problem document naming
/// `limit` (axum's `Query` refuses in plain text): [`DEFAULT_LIST`] when absent, at most
/// [`MAX_LIST`], and anything but decimal digits a `400`.
fn list_limit(query: Option<&str>) -> Result<i64, Stored> {
    let given = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| match pair.split_once('=') {
            Some(("limit", value)) => Some(value),
            None if pair == "limit" => Some(""),
            _ => None,
        });
    let Some(value) = given else {
        return Ok(DEFAULT_LIST);
    };
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        let reason = format!("must be a whole number (0 or more; at most {MAX_LIST} are listed)");
        return Err(problem(
            StatusCode::BAD_REQUEST,
            "invalid-limit",
            "Invalid limit",
            &format!("limit: {reason}"),
            vec![param("limit", reason)],
        ));
    }
    // Digits only: one too large for an i64 is larger than the cap.
    Ok(value.parse::<i64>().map_or(MAX_LIST, |n| n.min(MAX_LIST)))
}

/// `GET /api/tickets`: the tenant's tickets, newest first ([`DEFAULT_LIST`] unless `?limit=N`,
/// at most [`MAX_LIST`]). Read without holding up the store's writer (see
/// [`Store::list_tickets`]); the answer, built whole, holds its length of `--upload-memory`
/// until it has been handed to the connection, as a download does: without room, `503` with
/// `Retry-After: 1`.
pub async fn list_tickets(
    State(app): State<Arc<App>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let limit = match list_limit(query.as_deref()) {
        Ok(limit) => limit,
        Err(problem) => return respond(&problem),
    };
    match app.store.list_tickets(tenant, limit).await {
        Ok(tickets) => {
            let json = serde_json::to_vec(&tickets).unwrap_or_default();
            drop(tickets);
            let Some(reserved) = app.bodies.reserve_download(json.len()) else {
                return app.bodies.busy(json.len());
            };
            let mut r = Response::new(reserved.into_body(json));
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(JSON));
            r
        }
        Err(e) => {
            tracing::error!("listing tickets failed: {e}");
            unavailable("the store is unavailable; retry")
        }
    }
}

/// `GET /api/tickets/{id}/attachments/{n}`: the bytes of the tenant's ticket `id`'s file `n`
/// (0-based), with the media type it was sent with. Served as a download
/// (`Content-Disposition: attachment`, `nosniff`, a sandboxing CSP), never rendered as a page of
/// this origin: a file is whatever its sender wrote.
///
/// The file is held in memory while it is sent, so it counts against `--upload-memory` like an
/// upload's body: its stored length is reserved before its bytes are read from the store, and
/// given back once the answer's body has been handed to the connection whole, or dropped (the
/// client gone). Without room, the answer is `503` with `Retry-After: 1` at once, nothing read.
/// A file larger than the whole budget (stored under an earlier, larger `--max-upload`) takes
/// all of it: it is sent when nothing else is held.
pub async fn get_attachment(
    State(app): State<Arc<App>>,
    path: Result<Path<(String, String)>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    let tenant = match tenant(&headers) {
        Ok(t) => t,
        Err(problem) => return respond(&problem),
    };
    let not_found = || {
        respond(&problem(
            StatusCode::NOT_FOUND,
            "attachment-not-found",
            "No such attachment",
            "this tenant has no ticket with this id, or the ticket has no file with this number",
            vec![],
        ))
    };
    // A path axum cannot read (not UTF-8 once percent-decoded) names no attachment either.
    let Ok(Path((id, n))) = path else {
        return not_found();
    };
    let (Ok(id), Ok(n)) = (id.parse::<i64>(), n.parse::<i64>()) else {
        return not_found();
    };
    let job = app.clone();
    let found = app
        .store
        .run_light(move |tx| {
            let Some(size) = tx.attachment_size(&tenant, id, n)? else {
                return Ok(Download::Missing);
            };
            // Reserved before the bytes are read: a download past the budget reads none.
            let Some(reserved) = job.bodies.reserve_download(size) else {
                return Ok(Download::Busy(size));
            };
            Ok(match tx.attachment(&tenant, id, n)? {
                Some(file) => Download::Ready(file, reserved),
                None => Download::Missing,
            })
        })
        .await;
    match found {
        Ok(Download::Ready(file, reserved)) => {
            // The body holds the room: given back when it is sent whole or dropped, not here.
            let mut r = Response::new(reserved.into_body(file.bytes));
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(&file.media_type)
                    .unwrap_or(HeaderValue::from_static("application/octet-stream")),
            );
            if let Ok(v) = HeaderValue::from_str(&content_disposition(&file.name)) {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            r
        }
        Ok(Download::Busy(size)) => app.bodies.busy(size),
        Ok(Download::Missing) => not_found(),
        Err(e) => {
            tracing::error!("reading an attachment failed: {e}");
            unavailable("the store is unavailable; retry")
        }
    }
}

/// A path no route or file answers: `404` problem details, as every refusal is.
pub async fn no_route() -> Response {
    respond(&problem(
        StatusCode::NOT_FOUND,
        "not-found",
        "Not found",
        "no route or file has this path",
        vec![],
    ))
}

/// A route asked with a method it does not take: `405` problem details (the router adds
/// `Allow`).
pub async fn wrong_method() -> Response {
    respond(&problem(
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
        "Method not allowed",
        "this route does not take this method (see Allow)",
        vec![],
    ))
}

/// What a download found in the store.
enum Download {
    /// No such attachment.
    Missing,
    /// No room in the budget for a file of this many bytes now; its bytes were not read.
    Busy(usize),
    /// The file, read within the room reserved for it.
    Ready(File, Reserved),
}

/// `attachment; filename*=UTF-8''...` (RFC 6266 and 8187): the name percent-encoded, so any
/// name is a valid header value.
fn content_disposition(name: &str) -> String {
    let mut out = String::from("attachment; filename*=UTF-8''");
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
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

    #[test]
    fn counts_are_kept_for_at_most_max_counted_tenants() {
        let mut all = HashMap::new();
        for i in 0..MAX_COUNTED_TENANTS + 50 {
            count_in(&mut all, &format!("made-up-{i}"), |c| c.missing_keys += 1);
        }
        assert_eq!(
            all.len(),
            MAX_COUNTED_TENANTS,
            "no entry for a made-up name beyond"
        );
        assert!(!all.contains_key(&format!("made-up-{MAX_COUNTED_TENANTS}")));
        // A tenant counted already goes on being counted.
        count_in(&mut all, "made-up-0", |c| c.missing_keys += 1);
        assert_eq!(all["made-up-0"].missing_keys, 2);
    }
}
