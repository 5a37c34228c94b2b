//! # The idempotency layer
//!
//! The server side of the contract (CONTRACT.md section 6), around any handler that does its
//! work in a transaction (here `tickets::create`):
//!
//! 1. **Key**: the `Idempotency-Key` header, bare or as a structured-field string; missing or
//!    malformed is a `400` problem that names the header (`key`).
//! 2. **Claim**: a lease on (tenant, key), taken in its own transaction, with the request's
//!    fingerprint. The request's times are this process's clock; PostgreSQL, shared by a
//!    fleet, takes from them only the lease's length and the receipts' time to live, and
//!    judges them by the database's clock (see the store's "Whose clock").
//! 3. **Decide** (the store's pure `Found::decide`): another body is `422`; a lease held by
//!    another request is `409` with `Retry-After`; a completed receipt is replayed byte for
//!    byte with `Idempotent-Replayed: true`; a lease that ran out is taken over.
//! 4. **Complete**: the handler's work and the receipt's answer are written in one
//!    transaction, and only if the lease is still this request's; a `5xx` is never stored (the
//!    claim is given back, so the retry does the work).
//! 5. **Sweep**: receipts older than their time to live are removed now and then (`sweep`).
//!
//! The faults of `faults` wrap this layer at its three seams: before any work, while
//! the claim is held, and before the commit.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use oncekey::core::key::DEFAULT_KEY_HEADER;
use oncekey::Key;

use crate::api::{App, Reply};
use crate::faults::{self, Fault};
use crate::problem::{param, problem, respond, unavailable};
use crate::store::{ClaimRequest, Claimed, KeyClaim, Store, StoreError, Stored, Tx};

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The key of a keyed request; the `400` names the header, so clients can tell a setup error.
pub(crate) fn key(headers: &HeaderMap) -> Result<Key, Stored> {
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

/// A keyed request, read: whose key it is and what its body's fingerprint is.
#[derive(Debug)]
pub(crate) struct Keyed {
    pub(crate) tenant: String,
    pub(crate) key: Key,
    pub(crate) fingerprint: Vec<u8>,
}

/// What a handler's work answers: the answer to store and give, and the id of what it created
/// (`None` when it refused).
pub(crate) type Done = (Stored, Option<i64>);

/// Runs `work` once per key: claims the key, answers a repeat from its receipt (or `409`,
/// `422`), or does the work and completes the receipt in the same transaction.
pub(crate) async fn once<W>(app: &App, request: Keyed, fault: Option<Fault>, work: W) -> Reply
where
    W: FnOnce(&mut dyn Tx, &str) -> Result<Done, StoreError> + Send + 'static,
{
    let Keyed {
        tenant,
        key,
        fingerprint,
    } = request;
    let now = now_ms();
    let hold = faults::hold(fault);
    let claim = ClaimRequest {
        tenant: tenant.clone(),
        key: key.as_str().to_owned(),
        fingerprint,
        token: app.next_token.fetch_add(1, Ordering::Relaxed),
        now,
        // Both durations are bounded at start (MAX_LEASE, MAX_RECEIPT_TTL); saturating anyway.
        lease_until: now.saturating_add(ms(app.lease.saturating_add(hold.unwrap_or_default()))),
        expired_before: now.saturating_sub(ms(app.receipt_ttl)),
    };
    let c = claim.clone();
    let complete = move |tx: &mut dyn Tx| {
        let (answer, id) = work(tx, &c.key)?;
        tx.complete(&c, &answer, id, now_ms())?;
        faults::before_commit(fault)?;
        Ok((answer, id))
    };
    let short = key.short().to_owned();
    let (found, done) = match hold {
        // Claim, hold the lease a while, then work.
        Some(d) => match app.store.claim(claim.clone()).await {
            Ok(KeyClaim::Taken { took_over }) => {
                tokio::time::sleep(d).await;
                (
                    Ok(KeyClaim::Taken { took_over }),
                    Some(app.store.run(complete).await),
                )
            }
            other => (other, None),
        },
        // Otherwise the writer goes on from the claim to the work itself.
        None => match app.store.claim_then(claim.clone(), complete).await {
            Ok(Claimed::Worked { took_over, result }) => {
                (Ok(KeyClaim::Taken { took_over }), Some(result))
            }
            Ok(Claimed::Not(found)) => (Ok(found), None),
            Err(e) => (Err(e), None),
        },
    };
    if let Some(answer) = decide(app, &tenant, &short, found) {
        return Reply::Answer(answer);
    }
    match done.unwrap_or(Err(StoreError::NotCommitted)) {
        Ok((answer, id)) => {
            tracing::info!(%tenant, key = %short, status = answer.status, ticket_id = ?id, "done");
            app.count(&tenant, |c| {
                if id.is_some() {
                    c.created += 1
                } else {
                    c.invalid += 1
                }
            });
            faults::after_work(fault, &tenant, &short, respond(&answer))
        }
        Err(StoreError::Aborted) => {
            tracing::info!(%tenant, key = %short, "fault crash-before-commit: rolled back, closing the connection; the claim stays until its lease ends");
            Reply::CloseConnection
        }
        Err(StoreError::LostLease) => {
            tracing::warn!(%tenant, key = %short, "lease was taken over; work rolled back");
            app.count(&tenant, |c| c.lost_leases += 1);
            Reply::Answer(in_progress())
        }
        Err(e) => {
            tracing::error!(%tenant, key = %short, "completion failed: {e}");
            app.count(&tenant, |c| c.errors += 1);
            // A 5xx is never stored: give the key back so the retry does the work.
            let _ = app.store.run_light(move |tx| tx.release(&claim)).await;
            Reply::Answer(unavailable("the ticket could not be stored; retry"))
        }
    }
}

/// The answer to a claim that did not give this request the key: `None` when it did.
fn decide(
    app: &App,
    tenant: &str,
    short: &str,
    found: Result<KeyClaim, StoreError>,
) -> Option<Response> {
    match found {
        Err(e) => {
            tracing::error!(%tenant, key = %short, "claim failed: {e}");
            app.count(tenant, |c| c.errors += 1);
            Some(unavailable("the store is unavailable; retry"))
        }
        Ok(KeyClaim::Conflict) => {
            tracing::info!(%tenant, key = %short, "422: key reused with another body");
            app.count(tenant, |c| c.conflicts += 1);
            Some(respond(&problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency-Key reused with another body",
                "This Idempotency-Key was first used with a different request body. A key belongs to one intended submission; make a new key for a new one.",
                vec![param(DEFAULT_KEY_HEADER, "already used with a different body")],
            )))
        }
        Ok(KeyClaim::InProgress { .. }) => {
            tracing::info!(%tenant, key = %short, "409: key in progress");
            app.count(tenant, |c| c.in_progress += 1);
            Some(in_progress())
        }
        Ok(KeyClaim::Done(stored)) => {
            tracing::info!(%tenant, key = %short, status = stored.status, "replay");
            app.count(tenant, |c| c.replays += 1);
            let mut r = respond(&stored);
            r.headers_mut()
                .insert("idempotent-replayed", HeaderValue::from_static("true"));
            Some(r)
        }
        Ok(KeyClaim::Taken { took_over }) => {
            if took_over {
                tracing::info!(%tenant, key = %short, "took over an expired lease");
                app.count(tenant, |c| c.takeovers += 1);
            }
            None
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

/// The receipt sweeper: removes receipts older than their time to live, every `every`, until
/// the store closes.
pub(crate) async fn sweep(store: Store, ttl: Duration, every: Duration) {
    let mut ticker = tokio::time::interval(every.max(Duration::from_millis(10)));
    loop {
        ticker.tick().await;
        let now = now_ms();
        let before = now.saturating_sub(ms(ttl));
        match store.run_light(move |tx| tx.sweep(now, before)).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "swept expired receipts"),
            Err(StoreError::Closed) => return,
            Err(e) => tracing::warn!("sweeping receipts failed: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_key_names_the_header() {
        let problem = key(&HeaderMap::new()).unwrap_err();
        let text = String::from_utf8(problem.body).unwrap();
        assert!(text.contains("Idempotency-Key"), "{text}");
        assert_eq!(problem.status, 400);
    }
}
