// What the React and Vue adapters' declarations share (store.js is their shared code).
import type { SubmitOptions, Submitter, SubmitterState, SubmitResult } from './oncekey.js';

/** The package's errors: an Error named "OncekeyError" whose `code` says why. */
export interface OncekeyError extends Error {
  code: 'option' | 'body' | 'pending' | 'state' | 'discarded' | 'aborted';
}

/** The submission's state, from the Submitter's events and promises. */
export interface SubmitterSnapshot<Body = unknown> {
  /** init() has run and the Submitter exists (false on the server and before it is mounted). */
  readonly ready: boolean;
  /** "idle" until ready, and on the server. */
  readonly state: SubmitterState;
  /** The key of the pending (or last) submission, or null. */
  readonly key: string | null;
  readonly attempts: number;
  /** In "waiting": when the next attempt is due, ms since the epoch. */
  readonly nextAttemptAt: number | null;
  /** In "waiting": for the retry due at nextAttemptAt ("retry") or for the connection ("online"). */
  readonly waitingFor: 'retry' | 'online' | null;
  /**
   * The stored body while the outcome is unknown, also after a reload (fill the form from it);
   * the same object for as long as the submission is pending. Null otherwise. For a FormData
   * upload it is what is stored of it: `{ fields, files: [{ field, name, type, size, sha256 }] }`
   * (fill the form from `fields`; the files are in IndexedDB).
   */
  readonly pending: Body | null;
  /** The outcome is unknown (sending, waiting, unsure, or expired until sent as new or discarded): keep the inputs locked. */
  readonly locked: boolean;
  /** How the last round ended (submit, tryAgain or a resumed submission); null while one is under way. */
  readonly settlement: SubmitResult | null;
  /** Why the last call was refused or failed (a different body pending, a discard, init failing). */
  readonly error: OncekeyError | Error | null;
  /** Storage degraded to memory, or an unreadable record was removed. */
  readonly warning: string | null;
  /** Where the record is kept, once ready. */
  readonly storage: 'session' | 'local' | 'indexeddb' | 'memory' | null;
}

/** The Submitter's calls, made once init() has run: the same functions for the page's life. */
export interface SubmitterCalls<Body = unknown> {
  /** Submitter.submit; joins the pending submission for the same body. */
  submit(body: Body, options?: SubmitOptions): Promise<SubmitResult>;
  /**
   * Submitter.tryAgain: the same key and body ({ signal } aborts the wait, code "aborted").
   * Handed to a click handler as it is (onClick={tryAgain}, @click="tryAgain"), it is given the
   * event, which is taken for no options.
   */
  tryAgain(options?: SubmitOptions | { readonly target: unknown }): Promise<SubmitResult>;
  /** Submitter.sendAsNew: an expired submission sent deliberately under a new key. */
  sendAsNew(): Promise<SubmitResult>;
  /** Submitter.discard: the next submission gets a new key. */
  discard(): void;
  /** Submitter.setSecrets: sent with every attempt, never stored. */
  setSecrets(fields: Record<string, unknown>): void;
  /** The Submitter itself, once ready. */
  readonly submitter: Submitter | null;
}
