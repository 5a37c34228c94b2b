//! # Stores
//!
//! Where pending submissions live between the first attempt and a definite answer
//! (CONTRACT.md section 5): one row per submission name, holding the record (the core's
//! [`Record`](crate::core::Record) as JSON text, written before the first byte is sent) and a
//! lease.
//!
//! # Leases
//!
//! Two clients sharing a store (two processes, or two hosts on one database) never send the same
//! pending submission at the same time: a client sends only while it holds the name's lease, an
//! owner and an expiry taken in the store's own transaction by [`Store::claim`]. A live client
//! renews its lease before every attempt and every wait; a client that died stops renewing, its
//! lease runs out, and the next claim takes the submission over, record and key included.
//!
//! Whose clock judges a lease: see [`Store`]'s "Whose clock".
//!
//! # Bringing another store
//!
//! [`Store`] is public: implement its methods with the semantics written on each, each one
//! atomic, and [`Store::save`] durable before it returns. [`MemoryStore`] is the reference.

use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

use super::error::BoxError;
use crate::core::Timestamp;

/// A lease on a submission name: who may send it, and until when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The holder's id (one per [`Client`](crate::Client)).
    pub owner: String,
    /// When the lease runs out unless renewed.
    pub until: Timestamp,
}

/// What [`Store::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The lease is ours now. The record stored under the name, if any, as its text (empty
    /// when its bytes are not UTF-8: see [`Due::record`]).
    Taken(Option<String>),
    /// Another owner holds a lease that has not run out.
    Busy(Lease),
}

/// A stored submission, as [`Store::list`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The submission's name.
    pub name: String,
    /// Its record's text (lossy if it was not UTF-8).
    pub record: String,
    /// Its lease, if one was taken and not released (it may have run out).
    pub lease: Option<Lease>,
}

/// A record moved aside because it could not be read ([`Store::quarantine`]), as
/// [`Store::quarantined`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quarantined {
    /// The name it was stored under.
    pub name: String,
    /// Its text as it was stored (lossy if it was not UTF-8).
    pub record: String,
    /// Why it could not be read.
    pub reason: String,
    /// When it was moved aside.
    pub at: Timestamp,
}

/// A submission [`Store::claim_due`] took: its name and record, now leased to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Due {
    /// The submission's name.
    pub name: String,
    /// Its record's text. A record whose bytes are not UTF-8 (written by a foreign writer) is
    /// answered as an empty text, which no record is: the caller finds it unreadable and moves
    /// it aside ([`Store::quarantine`]) as it is stored, as it does a text that is no record,
    /// and the others are taken as ever. The client does so, with a warning.
    pub record: String,
}

/// The text a store answers for a stored record's bytes ([`Claim::Taken`], [`Due`]): the bytes
/// when they are UTF-8; otherwise nothing (an empty text, which no record is), so the client
/// finds the record unreadable and moves it aside as it is stored, rather than every call that
/// reads it failing. Never read with replacement characters: bytes changed inside a string of
/// the body would still parse, and be sent under its key.
pub(crate) fn record_text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_default()
}

/// One of the calls a submission makes as it goes, for [`Store::start`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreCall {
    /// [`Store::claim`].
    Claim {
        /// The submission's name.
        name: String,
        /// The lease to take.
        lease: Lease,
        /// The time leases are judged at.
        now: Timestamp,
    },
    /// [`Store::save`].
    Save {
        /// The submission's name.
        name: String,
        /// The record's text.
        record: String,
        /// The caller's lease, extended to its `until`.
        lease: Lease,
    },
    /// [`Store::renew`].
    Renew {
        /// The submission's name.
        name: String,
        /// The caller's lease, extended to its `until`.
        lease: Lease,
    },
    /// [`Store::remove`].
    Remove {
        /// The submission's name.
        name: String,
        /// The lease holder.
        owner: String,
    },
    /// [`Store::claim`], then, when it took the lease of a name with nothing stored,
    /// [`Store::save`] of `record` under that lease: a new submission's first two calls in one,
    /// so that a store answering from a thread of its own is asked once (and [`SqliteStore`]
    /// commits and syncs once). Answered with the claim, which saved the record when it is
    /// [`Claim::Taken`]`(None)`; a claim that found a record or another holder saves nothing.
    ///
    /// [`SqliteStore`]: super::SqliteStore
    ClaimSave {
        /// The submission's name.
        name: String,
        /// The lease to take, and to save the record under.
        lease: Lease,
        /// The time leases are judged at.
        now: Timestamp,
        /// The new submission's record.
        record: String,
    },
    /// [`Store::release`], or [`Store::defer`] until `due` when it is set.
    Release {
        /// The submission's name.
        name: String,
        /// The lease holder.
        owner: String,
        /// Kept out of [`Store::claim_due`] until then.
        due: Option<Timestamp>,
    },
}

/// What a [`StoreCall`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreAnswer {
    /// For [`StoreCall::Claim`] and [`StoreCall::ClaimSave`].
    Claim(Claim),
    /// For [`StoreCall::Save`], [`StoreCall::Renew`] and [`StoreCall::Remove`].
    Bool(bool),
    /// For [`StoreCall::Release`].
    Unit,
}

/// Where [`Store::start`] hands a call's answer, from whatever thread it is made on.
pub type StoreReply = Box<dyn FnOnce(Result<StoreAnswer, BoxError>) + Send>;

impl StoreCall {
    /// Makes the call on `store` with its blocking methods, here and now.
    pub fn run<S: Store + ?Sized>(self, store: &S) -> Result<StoreAnswer, BoxError> {
        Ok(match self {
            StoreCall::Claim { name, lease, now } => {
                StoreAnswer::Claim(store.claim(&name, &lease, now)?)
            }
            StoreCall::Save {
                name,
                record,
                lease,
            } => StoreAnswer::Bool(store.save(&name, &record, &lease)?),
            StoreCall::Renew { name, lease } => StoreAnswer::Bool(store.renew(&name, &lease)?),
            StoreCall::Remove { name, owner } => StoreAnswer::Bool(store.remove(&name, &owner)?),
            StoreCall::ClaimSave {
                name,
                lease,
                now,
                record,
            } => claim_save(store, &name, &lease, now, &record)?,
            StoreCall::Release { name, owner, due } => {
                match due {
                    None => store.release(&name, &owner)?,
                    Some(due) => store.defer(&name, &owner, due)?,
                }
                StoreAnswer::Unit
            }
        })
    }
}

/// [`StoreCall::ClaimSave`] made on `store` with its blocking methods, here and now.
pub(crate) fn claim_save<S: Store + ?Sized>(
    store: &S,
    name: &str,
    lease: &Lease,
    now: Timestamp,
    record: &str,
) -> Result<StoreAnswer, BoxError> {
    let claim = store.claim(name, lease, now)?;
    // Two steps here: another owner can take the lease only once it has run out.
    if claim == Claim::Taken(None) && !store.save(name, record, lease)? {
        return Err(
            format!("the lease on {name:?} was lost between its claim and the save").into(),
        );
    }
    Ok(StoreAnswer::Claim(claim))
}

/// Durable storage for pending submissions, shared by every client that opens it.
///
/// # Whose clock
///
/// Times (`now`, a lease's `until`) come from the caller: the client passes its host's system
/// clock. [`MemoryStore`] and [`SqliteStore`](crate::SqliteStore) store and compare them as
/// they are (one process, or the processes of one host, read one clock). A store shared by
/// hosts cannot: their clocks disagree, and a host whose clock runs ahead would find a live
/// lease run out and send the submission beside its holder. Such a store judges leases by one
/// clock of its own and takes from the caller only how long a lease lasts (`until` less `now`;
/// less the caller's clock for the calls given no `now`), as `PostgresStore` (feature
/// `postgres`) does with the database server's clock. A lease it answers (a [`Claim::Busy`]
/// holder's, [`Store::list`]'s) is shown on the caller's clock: its `now` plus the time left.
///
/// # Calls
///
/// Each method is one atomic step. Methods block; the client calls them on tokio's blocking
/// pool unless [`Store::blocks`] says they return at once, or [`Store::starts`] says the store
/// answers a submission's calls from a thread of its own ([`Store::start`]).
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// In one transaction: when no other owner holds an unexpired lease on `name` (at `now`, or
    /// by the store's own clock: see [whose clock](Store#whose-clock)), set the name's lease to
    /// `lease` (creating the row if there is none) and answer [`Claim::Taken`] with the stored
    /// record; otherwise change nothing and answer [`Claim::Busy`] with the holder's lease.
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError>;

    /// [`Store::claim`], with a lease held by `holder` counted as run out: for a client that
    /// found `holder` dead (a process of its own host whose pid is gone). Another holder's
    /// unexpired lease is [`Claim::Busy`] as with `claim`. The default is `claim` itself (the
    /// dead holder's lease is then waited out).
    fn take_over(
        &self,
        name: &str,
        holder: &str,
        lease: &Lease,
        now: Timestamp,
    ) -> Result<Claim, BoxError> {
        let _ = holder;
        self.claim(name, lease, now)
    }

    /// Writes `record` under `name` and extends the lease to `lease.until`, durably (synced)
    /// before returning, if `lease.owner` still holds the name's lease. Answers `false`, writing
    /// nothing, when it does not.
    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError>;

    /// Extends the lease to `lease.until` if `lease.owner` still holds it; `false` otherwise.
    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError>;

    /// Removes the name's record and lease if `owner` holds the lease; `false` otherwise. Called
    /// after a definite answer, it need not be durable on its own and may ride the next durable
    /// write: a removal lost in a crash makes the next process resend the submission with the
    /// same key, and the server replays its first answer.
    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError>;

    /// Removes the name's record and lease if `owner` holds the lease, as [`Store::remove`]
    /// does, but durably (synced) before returning: a deliberate discard has no definite answer
    /// for the server to replay, and one lost in a crash would bring the submission back for
    /// the next process to send, beside whatever was sent in its place. The default is
    /// [`Store::remove`], for a store whose removals are durable by themselves.
    fn discard(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        self.remove(name, owner)
    }

    /// Gives the lease up if `owner` holds it, keeping the record (or removing the row when it
    /// has none).
    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError>;

    /// Every stored record, by name.
    fn list(&self) -> Result<Vec<Listed>, BoxError>;

    /// Moves the record stored under `name` aside, if `owner` holds its lease, into the
    /// store's quarantine with `reason` and the time `now`, in one transaction: it leaves the
    /// pending submissions (the name is free) and is kept, never deleted, for an operator to
    /// look at (CONTRACT.md section 5). Answers whether it was moved. The default moves
    /// nothing (the record stays in place).
    fn quarantine(
        &self,
        name: &str,
        owner: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        let _ = (name, owner, reason, now);
        Ok(false)
    }

    /// The records moved aside by [`Store::quarantine`], oldest first.
    fn quarantined(&self) -> Result<Vec<Quarantined>, BoxError> {
        Ok(Vec::new())
    }

    /// Gives the lease up like [`Store::release`], and keeps the submission out of
    /// [`Store::claim_due`] until `due`: a claim by name ([`Store::claim`]) still takes it at
    /// once. For a submission that settled unsure, so that workers polling for due ones do not
    /// take it up again at every poll. The default releases it (due at once).
    fn defer(&self, name: &str, owner: &str, due: Timestamp) -> Result<(), BoxError> {
        let _ = due;
        self.release(name, owner)
    }

    /// Takes the lease `lease` on up to `limit` stored submissions that no one holds (never
    /// leased, released, or run out at `now`, or by the store's own clock), oldest lease first,
    /// and answers them with their records. Two callers at once get different submissions. The
    /// default claims them one by one from [`Store::list`]; a shared database does it in one
    /// statement (see `PostgresStore`).
    fn claim_due(&self, lease: &Lease, now: Timestamp, limit: usize) -> Result<Vec<Due>, BoxError> {
        let mut due = Vec::new();
        for listed in self.list()? {
            if due.len() >= limit {
                break;
            }
            if listed.lease.as_ref().is_some_and(|l| l.until > now) {
                continue;
            }
            if let Claim::Taken(Some(record)) = self.claim(&listed.name, lease, now)? {
                due.push(Due {
                    name: listed.name,
                    record,
                });
            } else {
                // Taken by someone else meanwhile, or removed: leave it.
                self.release(&listed.name, &lease.owner)?;
            }
        }
        Ok(due)
    }

    /// Whether the methods may block (disk, network). `false` lets the client call them
    /// directly on the async task.
    fn blocks(&self) -> bool {
        true
    }

    /// Whether [`Store::start`] returns at once and answers later, from a thread of the
    /// store's own: the client then makes a submission's calls ([`StoreCall`]) through it, and awaits
    /// the answer without keeping a thread of tokio's blocking pool waiting. Such a store carries
    /// its calls out in the order they were started, which the client relies on: it starts the
    /// removal after a definite answer and does not wait for it, and the name's next call (a new
    /// submission's claim, a listing) must find it done. `false` (the default): the client runs
    /// them as [`Store::blocks`] says, and waits for each.
    fn starts(&self) -> bool {
        false
    }

    /// Starts `call` and hands its answer to `reply` once it is made, with the same semantics
    /// as the method it names (a save's answer once the record is durable). Called only when
    /// [`Store::starts`] says so; the default makes the call here, blocking, and answers at
    /// once.
    fn start(&self, call: StoreCall, reply: StoreReply) {
        reply(call.run(self));
    }
}

#[derive(Debug, Default, Clone)]
struct Row {
    record: Option<String>,
    lease: Option<Lease>,
    /// Set aside from [`Store::claim_due`] until then ([`Store::defer`]).
    due: Option<Timestamp>,
}

/// A store in memory, for tests and for processes that need no restart safety. Clones of one
/// `MemoryStore` share its records (so two clients on it behave like two processes on a file).
#[derive(Debug, Default, Clone)]
pub struct MemoryStore {
    rows: std::sync::Arc<Mutex<HashMap<String, Row>>>,
    quarantine: std::sync::Arc<Mutex<Vec<Quarantined>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, HashMap<String, Row>> {
        // A panic elsewhere leaves the map consistent: every change below is one insert or
        // remove.
        self.rows.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn holds(row: &Row, owner: &str) -> bool {
    row.lease.as_ref().is_some_and(|l| l.owner == owner)
}

/// Extends the lease of a row that `lease.owner` [holds] to `lease.until`: the held lease is
/// that owner's already, so only its time changes (no copy of the owner's id).
fn extend(row: &mut Row, lease: &Lease) {
    if let Some(held) = &mut row.lease {
        held.until = lease.until;
    }
}

impl MemoryStore {
    /// Gives `owner`'s lease on `name` up, kept out of `claim_due` until `due` when set.
    fn release_until(&self, name: &str, owner: &str, due: Option<Timestamp>) {
        let mut rows = self.rows();
        if let Some(row) = rows.get_mut(name) {
            if holds(row, owner) {
                if row.record.is_none() {
                    rows.remove(name);
                } else {
                    row.lease = None;
                    row.due = due;
                }
            }
        }
    }

    fn claim_over(&self, name: &str, dead: Option<&str>, lease: &Lease, now: Timestamp) -> Claim {
        let mut rows = self.rows();
        let row = rows.entry(name.to_owned()).or_default();
        if let Some(held) = &row.lease {
            if held.owner != lease.owner && Some(held.owner.as_str()) != dead && held.until > now {
                return Claim::Busy(held.clone());
            }
        }
        row.lease = Some(lease.clone());
        row.due = None;
        Claim::Taken(row.record.clone())
    }
}

impl Store for MemoryStore {
    fn claim(&self, name: &str, lease: &Lease, now: Timestamp) -> Result<Claim, BoxError> {
        Ok(self.claim_over(name, None, lease, now))
    }

    fn take_over(
        &self,
        name: &str,
        holder: &str,
        lease: &Lease,
        now: Timestamp,
    ) -> Result<Claim, BoxError> {
        Ok(self.claim_over(name, Some(holder), lease, now))
    }

    fn save(&self, name: &str, record: &str, lease: &Lease) -> Result<bool, BoxError> {
        let mut rows = self.rows();
        match rows.get_mut(name) {
            Some(row) if holds(row, &lease.owner) => {
                row.record = Some(record.to_owned());
                extend(row, lease);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn renew(&self, name: &str, lease: &Lease) -> Result<bool, BoxError> {
        let mut rows = self.rows();
        match rows.get_mut(name) {
            Some(row) if holds(row, &lease.owner) => {
                extend(row, lease);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn remove(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let mut rows = self.rows();
        match rows.get(name) {
            Some(row) if holds(row, owner) => {
                rows.remove(name);
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    fn release(&self, name: &str, owner: &str) -> Result<(), BoxError> {
        self.release_until(name, owner, None);
        Ok(())
    }

    fn defer(&self, name: &str, owner: &str, due: Timestamp) -> Result<(), BoxError> {
        self.release_until(name, owner, Some(due));
        Ok(())
    }

    fn claim_due(&self, lease: &Lease, now: Timestamp, limit: usize) -> Result<Vec<Due>, BoxError> {
        let mut rows = self.rows();
        let mut free: Vec<(&String, &mut Row)> = rows
            .iter_mut()
            .filter(|(_, row)| {
                row.record.is_some()
                    && !row.lease.as_ref().is_some_and(|l| l.until > now)
                    && !row.due.is_some_and(|due| due > now)
            })
            .collect();
        free.sort_by(|a, b| a.0.cmp(b.0));
        Ok(free
            .into_iter()
            .take(limit)
            .filter_map(|(name, row)| {
                row.lease = Some(lease.clone());
                Some(Due {
                    name: name.clone(),
                    record: row.record.clone()?,
                })
            })
            .collect())
    }

    fn list(&self) -> Result<Vec<Listed>, BoxError> {
        let mut out: Vec<Listed> = self
            .rows()
            .iter()
            .filter_map(|(name, row)| {
                Some(Listed {
                    name: name.clone(),
                    record: row.record.clone()?,
                    lease: row.lease.clone(),
                })
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    fn quarantine(
        &self,
        name: &str,
        owner: &str,
        reason: &str,
        now: Timestamp,
    ) -> Result<bool, BoxError> {
        let mut rows = self.rows();
        let record = match rows.get(name) {
            Some(row) if holds(row, owner) => row.record.clone(),
            _ => None,
        };
        let Some(record) = record else {
            return Ok(false);
        };
        rows.remove(name);
        self.quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Quarantined {
                name: name.to_owned(),
                record,
                reason: reason.to_owned(),
                at: now,
            });
        Ok(true)
    }

    fn quarantined(&self) -> Result<Vec<Quarantined>, BoxError> {
        Ok(self
            .quarantine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone())
    }

    fn blocks(&self) -> bool {
        false
    }
}

/// Whose clock a store judges leases by, for [`check_semantics`].
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Judged {
    /// The caller's `now` ([`MemoryStore`], `SqliteStore`): times are simulated, from 0 ms.
    ByCaller,
    /// The database's clock (`PostgresStore`): times are this host's clock plus as many
    /// seconds, a holder's lease is shown on the caller's clock (only its owner is compared),
    /// and a lease meant to run out is renewed into the past first.
    ByDatabase,
}

/// The semantics every [`Store`] must have, run against one: used by this crate's tests for
/// [`MemoryStore`], `SqliteStore` and `PostgresStore`.
#[cfg(test)]
pub(crate) fn check_semantics(store: &dyn Store, other: &dyn Store, judged: Judged) {
    let by_database = judged == Judged::ByDatabase;
    let (base, unit) = if by_database {
        (super::client::now().as_millis(), 1000)
    } else {
        (0, 1)
    };
    let t = |x: u64| Timestamp::from_millis(base + x * unit);
    let a = |until| Lease {
        owner: "a".into(),
        until: t(until),
    };
    let b = |until| Lease {
        owner: "b".into(),
        until: t(until),
    };
    // The holder's lease, exactly when judged by the caller's clock.
    let held_by = |claim: Claim, lease: Lease| match (claim, by_database) {
        (Claim::Busy(held), true) => assert_eq!(held.owner, lease.owner),
        (claim, _) => assert_eq!(claim, Claim::Busy(lease)),
    };
    // By the database's clock, a lease runs out only as time passes: renew it into the past.
    let run_out = |name: &str, owner: &str| {
        if by_database {
            let past = Lease {
                owner: owner.into(),
                until: Timestamp::from_millis(0),
            };
            assert!(store.renew(name, &past).unwrap());
        }
    };
    assert_eq!(store.claim("n", &a(100), t(0)).unwrap(), Claim::Taken(None));
    assert!(
        store.list().unwrap().is_empty(),
        "a lease alone is no record"
    );
    assert!(store.save("n", "{r1}", &a(100)).unwrap());
    // The other handle sees the lease and the record.
    held_by(other.claim("n", &b(200), t(50)).unwrap(), a(100));
    assert!(!other.save("n", "{evil}", &b(200)).unwrap());
    assert!(!other.remove("n", "b").unwrap());
    assert!(store.renew("n", &a(150)).unwrap());
    held_by(other.claim("n", &b(300), t(120)).unwrap(), a(150));
    // A holder found dead is taken over at once; another live holder is not.
    let c = |until| Lease {
        owner: "c".into(),
        until: t(until),
    };
    held_by(other.take_over("n", "z", &c(300), t(120)).unwrap(), a(150));
    assert_eq!(
        other.take_over("n", "a", &c(300), t(120)).unwrap(),
        Claim::Taken(Some("{r1}".into()))
    );
    assert!(
        !store.renew("n", &a(150)).unwrap(),
        "the dead holder lost it"
    );
    // And cannot take it back from the live one.
    held_by(store.take_over("n", "a", &a(150), t(120)).unwrap(), c(300));
    other.release("n", "c").unwrap();
    assert_eq!(
        store.claim("n", &a(150), t(120)).unwrap(),
        Claim::Taken(Some("{r1}".into()))
    );
    // Expired: taken over, record included.
    run_out("n", "a");
    assert_eq!(
        other.claim("n", &b(300), t(151)).unwrap(),
        Claim::Taken(Some("{r1}".into()))
    );
    assert!(
        !store.save("n", "{late}", &a(400)).unwrap(),
        "a lost lease writes nothing"
    );
    assert!(!store.renew("n", &a(400)).unwrap());
    let listed = other.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].record, "{r1}");
    if by_database {
        assert_eq!(
            listed[0].lease.as_ref().map(|l| l.owner.as_str()),
            Some("b")
        );
    } else {
        assert_eq!(listed[0].lease, Some(b(300)));
    }
    // Released: the record stays, anyone may claim.
    other.release("n", "b").unwrap();
    assert_eq!(store.list().unwrap()[0].lease, None);
    assert_eq!(
        store.claim("n", &a(500), t(160)).unwrap(),
        Claim::Taken(Some("{r1}".into()))
    );
    assert!(store.remove("n", "a").unwrap());
    assert!(store.list().unwrap().is_empty());
    // A claim released without a record leaves nothing behind.
    assert_eq!(store.claim("m", &a(10), t(0)).unwrap(), Claim::Taken(None));
    store.release("m", "a").unwrap();
    assert_eq!(other.claim("m", &b(10), t(1)).unwrap(), Claim::Taken(None));
    other.release("m", "b").unwrap();
    assert!(store.list().unwrap().is_empty());

    // Due submissions: unleased (released) or run out, each taken by one caller only.
    for name in ["d1", "d2", "d3"] {
        assert_eq!(
            store.claim(name, &a(1000), t(200)).unwrap(),
            Claim::Taken(None)
        );
        assert!(store.save(name, &format!("{{{name}}}"), &a(1000)).unwrap());
    }
    store.release("d1", "a").unwrap();
    store.release("d2", "a").unwrap();
    // d3 is held by a until 1000: not due.
    let mine = store.claim_due(&a(2000), t(300), 1).unwrap();
    assert_eq!(mine.len(), 1, "the limit is kept");
    let theirs = other.claim_due(&b(2000), t(300), 10).unwrap();
    assert_eq!(
        theirs.len(),
        1,
        "the other caller gets the one left, not d3"
    );
    let mut names = vec![mine[0].name.clone(), theirs[0].name.clone()];
    names.sort();
    assert_eq!(names, ["d1", "d2"]);
    assert_eq!(theirs[0].record, format!("{{{}}}", theirs[0].name));
    assert!(store.claim_due(&a(2000), t(300), 10).unwrap().is_empty());
    // After a's leases run out (at 1000 and 2000), b takes them over.
    run_out("d3", "a");
    run_out(&mine[0].name, "a");
    let mut late: Vec<String> = other
        .claim_due(&b(9000), t(2500), 10)
        .unwrap()
        .into_iter()
        .map(|d| d.name)
        .collect();
    late.sort();
    assert!(late.contains(&"d3".to_owned()) && late.contains(&mine[0].name));
    for name in ["d1", "d2", "d3"] {
        assert!(other.remove(name, "b").unwrap());
    }
    assert!(store.list().unwrap().is_empty());

    // Quarantine: only the holder moves a record aside; it leaves the pending ones, is kept
    // with its text and reason, and the name is free again.
    assert_eq!(store.claim("q", &a(10), t(0)).unwrap(), Claim::Taken(None));
    assert!(store.save("q", "{broken", &a(10)).unwrap());
    assert!(!other.quarantine("q", "b", "unreadable", t(1)).unwrap());
    assert!(store.quarantine("q", "a", "it is not JSON", t(2)).unwrap());
    assert!(store.list().unwrap().is_empty());
    assert_eq!(
        other.quarantined().unwrap(),
        [Quarantined {
            name: "q".into(),
            record: "{broken".into(),
            reason: "it is not JSON".into(),
            at: t(2),
        }]
    );
    assert_eq!(other.claim("q", &b(10), t(3)).unwrap(), Claim::Taken(None));
    other.release("q", "b").unwrap();
    assert!(
        !store.quarantine("q", "a", "again", t(4)).unwrap(),
        "nothing left to move"
    );
    assert_eq!(store.quarantined().unwrap().len(), 1);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_store_has_the_semantics() {
        let store = MemoryStore::new();
        check_semantics(&store, &store.clone(), Judged::ByCaller);
    }
}
