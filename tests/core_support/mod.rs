//! A driver for the core in simulated time, with a simulated server that keeps receipts the way
//! the reference server does: what the tests of `src/core/` run against (quinn's `Pair` idea).

#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use oncekey::core::*;

pub const T0: Timestamp = Timestamp::from_millis(1_796_126_400_000);

pub fn request(body: &str) -> Request {
    Request::new("POST", "/api/tickets", body, Encoding::Json).unwrap()
}

pub fn bytes(n: u8) -> NewKey {
    NewKey::Random([n; 16])
}

/// Drains the submission's actions, carrying them out like a driver would: persists into
/// `stored`, remembers the attempt to send, collects changes and the settlement.
#[derive(Debug, Default)]
pub struct Driver {
    pub stored: Option<Record>,
    pub sent: Vec<Attempt>,
    pub changes: Vec<Change>,
    pub settled: Vec<Settled>,
    pub forgets: usize,
    /// Every Send checked against what was stored at that moment.
    pub sent_unstored: usize,
}

impl Driver {
    pub fn drain(&mut self, s: &mut Submission) {
        while let Some(action) = s.poll_action() {
            match action {
                Action::Persist(text) => {
                    self.stored =
                        Some(Record::from_json(&text).expect("the core writes records it reads"))
                }
                Action::Send(a) => {
                    match &self.stored {
                        Some(r) if r.key == a.key && r.attempts == a.number => {}
                        _ => self.sent_unstored += 1,
                    }
                    self.sent.push(a);
                }
                Action::Forget(_) => {
                    self.stored = None;
                    self.forgets += 1;
                }
                Action::Changed(c) => self.changes.push(c),
                Action::Settled(s) => self.settled.push(s),
            }
        }
    }

    pub fn last_sent(&self) -> &Attempt {
        self.sent.last().expect("an attempt was sent")
    }
}

/// A server in simulated time that follows CONTRACT.md section 6: one ticket per key, a repeat
/// after completion is a replay, another body under a held key is 422.
#[derive(Debug, Default)]
pub struct Server {
    /// key -> (canonical body, status, ticket id)
    pub receipts: HashMap<String, (String, u16, Option<u64>)>,
    pub tickets: Vec<(u64, String)>,
}

impl Server {
    /// Carries out an attempt; answers as the server would.
    pub fn handle(&mut self, a: &Attempt) -> Answer {
        let canonical = a.request.canonical_body().unwrap();
        if let Some((body, status, _)) = self.receipts.get(a.key.as_str()) {
            if *body != canonical {
                return Answer::status(422);
            }
            return Answer {
                replayed: true,
                ..Answer::status(*status)
            };
        }
        let id = self.tickets.len() as u64 + 1;
        self.tickets.push((id, canonical.clone()));
        self.receipts
            .insert(a.key.as_str().to_owned(), (canonical, 201, Some(id)));
        Answer::status(201)
    }
}

pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}
