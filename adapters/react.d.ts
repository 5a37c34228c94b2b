import type { Submitter, SubmitterOptions, SubmitterState, SubmitResult } from './oncekey.js';

/** The package's errors: an Error named "OncekeyError" whose `code` says why. */
export interface OncekeyError extends Error {
  code: 'option' | 'body' | 'pending' | 'state' | 'discarded';
}

/** What a component renders: the submission's state, from the Submitter's events and promises. */
export interface SubmitterSnapshot<Body = unknown> {
  /** init() has run and the Submitter exists (false on the server and on the first render). */
  readonly ready: boolean;
  /** "idle" until ready, and on the server. */
  readonly state: SubmitterState;
  /** The key of the pending (or last) submission, or null. */
  readonly key: string | null;
  readonly attempts: number;
  /** In "waiting": when the next attempt is due, ms since the epoch. */
  readonly nextAttemptAt: number | null;
  /**
   * The stored body while the outcome is unknown, also after a reload (fill the form from it);
   * the same object for as long as the submission is pending. Null otherwise.
   */
  readonly pending: Body | null;
  /** The outcome is unknown (sending, waiting, unsure): keep the inputs locked. */
  readonly locked: boolean;
  /** How the last round ended (submit, tryAgain or a resumed submission); null while one is under way. */
  readonly settlement: SubmitResult | null;
  /** Why the last call was refused or failed (a different body pending, a discard, init failing). */
  readonly error: OncekeyError | Error | null;
  /** Storage degraded to memory, or an unreadable record was removed. */
  readonly warning: string | null;
  /** Where the record is kept, once ready. */
  readonly storage: 'session' | 'local' | 'memory' | null;
}

/** The hook's value: the snapshot and the Submitter's calls (the same functions on every render). */
export interface UseSubmitter<Body = unknown> extends SubmitterSnapshot<Body> {
  /** Submitter.submit, after init(); joins the pending submission for the same body. */
  submit(body: Body): Promise<SubmitResult>;
  /** Submitter.tryAgain: the same key and body. */
  tryAgain(): Promise<SubmitResult>;
  /** Submitter.discard: the next submission gets a new key. */
  discard(): void;
  /** Submitter.setSecrets: sent with every attempt, never stored. */
  setSecrets(fields: Record<string, unknown>): void;
  /** The Submitter itself, once ready. */
  readonly submitter: Submitter | null;
}

/**
 * The submission `name` (one Submitter per name per page, made after init(), which the hook
 * calls once). `options` are read when the page first uses the name.
 */
export declare function useSubmitter<Body = unknown>(name: string, options: SubmitterOptions): UseSubmitter<Body>;

/** The package's init(), once per page, shared with the hooks. */
export declare function ready(): Promise<void>;
