//! # Faults, for the demo and the tests
//!
//! Off unless the server is started with `--faults` (or `--fault-rate`). A request asks for one
//! with an `X-Fault` header; with a fault rate, requests that ask for none get one at random from
//! a seeded generator, so a chaos run can be repeated.
//!
//! `fail-before` and `offline` hit any ticket request. The others hit the request that does the work: a
//! request answered from a receipt (a replay), a `409` or a `422` is answered normally, so a
//! client that retries through a `drop-reply` sees the lost ticket replayed.
//!
//! The faults wrap the handlers at their seams, and nothing else in the server knows them:
//! `read` and `before_work` (the route), `hold` (the claim held a while),
//! `before_commit` (the transaction rolled back) and `after_work` (the answer dropped).

use std::sync::Mutex;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use crate::api::{App, ConnectionAbort, Reply};
use crate::problem::{param, problem, quote, unavailable};
use crate::store::{StoreError, Stored};

/// The longest `delay=MS` honoured.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// A fault a request suffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Commit, then close the connection without an answer: the lost acknowledgement.
    DropReply,
    /// `503` before any work.
    FailBefore,
    /// Close the connection before any work and without an answer: to the client, the network
    /// is down (the demo's "offline"). Nothing was done.
    Offline,
    /// Hold the answer this long while holding the key's claim (a second request with the same
    /// key meanwhile gets `409`).
    Delay(Duration),
    /// Do the work, roll it back, and close the connection: a process that died mid-request.
    /// Its claim stays until its lease ends, as a dead process's would.
    CrashBeforeCommit,
}

impl Fault {
    /// Reads an `X-Fault` value: `drop-reply`, `fail-before`, `offline`, `delay=MS`,
    /// `crash-before-commit`.
    pub fn parse(value: &str) -> Result<Fault, String> {
        match value.trim() {
            "drop-reply" => Ok(Fault::DropReply),
            "fail-before" => Ok(Fault::FailBefore),
            "offline" => Ok(Fault::Offline),
            "crash-before-commit" => Ok(Fault::CrashBeforeCommit),
            other => {
                let ms = other
                    .strip_prefix("delay=")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .ok_or_else(|| {
                        format!(
                            "unknown fault {}; known: drop-reply, fail-before, offline, delay=MS, crash-before-commit",
                            quote(other)
                        )
                    })?;
                Ok(Fault::Delay(Duration::from_millis(ms).min(MAX_DELAY)))
            }
        }
    }
}

/// Random faults at a rate, from a seeded generator.
#[derive(Debug)]
pub struct RandomFaults {
    rate: f64,
    state: Mutex<u64>,
}

impl RandomFaults {
    /// Faults for a fraction `rate` (0 to 1) of requests, drawn from `seed`.
    pub fn new(rate: f64, seed: u64) -> RandomFaults {
        RandomFaults {
            rate: rate.clamp(0.0, 1.0),
            state: Mutex::new(seed),
        }
    }

    /// The next request's fault, if any.
    pub fn draw(&self) -> Option<Fault> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut next = || splitmix64(&mut state);
        let roll = (next() >> 11) as f64 / (1u64 << 53) as f64;
        if roll >= self.rate {
            return None;
        }
        Some(match next() % 4 {
            0 => Fault::DropReply,
            1 => Fault::FailBefore,
            2 => Fault::CrashBeforeCommit,
            _ => Fault::Delay(Duration::from_millis(50 + next() % 950)),
        })
    }
}

/// The fault this request suffers, if faults are on (a `400` for an unknown `X-Fault`).
pub(crate) fn read(app: &App, headers: &HeaderMap) -> Result<Option<Fault>, Stored> {
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

/// Counts a request's fault, and answers the ones that strike before any work (`fail-before`:
/// `503`; `offline`: the connection closed). `None`: go on.
pub(crate) fn before_work(
    app: &App,
    tenant: &str,
    key: Option<&str>,
    fault: Option<Fault>,
) -> Option<Reply> {
    let fault = fault?;
    app.count(tenant, |c| c.faults += 1);
    let key = key.unwrap_or("-");
    match fault {
        Fault::FailBefore => {
            tracing::info!(%tenant, key, "fault fail-before: 503");
            Some(Reply::Answer(unavailable(
                "fault injected: fail-before (nothing was done)",
            )))
        }
        Fault::Offline => {
            tracing::info!(%tenant, key, "fault offline: closing the connection, nothing done");
            Some(Reply::CloseConnection)
        }
        _ => None,
    }
}

/// How long the work waits (`delay=MS`), holding the key's claim on a keyed route.
pub(crate) fn hold(fault: Option<Fault>) -> Option<Duration> {
    match fault {
        Some(Fault::Delay(d)) => Some(d),
        _ => None,
    }
}

/// Inside the work's transaction, last: `crash-before-commit` rolls it all back.
pub(crate) fn before_commit(fault: Option<Fault>) -> Result<(), StoreError> {
    match fault {
        Some(Fault::CrashBeforeCommit) => Err(StoreError::Aborted),
        _ => Ok(()),
    }
}

/// The committed work's answer, or (`drop-reply`) the connection closed without it.
pub(crate) fn after_work(fault: Option<Fault>, tenant: &str, key: &str, answer: Response) -> Reply {
    if fault == Some(Fault::DropReply) {
        tracing::info!(%tenant, key, "fault drop-reply: committed, closing the connection");
        return Reply::CloseConnection;
    }
    Reply::Answer(answer)
}

/// Carries a reply out: an answer, or the connection closed without one.
pub(crate) async fn finish(reply: Reply, abort: &ConnectionAbort) -> Response {
    match reply {
        Reply::Answer(r) => r,
        Reply::CloseConnection => {
            abort.0.cancel();
            // The accept loop drops the connection; this future is dropped with it.
            std::future::pending::<()>().await;
            unreachable!()
        }
    }
}

/// SplitMix64: small, fast, and the same sequence on every platform for a seed.
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_parse() {
        assert_eq!(Fault::parse("drop-reply"), Ok(Fault::DropReply));
        assert_eq!(Fault::parse(" fail-before "), Ok(Fault::FailBefore));
        assert_eq!(Fault::parse("offline"), Ok(Fault::Offline));
        assert_eq!(
            Fault::parse("delay=250"),
            Ok(Fault::Delay(Duration::from_millis(250)))
        );
        assert_eq!(Fault::parse("delay=99999999"), Ok(Fault::Delay(MAX_DELAY)));
        assert!(Fault::parse("delay=x").is_err());
        assert!(Fault::parse("explode").unwrap_err().contains("drop-reply"));
    }

    #[test]
    fn random_faults_repeat_for_a_seed_and_follow_the_rate() {
        let a = RandomFaults::new(0.3, 42);
        let b = RandomFaults::new(0.3, 42);
        let draws: Vec<_> = (0..1000).map(|_| a.draw()).collect();
        assert_eq!(draws, (0..1000).map(|_| b.draw()).collect::<Vec<_>>());
        let faulted = draws.iter().filter(|d| d.is_some()).count();
        assert!((200..400).contains(&faulted), "{faulted}");
        assert!(RandomFaults::new(0.0, 1).draw().is_none());
        assert!((0..100).all(|_| RandomFaults::new(1.0, 7).draw().is_some()));
    }
}
