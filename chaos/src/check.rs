//! # The guarantees, checked
//!
//! Read after a run from the server's database file, the workers' results files and their
//! stores:
//!
//! 1. every intended submission has exactly one ticket (with the key its worker settled it
//!    with), or a definite refusal (the server's stored 4xx for its key) and no ticket;
//! 2. no ticket exists that no submission intended;
//! 3. every answer a worker took, replayed or not, is byte for byte the answer the server
//!    stored for its key;
//! 4. nothing is pending in any worker's store after the final resume.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use crate::plan::{parse_subject, read_events, sha256_hex, Event, Intent, TENANT};
use crate::worker::{open_store, Files};

/// A submission that broke a guarantee, and how.
#[derive(Debug, Clone)]
pub struct Violation {
    /// The guarantee's number (1 to 4).
    pub guarantee: u8,
    /// The submission's name, or the ticket that nobody intended.
    pub what: String,
    /// What was found.
    pub why: String,
}

/// What one run's check found.
#[derive(Debug, Default)]
pub struct Findings {
    /// Every violation.
    pub violations: Vec<Violation>,
    /// Final outcomes, by name (`succeeded`, `refused`, ...).
    pub outcomes: BTreeMap<String, u64>,
    /// Settled lines whose answer was a replay.
    pub replayed: u64,
    /// Settled lines whose answer was compared with the stored receipt.
    pub compared: u64,
    /// Tickets in the server's database.
    pub tickets: u64,
    /// Submissions deliberately discarded by a `--break` worker.
    pub discards: u64,
    /// Sends an impatient caller stopped waiting for, and made again.
    pub gave_up: u64,
}

/// A ticket's id and the key it was made under.
type TicketRef = (i64, Option<String>);

struct Receipt {
    state: String,
    status: Option<u16>,
    response: Option<Vec<u8>>,
}

/// Checks run `run` of `intents`, whose server wrote `db` and whose workers left their files in
/// `dir`.
pub fn check(
    db: &str,
    dir: &Path,
    stores: &[Option<String>],
    intents: &[Intent],
) -> Result<Findings, String> {
    let (tickets, receipts) = if db.starts_with("postgres://") || db.starts_with("postgresql://") {
        read_postgres(db)?
    } else {
        read_sqlite(db)?
    };
    check_with(tickets, receipts, dir, stores, intents)
}

type Tickets = Vec<(i64, String, Option<String>)>;

/// The run tenant's tickets and receipts from the server's PostgreSQL database.
fn read_postgres(url: &str) -> Result<(Tickets, HashMap<String, Receipt>), String> {
    let pg = |e: postgres::Error| format!("the server's PostgreSQL database: {e}");
    let mut db = postgres::Client::connect(url, postgres::NoTls).map_err(pg)?;
    let tickets = db
        .query(
            "SELECT id, subject, idempotency_key FROM tickets WHERE tenant = $1 ORDER BY id",
            &[&TENANT],
        )
        .map_err(pg)?
        .iter()
        .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
        .collect::<Result<Tickets, postgres::Error>>()
        .map_err(pg)?;
    let mut receipts = HashMap::new();
    for r in db
        .query(
            "SELECT key, state, status, response FROM receipts WHERE tenant = $1",
            &[&TENANT],
        )
        .map_err(pg)?
    {
        let status: Option<i32> = r.try_get(2).map_err(pg)?;
        receipts.insert(
            r.try_get::<_, String>(0).map_err(pg)?,
            Receipt {
                state: r.try_get(1).map_err(pg)?,
                status: status.and_then(|s| u16::try_from(s).ok()),
                response: r.try_get(3).map_err(pg)?,
            },
        );
    }
    Ok((tickets, receipts))
}

/// The run tenant's tickets and receipts from the server's SQLite file.
fn read_sqlite(db: &str) -> Result<(Tickets, HashMap<String, Receipt>), String> {
    let conn = rusqlite::Connection::open(db).map_err(|e| format!("{db}: {e}"))?;
    let sql = |e: rusqlite::Error| format!("{db}: {e}");
    let mut tickets: Tickets = Vec::new();
    {
        let mut stmt = conn
            .prepare(
                "SELECT id, subject, idempotency_key FROM tickets WHERE tenant = ?1 ORDER BY id",
            )
            .map_err(sql)?;
        let rows = stmt
            .query_map([TENANT], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(sql)?;
        for row in rows {
            tickets.push(row.map_err(sql)?);
        }
    }
    let mut receipts: HashMap<String, Receipt> = HashMap::new();
    {
        let mut stmt = conn
            .prepare("SELECT key, state, status, response FROM receipts WHERE tenant = ?1")
            .map_err(sql)?;
        let rows = stmt
            .query_map([TENANT], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    Receipt {
                        state: r.get(1)?,
                        status: r.get(2)?,
                        response: r.get(3)?,
                    },
                ))
            })
            .map_err(sql)?;
        for row in rows {
            let (key, receipt) = row.map_err(sql)?;
            receipts.insert(key, receipt);
        }
    }
    Ok((tickets, receipts))
}

fn check_with(
    tickets: Tickets,
    receipts: HashMap<String, Receipt>,
    dir: &Path,
    stores: &[Option<String>],
    intents: &[Intent],
) -> Result<Findings, String> {
    let mut f = Findings {
        tickets: tickets.len() as u64,
        ..Findings::default()
    };
    let mut violate = |guarantee: u8, what: &str, why: String| {
        f.violations.push(Violation {
            guarantee,
            what: what.to_owned(),
            why,
        })
    };

    // What the workers took as each submission's end, and every answer they saw.
    let mut last: HashMap<String, Event> = HashMap::new();
    let mut discards = 0;
    let mut gave_up = 0;
    let mut replayed = 0;
    let mut compared = 0;
    for (index, store_url) in stores.iter().enumerate() {
        let files = Files::of(dir, index);
        for event in read_events(&files.results) {
            match &event {
                Event::Settled {
                    name,
                    key,
                    outcome,
                    status,
                    replayed: was_replayed,
                    sha,
                    ..
                } => {
                    if *was_replayed {
                        replayed += 1;
                    }
                    // (3) The answer taken is the one stored, byte for byte (a refusal faked
                    // by a break has no answer to compare and is judged under (1)).
                    if let Some(status) = status {
                        compared += 1;
                        match receipts.get(key) {
                            Some(r) if r.state == "done" => {
                                let stored = r.response.as_deref().unwrap_or_default();
                                if r.status != Some(*status) && outcome != "refused" {
                                    violate(3, name, format!("answered {status}, but the server stored {:?} for key {key}", r.status));
                                } else if r.status == Some(*status) && sha256_hex(stored) != *sha {
                                    violate(3, name, format!("the {status} answer{} differs from the body the server stored for key {key}", if *was_replayed { " (replayed)" } else { "" }));
                                }
                            }
                            _ if (200..300).contains(status) || *was_replayed => violate(
                                3,
                                name,
                                format!("answered {status}, but the server holds no completed receipt for key {key}"),
                            ),
                            _ => {}
                        }
                    }
                    last.insert(name.clone(), event.clone());
                }
                Event::Discarded { .. } => discards += 1,
                Event::GaveUp { .. } => gave_up += 1,
                Event::Removed { .. } => {}
            }
        }
        // (4) Nothing left pending.
        if store_url.is_some() || files.store.exists() {
            let store = open_store(store_url.as_deref(), &files.store)?;
            for listed in store.list().map_err(|e| e.to_string())? {
                violate(
                    4,
                    &listed.name,
                    format!("still pending in worker {index}'s store"),
                );
            }
        }
    }
    f.discards = discards;
    f.gave_up = gave_up;
    f.replayed = replayed;
    f.compared = compared;

    // (1) and (2): tickets by the submission their subject names.
    let mut by_intent: HashMap<(u32, u32), Vec<TicketRef>> = HashMap::new();
    let known: HashMap<(u32, u32), &Intent> = intents.iter().map(|i| ((i.run, i.id), i)).collect();
    for (id, subject, key) in &tickets {
        match parse_subject(subject).filter(|k| known.contains_key(k)) {
            Some(k) => by_intent.entry(k).or_default().push((*id, key.clone())),
            None => violate(
                2,
                &format!("ticket {id}"),
                format!("subject {subject:?} names no intended submission"),
            ),
        }
    }
    for intent in intents {
        let found = by_intent
            .remove(&(intent.run, intent.id))
            .unwrap_or_default();
        let name = &intent.name;
        let Some(Event::Settled {
            key,
            outcome,
            status,
            ..
        }) = last.get(name)
        else {
            violate(
                1,
                name,
                format!("never settled ({} ticket(s))", found.len()),
            );
            continue;
        };
        *f.outcomes.entry(outcome.clone()).or_default() += 1;
        match outcome.as_str() {
            "succeeded" => match found.as_slice() {
                [(_, Some(k))] if k == key => {}
                [(id, k)] => violate(
                    1,
                    name,
                    format!("succeeded with key {key}, but its one ticket {id} has key {k:?}"),
                ),
                [] => violate(
                    1,
                    name,
                    format!("succeeded with key {key}, but has no ticket"),
                ),
                many => violate(
                    1,
                    name,
                    format!("{} tickets: {}", many.len(), describe(many)),
                ),
            },
            "refused" => {
                let server_refused = receipts.get(key).is_some_and(|r| {
                    r.state == "done" && r.status.is_some_and(|s| (400..500).contains(&s))
                });
                if !found.is_empty() {
                    violate(
                        1,
                        name,
                        format!(
                            "taken as refused ({status:?}), but has {} ticket(s): {}",
                            found.len(),
                            describe(&found)
                        ),
                    );
                } else if !server_refused {
                    violate(1, name, format!("taken as refused ({status:?}), but the server never refused key {key}: the submission is lost"));
                }
            }
            other => violate(
                1,
                name,
                format!("ended {other} ({status:?}) with {} ticket(s)", found.len()),
            ),
        }
    }
    Ok(f)
}

fn describe(tickets: &[TicketRef]) -> String {
    tickets
        .iter()
        .map(|(id, key)| format!("#{id} key {}", key.as_deref().unwrap_or("-")))
        .collect::<Vec<_>>()
        .join(", ")
}
