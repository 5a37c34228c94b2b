import type { SubmitterOptions } from './oncekey.js';
import type { SubmitterCalls, SubmitterSnapshot } from './store.js';

export type { OncekeyError, SubmitterCalls, SubmitterSnapshot } from './store.js';

/** The hook's value: the snapshot to render, and the Submitter's calls. */
export interface UseSubmitter<Body = unknown> extends SubmitterSnapshot<Body>, SubmitterCalls<Body> {}

/**
 * The submission `name` (one Submitter per name per page, made after init(), which the hook
 * calls once). `options` are read when the page first uses the name.
 */
export declare function useSubmitter<Body = unknown>(name: string, options: SubmitterOptions): UseSubmitter<Body>;

/** The package's init(), once per page, shared with the hooks. */
export declare function ready(): Promise<void>;
