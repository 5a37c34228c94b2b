//! # The form kit's declarations, until the Rust form kit lands
//!
//! The form kit is, for now, `kit.js` beside this file: a client of the exported `Submitter`
//! class, which `scripts/build-pkg.sh` copies into the package and re-exports from its
//! `oncekey.js`. These are its TypeScript declarations, written into `oncekey.d.ts` by
//! wasm-bindgen. Both go when the Rust form kit (`form.rs`) exports `attachForm` and
//! `autoAttach` itself.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const TS_FORM_KIT: &'static str = r#"
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
"#;
