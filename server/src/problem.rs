//! # Problem details (RFC 9457)
//!
//! Every refusal the server gives is an `application/problem+json` document, built here as a
//! `Stored` answer, so that a keyed request's refusal is stored in its receipt and replayed
//! byte for byte like any other answer.

use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use serde::Serialize;

use crate::store::Stored;

pub(crate) const PROBLEM_JSON: &str = "application/problem+json";
pub(crate) const JSON: &str = "application/json";

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
pub(crate) fn problem(
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

/// A stored answer as a response.
pub(crate) fn respond(answer: &Stored) -> Response {
    let mut response = Response::new(Body::from(answer.body.clone()));
    *response.status_mut() =
        StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(ct) = HeaderValue::from_str(&answer.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, ct);
    }
    response
}

/// The most characters of a client's own text (a media type, a part's name, a header) a problem
/// document quotes: enough to recognise it, never a copy of a large input, since a keyed
/// request's refusal is stored and replayed on every retry.
pub(crate) const QUOTED: usize = 40;

/// `text` cut for a problem document: its first [`QUOTED`] characters, `...` when cut.
pub(crate) fn cut(text: &str) -> String {
    match text.char_indices().nth(QUOTED) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// `text` in quotes for a problem document, [`cut`].
pub(crate) fn quote(text: &str) -> String {
    format!("\"{}\"", cut(text))
}

pub(crate) fn param(name: &str, reason: impl Into<String>) -> InvalidParam {
    InvalidParam {
        name: name.to_owned(),
        reason: reason.into(),
    }
}

/// `503` with `Retry-After: 1`: nothing was done, the retry may do it.
pub(crate) fn unavailable(detail: &str) -> Response {
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
