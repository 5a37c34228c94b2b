//! # The next key, drawn ahead
//!
//! Asking the browser's lock manager for a Web Lock is the largest single cost of a new key's
//! first attempt on the page's main thread, and it fell in the task of the submit itself,
//! between the person's click and the request. So the driver draws the next key's random bytes
//! ahead, and asks for the lock named after that key there: in the task in which a new key's
//! attempt is answered (no timer of its own, and out of the submit's task, which ends sooner),
//! or in a task of its own when the form kit's form gets the focus. Nobody can know that key
//! before its lock is asked for, so its first attempt holds the lock without waiting for the
//! grant, as a key made in the submit's own task does (`attempt.rs`). Measured with the form kit (bench-form,
//! Chromium): its first request goes out 0.3-0.6 ms sooner after the submit.
//!
//! A spare is used by the next key made here, or let go after [`LIFETIME_MS`]: a page does not
//! keep a lock of a key it does not use (a held lock may keep a page out of a browser's
//! back/forward cache). A global without Web Locks draws no spare. (Memory storage draws one too:
//! another submitter of the name in the page can take its record up, so its keys hold their
//! locks as every other key does.)

use std::rc::Rc;

use wasm_bindgen::JsValue;

use super::driver::{now, Driver};
use super::global::{random_bytes, request_lock, Lock, Timer};
use crate::core::{Key, Timestamp};

/// How long an unused spare (and its lock) is kept: long enough for a person to fill a form
/// after focusing it, short enough that a page left alone holds no lock for long.
pub(crate) const LIFETIME_MS: u32 = 60_000;

/// A key drawn ahead, with its lock asked for.
struct Spare {
    bytes: [u8; 16],
    key: Key,
    lock: Lock,
    /// When it was drawn.
    at: Timestamp,
}

/// The driver's spares: the one drawn ahead; the timer that draws it soon; the timer that lets
/// an unused one go (armed once and moved on when it finds a younger spare, not once per key);
/// and the lock of the key last made from one, until its first attempt takes it.
#[derive(Default)]
pub(crate) struct Spares {
    next: Option<Spare>,
    soon: Option<Timer>,
    expiry: Option<Timer>,
    made: Option<(Key, Lock)>,
    /// A key was made: the next is drawn once an attempt of it is answered ([`after_answer`]).
    wanted: bool,
}

/// A key was made here: the next one is drawn once an attempt of it is answered.
pub(crate) fn want(driver: &Driver) {
    driver.spares.borrow_mut().wanted = true;
}

/// An attempt's answer came: the next key is drawn now, if one is wanted, out of the task of
/// the submit that made this one (which ends sooner, the request out) and without a timer of
/// its own. A new key follows a definite answer (or a discard, which finds no spare unless the
/// form was focused meanwhile, and draws its key in its own task), so the spare is there in time.
pub(crate) fn after_answer(driver: &Rc<Driver>) {
    let wanted = std::mem::take(&mut driver.spares.borrow_mut().wanted);
    if wanted {
        prepare(driver);
    }
}

/// Draws a spare in a task of its own, unless one is there or on its way.
pub(crate) fn prepare_soon(driver: &Rc<Driver>) {
    let mut s = driver.spares.borrow_mut();
    if s.next.is_none() && s.soon.is_none() {
        s.soon = Some(Timer::new(0, driver, soon, 0));
    }
}

/// The timer of [`prepare_soon`].
fn soon(driver: &Rc<Driver>, _: u32) {
    let timer = driver.spares.borrow_mut().soon.take();
    prepare(driver);
    drop(timer);
}

/// Lets the spare go once it is [`LIFETIME_MS`] old (the timer armed when a spare is drawn
/// and none is armed), or looks again when the spare there is younger.
fn expire(d: &Rc<Driver>, _: u32) {
    let (timer, expired) = {
        let mut s = d.spares.borrow_mut();
        let timer = s.expiry.take();
        let age = s
            .next
            .as_ref()
            .map(|n| now().saturating_since(n.at).as_millis());
        match age {
            Some(age) if age < u128::from(LIFETIME_MS) => {
                s.expiry = Some(Timer::new(LIFETIME_MS - age as u32, d, expire, 0));
                (timer, None)
            }
            _ => (timer, s.next.take()),
        }
    };
    drop((timer, expired));
}

fn prepare(driver: &Rc<Driver>) {
    if driver.spares.borrow().next.is_some() {
        return;
    }
    let Ok(bytes) = random_bytes() else { return };
    let key = Key::from_random_bytes(bytes);
    let Some(lock) = request_lock(&key) else {
        return;
    };
    let mut s = driver.spares.borrow_mut();
    s.next = Some(Spare {
        bytes,
        key,
        lock,
        at: now(),
    });
    if s.expiry.is_none() {
        s.expiry = Some(Timer::new(LIFETIME_MS, driver, expire, 0));
    }
}

/// The random bytes of a new key: the spare's, whose lock is then kept for the key's first
/// attempt ([`take_lock`]), or drawn now, with its lock asked for now too: before the record is
/// written, so that another tab that reads it from
/// `localStorage` asks for the key's lock after this one, never first.
pub(crate) fn draw(driver: &Driver) -> Result<[u8; 16], JsValue> {
    let mut s = driver.spares.borrow_mut();
    match s.next.take() {
        Some(spare) => {
            s.made = Some((spare.key, spare.lock));
            Ok(spare.bytes)
        }
        None => {
            s.made = None;
            let bytes = random_bytes()?;
            let key = Key::from_random_bytes(bytes);
            s.made = request_lock(&key).map(|lock| (key, lock));
            Ok(bytes)
        }
    }
}

/// The lock asked for ahead for `key`, if it was made from a spare and this is the first
/// attempt to ask (a lock kept for another key, which nothing sends now, is let go).
pub(crate) fn take_lock(driver: &Driver, key: &Key) -> Option<Lock> {
    let made = driver.spares.borrow_mut().made.take();
    made.filter(|(made, _)| made == key).map(|(_, lock)| lock)
}

/// [`forget_made`], when the key made is `key` (a settled submission's): a key made since, in a
/// listener of that settlement's change, keeps its lock.
pub(crate) fn forget_made_of(driver: &Driver, key: &Key) {
    let made = {
        let mut s = driver.spares.borrow_mut();
        match &s.made {
            Some((k, _)) if k == key => s.made.take(),
            _ => None,
        }
    };
    drop(made);
}

/// The key made from a spare will not be sent (its submission settled, was discarded, or was
/// never begun): its lock is let go.
pub(crate) fn forget_made(driver: &Driver) {
    let made = driver.spares.borrow_mut().made.take();
    drop(made);
}
