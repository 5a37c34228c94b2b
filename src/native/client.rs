//! # The client
//!
//! [`Client`] sends submissions through the core's [`Submission`](crate::core::Submission) state
//! machine: it claims the name's lease, restores a pending record if there is one, begins, and
//! then carries out the core's actions in order (persist and sync the record, send an attempt,
//! wait, forget the record) until the core settles. The rules (the answer table, backoff,
//! `Retry-After`, budget, "same body", joining) are the core's; the client only does the I/O:
//!
//! - [`builder`](super::builder): setting a client up, describing a submission;
//! - [`flight`](super::flight): the one live core submission per name in flight, which later
//!   calls join;
//! - [`drive`](super::drive): the loop carrying out the core's actions, and one attempt;
//! - [`settlement`](super::settlement): what a send answers.
//!
//! This file holds the client itself and its calls on the store.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::{HeaderMap, HeaderName};
use tokio::sync::watch;

use super::builder::{http_url, ClientBuilder, SubmissionBuilder};
use super::error::{BoxError, Error, Result};
use super::flight::{Flights, Job};
use super::owner::{holder, Holder};
use super::settlement::{Pending, Resumed, Settlement};
use super::store::{Claim, Lease, Quarantined, Store, StoreAnswer, StoreCall};
use crate::core::{Key, KeyFormat, Record, Request, RetryPolicy, Timestamp};

/// The wall clock, as the core wants it.
pub(super) fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    Timestamp::from_millis(ms)
}

/// The record stored under `name`, or why no client can use it (it is not a readable record,
/// or it is another submission's): such a record is moved aside, never sent or deleted.
pub(super) fn read_stored(name: &str, text: &str) -> std::result::Result<Record, String> {
    match Record::from_json(text) {
        // Written by a client of this crate, it was checked as it was described; a record put
        // there otherwise (an outbox's enqueue, another writer) could never be sent.
        Ok(record) if record.name == name => match http_url(&record.request.url) {
            Ok(_) => Ok(record),
            Err(why) => Err(format!("its URL cannot be sent: {why}")),
        },
        Ok(record) => Err(format!("it belongs to the submission {:?}", record.name)),
        Err(e) => Err(e.to_string()),
    }
}

/// A uniform draw for the backoff's jitter, drawn for every answer. Jitter spreads retries, it
/// keeps nothing secret: a xorshift generator per thread, seeded once from the OS, rather than a
/// system call per answer. A failing OS generator only makes the jitter predictable, never the
/// key (keys fail loudly below).
pub(super) fn jitter() -> u32 {
    thread_local! {
        static STATE: std::cell::Cell<u64> =
            std::cell::Cell::new(getrandom::u64().unwrap_or(0x9E37_79B9_7F4A_7C15) | 1);
    }
    STATE.with(|state| {
        // xorshift64* (Vigna): never zero from a non-zero seed; the high half is the draw.
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as u32
    })
}

pub(super) fn random_key_bytes() -> Result<[u8; 16]> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| Error::request("no random bytes for a new key").with_source(e.to_string()))?;
    Ok(bytes)
}

/// What a [`HeaderProvider`] is asked for: one attempt about to be sent.
#[derive(Debug, Clone, Copy)]
pub struct Outgoing<'a> {
    /// The submission's name.
    pub name: &'a str,
    /// Its key.
    pub key: &'a Key,
    /// The attempt's number, counting every attempt of the submission from 1.
    pub attempt: u32,
    /// What is sent (method, URL, the stored headers, body).
    pub request: &'a Request,
}

/// Adds headers that must never be stored (credentials, session cookies) to every attempt,
/// including attempts resumed after a restart. Any `Fn(&Outgoing) -> HeaderMap` is one.
pub trait HeaderProvider: Send + Sync + 'static {
    /// The headers to add to this attempt.
    fn headers(&self, outgoing: &Outgoing<'_>) -> HeaderMap;
}

impl<F> HeaderProvider for F
where
    F: Fn(&Outgoing<'_>) -> HeaderMap + Send + Sync + 'static,
{
    fn headers(&self, outgoing: &Outgoing<'_>) -> HeaderMap {
        self(outgoing)
    }
}

/// Sends submissions once. Cheap to clone; clones share the store, the HTTP connection pool and
/// the lease owner id.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) http: reqwest::Client,
    pub(super) store: Arc<dyn Store>,
    pub(super) policy: RetryPolicy,
    pub(super) timeout: Duration,
    pub(super) lease: Duration,
    pub(super) owner: String,
    pub(super) key_header: HeaderName,
    pub(super) key_format: KeyFormat,
    pub(super) secret_names: Vec<HeaderName>,
    pub(super) secrets: HeaderMap,
    pub(super) provider: Option<Arc<dyn HeaderProvider>>,
    pub(super) resume_concurrency: usize,
    pub(super) max_response_bytes: usize,
    pub(super) flights: Flights,
    /// Removals after a definite answer under way in a store that blocks ([`Client::forget`]),
    /// by name: each ends when its sender is dropped.
    pub(super) removing: Mutex<HashMap<String, watch::Receiver<()>>>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("store", &self.inner.store)
            .field("policy", &self.inner.policy)
            .field("timeout", &self.inner.timeout)
            .field("lease", &self.inner.lease)
            .field("owner", &self.inner.owner)
            .field("key_header", &self.inner.key_header)
            .field("secret_names", &self.inner.secret_names)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// A builder. A store is required.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// Starts describing the intended submission named `name`: one name per thing meant to
    /// happen once ("payout-77").
    pub fn submission(&self, name: &str) -> SubmissionBuilder {
        SubmissionBuilder::new(self.clone(), name)
    }

    /// This client's lease owner id.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// Finishes every stored submission: each one not leased by another live client is resumed
    /// with its key and body (a submission whose round is spent, by attempts or time budget,
    /// stays unsure without being sent; one whose key is past its lifetime settles expired,
    /// unsent). Runs up to [`ClientBuilder::resume_concurrency`] at
    /// once; one result per stored name, and none for a name found gone when its turn came
    /// (another process settled or discarded it after the listing: nothing is left to resume).
    pub async fn resume_pending(&self) -> Result<Vec<Resumed>> {
        self.after_removal(None).await;
        let listed = self.store_call(|s| s.list()).await?;
        Ok(self
            .resume_all(listed.into_iter().map(|l| (l.name, Job::Resume)).collect())
            .await)
    }

    /// For a fleet sharing one store: takes up to `limit` stored submissions that no live
    /// client holds (enqueued with `PostgresStore::enqueue`, feature `postgres`,
    /// or left by a client that died, whose lease ran out) in one step of the store
    /// ([`Store::claim_due`]: instances calling it at once get different ones), and finishes
    /// them as [`Client::resume_pending`] does. Call it in a loop, with a pause when it finds
    /// nothing; one result per submission taken. A submission that settles unsure stays stored
    /// and is set aside for as long as a lease lasts ([`ClientBuilder::timeout`] plus
    /// [`ClientBuilder::lease`]) before a poll takes it again; [`Client::try_again`] takes it at
    /// once.
    pub async fn resume_due(&self, limit: usize) -> Result<Vec<Resumed>> {
        self.after_removal(None).await;
        let lease = self.lease_until(now());
        let due = self
            .store_call(move |s| s.claim_due(&lease, now(), limit))
            .await?;
        Ok(self
            .resume_all(
                due.into_iter()
                    .map(|d| (d.name, Job::Claimed(d.record)))
                    .collect(),
            )
            .await)
    }

    async fn resume_all(&self, jobs: Vec<(String, Job)>) -> Vec<Resumed> {
        // At most `resume_concurrency` at once, by as many workers taking names from one queue:
        // ten thousand stored records must not open ten thousand connections, nor hold ten
        // thousand spawned futures.
        type Queue = std::collections::VecDeque<(usize, (String, Job))>;
        let queue: Arc<Mutex<Queue>> = Arc::new(Mutex::new(jobs.into_iter().enumerate().collect()));
        let workers = self
            .inner
            .resume_concurrency
            .min(queue.lock().unwrap_or_else(|e| e.into_inner()).len());
        let mut tasks = Vec::with_capacity(workers);
        for _ in 0..workers {
            let client = self.clone();
            let queue = queue.clone();
            tasks.push(tokio::spawn(async move {
                let mut done = Vec::new();
                loop {
                    let next = queue.lock().unwrap_or_else(|e| e.into_inner()).pop_front();
                    let Some((i, (name, job))) = next else { break };
                    let result = client.run(&name, job, None).await;
                    if result.as_ref().is_err_and(Error::is_not_stored) {
                        // Settled or discarded elsewhere since it was listed.
                        continue;
                    }
                    done.push((i, Resumed { name, result }));
                }
                done
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            match task.await {
                Ok(done) => out.extend(done),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        out.sort_by_key(|(i, _)| *i);
        out.into_iter().map(|(_, r)| r).collect()
    }

    /// "Try again" for one stored submission (typically unsure): a new round of retries, with
    /// a fresh attempt limit and time budget, with its key and body. A key past its lifetime is
    /// not sent: that settles [`Outcome::Expired`](crate::Outcome::Expired).
    pub async fn try_again(&self, name: &str) -> Result<Settlement> {
        self.run(name, Job::TryAgain, None).await
    }

    /// "Send as new" for one stored submission that is [`Outcome::Expired`](crate::Outcome::Expired)
    /// (or unsure), once you have checked that the server did not carry it out: the stored
    /// request is sent again, deliberately, under a new key (the old record is replaced in the
    /// same write). Refused while it is being sent.
    pub async fn send_as_new(&self, name: &str) -> Result<Settlement> {
        self.run(name, Job::SendAsNew, None).await
    }

    /// Every stored submission, readable or not.
    pub async fn pending(&self) -> Result<Vec<Pending>> {
        self.after_removal(None).await;
        let listed = self.store_call(|s| s.list()).await?;
        Ok(listed
            .into_iter()
            .map(|l| Pending {
                record: Record::from_json(&l.record).map_err(|e| e.to_string()),
                name: l.name,
                lease: l.lease,
            })
            .collect())
    }

    /// Deliberately drops the stored submission `name` (the next send under it gets a new
    /// key). Refused while this client is sending it or waiting to retry it (its attempt may
    /// still be carried out: wait for its settlement) or starting or settling it, and while
    /// another client holds its lease; a send of the name started meanwhile waits for the
    /// discard. Answers whether one was stored.
    ///
    /// A record no client can read is moved aside to the store's quarantine with a warning,
    /// never deleted (CONTRACT.md section 5), as a send or resume of it would; a store with no
    /// quarantine removes it (the way its error names for going on).
    pub async fn discard(&self, name: &str) -> Result<bool> {
        // Held for the whole call (see `Flights::hold`).
        let _hold = self.inner.flights.hold(name)?;
        self.after_removal(Some(name)).await;
        let record = self.claim(name).await?;
        if let Some(Err(why)) = record.as_deref().map(|r| read_stored(name, r)) {
            if self.move_aside(name, &why).await? {
                return Ok(true);
            }
        }
        let (n, owner) = (name.to_owned(), self.inner.owner.clone());
        // Durable before it is answered: no definite answer stands behind it (Store::discard).
        self.store_call(move |s| s.discard(&n, &owner)).await?;
        Ok(record.is_some())
    }

    /// Takes the lease on `name` and answers the record stored under it. A holder that is a
    /// dead process of this host is taken over at once (with a warning); any other holder's
    /// unexpired lease is [`Error::is_busy`].
    pub(super) async fn claim(&self, name: &str) -> Result<Option<String>> {
        let lease = self.lease_until(now());
        let call = StoreCall::Claim {
            name: name.to_owned(),
            lease: lease.clone(),
            now: now(),
        };
        let answer = self
            .store_start(call)
            .await
            .map_err(|e| e.with_name(name))?;
        self.claimed(name, answer, lease).await
    }

    /// What the store answered to a claim of `name` under `lease` (perhaps with a save,
    /// [`StoreCall::ClaimSave`]), as [`Client::claim`] answers: a dead holder of this host is
    /// taken over (saving nothing), another holder is [`Error::is_busy`].
    pub(super) async fn claimed(
        &self,
        name: &str,
        answer: StoreAnswer,
        lease: Lease,
    ) -> Result<Option<String>> {
        let mut claimed = match answer {
            StoreAnswer::Claim(c) => c,
            other => {
                return Err(Error::store(
                    "the store failed",
                    format!("it answered {other:?} to a claim"),
                )
                .with_name(name))
            }
        };
        if let Claim::Busy(held) = &claimed {
            if let Holder::DeadHere(pid) = holder(&held.owner) {
                let (n, dead) = (name.to_owned(), held.owner.clone());
                claimed = self
                    .store_call(move |s| s.take_over(&n, &dead, &lease, now()))
                    .await
                    .map_err(|e| e.with_name(name))?;
                if matches!(claimed, Claim::Taken(_)) {
                    tracing::warn!(
                        name,
                        pid,
                        "taken over from a process of this host that died while holding it"
                    );
                }
            }
        }
        match claimed {
            Claim::Taken(record) => Ok(record),
            Claim::Busy(l) => Err(Error::busy(name, &l.owner, l.until, now())),
        }
    }

    /// Moves the unreadable record of `name` (whose lease this client holds) aside into the
    /// store's quarantine, with a warning, and answers the error for the caller. A store that
    /// has no quarantine keeps it in place (and the error says so).
    pub(super) async fn quarantine(&self, name: &str, why: &str) -> Error {
        match self.move_aside(name, why).await {
            Ok(true) => Error::unreadable_record(name, why, true),
            Ok(false) => {
                self.release(name, None).await;
                Error::unreadable_record(name, why, false)
            }
            Err(e) => Error::unreadable_record(name, why, false).with_source(e.to_string()),
        }
    }

    /// Moves the unreadable record of `name` (whose lease this client holds) into the store's
    /// quarantine, with a warning: whether it was moved (a store with no quarantine keeps it in
    /// place, and the lease with it). The lease is let go when the store fails.
    async fn move_aside(&self, name: &str, why: &str) -> Result<bool> {
        let (n, owner, reason) = (name.to_owned(), self.inner.owner.clone(), why.to_owned());
        let moved = self
            .store_call(move |s| s.quarantine(&n, &owner, &reason, now()))
            .await;
        match moved {
            Ok(true) => {
                tracing::warn!(
                    name,
                    "the stored record cannot be read ({why}); moved aside to the store's quarantine (oncekey list --quarantined)"
                );
                Ok(true)
            }
            Ok(false) => Ok(false),
            Err(e) => {
                self.release(name, None).await;
                Err(e)
            }
        }
    }

    /// The records moved aside because they could not be read, oldest first.
    pub async fn quarantined(&self) -> Result<Vec<Quarantined>> {
        self.store_call(|s| s.quarantined()).await
    }

    pub(super) fn lease_until(&self, from: Timestamp) -> Lease {
        Lease {
            owner: self.inner.owner.clone(),
            until: from + self.inner.timeout + self.inner.lease,
        }
    }

    pub(super) async fn store_call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&dyn Store) -> std::result::Result<T, BoxError> + Send + 'static,
    {
        let store = self.inner.store.clone();
        let result = if store.blocks() {
            tokio::task::spawn_blocking(move || f(&*store))
                .await
                .map_err(|e| Error::store("the store call failed", e.to_string()))?
        } else {
            f(&*store)
        };
        result.map_err(store_error)
    }

    /// Whether the store's calls are made here and now, from borrowed names: it neither starts
    /// them ([`Store::starts`]) nor blocks ([`Store::blocks`]), as [`Client::store_call`] makes
    /// them then, with no call to build.
    pub(super) fn store_here(&self) -> bool {
        let store = &self.inner.store;
        !store.starts() && !store.blocks()
    }

    /// Makes one of a submission's calls: through [`Store::start`] when the store answers from a
    /// thread of its own (awaited on a oneshot, no blocking-pool thread in between), otherwise
    /// as [`Client::store_call`] does.
    pub(super) async fn store_start(&self, call: StoreCall) -> Result<StoreAnswer> {
        let store = &self.inner.store;
        if !store.starts() {
            return self.store_call(move |s| call.run(s)).await;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        store.start(
            call,
            Box::new(move |answer| {
                let _ = tx.send(answer);
            }),
        );
        let result = rx
            .await
            .unwrap_or_else(|_| Err("the store dropped a call unanswered".into()));
        result.map_err(store_error)
    }

    /// Removes the record of `name` after a definite answer, without waiting for it: the
    /// settlement goes out at once, in the same step as the answer that settled it, so that a
    /// caller that stops waiting (its future dropped) cannot lose an answer whose record is gone
    /// (it would send the same message again under a new key). A store that answers from a
    /// thread of its own ([`Store::starts`]) runs its calls in the order they are started; for
    /// one that blocks, the removal is a blocking task started at once (a runtime that ends
    /// waits for it), and this client's later calls on the name, and its listings, wait for it
    /// ([`Client::after_removal`]). Either way this client's later calls on the store come after
    /// it. It is not synced on its own either (CONTRACT.md section 5): a removal lost in a crash
    /// leaves the record, which is resent with the same key and answered by the server's replay.
    /// A removal that fails is said in the log, not in the settlement: the answer was definite.
    pub(super) fn forget(&self, name: &str) {
        if self.store_here() {
            let removed_here = self.inner.store.remove(name, &self.inner.owner);
            removed(
                name,
                removed_here.map(StoreAnswer::Bool).map_err(store_error),
            );
            return;
        }
        let remove = StoreCall::Remove {
            name: name.to_owned(),
            owner: self.inner.owner.clone(),
        };
        let store = &self.inner.store;
        let name = name.to_owned();
        if store.starts() {
            store.start(remove, Box::new(move |answer| removed(&name, answer)));
            return;
        }
        let (done, finished) = watch::channel(());
        self.removals().insert(name.clone(), finished.clone());
        let client = self.clone();
        // A blocking task, started now: a runtime that ends (a command line's, once its send
        // returned) waits for it, where a task not yet run would be dropped with the removal.
        drop(tokio::task::spawn_blocking(move || {
            removed(&name, remove.run(&*client.inner.store));
            let mut removing = client.removals();
            if removing
                .get(&name)
                .is_some_and(|r| r.same_channel(&finished))
            {
                removing.remove(&name);
            }
            drop(removing);
            drop(done);
        }));
    }

    fn removals(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Receiver<()>>> {
        self.inner
            .removing
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the removal of `name` under way ([`Client::forget`]), if any; with no name,
    /// for every one (before a listing).
    pub(super) async fn after_removal(&self, name: Option<&str>) {
        let waiting: Vec<watch::Receiver<()>> = {
            let removing = self.removals();
            match name {
                Some(name) => removing.get(name).cloned().into_iter().collect(),
                None => removing.values().cloned().collect(),
            }
        };
        for mut finished in waiting {
            // Never sent to: it answers when the removal's task drops its sender.
            let _ = finished.changed().await;
        }
    }

    /// [`Client::store_start`] for a call answered with a flag.
    pub(super) async fn store_bool(&self, call: StoreCall) -> Result<bool> {
        match self.store_start(call).await? {
            StoreAnswer::Bool(b) => Ok(b),
            other => Err(Error::store(
                "the store failed",
                format!("it answered {other:?} to a call answered with a flag"),
            )),
        }
    }

    /// Gives the lease on `name` up: for anyone at once (`None`), or keeping the submission out
    /// of [`Store::claim_due`] until `due` ([`Store::defer`]).
    pub(super) async fn release(&self, name: &str, due: Option<Timestamp>) {
        let n = name.to_owned();
        let owner = self.inner.owner.clone();
        let released = self
            .store_start(StoreCall::Release {
                name: n,
                owner,
                due,
            })
            .await;
        if let Err(e) = released {
            tracing::warn!(
                name,
                "the lease could not be released (it runs out by itself): {e}"
            );
        }
    }
}

/// A store's error as the client's: an [`Error`] it passed on, or a failure of the store.
pub(super) fn store_error(e: BoxError) -> Error {
    match e.downcast::<Error>() {
        Ok(e) => *e,
        Err(e) => Error::store("the store failed", e),
    }
}

/// What a removal after a definite answer ([`Client::forget`]) answered, when it was not awaited:
/// said in the log, since the settlement has gone out already.
fn removed(name: &str, answer: std::result::Result<StoreAnswer, impl fmt::Display>) {
    match answer {
        Ok(StoreAnswer::Bool(true)) => {}
        Ok(StoreAnswer::Bool(false)) => tracing::warn!(
            name,
            "settled, but the lease had been taken over; the other client will get the server's replay"
        ),
        Ok(other) => tracing::warn!(name, "the store answered {other:?} to a removal"),
        Err(e) => tracing::warn!(
            name,
            "settled, but the record could not be removed ({e}); it will be resent with the same key and answered by the server's replay"
        ),
    }
}

#[cfg(test)]
mod tests {
    /// The jitter spreads over the whole range and does not repeat itself (a generator stuck at
    /// one value would make every client retry in step).
    #[test]
    fn jitter_spreads_over_the_range() {
        let draws: Vec<u32> = (0..1000).map(|_| super::jitter()).collect();
        let (low, high) = (u32::MAX / 8, u32::MAX / 8 * 7);
        assert!(draws.iter().any(|&d| d < low) && draws.iter().any(|&d| d > high));
        let mut distinct = draws.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert!(distinct.len() > 990, "{} distinct of 1000", distinct.len());
    }
}
