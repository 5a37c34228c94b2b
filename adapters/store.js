// What the React and Vue adapters share: one entry per submission name per page, which makes the
// package's Submitter once, listens to it while a component does, and keeps the snapshot a
// component renders. No rule of its own: when to retry, what an answer means and the key are the
// Submitter's; this only turns its events and promises into values a framework can render.
//
// The entries live on globalThis, so a module evaluated twice (fast refresh, two chunks of one
// app) finds the same Submitter, and a name is never sent by two Submitters of one page.

const ENTRIES = Symbol.for('oncekey.adapters.entries');
const INIT = Symbol.for('oncekey.adapters.init');

// While the outcome is unknown (CONTRACT.md section 4): sending, waiting, unsure (and expired,
// which stays locked too).
const LOCKED = ['sending', 'waiting', 'unsure', 'expired'];

/** What a component renders before the Submitter exists, and on the server. */
export const IDLE = Object.freeze({
  ready: false,
  state: 'idle',
  key: null,
  attempts: 0,
  nextAttemptAt: null,
  waitingFor: null,
  pending: null,
  locked: false,
  settlement: null,
  error: null,
  warning: null,
  storage: null,
});

/** A calls' options object ({ signal }), not an event a handler was given. */
const isOptions = (o) => o !== null && typeof o === 'object' && !('target' in o) && !('nativeEvent' in o);

/** In a page (not a server render, not a worker). */
export const inBrowser = () => typeof document !== 'undefined';

const notInBrowser = () => {
  const e = new Error('oncekey submits from a page: this ran on the server (or outside a page)');
  e.name = 'OncekeyError';
  e.code = 'state';
  return e;
};

/** The package's init(), called once per page, however many adapters and hooks ask. */
export function ready(init) {
  if (!inBrowser()) return Promise.reject(notInBrowser());
  return (globalThis[INIT] ??= Promise.resolve()
    .then(() => init())
    .then(
      () => undefined,
      (e) => {
        // Asked again later (the network may be back), not failed for the page's life.
        globalThis[INIT] = undefined;
        throw e;
      },
    ));
}

/** The entry of `name`, made on first use; `pkg` is the package's { init, Submitter }. */
export function entryFor(name, options, pkg) {
  const entries = (globalThis[ENTRIES] ??= new Map());
  let entry = entries.get(name);
  if (!entry) entries.set(name, (entry = new Entry(name, options, pkg)));
  return entry;
}

/** Stands in for an entry on the server: always idle, never sends. */
export const SERVER = Object.freeze({
  subscribe: () => () => {},
  read: () => IDLE,
  update() {},
  submit: () => Promise.reject(notInBrowser()),
  tryAgain: () => Promise.reject(notInBrowser()),
  sendAsNew: () => Promise.reject(notInBrowser()),
  discard() {},
  setSecrets() {},
  submitter: null,
});

class Entry {
  #name;
  // The options of the name's first use, which the Submitter is made with; and the latest
  // render's, whose attemptHeaders it calls.
  #first;
  #options;
  #pkg;
  #snapshot = IDLE;
  #listeners = new Set();
  #started = null;
  #off = null;
  #secrets = null;
  // Calls of this entry's whose promise has not settled: while none, a round under way was
  // started by somebody else (a resumed record, the Submitter used directly) and is joined.
  #calls = 0;
  // Aborts the join's wait: a call of the page's aborted by its signal stops the retries unless
  // another call waits, and the join is nobody's call.
  #joined = null;
  submitter = null;

  constructor(name, options, pkg) {
    this.#name = name;
    this.#first = options;
    this.#options = options;
    this.#pkg = pkg;
  }

  // Bound, so that components can pass them around (onClick={submit}) and they stay the same
  // function from render to render.
  read = () => this.#snapshot;

  /** Calls `listener` on every change; starts the Submitter on first use. */
  subscribe = (listener) => {
    this.#listeners.add(listener);
    this.#start().catch(() => {});
    this.#listen();
    return () => {
      this.#listeners.delete(listener);
      if (this.#listeners.size === 0) {
        this.#off?.();
        this.#off = null;
      }
    };
  };

  /** The options a component rendered last: options.attemptHeaders is called through them. */
  update(options) {
    this.#options = options;
  }

  submit = (body, options) => this.#call((s) => s.submit(body, options), false, options?.signal);

  // An onClick handler passes its event: only an options object ({ signal }) is handed on.
  tryAgain = (options) => {
    const given = isOptions(options) ? options : undefined;
    return this.#call((s) => s.tryAgain(given), false, given?.signal);
  };

  sendAsNew = () => this.#call((s) => s.sendAsNew());

  discard = () => {
    if (this.submitter) this.submitter.discard();
    else this.#start().then(() => this.submitter.discard(), () => {});
  };

  setSecrets = (fields) => {
    if (this.submitter) this.submitter.setSecrets(fields);
    else this.#secrets = fields;
  };

  // The Submitter, made once init() has run. A pending submission it found and resumed at once
  // (options.resume) is joined, so that its settlement is heard as a call's is.
  #start() {
    return (this.#started ??= ready(this.#pkg.init)
      .then(() => {
        const options = this.#first ?? {};
        const given = options.attemptHeaders;
        const submitter = new this.#pkg.Submitter(
          this.#name,
          typeof given === 'function'
            ? { ...options, attemptHeaders: (attempt) => (this.#options?.attemptHeaders ?? given)(attempt) }
            : options,
        );
        this.submitter = submitter;
        const secrets = this.#secrets;
        this.#secrets = null;
        this.#listen();
        this.#set({ ready: true, storage: submitter.storage });
        // Fields setSecrets could not take are said in the snapshot; the Submitter is made, and
        // stays this entry's (made twice, it would resume one record twice).
        if (secrets) {
          try {
            submitter.setSecrets(secrets);
          } catch (e) {
            this.#set({ error: e });
          }
        }
        this.#join();
      })
      .catch((e) => {
        // init() failed (the .wasm could not be fetched, say) or an option is wrong: said in
        // the snapshot, and by every call's promise.
        this.#started = null;
        this.#set({ error: e });
        throw e;
      }));
  }

  #listen() {
    if (this.submitter && !this.#off && this.#listeners.size > 0) {
      this.#off = this.submitter.onChange((change) => this.#changed(change));
    }
  }

  // A round this entry did not start (a record resumed at once, or once the connection is back,
  // or found in IndexedDB a moment after the Submitter was made) is joined when it sends, so that
  // its settlement reaches the snapshot as a call's does. tryAgain() while sending only waits
  // for the attempt under way; while waiting it would start a new round, so not then.
  #join() {
    if (this.#calls === 0 && this.submitter?.state === 'sending') {
      const joined = (this.#joined = new AbortController());
      this.#call((s) => s.tryAgain({ signal: joined.signal }), true);
    }
  }

  #changed({ state, key, attempts, nextAttemptAt, waitingFor, warning }) {
    const was = this.#snapshot;
    const locked = LOCKED.includes(state);
    // The stored body, read again only for another key: the same object from render to render,
    // so that an effect that fills a form from it runs once per submission.
    const pending = !locked ? null : key === was.key && was.pending !== null ? was.pending : (this.submitter.pending()?.body ?? null);
    this.#set({
      state,
      key,
      attempts,
      nextAttemptAt,
      waitingFor: waitingFor ?? null,
      pending,
      locked,
      warning: warning ?? was.warning,
      storage: this.submitter.storage,
      // How the last round ended; none while one is under way.
      settlement: state === 'sending' || state === 'waiting' ? null : was.settlement,
    });
    // After the listeners: the Submitter is in the middle of telling its change.
    if (state === 'sending' && this.#calls === 0) queueMicrotask(() => this.#join());
  }

  // Runs `f` on the Submitter (once it exists); the settlement or the error goes into the
  // snapshot, and the caller gets the package's own promise. A join (`joining`) is no call of
  // the page's: the error a call just had stays in the snapshot. `signal` is the call's.
  #call(f, joining = false, signal = undefined) {
    // Aborted before it began, a call never waited on the round (nothing of it to stop).
    const waits = signal?.aborted === false;
    this.#calls += 1;
    let promise;
    try {
      promise = this.submitter ? f(this.submitter) : this.#start().then(() => f(this.submitter));
    } catch (e) {
      this.#calls -= 1;
      throw e;
    }
    if (this.#snapshot.error && !joining) this.#set({ error: null });
    promise.then(
      (settlement) => {
        this.#calls -= 1;
        this.#set(joining ? { settlement } : { settlement, error: null });
      },
      (error) => {
        this.#calls -= 1;
        // The join's own abort (below) says nothing the aborted call did not.
        if (!joining || error?.code !== 'aborted') this.#set({ error });
        // Aborted while it waited on a round the entry joined: the join stops waiting too, or
        // the retries would go on with nobody's call waiting.
        if (waits && error?.code === 'aborted') this.#joined?.abort();
        // Refused (another body is pending, say) while a round of somebody else's is under way.
        this.#join();
      },
    );
    return promise;
  }

  #set(patch) {
    this.#snapshot = Object.freeze({ ...this.#snapshot, ...patch });
    for (const listener of this.#listeners) listener(this.#snapshot);
  }
}
