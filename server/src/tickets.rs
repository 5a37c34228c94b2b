//! # The tickets handler
//!
//! The help desk itself, with no idempotency in it: reading a ticket request (tenant, body,
//! fields, and the files of a `multipart/form-data` one) and creating the ticket, with its
//! attachments, in a transaction. `POST /api/plain/tickets` is this handler
//! alone (every request makes a ticket); `POST /api/tickets` is this handler under the
//! idempotency layer (`idempotency`).

use std::time::{Duration, SystemTime};

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use oncekey::core::body::{self as canonical, Value};
use sha2::{Digest, Sha256};

use crate::budget::{BodyBudget, Reserved};
use crate::problem::{cut, param, problem, quote, respond, JSON};
use crate::store::{hex, NewAttachment, NewTicket, StoreError, Stored, Tx};

/// The largest request body read unless configured otherwise (`--max-body`), in bytes.
pub const MAX_BODY: usize = 64 * 1024;
/// The largest `multipart/form-data` body (a ticket with files) read unless configured
/// otherwise (`--max-upload`), in bytes: 25 MiB.
pub const MAX_UPLOAD: usize = 25 * 1024 * 1024;
/// The largest `--max-upload` (and `--max-body`) the server accepts: a body is held in memory
/// while it is read and stored, so the flag is bounded (256 MiB).
pub const MAX_UPLOAD_CAP: usize = 256 * 1024 * 1024;
/// The most files one ticket may carry.
pub const MAX_ATTACHMENTS: usize = 16;
/// The longest attachment file name, in bytes.
pub const MAX_FILE_NAME: usize = 255;
/// The longest name of a multipart part (a field's or a file input's), in bytes, as
/// [`MAX_FILE_NAME`]: a longer one is refused without being copied, nor quoted in the `400`.
pub const MAX_PART_NAME: usize = 255;
/// The longest attachment media type, in bytes.
pub const MAX_MEDIA_TYPE: usize = 127;
/// The longest subject, in characters.
pub const MAX_SUBJECT: usize = 200;
/// The longest ticket text (`body`), in characters: what a JSON body may hold
/// ([`MAX_BODY`]), whichever way it comes (a multipart field may be larger).
pub const MAX_TEXT: usize = MAX_BODY;
/// The most text fields (parts without a file) in a multipart body: a ticket has three, and
/// each one more costs the sorted list of fields a shift of the ones after it.
pub const MAX_FIELDS: usize = 64;
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

/// The media type of the request's `Content-Type`, lower-case, without parameters.
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

/// Whether the request is a `multipart/form-data` one (a ticket that may carry files).
pub(crate) fn is_multipart(headers: &HeaderMap) -> bool {
    media_type(headers) == "multipart/form-data"
}

/// A `400` for a request whose body cannot be read as a ticket, fingerprinted as its bytes.
fn unreadable(bytes: &[u8], slug: &str, title: &str, name: &str, reason: String) -> TicketRequest {
    TicketRequest {
        fingerprint: fingerprint(bytes),
        ticket: Err(problem(
            StatusCode::BAD_REQUEST,
            slug,
            title,
            &format!("{name}: {reason}"),
            vec![param(name, reason.clone())],
        )),
    }
}

/// Reads a ticket from a JSON, form or multipart body (see [`read_ticket`] and
/// [`read_multipart`]).
pub(crate) async fn read_request(tenant: &str, headers: &HeaderMap, bytes: Bytes) -> TicketRequest {
    if is_multipart(headers) {
        read_multipart(tenant, headers, bytes).await
    } else {
        read_ticket(tenant, headers, &bytes)
    }
}

/// Reads a ticket from a JSON or form body. The fingerprint is of the canonical JSON, so a JSON
/// and a form submission of the same fields match, and key order never matters; a body that
/// cannot be read is fingerprinted as its bytes, and its `400` is stored like any answer.
pub(crate) fn read_ticket(tenant: &str, headers: &HeaderMap, bytes: &[u8]) -> TicketRequest {
    let invalid = |name: &str, reason: String| {
        unreadable(bytes, "invalid-ticket", "Invalid ticket", name, reason)
    };
    let media = media_type(headers);
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
            format!("the body must be application/json, application/x-www-form-urlencoded or multipart/form-data, not {}", quote(&media)),
        );
    };
    let (canonical, value) = match parsed {
        Ok(c) => c,
        Err(e) => return invalid("body", e.to_string()),
    };
    check(tenant, value, fingerprint(canonical.as_bytes()), Vec::new())
}

/// Reads a ticket from a `multipart/form-data` body: parts without a file name are its fields
/// (a name given twice is an array, as in a form body), parts with one are its attachments (an
/// empty part with an empty file name, what a browser sends for a file input left empty, is
/// skipped). The fingerprint is that of the fields' canonical JSON, as for a JSON or form body
/// of the same fields, followed when there are files by each file's field name, file name,
/// media type and SHA-256: the same key with other files is another body. A body that is not
/// well-formed multipart is a `400` naming what was wrong, fingerprinted as its bytes.
pub(crate) async fn read_multipart(
    tenant: &str,
    headers: &HeaderMap,
    bytes: Bytes,
) -> TicketRequest {
    let malformed = |name: &str, reason: String| {
        unreadable(
            &bytes,
            "invalid-multipart",
            "Malformed multipart body",
            name,
            reason,
        )
    };
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let boundary = match multer::parse_boundary(content_type) {
        Ok(b) => b,
        Err(e) => {
            return malformed(
                "Content-Type",
                format!("multipart/form-data needs a boundary parameter ({e})"),
            )
        }
    };
    let mut parts = multer::Multipart::new(Body::from(bytes.clone()).into_data_stream(), boundary);
    let mut fields = canonical::Fields::new();
    let mut files: Vec<(String, NewAttachment)> = Vec::new();
    let mut texts = 0;
    loop {
        let part = match parts.next_field().await {
            Ok(Some(part)) => part,
            Ok(None) => break,
            Err(e) => return malformed("body", multipart_reason(&e)),
        };
        let Some(name) = part.name() else {
            return malformed(
                "body",
                "a part has no name (Content-Disposition: form-data; name=\"...\")".into(),
            );
        };
        if name.len() > MAX_PART_NAME {
            return malformed(
                "body",
                format!(
                    "a part's name is {} bytes long; at most {MAX_PART_NAME} are allowed",
                    name.len()
                ),
            );
        }
        let name = name.to_owned();
        let file_name = part.file_name().map(str::to_owned);
        let media_type = part.content_type().map(|m| m.to_string());
        let data = match part.bytes().await {
            Ok(d) => d,
            Err(e) => return malformed("body", multipart_reason(&e)),
        };
        let Some(file_name) = file_name else {
            let Ok(text) = String::from_utf8(data.to_vec()) else {
                return malformed(&name, "is not UTF-8 text".into());
            };
            texts += 1;
            if texts > MAX_FIELDS {
                return malformed("body", format!("at most {MAX_FIELDS} fields are allowed"));
            }
            fields.append(name, Value::String(text));
            continue;
        };
        if file_name.is_empty() && data.is_empty() {
            continue;
        }
        if let Err(reason) = check_file(&file_name, media_type.as_deref(), files.len()) {
            return malformed(&name, reason);
        }
        let sha256 = Sha256::digest(&data).to_vec();
        files.push((
            name,
            NewAttachment {
                name: file_name,
                media_type: media_type.unwrap_or_else(|| "application/octet-stream".into()),
                bytes: data.to_vec(),
                sha256,
            },
        ));
    }
    let value = Value::Object(fields);
    let mut text = value.to_canonical();
    if !files.is_empty() {
        let described: Vec<Value> = files
            .iter()
            .map(|(field, f)| {
                let mut d = canonical::Fields::new();
                d.insert("field".into(), Value::String(field.clone()));
                d.insert("name".into(), Value::String(f.name.clone()));
                d.insert("type".into(), Value::String(f.media_type.clone()));
                d.insert("sha256".into(), Value::String(hex(&f.sha256)));
                Value::Object(d)
            })
            .collect();
        text.push('\n');
        text.push_str(&Value::Array(described).to_canonical());
    }
    let files = files.into_iter().map(|(_, f)| f).collect();
    check(tenant, value, fingerprint(text.as_bytes()), files)
}

/// What was wrong with a multipart body, in words a client's developer can act on.
fn multipart_reason(e: &multer::Error) -> String {
    match e {
        multer::Error::IncompleteStream => {
            "the multipart body ends before its closing boundary".into()
        }
        multer::Error::IncompleteFieldData { field_name } => format!(
            "the part {} ends before the next boundary",
            quote(field_name.as_deref().unwrap_or(""))
        ),
        multer::Error::IncompleteHeaders => "a part's headers are incomplete".into(),
        multer::Error::ReadHeaderFailed(_) => "a part's headers cannot be read".into(),
        multer::Error::DecodeHeaderName { .. } | multer::Error::DecodeHeaderValue { .. } => {
            "a part has a header that is not valid".into()
        }
        multer::Error::NoMultipart | multer::Error::NoBoundary => {
            "no multipart body with this boundary".into()
        }
        // multer's own words may hold a part's name.
        other => format!(
            "is not well-formed multipart/form-data ({})",
            cut(&other.to_string())
        ),
    }
}

/// A file part's name and type, checked: they are stored and sent back as headers.
fn check_file(name: &str, media_type: Option<&str>, before: usize) -> Result<(), String> {
    if before >= MAX_ATTACHMENTS {
        return Err(format!("at most {MAX_ATTACHMENTS} files are allowed"));
    }
    if name.is_empty() {
        return Err("a file part has an empty file name".into());
    }
    if name.len() > MAX_FILE_NAME {
        return Err(format!(
            "the file name is {} bytes long; at most {MAX_FILE_NAME} are allowed",
            name.len()
        ));
    }
    if name.chars().any(char::is_control) {
        return Err("the file name holds control characters".into());
    }
    if let Some(t) = media_type {
        if t.len() > MAX_MEDIA_TYPE || HeaderValue::from_str(t).is_err() {
            return Err(format!(
                "the file's media type must be at most {MAX_MEDIA_TYPE} visible ASCII characters"
            ));
        }
    }
    Ok(())
}

/// Checks a ticket's fields (an object with subject, body and email) and makes the ticket.
fn check(
    tenant: &str,
    value: Value,
    fingerprint: Vec<u8>,
    attachments: Vec<NewAttachment>,
) -> TicketRequest {
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
        } else if let Some(c) = control(subject, false) {
            errors.push(param("subject", c));
        } else if len > MAX_SUBJECT {
            errors.push(param(
                "subject",
                format!("is {len} characters long; at most {MAX_SUBJECT} are allowed"),
            ));
        }
    }
    if let Some(body) = &body {
        let len = body.chars().count();
        if let Some(c) = control(body, true) {
            errors.push(param("body", c));
        } else if len > MAX_TEXT {
            errors.push(param(
                "body",
                format!("is {len} characters long; at most {MAX_TEXT} are allowed"),
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
            attachments,
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

/// Why `text` cannot be stored, if it holds a control character (a line break or tab allowed
/// in a multi-line text): a NUL, which PostgreSQL's text refuses, would fail every retry of the
/// request as a store error (`503`) rather than be answered as the bad input it is.
fn control(text: &str, lines: bool) -> Option<String> {
    let c = text
        .chars()
        .find(|c| c.is_control() && !(lines && matches!(c, '\n' | '\r' | '\t')))?;
    Some(format!(
        "contains a control character (U+{:04X})",
        u32::from(c)
    ))
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

/// The request's body, with the room reserved for it in `budget` (hold it until the request is
/// done): `413` above `limit` (`--max-body`), `503` when the budget has no room for it now (see
/// [`crate::budget`]), `408` when it does not arrive within `timeout` (a body shorter than its
/// `Content-Length` that never ends), `400` when it cannot be read (bad chunked encoding). The
/// last two close the connection: what is left of the body cannot be told from the next
/// request.
pub(crate) async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
    budget: &BodyBudget,
) -> Result<(Bytes, Reserved), Response> {
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
    // Before a byte is read; given back on every way out (the caller's, or an error below).
    let room = declared.map_or(limit, |n| n as usize);
    let Some(reserved) = budget.reserve(room) else {
        return Err(budget.busy(room));
    };
    match tokio::time::timeout(timeout, axum::body::to_bytes(body, limit)).await {
        Ok(Ok(bytes)) => Ok((bytes, reserved)),
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
