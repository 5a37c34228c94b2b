//! # The JavaScript API
//!
//! What wasm-pack publishes as the npm package `oncekey`: the `Submitter` class, with real
//! TypeScript types for its options, results and events (the custom section below).

use js_sys::{Object, Promise, Reflect};
use wasm_bindgen::prelude::*;

use super::options;
use super::submitter::{as_function, js_listener, to_json, Event, Submitted, Submitter};

#[wasm_bindgen(typescript_custom_section)]
const TS_TYPES: &'static str = r#"
/** The contract's outcomes (CONTRACT.md section 2). */
export type Outcome = "succeeded" | "refused" | "conflict" | "misconfigured" | "unsure";

/** Where a submission is (CONTRACT.md section 3). */
export type SubmitterState = "idle" | "sending" | "waiting" | Outcome;

/** Retries: attempts per round, and times in milliseconds. */
export interface RetryOptions {
  /** Attempts per round (the first and each "Try again"), default 8. */
  attempts?: number;
  /** Backoff base in ms, default 500: delay = random(0, min(cap, base * 2^n)). */
  base?: number;
  /** Longest wait between attempts in ms (also for Retry-After), default 30000. */
  cap?: number;
  /** Time budget of a round in ms, default 900000 (15 minutes); then `unsure`. */
  budget?: number;
}

export interface SubmitterOptions {
  /** Where to send. */
  url: string;
  /** Default "POST". */
  method?: string;
  /** Added to every attempt; never stored (they may carry credentials). */
  headers?: Record<string, string>;
  /**
   * Called before every attempt; the headers it returns go on that attempt only and are never
   * stored (a fresh token, a per-request trace id). A throw is reported and the attempt goes on.
   */
  attemptHeaders?: (attempt: { attempt: number; key: string }) => Record<string, string>;
  /** Default "Idempotency-Key". */
  keyHeader?: string;
  /** "bare" (default) or "sf-string" (a quoted structured-field string). */
  keyFormat?: "bare" | "sf-string";
  /** Per attempt, default 30000; a timed-out attempt is retried with the same key. */
  timeoutMs?: number;
  retry?: RetryOptions;
  /** Where key and body are kept until a definite answer; default "session". */
  storage?: "session" | "local" | "memory";
  /** fetch's credentials; default "same-origin". */
  credentials?: "omit" | "same-origin" | "include";
  /** "json" (default) or "form" (application/x-www-form-urlencoded from a flat object). */
  encoding?: "json" | "form";
  /** Resend a pending submission found at start-up at once, instead of waiting `unsure`. */
  resume?: boolean;
}

/** How a submission ended, or why its retries stopped (`unsure`). */
export interface SubmitResult {
  outcome: Outcome;
  /** The last HTTP status, or null when no answer ever came. */
  status: number | null;
  /** The idempotency key it was sent with. */
  key: string;
  /** The answer's JSON parsed, or its text; null when empty. */
  body: unknown;
  /** The server replayed a stored answer (Idempotent-Replayed). */
  replayed: boolean;
  /** Attempts made, all rounds. */
  attempts: number;
  /** For `unsure`: why retries stopped. */
  gaveUp: string | null;
}

/** The pending submission, as stored. */
export interface PendingSubmission {
  key: string;
  body: unknown;
  attempts: number;
  /** When the first attempt was made, ms since the epoch. */
  startedAt: number;
}

/** An event: a change of state, or a warning (with the state unchanged). */
export interface SubmitterChange {
  state: SubmitterState;
  key: string | null;
  attempts: number;
  /** In `waiting`: when the next attempt is due, ms since the epoch. */
  nextAttemptAt: number | null;
  /** Storage degraded to memory, or an unreadable record was removed. */
  warning: string | null;
}
"#;

fn object(fields: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (name, value) in fields {
        // Setting a data property on a fresh plain object cannot fail.
        let _ = Reflect::set(&o, &(*name).into(), value);
    }
    o.into()
}

fn opt<T: Into<JsValue>>(value: Option<T>) -> JsValue {
    value.map_or(JsValue::NULL, Into::into)
}

fn result_to_js(s: &Submitted) -> JsValue {
    object(&[
        ("outcome", s.outcome.as_str().into()),
        ("status", opt(s.status)),
        ("key", s.key.as_str().into()),
        ("body", s.body.clone()),
        ("replayed", s.replayed.into()),
        ("attempts", s.attempts.into()),
        ("gaveUp", opt(s.gave_up.map(|g| g.as_str()))),
    ])
}

pub(crate) fn event_to_js(e: &Event) -> JsValue {
    let c = &e.change;
    object(&[
        ("state", c.state.as_str().into()),
        ("key", opt(c.key.as_ref().map(|k| k.as_str()))),
        ("attempts", c.attempts.into()),
        (
            "nextAttemptAt",
            opt(c.next_attempt_at.map(|t| t.as_millis() as f64)),
        ),
        ("warning", opt(e.warning.as_deref())),
    ])
}

fn settle_to_promise(settling: super::Result<super::Settling>) -> Promise {
    let mut settling = match settling {
        Err(e) => return Promise::reject(&e.into()),
        Ok(settling) => Some(settling),
    };
    Promise::new(&mut |resolve, reject| {
        if let Some(settling) = settling.take() {
            settling.then(move |result| {
                let _ = match result {
                    Ok(s) => resolve.call1(&JsValue::NULL, &result_to_js(&s)),
                    Err(e) => reject.call1(&JsValue::NULL, &e.into()),
                };
            });
        }
    })
}

#[wasm_bindgen]
impl Submitter {
    /// `new Submitter(name, options)`: throws an error naming a wrong option; never throws for
    /// storage problems (they are warnings).
    #[wasm_bindgen(constructor)]
    pub fn new(
        name: &str,
        #[wasm_bindgen(unchecked_param_type = "SubmitterOptions")] options: JsValue,
    ) -> Result<Submitter, JsValue> {
        let options = options::from_js(&options)?;
        Ok(Submitter::open(name, options)?)
    }

    /// Sends `body` once: resolves when the outcome is definite, or `unsure` when retries
    /// stopped. Rejects, with nothing stored or sent, for a body JSON cannot carry or when
    /// another body is pending.
    #[wasm_bindgen(js_name = submit, unchecked_return_type = "Promise<SubmitResult>")]
    pub fn submit_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "unknown")] body: JsValue,
    ) -> Promise {
        settle_to_promise(to_json(&body).and_then(|text| self.submit(&text)))
    }

    /// Resends the pending submission: same key, same body.
    #[wasm_bindgen(js_name = tryAgain, unchecked_return_type = "Promise<SubmitResult>")]
    pub fn try_again_js(&self) -> Promise {
        settle_to_promise(self.try_again())
    }

    /// The pending submission, or null.
    #[wasm_bindgen(js_name = pending, unchecked_return_type = "PendingSubmission | null")]
    pub fn pending_js(&self) -> JsValue {
        match self.pending_record() {
            None => JsValue::NULL,
            Some(r) => object(&[
                ("key", r.key.as_str().into()),
                ("body", super::submitter::parse_body(&r.request.body)),
                ("attempts", r.attempts.into()),
                ("startedAt", (r.started_at.as_millis() as f64).into()),
            ]),
        }
    }

    /// The current state.
    #[wasm_bindgen(getter, js_name = state, unchecked_return_type = "SubmitterState")]
    pub fn state_js(&self) -> JsValue {
        self.current_state().as_str().into()
    }

    /// Calls `listener` at once with the current state (and any warning from the constructor),
    /// then on every change. Returns a function that stops it.
    #[wasm_bindgen(js_name = onChange, unchecked_return_type = "() => void")]
    pub fn on_change_js(
        &self,
        #[wasm_bindgen(unchecked_param_type = "(change: SubmitterChange) => void")]
        listener: JsValue,
    ) -> Result<JsValue, JsValue> {
        let Some(listener) = as_function(listener) else {
            return Err(super::Error::option("onChange needs a function").into());
        };
        let id = self.on_change(js_listener(listener));
        let weak = self.weak();
        Ok(Closure::once_into_js(move || {
            Submitter::off_weak(&weak, id)
        }))
    }
}
