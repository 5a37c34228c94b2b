//! # The JavaScript API
//!
//! What the npm package `oncekey` exports besides `init`: the `Submitter` class and the form
//! kit, written in JavaScript (`browser.js`) around the wasm core ([`machine`](super::machine)).
//! Their TypeScript declarations are the custom section below (wasm-bindgen writes it into
//! `oncekey.d.ts`), and `scripts/build-pkg.sh` re-exports them from the package's `oncekey.js`.
//!
//! For Rust programs in the browser, the same API as thin bindings, gloo's way: [`Submitter`]
//! takes and gives JavaScript values, and its promises become futures with
//! `wasm_bindgen_futures::JsFuture`.

use crate::prelude::*;
use js_sys::{Function, Promise};
use wasm_bindgen::prelude::*;

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

/**
 * One named submission: one key per intended submission, kept in storage across retries and
 * reloads until a definite answer. Make it after `await init()`.
 */
export declare class Submitter {
  /** Throws an error naming a wrong option; never throws for storage problems (warnings). */
  constructor(name: string, options: SubmitterOptions);
  /** The name it was made with. */
  readonly name: string;
  /**
   * Sends `body` once: resolves when the outcome is definite, or `unsure` when retries
   * stopped. The same body while one is pending joins it. Rejects, with nothing stored or
   * sent, for a body JSON cannot carry (code "body") or when another body is pending
   * ("pending").
   */
  submit(body: unknown): Promise<SubmitResult>;
  /** Resends the pending submission: same key, same body ("state" when nothing is pending). */
  tryAgain(): Promise<SubmitResult>;
  /**
   * Drops an unconfirmed submission: the record is removed, an attempt under way is aborted,
   * waiting calls reject ("discarded"), and the next submission gets a new key.
   */
  discard(): void;
  /** The pending submission, or null. */
  pending(): PendingSubmission | null;
  /** The current state. */
  readonly state: SubmitterState;
  /** Where records are kept: the storage asked for, or "memory" once it could not be used. */
  readonly storage: "session" | "local" | "memory";
  /**
   * Calls `listener` at once with the current state (and any warning from the constructor),
   * then on every change. Returns a function that stops it.
   */
  onChange(listener: (change: SubmitterChange) => void): () => void;
  /**
   * Fields that are never stored (a password, a card number), merged into the JSON object body
   * of every attempt from now on, in memory only; dropped when the submission settles or is
   * discarded. After a reload, ask for them again and set them before `tryAgain()`.
   */
  setSecrets(fields: Record<string, unknown>): void;
}

/** Options of the form kit: the submitter's, and its own. */
export interface FormKitOptions extends Partial<Omit<SubmitterOptions, "resume">> {
  /** The submission's name; default: the form's `data-oncekey` attribute, or its id. */
  name?: string;
  /** Clear the form after a success; default true. */
  clearOnSuccess?: boolean;
  /** "Ticket #{id} created", with `{field}` from the answer, or a function of the answer. */
  successMessage?: string | ((body: unknown) => string);
  /** After a reload: resend at once ("auto", the default) or wait for "Try again" ("manual"). */
  resume?: "auto" | "manual";
}

/** A form wired to a submitter. */
export interface FormKit {
  readonly submitter: Submitter;
  /** Undoes everything the kit did; a pending submission stays stored. */
  detach(): void;
  /** "Try again", as the button does. */
  tryAgain(): void;
  /** "Discard", as the button does. */
  discard(): void;
}

/**
 * Wires `form` to a submitter: locks it while the outcome is unknown, restores it after a
 * reload, says what is happening, offers "Try again". URL and method default to the form's.
 */
export declare function attachForm(form: HTMLFormElement, options?: FormKitOptions): FormKit;

/** `attachForm` for every `<form data-oncekey="NAME">` on the page. */
export declare function autoAttach(options?: FormKitOptions): FormKit[];

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

#[wasm_bindgen(module = "/src/web/browser.js")]
extern "C" {
    /// One named submission: one key per intended submission, kept in storage across retries
    /// and reloads until a definite answer (the package's `Submitter`; see the README).
    #[derive(Debug, Clone)]
    pub type Submitter;

    #[wasm_bindgen(constructor, catch)]
    fn construct(name: &str, options: &JsValue) -> Result<Submitter, JsValue>;

    /// Sends `body` once; the promise resolves to the `SubmitResult` object, or rejects with an
    /// `OncekeyError` (its `code`: `body`, `pending` or `discarded`).
    #[wasm_bindgen(method)]
    pub fn submit(this: &Submitter, body: &JsValue) -> Promise;

    /// Resends the pending submission: same key, same body.
    #[wasm_bindgen(method, js_name = tryAgain)]
    pub fn try_again(this: &Submitter) -> Promise;

    /// Drops the unconfirmed submission; the next one gets a new key.
    #[wasm_bindgen(method)]
    pub fn discard(this: &Submitter);

    /// The pending submission (`{ key, body, attempts, startedAt }`), or `null`.
    #[wasm_bindgen(method)]
    pub fn pending(this: &Submitter) -> JsValue;

    /// The current state: `idle`, `sending`, `waiting`, `unsure` or an outcome.
    #[wasm_bindgen(method, getter)]
    pub fn state(this: &Submitter) -> String;

    /// Where records are kept: `session`, `local`, or `memory` (asked for, or degraded).
    #[wasm_bindgen(method, getter)]
    pub fn storage(this: &Submitter) -> String;

    /// Calls `listener` with every change (now first); returns the function that stops it.
    #[wasm_bindgen(method, catch, js_name = onChange)]
    pub fn on_change(this: &Submitter, listener: &Function) -> Result<Function, JsValue>;

    /// Fields never stored, merged into every attempt's JSON object body.
    #[wasm_bindgen(method, catch, js_name = setSecrets)]
    pub fn set_secrets(this: &Submitter, fields: &JsValue) -> Result<(), JsValue>;
}

impl Submitter {
    /// `new Submitter(name, options)`: an `OncekeyError` naming a wrong option; never an error
    /// for storage problems (they are warnings, through `on_change`).
    pub fn new(name: &str, options: &JsValue) -> Result<Submitter, JsValue> {
        super::machine::install();
        Submitter::construct(name, options)
    }
}
