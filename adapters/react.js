// oncekey/react: useSubmitter(name, options), the package's Submitter as a React hook (React 18
// and 19). It renders values and never writes the DOM, so it fits controlled inputs. One
// Submitter per name per page (store.js), made after init(), which the hook calls once: strict
// mode's double effects and fast refresh find the same one and send nothing twice.
import { useEffect, useMemo, useSyncExternalStore } from 'react';
import init, { Submitter } from './oncekey.js';
import { IDLE, SERVER, entryFor, inBrowser, ready as readyOnce } from './store.js';

const PACKAGE = { init, Submitter };
const serverSnapshot = () => IDLE;

/** The package's init(), once per page, shared with every hook: await it to use the package directly. */
export const ready = () => readyOnce(init);

/**
 * The submission `name` as React state: { ready, state, key, attempts, nextAttemptAt, waitingFor, pending,
 * locked, settlement, error, warning, storage } and submit, tryAgain, sendAsNew, discard, setSecrets.
 * `options` are the Submitter's, read when the page first uses the name (attemptHeaders is
 * called through the latest render's).
 */
export function useSubmitter(name, options) {
  const entry = inBrowser() ? entryFor(name, options, PACKAGE) : SERVER;
  const snapshot = useSyncExternalStore(entry.subscribe, entry.read, serverSnapshot);
  useEffect(() => entry.update(options));
  return useMemo(
    () => ({
      ...snapshot,
      submit: entry.submit,
      tryAgain: entry.tryAgain,
      sendAsNew: entry.sendAsNew,
      discard: entry.discard,
      setSecrets: entry.setSecrets,
      submitter: entry.submitter,
    }),
    [snapshot, entry],
  );
}
