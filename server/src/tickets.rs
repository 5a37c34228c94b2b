//! # The tickets handler
//!
//! The help desk itself, with no idempotency in it: reading a ticket request (tenant, body,
//! fields) and creating the ticket in a transaction. `POST /api/plain/tickets` is this handler
//! alone (every request makes a ticket); `POST /api/tickets` is this handler under the
//! idempotency layer (`idempotency`).

use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use oncekey::core::body::{self as canonical, Value};
use sha2::{Digest, Sha256};

use crate::problem::{param, problem, respond, JSON};
use crate::store::{NewTicket, StoreError, Stored, Tx};

/// The largest request body read unless configured otherwise (`--max-body`), in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The longest subject, in characters.
pub const MAX_SUBJECT: usize = 200;
/// The longest email address, in characters.
pub const MAX_EMAIL: usize = 254;
/// The longest tenant name, in bytes.
pub const MAX_TENANT: usize = 64;

/// The tenant named by `X-Tenant`, `public` by default.
pub(crate) fn tenant(headers: &HeaderMap) -> Result<String, Stored> {
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

/// A ticket request read and checked: its fingerprint, and the ticket or the `400` to give.
#[derive(Debug)]
pub(crate) struct TicketRequest {
    /// The SHA-256 of the canonical body: what a key's repeat must match.
    pub(crate) fingerprint: Vec<u8>,
    /// The ticket to create, or the refusal to give (and, on a keyed request, to store).
    pub(crate) ticket: Result<NewTicket, Stored>,
}

fn fingerprint(text: &[u8]) -> Vec<u8> {
    Sha256::digest(text).to_vec()
}

/// Reads a ticket from a JSON or form body. The fingerprint is of the canonical JSON, so a JSON
/// and a form submission of the same fields match, and key order never matters; a body that
/// cannot be read is fingerprinted as its bytes, and its `400` is stored like any answer.
pub(crate) fn read_ticket(tenant: &str, headers: &HeaderMap, bytes: &[u8]) -> TicketRequest {
    let invalid = |name: &str, reason: String| TicketRequest {
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
        return TicketRequest {
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
    TicketRequest {
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

/// The request's body: `413` above `limit` (`--max-body`), `408` when it does not arrive within
/// `timeout` (a body shorter than its `Content-Length` that never ends), `400` when it cannot be
/// read (bad chunked encoding). The last two close the connection: what is left of the body
/// cannot be told from the next request.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<Bytes, Response> {
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
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
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
                humantime::format_duration(timeout)
            ),
        )),
    }
}

/// Creates the ticket `new` in the transaction `tx` (under `key` for a keyed request): the
/// `201` answer and the ticket's id.
pub(crate) fn create(
    tx: &mut dyn Tx,
    new: &NewTicket,
    key: Option<&str>,
) -> Result<(Stored, i64), StoreError> {
    let ticket = tx.insert_ticket(new, key)?;
    let answer = Stored {
        status: 201,
        content_type: JSON.to_owned(),
        body: serde_json::to_vec(&ticket).unwrap_or_default(),
    };
    Ok((answer, ticket.id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
}
