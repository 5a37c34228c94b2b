// oncekey/vue: useSubmitter(name, options), the package's Submitter as a Vue 3 composable
// returning read-only refs. It never writes the DOM. One Submitter per name per page (store.js),
// made after init(), which the composable calls once; it listens from mount to unmount (or for
// the effect scope it runs in), and on the server it stays idle.
import { computed, getCurrentInstance, getCurrentScope, onMounted, onScopeDispose, shallowRef } from 'vue';
import init, { Submitter } from './oncekey.js';
import { IDLE, SERVER, entryFor, inBrowser, ready as readyOnce } from './store.js';

const PACKAGE = { init, Submitter };

/** The package's init(), once per page, shared with every composable: await it to use the package directly. */
export const ready = () => readyOnce(init);

/**
 * The submission `name` as refs: ready, state, key, attempts, nextAttemptAt, waitingFor, pending, locked,
 * settlement, error, warning, storage; and submit, tryAgain, sendAsNew, discard, setSecrets. `options` are
 * the Submitter's, read when the page first uses the name.
 */
export function useSubmitter(name, options) {
  const entry = inBrowser() ? entryFor(name, options, PACKAGE) : SERVER;
  entry.update(options);
  // Idle until mounted, as the server rendered it, so hydration matches.
  const snapshot = shallowRef(IDLE);
  let off = null;
  const start = () => {
    off ??= entry.subscribe((s) => (snapshot.value = s));
    snapshot.value = entry.read();
  };
  const stop = () => {
    off?.();
    off = null;
  };
  if (getCurrentInstance()) onMounted(start);
  else start();
  if (getCurrentScope()) onScopeDispose(stop);
  const refs = {};
  for (const field of Object.keys(IDLE)) refs[field] = computed(() => snapshot.value[field]);
  return {
    ...refs,
    submit: entry.submit,
    tryAgain: entry.tryAgain,
    sendAsNew: entry.sendAsNew,
    discard: entry.discard,
    setSecrets: entry.setSecrets,
    get submitter() {
      return entry.submitter;
    },
  };
}
