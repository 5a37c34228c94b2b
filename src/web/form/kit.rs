//! # The kit's behaviour
//!
//! One [`Kit`] per attached form: what each submit, change of state and settlement does to the
//! page. Its state is a few cells, each borrowed only for a moment and never across a call out
//! of the kit (events it dispatches, focus, a page's listener, the submitter), so that a page's
//! listener may call the kit again.

use ::core::cell::{Cell, RefCell};

use crate::core::body::{Fields, Value};
use crate::core::text::{concat, decimal, quoted};
use crate::core::{GiveUp, State, WaitingFor};
use crate::prelude::*;
use alloc::rc::Rc;
use js_sys::Object;
use wasm_bindgen::closure::Closure;
use wasm_bindgen::JsValue;
use web_sys::{Element, Event, HtmlFormElement};

use super::answer::clear_field_errors;
use super::dom::{attr, call2, call_str, get, put, remove_attr, run, set_attr, set_text, text};
use super::fields::{empty_secret_fields, read_fields, restore_fields, secret_field_names};
use super::first_paint::{self, closes_dialog};
use super::messages::{Message, Messages};
use super::view::status_of;
use super::{FormLock, FormOptions, Resume, SuccessMessage};
use crate::web::{Error, ErrorCode, Listener, Settlement, Submitter, Update};

/// A form wired to a submitter.
pub(super) struct Kit {
    pub(super) form: HtmlFormElement,
    pub(super) submitter: Submitter,
    pub(super) status: Element,
    /// The kit made the status element (and removes it on detach).
    pub(super) status_made: bool,
    /// The secret fields' names, read when the form is attached.
    pub(super) secret_names: Vec<String>,
    pub(super) clear_on_success: bool,
    pub(super) success: SuccessMessage,
    /// Every text it writes.
    pub(super) messages: Messages,
    /// Held while the outcome is unknown.
    pub(super) lock: Cell<Option<FormLock>>,
    /// "Try again" and "Discard", while unsure.
    pub(super) controls: Cell<Option<Element>>,
    /// Waiting for the person to fill the secret fields again after a reload.
    pub(super) asking_secrets: Cell<bool>,
    /// Counts submissions begun and discards, so that a late settlement of a discarded one is
    /// ignored.
    pub(super) round: Cell<u32>,
    /// The fields may carry notes of a refusal (or, before the first submit, the page's own
    /// markup of them): cleared at the next submit, which otherwise skips the search.
    pub(super) marked: Cell<bool>,
    /// A submission or a "Try again" of this kit awaits its settlement.
    pub(super) in_flight: Cell<bool>,
    /// What the person had filled in when their submit was refused for a submission another
    /// tab (or submitter of the name) had stored meanwhile, which the form then shows in place:
    /// put back once that one is settled or discarded, so that nothing typed is lost.
    pub(super) typed: RefCell<Option<Fields>>,
    /// The listeners; `None` once detached. They hold the kit (a cycle that `detach` breaks), so
    /// the kit lives as long as the form is wired, whoever keeps a `FormKit`. Taken out only
    /// for a moment (`offer`), with no call out of the kit meanwhile.
    pub(super) wiring: Cell<Option<Wiring>>,
    /// Its JavaScript objects (`form/js.rs`), kept while it is wired.
    pub(super) faces: RefCell<Faces>,
}

/// The JavaScript objects of a kit and of its submitter, one each, made when first asked for and
/// kept by the kit until `detach()`. A page that drops what `attachForm` gave it leaves no
/// object of ours to the garbage collector while the form is wired: its finalizer would run in
/// a later task, maybe while the page sits in the back/forward cache, and a page that runs
/// script there is evicted from it (Chromium: about one in five pages left just after a kit's
/// submission, measured; none once the object was kept).
#[derive(Default)]
#[cfg_attr(not(feature = "js"), allow(dead_code))]
pub(super) struct Faces {
    pub(super) kit: Option<JsValue>,
    pub(super) submitter: Option<JsValue>,
}

/// The classes of the kit's buttons, which say what a click on each does.
pub(super) const TRY_AGAIN: &str = "oncekey-try-again";
pub(super) const SEND_AS_NEW: &str = "oncekey-send-as-new";
pub(super) const DISCARD: &str = "oncekey-discard secondary";

pub(super) struct Wiring {
    /// The form's submits and clicks on the kit's buttons, all in one listener: each closure
    /// costs the package its own code. `Fn`, not `FnMut`: it is called again while it runs (a
    /// click that asks for the secrets focuses a field, whose `focusin` comes to this listener
    /// at once), which wasm-bindgen refuses a `FnMut` with an uncaught error.
    pub(super) on_event: Closure<dyn Fn(Event)>,
    pub(super) _listener: Listener,
}

/// Where `form` posts: its `action` property, or the attribute when a control named "action"
/// hides the property (a common hidden field); a form without one posts to its page, as the
/// property says.
pub(super) fn form_url(form: &HtmlFormElement) -> String {
    text(form, "action")
        .or_else(|| attr(form, "action"))
        .or_else(|| text(&get(&js_sys::global(), "location"), "href"))
        .unwrap_or_default()
}

impl Kit {
    pub(super) fn attach(form: &HtmlFormElement, o: FormOptions) -> Result<Rc<Kit>, Error> {
        // Two kits on one form would each send its submit, under a key of its own.
        if attr(form, "data-oncekey-state").is_some() {
            return Err(Error::new(
                ErrorCode::State,
                "the form has a form kit already (it carries data-oncekey-state): detach that one first",
            ));
        }
        let mut options = o.submitter;
        if options.url.is_empty() {
            options.url = form_url(form);
        }
        options.method = match o.method {
            Some(method) => method,
            None => {
                let method = attr(form, "method").unwrap_or_else(|| "POST".into());
                if method.eq_ignore_ascii_case("get") || method.eq_ignore_ascii_case("dialog") {
                    return Err(Error::option(concat(&[
                        "the form's method is ",
                        &quoted(&method),
                        "; oncekey sends a body, so use method=\"post\"",
                    ])));
                }
                method
            }
        };
        // The kit decides when to resend what it found: it may need secrets first.
        options.resume = false;
        let name = match o.name {
            Some(name) => name,
            None => attr(form, "data-oncekey")
                .filter(|n| !n.is_empty())
                // The attribute: a control named "id" hides the property.
                .or_else(|| attr(form, "id").filter(|n| !n.is_empty()))
                .ok_or_else(|| {
                    Error::option(
                        "options.name is required when the form has no data-oncekey attribute or id",
                    )
                })?,
        };
        let submitter = Submitter::new(&name, options)?;
        let (status, status_made) = status_of(form)?;
        let kit = Rc::new(Kit {
            form: form.clone(),
            submitter,
            status,
            status_made,
            secret_names: secret_field_names(form),
            clear_on_success: o.clear_on_success,
            success: o.success_message,
            messages: o.messages,
            lock: Cell::new(None),
            controls: Cell::new(None),
            asking_secrets: Cell::new(false),
            round: Cell::new(0),
            marked: Cell::new(true),
            in_flight: Cell::new(false),
            typed: RefCell::new(None),
            wiring: Cell::new(None),
            faces: Default::default(),
        });
        Kit::wire(&kit);
        set_attr(form, "data-oncekey-state", kit.submitter.state().as_str());
        first_paint::enable_waiting(form);
        let had = kit.submitter.driver().has_pending();
        Kit::take_up_pending(&kit, o.resume);
        if !had {
            // An upload is found in IndexedDB a moment later: taken up the same way.
            let weak = Rc::downgrade(&kit);
            let resume = o.resume;
            kit.submitter.when_loaded(move |taken_up| {
                if let Some(kit) = weak.upgrade() {
                    // Only what came from IndexedDB: an unsure submission of this page's own
                    // is the person's to try again.
                    // An expired one too: its fields are what "Send as a new ticket" sends.
                    let state = kit.submitter.state();
                    let found = matches!(state, State::Unsure | State::Expired);
                    if taken_up && found && !kit.in_flight.get() {
                        Kit::take_up_pending(&kit, resume);
                    }
                }
            });
        }
        // A submit held before the module loaded: pressed as the person meant, once IndexedDB
        // was looked at. A submission stored there (an upload, or `storage: 'indexeddb'`) is
        // found a moment after the attach, and is the one to send, with its key: pressed at
        // once, the held submit began another under a new key, or was refused as another body
        // with the form left locked and no button. The mark is taken off then, by the kit
        // still attached: one detached meanwhile (React's StrictMode attaches, detaches and
        // attaches again) leaves it to the next.
        if first_paint::is_held(form) {
            let weak = Rc::downgrade(&kit);
            kit.submitter.when_loaded(move |_| {
                if let Some(kit) = weak.upgrade() {
                    if !holds(&kit.wiring) {
                        return;
                    }
                    let differs = |button: &Element| elsewhere(&kit, button).is_some();
                    match first_paint::take_held(&kit.form, differs) {
                        Some(first_paint::Held::Pressed(button)) => Kit::on_submit(&kit, &button),
                        Some(first_paint::Held::Unknown) => kit.say(UNKNOWN_HELD),
                        None => {}
                    }
                }
            });
        }
        Ok(kit)
    }

    fn wire(kit: &Rc<Kit>) {
        let k = kit.clone();
        let on_event = Closure::<dyn Fn(Event)>::new(move |event: Event| Kit::on_event(&k, &event));
        let k = kit.clone();
        let listener = kit
            .submitter
            .on_change(move |update: &Update| Kit::on_change(&k, update));
        kit.listen("addEventListener", &on_event);
        kit.wiring.set(Some(Wiring {
            on_event,
            _listener: listener,
        }));
    }

    /// The form's submit, click and focusin listeners added or removed (`method`).
    fn listen(&self, method: &str, f: &Closure<dyn Fn(Event)>) {
        for kind in ["submit", "click", "focusin"] {
            call2(&self.form, method, &JsValue::from_str(kind), f.as_ref());
        }
    }

    /// A submit of the form, a click or the focus in it, or a click on one of the kit's buttons
    /// (which, by its class).
    fn on_event(kit: &Rc<Kit>, event: &Event) {
        match text(event, "type").as_deref() {
            Some("submit") => {
                let button = get(event, "submitter");
                // It closes its dialog: no submission, the browser's to carry out.
                if closes_dialog(&button) {
                    return;
                }
                run(event, "preventDefault");
                return Kit::on_submit(kit, &button);
            }
            // The person is about to fill the form: the key of its submit is drawn ahead, with
            // its Web Lock, out of the submit's way (`spare.rs`).
            Some("focusin") => return crate::web::spare::prepare_soon(kit.submitter.driver()),
            _ => {}
        }
        let target = get(event, "currentTarget");
        if target == *AsRef::<JsValue>::as_ref(&kit.form) {
            return kit.on_click(event);
        }
        match attr(&target, "class").as_deref() {
            // The secrets a reload lost are asked for: read with them, as the Send button does.
            Some(TRY_AGAIN | SEND_AS_NEW) if kit.asking_secrets.get() => {
                Kit::on_submit(kit, &JsValue::UNDEFINED)
            }
            Some(TRY_AGAIN) => Kit::resend(kit),
            Some(SEND_AS_NEW) => Kit::send_as_new(kit),
            Some(DISCARD) => Kit::discard(kit),
            _ => {}
        }
    }

    /// The second click of a double click on a submit button, landing after the answer to the
    /// first (a reply faster than the person's click): the one submission the person meant is
    /// done, so this click submits nothing. Without this a form cleared by its success would go
    /// out empty, and one that keeps its values would be sent again under a new key.
    fn on_click(&self, event: &Event) {
        // `detail` counts the clicks of one gesture: 2 is the second click of a double click.
        let repeat = get(event, "detail")
            .as_f64()
            .is_some_and(|clicks| clicks >= 2.0);
        let state = self.submitter.state();
        if !repeat || state == State::Idle || state.is_pending() {
            return;
        }
        let control = call_str(&get(event, "target"), "closest", "button,input");
        if matches!(text(&control, "type").as_deref(), Some("submit" | "image")) {
            run(event, "preventDefault");
        }
    }

    pub(super) fn detach(&self) {
        let Some(wiring) = self.wiring.take() else {
            return;
        };
        self.listen("removeEventListener", &wiring.on_event);
        // A settlement still to come finds the kit gone.
        self.round.set(self.round.get().wrapping_add(1));
        self.in_flight.set(false);
        self.asking_secrets.set(false);
        self.remove_controls();
        self.unlock();
        for name in ["data-oncekey-state", "data-oncekey-outcome", "aria-busy"] {
            remove_attr(&self.form, name);
        }
        clear_field_errors(&self.form);
        if self.status_made {
            run(&self.status, "remove");
        } else {
            set_text(&self.status, "");
        }
        drop(wiring);
        // Its JavaScript objects are the page's alone now.
        drop(self.faces.take());
    }

    /// A submission found in storage: fields back, form locked, then resend (or wait). Not by a
    /// kit detached meanwhile (an upload is found in IndexedDB a moment after the attach, and a
    /// page, React's StrictMode say, may detach and attach again before that): the form is the
    /// next kit's.
    fn take_up_pending(kit: &Rc<Kit>, resume: Resume) {
        if !holds(&kit.wiring) {
            return;
        }
        let Some(pending) = kit.submitter.pending() else {
            return;
        };
        // An upload's body is its description: its fields are under "fields".
        let body = match pending.body() {
            Value::Object(b) if matches!(b.get("files"), Some(Value::Array(_))) => b.get("fields"),
            b => Some(b),
        };
        if let Some(Value::Object(fields)) = body {
            restore_fields(&kit.form, fields);
        }
        let detail = Object::new();
        put(&detail, "key", &pending.key().as_str().into());
        put(&detail, "attempts", &pending.attempts().into());
        if kit.submitter.state() == State::Expired {
            // Past its key's lifetime: nothing is sent, whatever `resume` says.
            kit.show_expired();
            kit.announce(State::Expired, &detail);
        } else if !kit.secret_names.is_empty() {
            kit.ask_for_secrets();
        } else if resume == Resume::Auto
            && matches!(pending.stopped(), None | Some(GiveUp::BudgetSpent))
        {
            // Not a round the server or the caller ended (x-should-retry: false, a redirect,
            // an abort): that one waits for the person's Try again, as it did before the reload.
            // A round its attempts or its budget ended is sent again, as a new round.
            Kit::resend(kit);
        } else {
            kit.show_unsure(Message::Reloaded);
            kit.announce(State::Unsure, &detail);
        }
    }

    /// A submit, by `submitter` (the button, when the event names one).
    fn on_submit(kit: &Rc<Kit>, submitter: &JsValue) {
        if kit.asking_secrets.replace(false) {
            match read_fields(&kit.form, &kit.secret_names, &JsValue::UNDEFINED) {
                Ok(read) => {
                    if let Err(e) = kit.submitter.set_secrets(read.secrets) {
                        return kit.say(e.message());
                    }
                }
                Err(message) => return kit.say(&message),
            }
            // The secrets asked for after a reload: then on with what was offered.
            return if kit.submitter.state() == State::Expired {
                Kit::send_as_new(kit)
            } else {
                Kit::resend(kit)
            };
        }
        match kit.submitter.state() {
            // Submitted while unsure (by a script's requestSubmit(): the form's fields and
            // buttons are locked): that is Try again, the same key and body.
            State::Unsure => Kit::resend(kit),
            // Double submit: the attempt under way answers for both. Expired: only "Send as a
            // new ticket" sends it again, deliberately.
            State::Sending | State::Waiting | State::Expired => {}
            _ => Kit::begin(kit, submitter),
        }
    }

    fn begin(kit: &Rc<Kit>, submitter: &JsValue) {
        if kit.in_flight.get() || closes_dialog(submitter) {
            return;
        }
        if let Some(why) = elsewhere(kit, submitter) {
            web_sys::console::error_1(&JsValue::from_str(&concat(&["oncekey: ", &why])));
            return kit.say(&why);
        }
        if kit.marked.replace(false) {
            clear_field_errors(&kit.form);
        }
        remove_attr(&kit.form, "data-oncekey-outcome");
        // Read before locking: disabled fields are not submitted.
        let read = match read_fields(&kit.form, &kit.secret_names, submitter) {
            Ok(read) => read,
            Err(message) => return kit.say(&message),
        };
        // Every secret field read, one added after the attach included.
        let secret_names: Vec<String> = read.secrets.iter().map(|(n, _)| n.to_owned()).collect();
        if let Err(e) = kit.submitter.set_secrets(read.secrets) {
            return kit.say(e.message());
        }
        if read.files {
            // An upload: fields and files as the browser reads them, less the secrets (sent
            // from memory, never stored).
            let data = match super::fields::form_data(&kit.form, submitter) {
                Ok(data) => data,
                Err(e) => return kit.say(&super::view::describe(&e)),
            };
            for name in &secret_names {
                data.delete(name);
            }
            kit.hold(false);
            return Kit::settle_later(kit, Box::pin(kit.submitter.submit_form(data)), true);
        }
        // Locked in the submit's own task, before the driver's first step.
        kit.hold(false);
        // Begun now: key and body are stored before the submit event is over.
        Kit::settle_later(
            kit,
            Box::pin(kit.submitter.submit(Value::Object(read.body))),
            true,
        );
    }

    /// Try again: the same key and body (and the secrets held in memory).
    pub(super) fn resend(kit: &Rc<Kit>) {
        if kit.in_flight.get() || !holds(&kit.wiring) {
            return;
        }
        if kit.submitter.state() == State::Expired {
            // Nothing more goes out with an expired key: the offer stays as it is.
            return;
        }
        kit.remove_controls();
        kit.hold(false);
        Kit::settle_later(kit, Box::pin(kit.submitter.try_again()), false);
    }

    /// "Send as a new ticket": the expired submission's request again, under a new key.
    pub(super) fn send_as_new(kit: &Rc<Kit>) {
        if kit.in_flight.get() || !holds(&kit.wiring) {
            return;
        }
        kit.remove_controls();
        // Found expired after a reload, its secrets are gone (never stored): asked for first,
        // then sent as new when the form is submitted (`on_submit`).
        if !kit.secret_names.is_empty() && kit.submitter.driver().secrets().is_empty() {
            return kit.ask_for_secrets();
        }
        kit.hold(false);
        Kit::settle_later(kit, Box::pin(kit.submitter.send_as_new()), false);
    }

    /// "Discard". A submission this kit shows but is not sending (unsure or expired) may be
    /// another tab's, found in shared storage, which that tab is sending right now: its record
    /// is that tab's until its answer, and removing it here would leave a reload there with
    /// nothing to resume (or another submitter of the name in this page, which took it up). So
    /// the discard is done only if no one holds
    /// or waits for the key's Web Lock (with the lock held, so that no attempt starts
    /// meanwhile); otherwise the form says so and keeps the submission, for "Try again" (which
    /// waits for that tab's attempt and gets its answer) or a later discard.
    pub(super) fn discard(kit: &Rc<Kit>) {
        let submitter = &kit.submitter;
        let driver = submitter.driver();
        let key = matches!(submitter.state(), State::Unsure | State::Expired)
            .then(|| driver.pending_key())
            .flatten();
        if let Some(key) = key {
            let round = kit.round.get();
            let later = kit.clone();
            let asked = crate::web::global::if_lock_taken(&key, move |taken| {
                // The person or the page moved on meanwhile (a "Try again", another discard).
                if later.round.get() != round || !holds(&later.wiring) {
                    return;
                }
                if taken {
                    later.say(later.messages.text(Message::SentElsewhere));
                } else {
                    later.discard_now();
                }
            });
            if asked {
                return;
            }
        }
        kit.discard_now();
    }

    fn discard_now(&self) {
        self.submitter.discard();
        // Shown now, whether or not an attempt was under way.
        self.discarded();
    }

    /// Shows the settlement of `work` when it comes (boxed: one copy of this code for a
    /// submission and an upload alike), unless the kit moved on meanwhile. `typed`: the work
    /// sends what the person filled in (not a Try again of what the form shows).
    fn settle_later(kit: &Rc<Kit>, work: Work, typed: bool) {
        let round = kit.round.get().wrapping_add(1);
        kit.round.set(round);
        kit.in_flight.set(true);
        let kit = kit.clone();
        wasm_bindgen_futures::spawn_local(async move {
            let result = work.await;
            // Discarded or detached meanwhile: that was shown already.
            if kit.round.get() != round {
                return;
            }
            kit.in_flight.set(false);
            match result {
                Ok(settlement) => kit.settled(&settlement),
                Err(e) if e.code() == ErrorCode::Discarded => kit.discarded(),
                Err(e) => {
                    // Refused at once (nothing was sent): the form is the person's again,
                    // unless another submission is pending (one found in IndexedDB a moment
                    // after the attach, say): locked then, with what can be done about it.
                    let state = kit.submitter.state();
                    if !state.is_pending() {
                        kit.unlock();
                    } else if matches!(state, State::Unsure | State::Expired) {
                        if typed {
                            // Found in storage at this submit: what the person typed is kept
                            // for when that one is over (read unlocked: a disabled field is
                            // not read).
                            kit.unlock();
                            let read =
                                read_fields(&kit.form, &kit.secret_names, &JsValue::UNDEFINED);
                            kit.typed.replace(read.ok().map(|r| r.body));
                            // The secrets typed for this submit are not that one's: asked for,
                            // as after a reload, before it is sent again or as new, in emptied
                            // fields (read from them then, what is typed here would go too).
                            let _ = kit.submitter.set_secrets(Fields::new());
                            empty_secret_fields(&kit.form);
                        }
                        // Its fields back, as after a reload: what Try again would send.
                        Kit::take_up_pending(&kit, Resume::Manual);
                    }
                    kit.say(e.message());
                }
            }
        });
    }

    fn on_change(kit: &Rc<Kit>, update: &Update) {
        // Storage degraded to memory, or an unreadable record removed: the form still works,
        // once; the submitter has said why on the console.
        if update.warning.is_some() {
            return;
        }
        let state = update.state;
        match state {
            State::Sending => {
                if !kit.in_flight.get() {
                    // A round the kit did not start (its submitter called by the page): joined,
                    // so that its settlement unlocks the form and is shown. After this change is
                    // told, and only if still nobody of the kit's awaits it: a round the kit
                    // starts itself is sending before the kit marks it.
                    let kit = kit.clone();
                    wasm_bindgen_futures::spawn_local(async move {
                        let ours = kit.in_flight.get() || !holds(&kit.wiring);
                        if !ours && kit.submitter.state() == State::Sending {
                            kit.remove_controls();
                            Kit::settle_later(&kit, Box::pin(kit.submitter.try_again()), false);
                        }
                    });
                }
                kit.hold(false);
                let m = &kit.messages;
                if update.attempts > 1 {
                    kit.say(&m.fill(
                        Message::SendingAgain,
                        &[("attempt", &decimal(update.attempts.into()))],
                    ));
                } else {
                    kit.say(m.text(Message::Sending));
                }
            }
            State::Waiting => {
                kit.hold(false);
                let m = &kit.messages;
                match update.waiting_for {
                    // Sent at once when the connection is back, with the same key.
                    Some(WaitingFor::Online) | None => kit.say(m.text(Message::Offline)),
                    Some(WaitingFor::Timer(at)) => {
                        // Tenths of a second, in integers: float formatting would cost the
                        // package.
                        let now = js_sys::Date::now() as u64;
                        let tenths = at.as_millis().saturating_sub(now).div_ceil(100);
                        let seconds = concat(&[&decimal(tenths / 10), ".", &decimal(tenths % 10)]);
                        kit.say(&m.fill(Message::Waiting, &[("seconds", &seconds)]));
                    }
                }
            }
            // Expired while nothing of the kit's awaited it (unsure, its key's deadline came).
            State::Expired if !kit.in_flight.get() => kit.show_expired(),
            // Discarded through the submitter itself, with nothing of the kit's awaiting it.
            State::Idle if !kit.in_flight.get() => return kit.discarded(),
            // Unsure and the outcomes are shown when the submission settles, with its answer;
            // a restored record by take_up_pending.
            _ => return,
        }
        let detail = Object::new();
        if let Some(key) = &update.key {
            put(&detail, "key", &key.as_str().into());
        }
        put(&detail, "attempts", &update.attempts.into());
        if let Some(at) = update.next_attempt_at {
            put(&detail, "nextAttemptAt", &(at.as_millis() as f64).into());
        }
        if let Some(why) = update.waiting_for {
            put(&detail, "waitingFor", &waiting_for(why).into());
        }
        kit.announce(state, &detail);
    }
}

/// Whether `cell` holds something (looked at without a borrow: taken out and put back).
pub(super) fn holds<T>(cell: &Cell<Option<T>>) -> bool {
    let value = cell.take();
    let some = value.is_some();
    cell.set(value);
    some
}

/// A submission's settlement to come.
type Work = ::core::pin::Pin<Box<dyn ::core::future::Future<Output = Result<Settlement, Error>>>>;

/// What a waiting submission waits for, as JavaScript reads it: `retry` or `online`.
pub(crate) fn waiting_for(why: WaitingFor) -> &'static str {
    match why {
        WaitingFor::Timer(_) => "retry",
        WaitingFor::Online => "online",
    }
}

/// Said when a submit held before the kit was attached cannot be told from another button of
/// its name and value that does something else ([`first_paint::Held::Unknown`]).
const UNKNOWN_HELD: &str = "this form was submitted before the page had loaded, with a button that cannot be told from another one that does something else: nothing was sent; press the button again";

/// Why the kit does not send what the pressed `button` asks for: its `formaction` or
/// `formmethod` names another address or method than the kit's (the form's, unless its options
/// said otherwise), and the kit sends every submission of the form one way (a "Save draft"
/// button would have gone to the kit's address). `None` when it asks for nothing else.
fn elsewhere(kit: &Kit, button: &JsValue) -> Option<String> {
    let refused = |what: &str, asked: &str| {
        Some(concat(&[
            "this button's ",
            what,
            " is ",
            &quoted(asked),
            ", but the form kit sends every submission of this form to one address, one way: nothing was sent",
        ]))
    };
    let options = &kit.submitter.driver().options;
    if let Some(asked) = attr(button, "formaction") {
        // Both resolved against the page, as the browser resolves the button's.
        let to = text(button, "formAction").unwrap_or(asked);
        // A fragment is not sent: `/tickets#top` goes where `/tickets` goes.
        let bare = |url: &str| url.split('#').next().unwrap_or_default().to_owned();
        if resolved(&kit.form, &options.url).map(|u| bare(&u)) != Some(bare(&to)) {
            return refused("formaction", &to);
        }
    }
    let method = attr(button, "formmethod")?;
    if method.eq_ignore_ascii_case(&options.method) {
        return None;
    }
    refused("formmethod", &method)
}

/// `url` resolved against `el`'s document, as a link's `href` is.
fn resolved(el: &JsValue, url: &str) -> Option<String> {
    let link = super::dom::make(el, "a")?;
    set_attr(&link, "href", url);
    text(&link, "href")
}
