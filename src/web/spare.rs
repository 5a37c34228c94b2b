//! # The next key, drawn ahead
//!
//! Asking the browser's lock manager for a Web Lock is the largest single cost of a new key's
//! first attempt on the page's main thread, and it fell in the task of the submit itself,
//! between the person's click and the request. So the driver draws the next key's random bytes
//! ahead, in a task of its own (while an attempt is out, or when the form kit's form gets the
//! focus), and asks for the lock named after that key there. Nobody can know that key before its
//! lock is asked for, so its first attempt holds the lock without waiting for the grant, as a key
//! made in the submit's own task does (`attempt.rs`). Measured with the form kit (bench-form,
//! Chromium): its first request goes out 0.3-0.6 ms sooner after the submit.
//!
//! A spare is used by the next key made here, or let go after [`LIFETIME_MS`]: a page does not
//! keep a lock of a key it does not use (a held lock may keep a page out of a browser's
//! back/forward cache). Memory storage takes no locks and draws no spare; nor does a global
//! without Web Locks.

use std::rc::{Rc, Weak};

use wasm_bindgen::JsValue;

use super::driver::Driver;
use super::global::{random_bytes, request_lock, Lock, Timer};
use crate::core::Key;

/// How long an unused spare (and its lock) is kept: long enough for a person to fill a form
/// after focusing it, short enough that a page left alone holds no lock for long.
pub(crate) const LIFETIME_MS: u32 = 60_000;

/// A key drawn ahead, with its lock asked for.
struct Spare {
    bytes: [u8; 16],
    key: Key,
    lock: Lock,
}

/// The driver's spares: the one drawn ahead; its timer (which draws it soon, or once drawn lets
/// it go when nobody used it in time); and the lock of the key last made from one, until its
/// first attempt takes it.
#[derive(Default)]
pub(crate) struct Spares {
    next: Option<Spare>,
    timer: Option<Timer>,
    made: Option<(Key, Lock)>,
}

/// Draws a spare in a task of its own, unless one is there or on its way, or the storage is
/// memory (no lock to ask for).
pub(crate) fn prepare_soon(driver: &Rc<Driver>) {
    let mut s = driver.spares.borrow_mut();
    if s.next.is_none() && s.timer.is_none() && driver.shares_keys() {
        s.timer = Some(schedule(driver, 0));
    }
}

/// One timer for both jobs (one closure in the module): with no spare it draws one, with one
/// it lets it go.
fn schedule(driver: &Rc<Driver>, ms: u32) -> Timer {
    let weak: Weak<Driver> = Rc::downgrade(driver);
    Timer::new(ms, move || {
        if let Some(d) = weak.upgrade() {
            let (timer, expired) = {
                let mut s = d.spares.borrow_mut();
                (s.timer.take(), s.next.take())
            };
            if expired.is_none() {
                prepare(&d);
            }
            drop((timer, expired));
        }
    })
}

fn prepare(driver: &Rc<Driver>) {
    if !driver.shares_keys() {
        return;
    }
    let Ok(bytes) = random_bytes() else { return };
    let key = Key::from_random_bytes(bytes);
    let Some(lock) = request_lock(&("oncekey:".to_owned() + key.as_str())) else {
        return;
    };
    let mut s = driver.spares.borrow_mut();
    s.next = Some(Spare { bytes, key, lock });
    s.timer = Some(schedule(driver, LIFETIME_MS));
}

/// The random bytes of a new key: the spare's, whose lock is then kept for the key's first
/// attempt ([`take_lock`]), or drawn now.
pub(crate) fn draw(driver: &Driver) -> Result<[u8; 16], JsValue> {
    let mut s = driver.spares.borrow_mut();
    match s.next.take() {
        Some(spare) => {
            // Its lifetime's timer goes with it.
            let timer = s.timer.take();
            drop(timer);
            s.made = Some((spare.key, spare.lock));
            Ok(spare.bytes)
        }
        None => {
            s.made = None;
            random_bytes()
        }
    }
}

/// The lock asked for ahead for `key`, if it was made from a spare and this is the first
/// attempt to ask (a lock kept for another key, which nothing sends now, is let go).
pub(crate) fn take_lock(driver: &Driver, key: &Key) -> Option<Lock> {
    let made = driver.spares.borrow_mut().made.take();
    made.filter(|(made, _)| made == key).map(|(_, lock)| lock)
}

/// The key made from a spare will not be sent (its submission settled, was discarded, or was
/// never begun): its lock is let go.
pub(crate) fn forget_made(driver: &Driver) {
    let made = driver.spares.borrow_mut().made.take();
    drop(made);
}
