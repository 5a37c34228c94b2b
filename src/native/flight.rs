//! # Flights
//!
//! One send, resume or "Try again" of a name under way in this client is a *flight*. It holds the
//! name's one live core [`Submission`], and a later call for the same name is put to that
//! submission, so that the core decides (CONTRACT.md section 3): the same body
//! [joins](crate::core::Begun::Joined) the attempt under way, another body is refused
//! ([`BeginError::PendingMismatch`]) and nothing is sent, "Try again" while waiting sends at
//! once. Joined callers get the flight's settlement.
//!
//! The table's lock, and each flight's own, are held only for calls into the core, never across an
//! await.

use std::collections::hash_map::{Entry, HashMap, VacantEntry};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{watch, Notify};

use super::client::{now, random_key_bytes, read_stored, store_error, Client};
use super::drive::Parsed;
use super::error::{Error, Result};
use super::settlement::Settlement;
use super::store::{claim_save, Claim, StoreAnswer, StoreCall};
use crate::core::{
    Action, BeginError, Begun, Key, NewKey, Record, Request, State, StateError, Submission,
    Timestamp,
};

/// What a call asks of a name.
pub(super) enum Job {
    Send {
        request: Request,
        key: Option<Key>,
    },
    Resume,
    /// A resume whose lease [`Store::claim_due`](super::Store::claim_due) already took, with the
    /// record it found.
    Claimed(String),
    TryAgain,
    /// "Send as new": the stored request under a new key.
    SendAsNew,
}

/// Where a flight is, as the calls that joined it see it.
#[derive(Clone)]
enum Phase {
    /// Its lease is being claimed and its record read: no submission yet.
    Starting,
    /// Its submission is live in the table.
    Flying,
    /// It settled (or failed); the table no longer holds it.
    Done(Arc<Result<Settlement>>),
}

struct Flight {
    /// The leader's, told apart from a later flight of the name by its address.
    live: Arc<Live>,
}

/// What a flight's leader shares with the calls that meet it, under a lock of its own: the
/// driver reaches its submission without looking its name up in the table. A call that meets
/// the flight takes this lock inside the table's, never the other way round.
struct Live {
    /// Wakes the driver from a wait when a joined "Try again" queued an attempt.
    wake: Notify,
    state: Mutex<LiveState>,
}

#[derive(Default)]
struct LiveState {
    /// The name's live core submission, once its record is restored (`None` while starting).
    sub: Option<Submission>,
    /// Where the calls that joined or wait for the flight hear of it: made by the first such
    /// call (most flights meet none), and told by the leader under this lock.
    phase: Option<watch::Sender<Phase>>,
}

impl Live {
    fn state(&self) -> MutexGuard<'_, LiveState> {
        // Every change under the lock is one assignment or call into the core.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A handle on a flight's `phase` for a call that meets it, the flight `starting` (no
/// submission yet) or flying.
fn subscribe(phase: &mut Option<watch::Sender<Phase>>, starting: bool) -> watch::Receiver<Phase> {
    phase
        .get_or_insert_with(|| {
            watch::Sender::new(if starting {
                Phase::Starting
            } else {
                Phase::Flying
            })
        })
        .subscribe()
}

/// The flights of one client, by name.
#[derive(Default)]
pub(super) struct Flights {
    table: Mutex<HashMap<String, Flight>>,
}

impl Flights {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Flight>> {
        // Every change under the lock is one insert, remove or call into the core.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A flight for `name`, put in its free `slot` of the table (locked by the caller), led by
    /// the handle returned.
    fn start<'a>(&'a self, slot: VacantEntry<'_, String, Flight>, name: &'a str) -> Lead<'a> {
        let live = Arc::new(Live {
            wake: Notify::new(),
            state: Mutex::default(),
        });
        slot.insert(Flight { live: live.clone() });
        Lead {
            flights: self,
            name,
            live,
            ended: false,
        }
    }

    /// This client's hold on `name` for a call that must not overlap a flight of it (a
    /// discard): refused while one is under way, with its key once it has one; while held, a
    /// send of the name waits (it meets a flight starting), and meets the name again when the
    /// hold is dropped.
    pub(super) fn hold<'a>(&'a self, name: &'a str) -> Result<Lead<'a>> {
        let mut table = self.table();
        let flight = match table.entry(name.to_owned()) {
            Entry::Vacant(slot) => return Ok(self.start(slot, name)),
            Entry::Occupied(flight) => flight.into_mut(),
        };
        let key = flight
            .live
            .state()
            .sub
            .as_ref()
            .and_then(|sub| sub.pending())
            .map(|r| r.key.clone());
        Err(match key {
            Some(key) => Error::request(StateError::StillSending(key).message()),
            None => Error::request(
                "the submission is being started or settled by this client; wait for its send to return",
            ),
        }
        .with_name(name))
    }
}

/// How a call meets the name's flight.
enum Meet<'a> {
    /// No flight: this call leads one.
    Lead(Lead<'a>),
    /// The flight's submission took this call in: wait for its settlement.
    Join(watch::Receiver<Phase>),
    /// The flight is starting (`true`: wait until it flies) or ending (`false`: until it is
    /// done), then meet again.
    Wait(watch::Receiver<Phase>, bool),
}

/// The leader's handle on its flight: it ends the flight when the leader is done or dropped.
pub(super) struct Lead<'a> {
    flights: &'a Flights,
    name: &'a str,
    live: Arc<Live>,
    /// Taken out of the table by [`Lead::finish`]: nothing is left for the drop to do.
    ended: bool,
}

impl Lead<'_> {
    /// Puts the flight's submission, set up, in place: later calls meet it from now on.
    fn fly(&self, sub: Submission) {
        let mut state = self.live.state();
        state.sub = Some(sub);
        if let Some(phase) = &state.phase {
            phase.send_replace(Phase::Flying);
        }
    }

    /// Runs `f` on the flight's live submission (its driver's handle on it).
    pub(super) fn with<T>(&self, f: impl FnOnce(&mut Submission) -> T) -> T {
        let mut state = self.live.state();
        let sub = state
            .sub
            .as_mut()
            .expect("a flight's submission stays in place until its driver ends it");
        f(sub)
    }

    /// Wakes the driver from a wait when a joined "Try again" queued an attempt.
    pub(super) fn wake(&self) -> &Notify {
        &self.live.wake
    }

    /// Takes the flight out of the table with one lookup; another flight of the name (started
    /// by a call since this one was taken out) goes back.
    fn remove(&self) {
        let mut table = self.flights.table();
        if let Some((name, flight)) = table.remove_entry(self.name) {
            if !Arc::ptr_eq(&flight.live, &self.live) {
                table.insert(name, flight);
            }
        }
    }

    /// Ends the flight (so a caller waking up finds the name free) and hands its result to the
    /// calls that joined it; joined by no one, the result is the leader's alone: handed back,
    /// not shared.
    fn finish(mut self, result: Result<Settlement>) -> Result<Settlement> {
        self.remove();
        self.ended = true;
        let phase = self.live.state().phase.take();
        match phase {
            Some(phase) if phase.receiver_count() > 0 => {
                let result = Arc::new(result);
                phase.send_replace(Phase::Done(result.clone()));
                drop(phase);
                Arc::try_unwrap(result).unwrap_or_else(|shared| share(&shared))
            }
            _ => result,
        }
    }
}

impl Drop for Lead<'_> {
    fn drop(&mut self) {
        if !self.ended {
            self.remove();
        }
    }
}

fn share(result: &Result<Settlement>) -> Result<Settlement> {
    match result {
        Ok(s) => Ok(s.clone()),
        Err(e) => Err(e.duplicate()),
    }
}

impl Client {
    /// One send, resume or "Try again" of `name`: leads a flight, or is put to the one under
    /// way. A send's request `parsed` as it was described goes to its first attempt when it
    /// leads a new submission.
    pub(super) async fn run(
        &self,
        name: &str,
        job: Job,
        parsed: Option<Parsed>,
    ) -> Result<Settlement> {
        // The key a new submission would get, drawn before the table is locked.
        let new_key = match &job {
            Job::Send { key: Some(k), .. } => Some(NewKey::Given(k.clone())),
            Job::Send { key: None, .. } | Job::SendAsNew => {
                Some(NewKey::Random(random_key_bytes()?))
            }
            _ => None,
        };
        loop {
            // A removal of the name's last record under way comes first (a flight that just
            // ended may have started one).
            self.after_removal(Some(name)).await;
            let meet = self.meet(name, &job, new_key.as_ref())?;
            let mut phase = match meet {
                Meet::Lead(lead) => {
                    let result = self.lead(name, job, new_key, &lead, parsed).await;
                    return lead.finish(result);
                }
                Meet::Join(phase) => phase,
                Meet::Wait(mut phase, starting) => {
                    // Whether it flies, ended or was dropped, meet the name again.
                    let _ = phase
                        .wait_for(|p| match p {
                            Phase::Starting => false,
                            Phase::Flying => starting,
                            Phase::Done(_) => true,
                        })
                        .await;
                    continue;
                }
            };
            let settled = match phase.wait_for(|p| matches!(p, Phase::Done(_))).await {
                Ok(p) => match &*p {
                    Phase::Done(result) => share(result),
                    _ => unreachable!("waited for Done"),
                },
                // The leader was dropped (its caller stopped waiting) before it settled; its
                // flight is out of the table. This call goes on with the name itself: it leads
                // now, and takes the stored record up under its key, as a later call would.
                Err(_) => continue,
            };
            return settled;
        }
    }

    /// Under the table's lock: starts a flight for `name`, or puts `job` to the live one.
    fn meet<'a>(&'a self, name: &'a str, job: &Job, new_key: Option<&NewKey>) -> Result<Meet<'a>> {
        let flights = &self.inner.flights;
        let mut table = flights.table();
        let live = match table.entry(name.to_owned()) {
            Entry::Vacant(slot) => return Ok(Meet::Lead(flights.start(slot, name))),
            Entry::Occupied(flight) => &flight.into_mut().live,
        };
        let wake = &live.wake;
        let mut state = live.state();
        let LiveState { sub, phase } = &mut *state;
        let Some(sub) = sub.as_mut() else {
            return Ok(Meet::Wait(subscribe(phase, true), true));
        };
        // Unsure or definite: its settlement is being handed out. A call now is a new one
        // (an unsure record's "Try again"), once the flight has ended.
        if !matches!(sub.state(), State::Sending | State::Waiting) {
            return Ok(Meet::Wait(subscribe(phase, false), false));
        }
        let t = now();
        match job {
            Job::Send { request, .. } => {
                let key = new_key.cloned().expect("a send draws its key");
                match sub.begin(t, request.clone(), key) {
                    Ok(Begun::Joined) => {}
                    // Not while sending or waiting; were it so, the driver must hear of it.
                    Ok(Begun::Started | Begun::Resumed) => wake.notify_one(),
                    Err(e) => return Err(begin_error(name, e)),
                }
            }
            Job::TryAgain => {
                let waiting = sub.state() == State::Waiting;
                let _ = sub.try_again(t);
                if waiting {
                    wake.notify_one();
                }
            }
            Job::SendAsNew => {
                let key = sub
                    .pending()
                    .map(|r| r.key.clone())
                    .expect("sending or waiting");
                return Err(Error::request(StateError::StillSending(key).message()).with_name(name));
            }
            Job::Resume | Job::Claimed(_) => {}
        }
        Ok(Meet::Join(subscribe(phase, false)))
    }

    /// Claims the lease, sets the flight's submission up from the store and `job`, and drives
    /// it to its settlement.
    async fn lead(
        &self,
        name: &str,
        job: Job,
        new_key: Option<NewKey>,
        lead: &Lead<'_>,
        parsed: Option<Parsed>,
    ) -> Result<Settlement> {
        // The request and the record found are moved on, not copied.
        let (job, stored) = match job {
            Job::Claimed(record) => (Job::Resume, Some(record)),
            Job::Send { request, key } => {
                match self.claim_fresh(name, request, new_key.clone()).await? {
                    Fresh::Saved(sub) => {
                        lead.fly(*sub);
                        return self.drive(name, lead, parsed).await;
                    }
                    // Sent as the record found has it (its headers in their order): the
                    // request as parsed is not what goes out.
                    Fresh::Found(stored, request) => {
                        let job = Job::Send {
                            request: *request,
                            key,
                        };
                        (job, stored)
                    }
                }
            }
            job => (job, self.claim(name).await?),
        };
        let record = match stored.as_deref().map(|text| read_stored(name, text)) {
            None => None,
            Some(Ok(record)) => Some(record),
            Some(Err(why)) => return Err(self.quarantine(name, &why).await),
        };
        match set_up(name, self.inner.policy, now(), job, new_key, record) {
            Ok(Some(sub)) => {
                lead.fly(sub);
                self.drive(name, lead, None).await
            }
            Ok(None) => {
                self.release(name, None).await;
                Err(Error::not_stored(name))
            }
            Err(e) => {
                self.release(name, None).await;
                Err(e)
            }
        }
    }
}

/// What [`Client::claim_fresh`] found.
enum Fresh {
    /// Nothing was stored: the new submission, its lease taken and its first record saved.
    Saved(Box<Submission>),
    /// The name's record (or none, after taking a dead holder's lease over), and the request
    /// handed back: nothing saved.
    Found(Option<String>, Box<Request>),
}

impl Client {
    /// A new send's claim and its first record as one call to the store
    /// ([`StoreCall::ClaimSave`]: one round trip, and in `SqliteStore` one commit and one sync;
    /// a store that does not start its calls makes the two in one step, [`StoreCall::run`]).
    /// Most sends find nothing stored under the name; one that finds a record or another holder
    /// saves nothing and goes on from what the claim found, as every other job does. A body
    /// that cannot be sent is refused before the store is asked anything.
    async fn claim_fresh(
        &self,
        name: &str,
        request: Request,
        new_key: Option<NewKey>,
    ) -> Result<Fresh> {
        let mut sub = Submission::new(name, self.inner.policy);
        let key = new_key.expect("a send draws its key");
        // Made by the builder, which checked it (`Request::from_owned`).
        sub.begin_checked(now(), request, key)
            .map_err(|e| begin_error(name, e))?;
        // A new submission's first action is its record (`Submission::start`).
        let (Some(Action::Persist(record)), Some(pending)) = (sub.poll_action(), sub.pending())
        else {
            return Err(Error::request(format!(
                "the submission {name:?} began without a record to save"
            )));
        };
        let request = &pending.request;
        let t = now();
        let lease = self.lease_until(t);
        let answer = if self.store_here() {
            claim_save(&*self.inner.store, name, &lease, t, &record).map_err(store_error)
        } else {
            let call = StoreCall::ClaimSave {
                name: name.to_owned(),
                lease: lease.clone(),
                now: t,
                record,
            };
            self.store_start(call).await
        };
        let answer = answer.map_err(|e| e.with_name(name))?;
        if answer == StoreAnswer::Claim(Claim::Taken(None)) {
            return Ok(Fresh::Saved(Box::new(sub)));
        }
        let request = Box::new(request.clone());
        Ok(Fresh::Found(
            self.claimed(name, answer, lease).await?,
            request,
        ))
    }
}

fn begin_error(name: &str, e: BeginError) -> Error {
    match e {
        BeginError::PendingMismatch { key, differs } => {
            Error::pending_mismatch(name, Some(key), differs)
        }
        BeginError::Body(e) => {
            Error::request(format!("the body cannot be sent: {e}")).with_name(name)
        }
        e @ BeginError::Expired { .. } => Error::request(e.message()).with_name(name),
    }
}

/// The core's submission for `job` and the record stored under the name, with its first
/// actions queued. `None` when a resume found nothing stored.
fn set_up(
    name: &str,
    policy: crate::core::RetryPolicy,
    t: Timestamp,
    job: Job,
    new_key: Option<NewKey>,
    record: Option<Record>,
) -> Result<Option<Submission>> {
    let mut sub = Submission::new(name, policy);
    // Read and checked already (its name and body too): restoring it cannot fail.
    let unreadable = |e: crate::core::StateError| Error::request(e.to_string()).with_name(name);
    match job {
        Job::Resume | Job::Claimed(_) | Job::TryAgain => {
            let Some(record) = record else {
                return Ok(None);
            };
            let again = matches!(job, Job::TryAgain);
            // With its round spent before the restart a resume stays unsure, unsent: "Try
            // again" starts a new round.
            sub.restore(t, record, !again).map_err(unreadable)?;
            // Past its key's lifetime, the restore settled it expired, for the caller to hear.
            if again && sub.state() != State::Expired {
                sub.try_again(t).map_err(unreadable)?;
            }
        }
        Job::SendAsNew => {
            let Some(record) = record else {
                return Ok(None);
            };
            sub.restore(t, record, false).map_err(unreadable)?;
            // Restoring an expired record settled it: the new key's attempt comes after.
            while sub.poll_action().is_some() {}
            let key = new_key.expect("sending as new draws its key");
            sub.send_as_new(t, key).map_err(unreadable)?;
        }
        Job::Send { request, .. } => {
            if let Some(record) = record {
                sub.restore(t, record, false).map_err(unreadable)?;
            }
            // Past its key's lifetime, the restore settled it expired: that is the answer, not
            // a begin on top of it.
            if sub.state() != State::Expired {
                let key = new_key.expect("a send draws its key");
                sub.begin(t, request, key)
                    .map_err(|e| begin_error(name, e))?;
            }
        }
    }
    Ok(Some(sub))
}
