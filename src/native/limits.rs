//! # What an attempt reads, and where it follows
//!
//! A client that talks to payment APIs must bound what a peer can make it read and keep, and
//! must not let a redirect change what it sends or where its key goes:
//!
//! - **Size**: an answer's body is kept up to [`ClientBuilder::max_response_bytes`]
//!   (16 MiB by default). A larger one (by its `Content-Length`, or as it arrives) is not read
//!   further and not kept; the connection is dropped.
//! - **Time**: each attempt has one deadline, [`ClientBuilder::timeout`], from its first byte
//!   sent to its answer's last byte read, so a body that trickles cannot hold it longer. No
//!   status by the deadline is a timeout (retried with the same key).
//! - Either way, once a status has come, **the status decides the outcome** (a `201` whose body
//!   is too large, or cut off by the deadline, is still `succeeded`) and the settlement says why
//!   it has no body ([`Settlement::body_error`]).
//! - **Redirects** (the client's own reqwest client; one given with
//!   [`ClientBuilder::http_client`] keeps its policy): `307` and `308`, which keep the method and
//!   the body, are followed within the same origin, 5 at most, never in a loop. A `303` (or
//!   `301`, `302`) after a `POST` would be followed as a `GET` of another resource, or sent again:
//!   it is not followed, and is the answer: a `303` is the server's answer to the request,
//!   `succeeded`; a `301` or `302` says nothing of it (it may have been carried out), so the
//!   submission is `unsure`, its record and key kept for "Try again", never `refused`. A
//!   redirect to another origin is not followed, so the
//!   key (and the body) never go there, unless
//!   [`ClientBuilder::follow_redirects_across_origins`] says so.
//!
//! [`ClientBuilder::max_response_bytes`]: super::ClientBuilder::max_response_bytes
//! [`ClientBuilder::timeout`]: super::ClientBuilder::timeout
//! [`ClientBuilder::http_client`]: super::ClientBuilder::http_client
//! [`ClientBuilder::follow_redirects_across_origins`]: super::ClientBuilder::follow_redirects_across_origins
//! [`Settlement::body_error`]: super::Settlement::body_error

use tokio::time::Instant;

use super::error::Error;

/// The default of [`ClientBuilder::max_response_bytes`](super::ClientBuilder::max_response_bytes).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// The most redirects followed for one attempt.
const MAX_REDIRECTS: usize = 5;

/// Reads an answer's body, up to `limit` bytes and until `deadline`: the body, or why it is not
/// kept.
pub(super) async fn read_body(
    mut response: reqwest::Response,
    limit: usize,
    deadline: Instant,
) -> Result<Vec<u8>, Error> {
    if let Some(declared) = response.content_length() {
        if declared > limit as u64 {
            return Err(Error::body_too_large(limit, Some(declared)));
        }
    }
    let mut body = Vec::new();
    loop {
        match tokio::time::timeout_at(deadline, response.chunk()).await {
            Err(_) => return Err(Error::body_timeout(body.len())),
            Ok(Err(e)) if e.is_timeout() => return Err(Error::body_timeout(body.len())),
            Ok(Err(e)) => return Err(Error::body_incomplete(body.len(), e)),
            Ok(Ok(None)) => return Ok(body),
            Ok(Ok(Some(chunk))) => {
                if body.len() + chunk.len() > limit {
                    return Err(Error::body_too_large(limit, None));
                }
                body.extend_from_slice(&chunk);
            }
        }
    }
}

/// The redirect policy of the client's own reqwest client (see the module's docs).
pub(super) fn redirect_policy(across_origins: bool) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let keeps_the_request = matches!(attempt.status().as_u16(), 307 | 308);
        let previous = attempt.previous();
        let same_origin = previous
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        let looped = previous.contains(attempt.url());
        if keeps_the_request
            && !looped
            && previous.len() <= MAX_REDIRECTS
            && (same_origin || across_origins)
        {
            attempt.follow()
        } else {
            attempt.stop()
        }
    })
}
