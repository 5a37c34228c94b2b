import type { Ref } from 'vue';
import type { Submitter, SubmitterOptions, SubmitterState, SubmitResult } from './oncekey.js';

/** The package's errors: an Error named "OncekeyError" whose `code` says why. */
export interface OncekeyError extends Error {
  code: 'option' | 'body' | 'pending' | 'state' | 'discarded';
}

/** The composable's value: read-only refs of the submission's state, and the Submitter's calls. */
export interface UseSubmitter<Body = unknown> {
  /** init() has run and the Submitter exists (false on the server and until mounted). */
  readonly ready: Readonly<Ref<boolean>>;
  /** "idle" until ready, and on the server. */
  readonly state: Readonly<Ref<SubmitterState>>;
  readonly key: Readonly<Ref<string | null>>;
  readonly attempts: Readonly<Ref<number>>;
  /** In "waiting": when the next attempt is due, ms since the epoch. */
  readonly nextAttemptAt: Readonly<Ref<number | null>>;
  /** The stored body while the outcome is unknown, also after a reload; null otherwise. */
  readonly pending: Readonly<Ref<Body | null>>;
  /** The outcome is unknown (sending, waiting, unsure): keep the inputs locked. */
  readonly locked: Readonly<Ref<boolean>>;
  /** How the last round ended; null while one is under way. */
  readonly settlement: Readonly<Ref<SubmitResult | null>>;
  /** Why the last call was refused or failed. */
  readonly error: Readonly<Ref<OncekeyError | Error | null>>;
  /** Storage degraded to memory, or an unreadable record was removed. */
  readonly warning: Readonly<Ref<string | null>>;
  readonly storage: Readonly<Ref<'session' | 'local' | 'memory' | null>>;
  submit(body: Body): Promise<SubmitResult>;
  tryAgain(): Promise<SubmitResult>;
  discard(): void;
  setSecrets(fields: Record<string, unknown>): void;
  /** The Submitter itself, once ready. */
  readonly submitter: Submitter | null;
}

/**
 * The submission `name` (one Submitter per name per page, made after init(), which the
 * composable calls once). `options` are read when the page first uses the name.
 */
export declare function useSubmitter<Body = unknown>(name: string, options: SubmitterOptions): UseSubmitter<Body>;

/** The package's init(), once per page, shared with the composables. */
export declare function ready(): Promise<void>;
