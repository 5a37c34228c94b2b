import type { Ref } from 'vue';
import type { SubmitterOptions } from './oncekey.js';
import type { SubmitterCalls, SubmitterSnapshot } from './store.js';

export type { OncekeyError, SubmitterCalls, SubmitterSnapshot } from './store.js';

/** The composable's value: each field of the snapshot as a read-only ref, and the Submitter's calls. */
export type UseSubmitter<Body = unknown> = {
  readonly [Field in keyof SubmitterSnapshot<Body>]: Readonly<Ref<SubmitterSnapshot<Body>[Field]>>;
} & SubmitterCalls<Body>;

/**
 * The submission `name` (one Submitter per name per page, made after init(), which the
 * composable calls once). `options` are read when the page first uses the name.
 */
export declare function useSubmitter<Body = unknown>(name: string, options: SubmitterOptions): UseSubmitter<Body>;

/** The package's init(), once per page, shared with the composables. */
export declare function ready(): Promise<void>;
