//! # The drive loop
//!
//! Carries the core's actions out, in order, for one flight: persist and sync the record before
//! the attempt it covers, send, wait (renewing the lease), forget the record, settle. What an
//! answer means and when to retry are the core's; this loop only reports them (the `tracing`
//! span `oncekey.attempt` tells the state the core went to).

use reqwest::header::{HeaderMap, HeaderName, HeaderValue, CONTENT_TYPE};
use tracing::Instrument;

use super::client::{jitter, now, Client, Outgoing};
use super::error::{Error, Result};
use super::flight::Lead;
use super::settlement::Settlement;
use super::store::StoreCall;
use crate::core::{Action, Answer, Attempt, Failure, Key, State};

/// A new submission's URL and stored headers as parsed when it was described: its first
/// attempt sends them without parsing them again.
pub(super) struct Parsed {
    pub(super) url: reqwest::Url,
    /// The stored headers, in their order.
    pub(super) headers: HeaderMap,
}

impl Client {
    /// Carries out the actions of the flight's submission until it settles.
    pub(super) async fn drive(
        &self,
        name: &str,
        lead: &Lead<'_>,
        mut parsed: Option<Parsed>,
    ) -> Result<Settlement> {
        let core = |f: &mut dyn FnMut(&mut crate::core::Submission)| lead.with(f);
        let mut last: Option<(HeaderMap, Vec<u8>, Option<Error>)> = None;
        let mut actions = Vec::new();
        loop {
            let mut send: Option<Attempt> = None;
            // An answer's actions are taken with it, under one lock (below).
            if actions.is_empty() {
                core(&mut |sub| actions.extend(std::iter::from_fn(|| sub.poll_action())));
            }
            for action in actions.drain(..) {
                match action {
                    Action::Persist(text) => {
                        let lease = self.lease_until(now());
                        let saved = self
                            .store_bool(StoreCall::Save {
                                name: name.to_owned(),
                                record: text,
                                lease,
                            })
                            .await
                            .map_err(|e| e.with_name(name))?;
                        if !saved {
                            return Err(Error::lease_lost(name));
                        }
                    }
                    Action::Send(attempt) => send = Some(attempt),
                    Action::Forget(_) => self.forget(name),
                    Action::Changed(change) => tracing::debug!(
                        name,
                        state = change.state.as_str(),
                        key = change.key.as_ref().map(Key::short),
                        attempts = change.attempts,
                        "oncekey state"
                    ),
                    Action::Settled(settled) => {
                        if settled.outcome.keeps_record() {
                            // Kept (unsure or expired), and set aside from resume_due for as long
                            // as a lease lasts.
                            let due = self.lease_until(now()).until;
                            self.release(name, Some(due)).await;
                        }
                        let (headers, body, body_error) = last.take().unwrap_or_default();
                        return Ok(Settlement {
                            name: name.to_owned(),
                            settled,
                            headers,
                            body,
                            body_error: body_error.map(std::sync::Arc::new),
                        });
                    }
                }
            }
            if let Some(attempt) = send {
                let span = tracing::info_span!(
                    "oncekey.attempt",
                    name,
                    key = attempt.key.short(),
                    attempt = attempt.number,
                    outcome = tracing::field::Empty,
                );
                let mut attempt = attempt;
                let result = self
                    .attempt(name, &mut attempt, parsed.take())
                    .instrument(span.clone())
                    .await;
                let t = now();
                match result {
                    Ok((answer, headers, body, body_error)) => {
                        let mut state = State::Sending;
                        core(&mut |sub| {
                            sub.handle_answer(t, attempt.id, &answer, jitter());
                            state = sub.state();
                            actions.extend(std::iter::from_fn(|| sub.poll_action()));
                        });
                        let verdict = traced(state);
                        if !span.is_disabled() {
                            span.record("outcome", format!("{} {verdict}", answer.status));
                        }
                        span.in_scope(|| tracing::info!(status = answer.status, verdict, "answer"));
                        if let Some(e) = &body_error {
                            span.in_scope(|| tracing::warn!(status = answer.status, "{e}"));
                        }
                        last = Some((headers, body, body_error));
                    }
                    Err(failure) => {
                        let what = match failure {
                            Failure::Network => "network error",
                            Failure::Timeout => "timeout",
                        };
                        span.record("outcome", what);
                        span.in_scope(|| tracing::info!(failure = what, "no answer"));
                        core(&mut |sub| sub.handle_failure(t, attempt.id, failure, jitter()));
                    }
                }
                continue;
            }
            let mut due = None;
            core(&mut |sub| due = sub.poll_timeout());
            if let Some(at) = due {
                let lease = self.lease_until(at);
                if !self
                    .store_bool(StoreCall::Renew {
                        name: name.to_owned(),
                        lease,
                    })
                    .await
                    .map_err(|e| e.with_name(name))?
                {
                    return Err(Error::lease_lost(name));
                }
                let wait = at.saturating_since(now());
                // Woken early by a joined "Try again", which queued its attempt.
                let woken = tokio::select! {
                    () = tokio::time::sleep(wait) => false,
                    () = lead.wake().notified() => true,
                };
                let t = if woken { now() } else { now().max(at) };
                core(&mut |sub| sub.handle_timeout(t));
                continue;
            }
            // The core always sends, waits or settles (a restored record whose round is spent
            // settles unsure): reaching here is a bug, so say so rather than hang.
            self.release(name, None).await;
            return Err(Error::request(format!(
                "the submission {name:?} neither sent, waited nor settled"
            )));
        }
    }

    /// Sends one attempt and reads its answer, or says why none came. The attempt's copy of the
    /// body is handed to the request, not copied again.
    pub(super) async fn attempt(
        &self,
        name: &str,
        attempt: &mut Attempt,
        parsed: Option<Parsed>,
    ) -> std::result::Result<(Answer, HeaderMap, Vec<u8>, Option<Error>), Failure> {
        let inner = &*self.inner;
        // One deadline for the whole attempt, the body's last byte included (limits.rs).
        let deadline = tokio::time::Instant::now() + inner.timeout;
        let request = &attempt.request;
        let failure = |e: reqwest::Error| {
            if e.is_timeout() {
                Failure::Timeout
            } else {
                Failure::Network
            }
        };
        // Checked when the submission was described, and again when a record was read.
        let method =
            reqwest::Method::from_bytes(request.method.as_bytes()).map_err(|_| Failure::Network)?;
        // The stored headers as parsed when the submission was described, if they are what is
        // sent (its first attempt); the URL likewise, below.
        let (parsed_url, mut headers) = match parsed {
            Some(p) if p.url.as_str() == request.url => (Some(p.url), p.headers),
            _ => (None, stored_headers(&request.headers, inner.secrets.len())),
        };
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static(request.encoding.content_type()),
        );
        for (n, v) in &inner.secrets {
            headers.insert(n, v.clone());
        }
        if let Some(provider) = &inner.provider {
            let extra = provider.headers(&Outgoing {
                name,
                key: &attempt.key,
                attempt: attempt.number,
                request,
            });
            for (n, v) in extra {
                if let Some(n) = n {
                    headers.insert(n, v);
                }
            }
        }
        // The value's text handed over, not copied again.
        let key = HeaderValue::try_from(attempt.key.header_value(inner.key_format))
            .map_err(|_| Failure::Network)?;
        headers.insert(inner.key_header.clone(), key);
        let url = match parsed_url {
            Some(url) => url,
            None => reqwest::Url::parse(&request.url).map_err(|_| Failure::Network)?,
        };
        let body = attempt
            .request
            .take_wire_body()
            .map_err(|_| Failure::Network)?;
        // Made whole, not through a RequestBuilder, whose `headers` copies the map in header by
        // header. No timeout of reqwest's own: the deadline below covers the whole attempt.
        let mut outgoing = reqwest::Request::new(method, url);
        *outgoing.headers_mut() = headers;
        *outgoing.body_mut() = Some(body.into());
        let sent = inner.http.execute(outgoing);
        let response = tokio::time::timeout_at(deadline, sent)
            .await
            .map_err(|_| Failure::Timeout)?
            .map_err(failure)?;
        let status = response.status().as_u16();
        // Values copied, not cloned: a parsed header value is a slice of the connection's whole
        // read buffer, which a kept clone would hold alive (7 KiB per settlement kept). They are
        // copied into one buffer of their own, each value a slice of it. A name is parsed into
        // storage of its own, and cloned.
        let received = response.headers();
        let mut values = Vec::with_capacity(received.values().map(HeaderValue::len).sum());
        for v in received.values() {
            values.extend_from_slice(v.as_bytes());
        }
        let values = bytes::Bytes::from(values);
        let mut headers = HeaderMap::with_capacity(received.len());
        let mut at = 0;
        for (n, v) in received {
            let value = values.slice(at..at + v.len());
            at += v.len();
            if let Ok(v) = HeaderValue::from_maybe_shared(value) {
                headers.append(n.clone(), v);
            }
        }
        // Once the status has come it decides the outcome, whatever becomes of the body.
        let (bytes, body_error) =
            match super::limits::read_body(response, inner.max_response_bytes, deadline).await {
                Ok(bytes) => (bytes, None),
                Err(e) => (Vec::new(), Some(e)),
            };
        let text = if status == 400 {
            String::from_utf8_lossy(&bytes).into_owned()
        } else {
            String::new()
        };
        let answer = Answer::from_response(
            status,
            headers
                .iter()
                .filter_map(|(n, v)| Some((n.as_str(), v.to_str().ok()?))),
            &text,
            inner.key_header.as_str(),
        );
        Ok((answer, headers, bytes, body_error))
    }
}

/// An empty map for an attempt's headers: room for `stored` of the request's own, the content
/// type, the key and `secrets` more.
pub(super) fn attempt_headers(stored: usize, secrets: usize) -> HeaderMap {
    HeaderMap::with_capacity(stored + 2 + secrets)
}

/// A request's stored headers as an attempt sends them (any that cannot be sent left out: each
/// was checked when the submission was described), in a map of [`attempt_headers`].
fn stored_headers(stored: &[(String, String)], secrets: usize) -> HeaderMap {
    let mut headers = attempt_headers(stored.len(), secrets);
    for (n, v) in stored {
        if let (Ok(n), Ok(v)) = (
            HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.append(n, v);
        }
    }
    headers
}

/// The state an answer led the core to, as the attempt's span tells it.
fn traced(state: State) -> &'static str {
    match state {
        State::Waiting | State::Sending => "retry",
        State::Unsure => "stop",
        other => other.as_str(),
    }
}
