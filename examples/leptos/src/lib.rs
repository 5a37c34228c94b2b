//! The help desk's ticket form in Leptos, on the crate's own Rust [`Submitter`]: one per page,
//! made when the app starts, its changes copied into signals the form renders. The inputs are
//! signals too (never written by the submitter); while the outcome is unknown they are locked,
//! and after a reload the stored body comes back into them.

use js_sys::{Array, Reflect};
use leptos::prelude::*;
use leptos::task::spawn_local;
use oncekey::core::body::{Fields, Value};
use oncekey::{Error, Options, Outcome, Settlement, Settling, State, Submitter, Update};
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen::JsCast;
use wasm_bindgen_futures::JsFuture;

/// The fields of a ticket, in the order the form shows them.
const FIELDS: [&str; 3] = ["subject", "email", "body"];

/// The network conditions the reference server's `--faults` understands, for the next attempt.
const CONDITIONS: [(&str, &str); 3] = [
    ("", "Normal"),
    ("drop-reply", "Lose the reply"),
    ("delay=3000", "Slow (3 s)"),
];

#[wasm_bindgen(start)]
pub fn start() {
    leptos::mount::mount_to_body(App);
}

/// Each visitor (and each end-to-end test) can have its own tickets: `?tenant=NAME`.
fn tenant() -> String {
    let search = web_sys::window().and_then(|w| w.location().search().ok());
    search
        .and_then(|s| web_sys::UrlSearchParams::new_with_str(&s).ok())
        .and_then(|p| p.get("tenant"))
        .unwrap_or_else(|| "demo".to_owned())
}

/// What the form says of the last round: its outcome, status and the answer's id or detail.
#[derive(Debug, Clone, PartialEq)]
struct Said {
    outcome: Outcome,
    status: Option<u16>,
    id: Option<String>,
    detail: Option<String>,
}

impl Said {
    fn of(s: &Settlement) -> Said {
        let field = |name: &str| match s.body() {
            Some(Value::Object(answer)) => match answer.get(name) {
                Some(Value::Number(n)) => Some(n.clone()),
                Some(Value::String(t)) => Some(t.clone()),
                _ => None,
            },
            _ => None,
        };
        Said {
            outcome: s.outcome(),
            status: s.status(),
            id: field("id"),
            detail: field("detail").or_else(|| field("title")),
        }
    }
}

/// The submission as signals, shared by the app's views (the Leptos counterpart of
/// `oncekey/react`'s hook): one submitter per page, so that a form unmounted and mounted again
/// finds the same submission.
#[derive(Clone, Copy)]
struct Tickets {
    submitter: StoredValue<Submitter, LocalStorage>,
    state: RwSignal<State>,
    key: RwSignal<Option<String>>,
    attempts: RwSignal<u32>,
    /// The stored body while the outcome is unknown, read again only for another key.
    pending: RwSignal<Option<[String; 3]>>,
    /// How the last round ended; none while one is under way.
    settlement: RwSignal<Option<Said>>,
    error: RwSignal<Option<String>>,
    /// The fault for the next attempt.
    condition: RwSignal<String>,
    /// Calls whose settlement has not come: while none, a round under way is somebody else's.
    calls: StoredValue<u32>,
}

impl Tickets {
    fn new() -> Result<Tickets, Error> {
        let condition = RwSignal::new(String::new());
        let mut options = Options::new("/api/tickets");
        options.headers.push(("X-Tenant".into(), tenant()));
        // A reload mid-request resends at once, with the same key.
        options.resume = true;
        options.attempt_headers = Some(Rc::new(move |_, _| {
            let fault = condition.get_untracked();
            if fault.is_empty() {
                return Vec::new();
            }
            condition.set(String::new());
            vec![("X-Fault".to_owned(), fault)]
        }));
        let submitter = Submitter::new("new-ticket", options)?;
        let t = Tickets {
            state: RwSignal::new(submitter.state()),
            key: RwSignal::new(None),
            attempts: RwSignal::new(0),
            pending: RwSignal::new(None),
            settlement: RwSignal::new(None),
            error: RwSignal::new(None),
            condition,
            calls: StoredValue::new(0),
            submitter: StoredValue::new_local(submitter.clone()),
        };
        // The app lives as long as the page: so does its listener (told the state at once).
        submitter.on_change(move |u| t.changed(u)).forget();
        Ok(t)
    }

    /// A round this page did not start (resumed at start-up, or once the connection is back)
    /// is joined when it sends, so that its settlement is heard as a call's is. `try_again()`
    /// while sending only waits for the attempt under way; while waiting it would start a new
    /// round, so not then.
    fn join(self) {
        let sending = self.submitter.with_value(|s| s.state()) == State::Sending;
        if sending && self.calls.get_value() == 0 {
            self.wait(self.submitter.with_value(|s| s.try_again()));
        }
    }

    fn changed(self, u: &Update) {
        let key = u.key.as_ref().map(|k| k.as_str().to_owned());
        let locked = locked(u.state);
        if !locked {
            self.pending.set(None);
        } else if key != self.key.get_untracked() || self.pending.get_untracked().is_none() {
            let body = self
                .submitter
                .with_value(|s| s.pending())
                .map(|p| match p.body() {
                    Value::Object(f) => FIELDS
                        .map(|name| f.get(name).and_then(Value::as_str).unwrap_or("").to_owned()),
                    _ => Default::default(),
                });
            self.pending.set(body);
        }
        if matches!(u.state, State::Sending | State::Waiting) {
            self.settlement.set(None);
        }
        self.state.set(u.state);
        self.key.set(key);
        self.attempts.set(u.attempts);
        // After the listeners: the submitter is in the middle of telling its change.
        if u.state == State::Sending && self.calls.get_value() == 0 {
            spawn_local(async move { self.join() });
        }
    }

    /// Waits for a call's settlement, for the status line.
    fn settle(self, settling: Settling) {
        self.error.set(None);
        self.wait(settling);
    }

    /// Waits for a settlement, a call's or a join's (which clears no error a call just had).
    fn wait(self, settling: Settling) {
        self.calls.update_value(|n| *n += 1);
        spawn_local(async move {
            let settled = settling.await;
            self.calls.update_value(|n| *n -= 1);
            match settled {
                Ok(s) => self.settlement.set(Some(Said::of(&s))),
                Err(e) => {
                    self.error.set(Some(e.message().to_owned()));
                    // Refused while a round of somebody else's is under way.
                    self.join();
                }
            }
        });
    }

    fn submit(self, fields: [String; 3]) {
        let mut body = Fields::new();
        for (name, value) in FIELDS.iter().zip(fields) {
            body.insert((*name).to_owned(), Value::String(value));
        }
        self.settle(self.submitter.with_value(|s| s.submit(Value::Object(body))));
    }
}

/// While the outcome is unknown (CONTRACT.md section 4).
fn locked(state: State) -> bool {
    matches!(
        state,
        State::Sending | State::Waiting | State::Unsure | State::Expired
    )
}

#[component]
fn App() -> impl IntoView {
    let view = RwSignal::new("form");
    let tickets = Tickets::new();
    let shown = move || match &tickets {
        Ok(t) if view.get() == "form" => {
            let t = *t;
            view! { <TicketForm tickets=t/> }.into_any()
        }
        Ok(_) => view! { <TicketList/> }.into_any(),
        Err(e) => view! { <p role="alert">{e.message().to_owned()}</p> }.into_any(),
    };
    let tab = move |name: &'static str, label: &'static str| {
        view! {
            <button type="button" class=move || if view.get() == name { "" } else { "secondary" }
                on:click=move |_| view.set(name)>{label}</button>
        }
    };
    view! {
        <main>
            <header class="top">
                <h1>"Help desk "<span class="brand">"Leptos + oncekey"</span></h1>
                <p class="lede">"A ticket form in Rust, on oncekey's own Submitter: one ticket per Send."</p>
                <nav class="actions">{tab("form", "New ticket")}{tab("list", "All tickets")}</nav>
            </header>
            {shown}
        </main>
    }
}

#[component]
fn TicketForm(tickets: Tickets) -> impl IntoView {
    let fields = FIELDS.map(|_| RwSignal::new(String::new()));
    // After a reload the stored body comes back into the inputs (locked until the outcome is
    // known); after a success they are cleared, after a refusal kept.
    Effect::new(move || {
        if let Some(body) = tickets.pending.get() {
            for (field, value) in fields.iter().zip(body) {
                field.set(value);
            }
        }
    });
    Effect::new(move || {
        if matches!(
            tickets.settlement.get(),
            Some(Said {
                outcome: Outcome::Succeeded,
                ..
            })
        ) {
            fields.iter().for_each(|f| f.set(String::new()));
        }
    });
    let locked = move || locked(tickets.state.get());
    let input = move |i: usize, label: &'static str, kind: &'static str| {
        let f = fields[i];
        view! {
            <label>{label}" "
                <input name=FIELDS[i] type=kind prop:value=move || f.get()
                    on:input=move |ev| f.set(event_target_value(&ev))/>
            </label>
        }
    };
    let conditions = CONDITIONS.map(|(value, label)| {
        view! {
            <label>
                <input type="radio" name="condition" value=value
                    prop:checked=move || tickets.condition.get() == value
                    on:change=move |_| tickets.condition.set(value.to_owned())/>" "{label}
            </label>
        }
    });
    let subject = fields[0];
    let body = fields[2];
    view! {
        <section class="panel">
            <div class="choices" role="radiogroup" aria-label="Network condition for the next request">{conditions}</div>
            <form id="ticket-form" novalidate aria-busy=move || locked().to_string()
                data-state=move || tickets.state.get().as_str()
                on:submit=move |ev| {
                    ev.prevent_default();
                    // A second click while one is under way joins it (the same body).
                    tickets.submit(fields.map(|f| f.get_untracked()));
                }>
                <fieldset disabled=locked>
                    {input(0, "Subject", "text")}
                    {input(1, "Email", "email")}
                    <label>"Message "
                        <textarea name="body" rows="4" prop:value=move || body.get()
                            on:input=move |ev| body.set(event_target_value(&ev))></textarea>
                    </label>
                    // Nothing to send until there is a subject: also after a success clears the
                    // form, when the second click of a double click lands.
                    <div class="actions">
                        <button type="submit" disabled=move || subject.get().trim().is_empty()>"Send ticket"</button>
                    </div>
                </fieldset>
                <Show when=move || matches!(tickets.state.get(), State::Unsure | State::Expired)>
                    <div class="actions">
                        <Show when=move || tickets.state.get() == State::Unsure
                            fallback=move || view! {
                                // Deliberate: the person checked that the first one did not arrive.
                                <button type="button" on:click=move |_| tickets.settle(tickets.submitter.with_value(|s| s.send_as_new()))>
                                    "Send as new"
                                </button>
                            }>
                            <button type="button" on:click=move |_| tickets.settle(tickets.submitter.with_value(|s| s.try_again()))>
                                "Try again"
                            </button>
                        </Show>
                        <button type="button" class="secondary" on:click=move |_| tickets.submitter.with_value(|s| s.discard())>
                            "Discard"
                        </button>
                    </div>
                </Show>
                <p role="status" class="status">{move || say(&tickets)}</p>
            </form>
            <dl class="live" aria-label="What the submitter is doing">
                <div><dt>"State"</dt><dd id="live-state">{move || tickets.state.get().as_str()}</dd></div>
                <div><dt>"Key"</dt><dd id="live-key">{move || tickets.key.get().unwrap_or_else(|| "none yet".to_owned())}</dd></div>
                <div><dt>"Attempt"</dt><dd id="live-attempts">{move || tickets.attempts.get()}</dd></div>
            </dl>
        </section>
    }
}

/// What the status line says, as text.
fn say(t: &Tickets) -> String {
    if let Some(e) = t.error.get() {
        return e;
    }
    let said = t.settlement.get();
    match t.state.get() {
        State::Sending if t.attempts.get() > 1 => {
            format!("Sending again (attempt {}), with the same key…", t.attempts.get())
        }
        State::Sending => "Sending…".to_owned(),
        State::Waiting => "No answer yet; trying again with the same key…".to_owned(),
        State::Unsure => {
            "The answer was lost. Try again sends the same request; the server will not do it twice."
                .to_owned()
        }
        State::Expired => {
            "The key is now too old to resend safely, so whether the ticket was created cannot be known: check All tickets before you send it as new."
                .to_owned()
        }
        State::Succeeded => match said.and_then(|s| s.id) {
            Some(id) => format!("Ticket #{id} created."),
            None => "Ticket created.".to_owned(),
        },
        State::Refused => match said {
            Some(Said { detail: Some(d), .. }) => format!("Not sent: {d}"),
            Some(Said { status, .. }) => format!("Not sent: status {}", status.unwrap_or(0)),
            None => "Not sent.".to_owned(),
        },
        s @ (State::Conflict | State::Misconfigured) => format!(
            "The server refused this request's key ({}); nothing was retried.",
            s.as_str()
        ),
        State::Idle => String::new(),
    }
}

#[component]
fn TicketList() -> impl IntoView {
    let list = RwSignal::new(None::<Vec<(String, String, String)>>);
    spawn_local(async move {
        list.try_set(Some(fetch_tickets().await.unwrap_or_default()));
    });
    move || match list.get() {
        None => view! { <section class="panel">"Loading…"</section> }.into_any(),
        Some(l) => view! {
            <section class="panel">
                <h2>"Tickets "<span class="count">{l.len()}</span></h2>
                <ol class="tickets">
                    {l.into_iter().map(|(id, subject, email)| view! {
                        <li><strong>"#"{id}" "{subject}</strong>" "{email}</li>
                    }).collect_view()}
                </ol>
            </section>
        }
        .into_any(),
    }
}

/// The tenant's tickets: (id, subject, email).
async fn fetch_tickets() -> Result<Vec<(String, String, String)>, JsValue> {
    let window = web_sys::window().ok_or("no window")?;
    let headers = web_sys::Headers::new()?;
    headers.set("X-Tenant", &tenant())?;
    let init = web_sys::RequestInit::new();
    init.set_headers(&headers);
    let response: web_sys::Response =
        JsFuture::from(window.fetch_with_str_and_init("/api/tickets", &init))
            .await?
            .dyn_into()?;
    let list: Array = JsFuture::from(response.json()?).await?.dyn_into()?;
    let text = |t: &JsValue, name: &str| {
        let v = Reflect::get(t, &name.into()).unwrap_or(JsValue::UNDEFINED);
        v.as_string()
            .or_else(|| v.as_f64().map(|n| n.to_string()))
            .unwrap_or_default()
    };
    Ok(list
        .iter()
        .map(|t| (text(&t, "id"), text(&t, "subject"), text(&t, "email")))
        .collect())
}
