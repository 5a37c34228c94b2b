// The browser driver: the npm package's `Submitter` and form kit. The rules are the core's, in
// wasm (machine.rs: whether and when to retry, what a status means, the key, the record, "same
// body"); this file carries out its actions in the page: storage, fetch under a Web Lock with a
// timeout, timers, promises and listeners, and the form kit's DOM work. Written in JavaScript
// because promises, web APIs and the DOM cost wasm many times the bytes through bindings.
// Nothing here runs at load, so the module loads in a worker too.

// The core's class, handed over by the wasm module when it starts (machine.rs, `provide`).
let Core;
export function provide(core) {
  Core = core.constructor;
  core.free();
}

// The driver's errors, a wrong option unless said otherwise: an Error named OncekeyError with
// its code: option, body, pending, state or discarded.
const fail = (message, code = 'option') => {
  const e = new Error(message);
  e.name = 'OncekeyError';
  e.code = code;
  return e;
};

// What a value says, without assuming it is an Error.
const describe = (v) => {
  if (v instanceof Error) {
    const name = String(v.name);
    return !name || name === 'Error' || name === 'OncekeyError' ? String(v.message) : `${name}: ${v.message}`;
  }
  if (typeof v === 'string') return v;
  try {
    const s = JSON.stringify(v);
    if (typeof s === 'string') return s;
  } catch {
    // Described below.
  }
  return 'a thrown ' + typeof v;
};

const warn = (message) => console.warn('oncekey: ' + message);

// ## Options
//
// Every mistake is an error that names the option (an unknown name too, so that a typo such as
// `timeout` for `timeoutMs` does not pass silently). The retry policy's own rules (a cap below
// the base, say) are the core's.

const KNOWN = [
  'url',
  'method',
  'headers',
  'attemptHeaders',
  'keyHeader',
  'keyFormat',
  'timeoutMs',
  'retry',
  'storage',
  'credentials',
  'encoding',
  'resume',
];
const RETRY_KNOWN = ['attempts', 'base', 'cap', 'budget'];
// The words of each choice; the first is the default.
const CHOICES = {
  keyFormat: ['bare', 'sf-string'],
  storage: ['session', 'local', 'memory'],
  credentials: ['same-origin', 'omit', 'include'],
  encoding: ['json', 'form'],
};
// An HTTP token (RFC 9110 section 5.6.2): what a method or a header name must be.
const TOKEN = /^[!#$%&'*+\-.^_\x60|~0-9A-Za-z]+$/;
// What a header value cannot hold: control characters but the tab.
const CONTROL = /[\0-\x08\n-\x1f\x7f-\x9f]/;

// A value as the error message shows it.
function show(value) {
  if (typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'function') return 'a function';
  try {
    const s = JSON.stringify(value);
    if (typeof s === 'string') return s;
  } catch {
    // Named by its type below.
  }
  return typeof value;
}

const wrong = (path, expected, value) => fail(`${path} must be ${expected}, not ${show(value)}`);

const isPlainObject = (v) => typeof v === 'object' && v !== null && !Array.isArray(v);

function checkNames(object, known, prefix) {
  for (const name of Object.keys(object)) {
    if (!known.includes(name)) throw fail(`${prefix}${name} is not an option; the options are ${known.join(', ')}`);
  }
}

function string(object, name, fallback) {
  const value = object[name];
  if (value === undefined) return fallback;
  if (typeof value === 'string' && value) return value;
  throw wrong('options.' + name, 'a non-empty string', value);
}

function millis(object, name, path, fallback) {
  const value = object[name];
  if (value === undefined) return fallback;
  if (typeof value === 'number' && value > 0 && value <= 2147483647) return Math.ceil(value);
  throw wrong(path, 'a number of milliseconds above 0 (at most 2147483647)', value);
}

// The options with their defaults, checked.
function readOptions(value) {
  if (!isPlainObject(value)) throw fail('options must be an object such as { url: "/api/tickets" }');
  checkNames(value, KNOWN, 'options.');
  const o = {};
  o.url = string(value, 'url');
  if (o.url === undefined) throw fail('options.url is required: where to send the submission');
  // ASCII only, as the core compares methods.
  o.method = string(value, 'method', 'POST').replace(/[a-z]+/g, (s) => s.toUpperCase());
  if (!TOKEN.test(o.method)) throw wrong('options.method', 'an HTTP method such as "POST"', o.method);
  o.keyHeader = string(value, 'keyHeader', 'Idempotency-Key');
  if (!TOKEN.test(o.keyHeader)) throw wrong('options.keyHeader', 'a header name', o.keyHeader);
  for (const [name, words] of Object.entries(CHOICES)) {
    const word = value[name] ?? words[0];
    if (!words.includes(word)) {
      throw wrong('options.' + name, 'one of ' + words.map((w) => JSON.stringify(w)).join(', '), word);
    }
    o[name] = word;
  }
  o.timeoutMs = millis(value, 'timeoutMs', 'options.timeoutMs', 30000);
  o.resume = value.resume ?? false;
  if (typeof o.resume !== 'boolean') throw wrong('options.resume', 'true or false', o.resume);
  const headers = value.headers ?? {};
  if (!isPlainObject(headers)) throw fail('options.headers must be an object of header names to string values');
  o.headers = Object.entries(headers);
  for (const [name, v] of o.headers) {
    if (typeof v !== 'string') throw wrong(`options.headers[${JSON.stringify(name)}]`, 'a string', v);
    if (!TOKEN.test(name) || CONTROL.test(v)) {
      throw fail('options.headers has a header that cannot be sent: ' + JSON.stringify(name));
    }
  }
  o.attemptHeaders = value.attemptHeaders;
  if (o.attemptHeaders !== undefined && typeof o.attemptHeaders !== 'function') {
    throw wrong('options.attemptHeaders', 'a function returning headers', o.attemptHeaders);
  }
  const retry = value.retry ?? {};
  if (!isPlainObject(retry)) {
    throw fail('options.retry must be an object such as { attempts: 8, base: 500, cap: 30000, budget: 900000 }');
  }
  checkNames(retry, RETRY_KNOWN, 'options.retry.');
  o.attempts = retry.attempts ?? 8;
  if (!(Number.isInteger(o.attempts) && o.attempts >= 1 && o.attempts <= 4294967295)) {
    throw wrong('options.retry.attempts', 'a whole number of at least 1', o.attempts);
  }
  o.base = millis(retry, 'base', 'options.retry.base', 500);
  o.cap = millis(retry, 'cap', 'options.retry.cap', 30000);
  o.budget = millis(retry, 'budget', 'options.retry.budget', 900000);
  return o;
}

// ## The body

const bodyError = (message) => fail(message, 'body');

// The body as JSON text, refusing what JSON cannot carry (a cycle, a BigInt, a function, a
// symbol, NaN or Infinity) instead of letting JSON.stringify drop or mangle it.
function toJson(body) {
  let text;
  try {
    text = JSON.stringify(body, (key, value) => {
      const what =
        typeof value === 'function'
          ? 'a function'
          : typeof value === 'bigint'
            ? 'a BigInt'
            : typeof value === 'symbol'
              ? 'a symbol'
              : typeof value === 'number' && !Number.isFinite(value)
                ? 'NaN or Infinity'
                : null;
      if (what === null) return value;
      const at = key ? ' at ' + JSON.stringify(key) : '';
      throw bodyError(`the body has ${what}${at}, which JSON cannot carry`);
    });
  } catch (e) {
    throw bodyError('the body cannot be sent as JSON: ' + describe(e));
  }
  if (typeof text !== 'string') throw bodyError('the body cannot be sent as JSON: it is undefined');
  return text;
}

// An answer's body: its JSON parsed, or its text; null when empty.
function parseBody(text) {
  if (!text) return null;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

// ## Storage
//
// CONTRACT.md section 5, in the browser: one record per name, under `oncekey:<name>`, in
// sessionStorage by default, localStorage or memory on request; values are the record's JSON
// text, written and read by the core. Storage that cannot be used (blocked in a sandboxed frame,
// disabled, full) degrades to memory with a warning; the submission still happens once.

// The memory store is one per page, like the web storages it stands in for.
const memory = new Map();

const slot = (name) => 'oncekey:' + name;

const degraded = (kind, what, why) =>
  `${kind}Storage ${what} (${describe(why)}); pending submissions are kept in memory and will not survive a reload`;

class Store {
  // The storage of `kind` from the global scope (a getter that throws when it is blocked), once
  // a probe was written and removed (which throws when it is disabled or full); or memory, and
  // `this.warning` says why.
  constructor(kind) {
    this.kind = kind;
    this.web = null;
    if (kind === 'memory') return;
    try {
      const web = globalThis[kind + 'Storage'];
      if (web === undefined || web === null) throw new Error(`this context has no ${kind}Storage`);
      web.setItem('oncekey:probe', '1');
      web.removeItem('oncekey:probe');
      this.web = web;
    } catch (e) {
      this.warning = degraded(kind, 'cannot be used', e);
    }
  }

  // A failure of the web storage: memory from now on; returns the warning.
  degrade(e) {
    this.web = null;
    return degraded(this.kind, 'failed', e);
  }

  // The text stored under `name`, or null; [text, warning] when the storage failed.
  read(name) {
    if (this.web) {
      try {
        return [this.web.getItem(slot(name))];
      } catch (e) {
        return [memory.get(slot(name)) ?? null, this.degrade(e)];
      }
    }
    return [memory.get(slot(name)) ?? null];
  }

  // Writes synchronously, so before the action that follows; returns a warning when it failed
  // (the record is then kept in memory).
  write(name, text) {
    if (this.web) {
      try {
        return void this.web.setItem(slot(name), text);
      } catch (e) {
        memory.set(slot(name), text);
        return this.degrade(e);
      }
    }
    memory.set(slot(name), text);
  }

  remove(name) {
    try {
      this.web?.removeItem(slot(name));
    } catch {
      // A storage that fails to remove fails to read too; nothing more can be done here.
    }
    memory.delete(slot(name));
  }
}

// ## The submitter

// The core's states and outcomes, in the order of its enums (machine.rs).
const STATES = ['idle', 'sending', 'waiting', 'unsure', 'succeeded', 'refused', 'conflict', 'misconfigured', 'expired'];
const OUTCOMES = ['succeeded', 'refused', 'conflict', 'misconfigured', 'unsure', 'expired'];

// The backoff's jitter spreads retries out; it guards no secret, so Math.random does (keys come
// from crypto.getRandomValues).
const jitter = () => (Math.random() * 4294967296) >>> 0;

// The first `n` lines of `text` and the rest.
function lines(text, n) {
  const out = [];
  let at = 0;
  for (let i = 0; i < n; i++) {
    const end = text.indexOf('\n', at);
    out.push(text.slice(at, end));
    at = end + 1;
  }
  out.push(text.slice(at));
  return out;
}

// One named submission: one key per intended submission, kept in storage across retries and
// reloads until a definite answer. See oncekey.d.ts for the API.
export class Submitter {
  #core;
  #o;
  #store;
  #listeners = [];
  #waiters = [];
  #timer = null;
  #armedAt = -1;
  #abort = null;
  #lastBody = null;
  #warnings = [];

  constructor(name, options) {
    if (!Core) throw fail('oncekey is not ready: await init() before making a Submitter', 'state');
    if (typeof name !== 'string' || !name) throw fail("the submitter's name must be a non-empty string");
    const o = (this.#o = readOptions(options));
    try {
      this.#core = new Core(name, o.keyHeader, o.attempts, o.base, o.cap, o.budget);
    } catch (e) {
      throw fail('options.' + describe(e));
    }
    this.name = name;
    const store = (this.#store = new Store(o.storage));
    if (store.warning) this.#warnings.push(store.warning);
    const [text, warning] = store.read(name);
    if (warning) this.#warnings.push(warning);
    if (text !== null) {
      const why = this.#core.restore(Date.now(), text, o.resume);
      if (why !== undefined) {
        store.remove(name);
        this.#warnings.push(`the stored submission ${JSON.stringify(slot(name))} was removed: ${why}`);
      }
    }
    for (const w of this.#warnings) warn(w);
    this.#drive();
  }

  // Sends `body` once (see oncekey.d.ts).
  submit(body) {
    let began;
    try {
      const o = this.#o;
      const random = crypto.getRandomValues(new Uint8Array(16));
      began = this.#core.begin(Date.now(), o.method, o.url, toJson(body), o.encoding === 'form', random);
    } catch (e) {
      return Promise.reject(e);
    }
    const code = began[0];
    if (code === 'S') this.#lastBody = null;
    else if (code !== 'J') {
      return Promise.reject(fail(began.slice(1), code === 'o' ? 'option' : code === 'b' ? 'body' : 'pending'));
    }
    return this.#wait();
  }

  // Resends the pending submission: same key, same body.
  tryAgain() {
    const why = this.#core.tryAgain(Date.now());
    return why === undefined ? this.#wait() : Promise.reject(fail(why, 'state'));
  }

  // The person chose to drop the unconfirmed submission: the record is removed, an attempt under
  // way is aborted, callers waiting on it get an error, and the next submission gets a new key.
  discard() {
    this.#core.discard();
    const waiters = this.#waiters;
    const abort = this.#abort;
    this.#waiters = [];
    this.#abort = null;
    this.#drive();
    abort?.();
    for (const w of waiters) w[1](fail('the submission was discarded before a definite answer', 'discarded'));
  }

  // The pending submission, as stored, or null.
  pending() {
    const text = this.#core.pending();
    if (text === undefined) return null;
    const [key, attempts, startedAt, body] = lines(text, 3);
    return { key, body: parseBody(body), attempts: +attempts, startedAt: +startedAt };
  }

  get state() {
    return STATES[this.#core.state()];
  }

  // Where records are kept: the storage asked for, or "memory" once it failed.
  get storage() {
    return this.#store.web ? this.#o.storage : 'memory';
  }

  // Calls `listener` at once with the current state (and any warning from the constructor),
  // then on every change. Returns a function that stops it.
  onChange(listener) {
    if (typeof listener !== 'function') throw fail('onChange needs a function');
    const entry = [listener];
    this.#listeners.push(entry);
    const now = this.#snapshot();
    call(listener, now);
    for (const w of this.#warnings) call(listener, { ...now, warning: w });
    return () => {
      this.#listeners = this.#listeners.filter((l) => l !== entry);
    };
  }

  // Fields never stored (a password, a card number: CONTRACT.md section 4), merged into the
  // JSON object body of every attempt from now on, in memory only; dropped when the submission
  // settles or is discarded.
  setSecrets(fields) {
    const why = this.#core.setSecrets(toJson(fields));
    if (why !== undefined) throw bodyError(why);
  }

  #wait() {
    const settled = new Promise((resolve, reject) => this.#waiters.push([resolve, reject]));
    this.#drive();
    return settled;
  }

  #snapshot(warning) {
    const p = this.#core.pending();
    const [key, attempts] = p === undefined ? [null, 0] : lines(p, 3);
    return change(this.state, key, attempts, this.#core.deadline(), warning);
  }

  #emit(change) {
    for (const [listener] of this.#listeners) call(listener, change);
  }

  // Carries out the core's actions in order, then arms its timer.
  #drive() {
    for (let action; (action = this.#core.poll()) !== undefined; ) {
      const kind = action[0];
      const text = action.slice(1);
      if (kind === 'P') {
        const warning = this.#store.write(this.name, text);
        if (warning) {
          warn(warning);
          this.#emit(this.#snapshot(warning));
        }
      } else if (kind === 'S') this.#send(text);
      else if (kind === 'F') this.#store.remove(this.name);
      else if (kind === 'C') {
        const [state, attempts, next, key] = lines(text, 3);
        this.#emit(change(STATES[state], key, attempts, next));
      } else {
        const [outcome, status, attempts, replayed, gaveUp, key] = lines(text, 5);
        const result = {
          outcome: OUTCOMES[outcome],
          status: status ? +status : null,
          key,
          body: this.#lastBody,
          replayed: replayed === '1',
          attempts: +attempts,
          gaveUp: gaveUp || null,
        };
        const waiters = this.#waiters;
        this.#waiters = [];
        for (const w of waiters) w[0](result);
      }
    }
    const at = this.#core.deadline();
    if (at === this.#armedAt) return;
    clearTimeout(this.#timer);
    this.#armedAt = at;
    if (at < 0) return;
    this.#timer = setTimeout(() => {
      // Disarmed first, so that the drive re-arms, also when this fired a little early.
      this.#armedAt = -1;
      this.#core.timeout(Date.now());
      this.#drive();
    }, Math.min(Math.max(at - Date.now(), 0), 2147483647));
  }

  // Starts attempt `n` (known to the core as `id`) after the current task, under the Web Lock
  // named after the key when another tab can know the key: once it has been stored and found
  // there (after a first attempt, or at once through localStorage). The first attempt of a key
  // made here in session (or memory) storage skips the lock, whose round trip costs about 1 ms.
  #send(text) {
    const [id, n, key, method, url, contentType, stored, body] = lines(text, 7);
    const o = this.#o;
    const controller = new AbortController();
    this.#abort = () => controller.abort();
    let timedOut = false;
    // The answer goes to the core, then the drive; a late one (after a discard) is ignored.
    const done = (status, found, answer) => {
      const now = Date.now();
      const core = this.#core;
      const taken =
        status < 2 ? core.failure(now, +id, status === 1, jitter()) : core.answer(now, +id, status, found, answer, jitter());
      if (!taken) return;
      this.#abort = null;
      if (status > 1) this.#lastBody = parseBody(answer);
      this.#drive();
    };
    const go = async () => {
      // A body that cannot be sent (a secret the encoding cannot carry) fails like the network.
      if (controller.signal.aborted || body[0] !== '1') return done(0);
      const timer = setTimeout(() => ((timedOut = true), controller.abort()), o.timeoutMs);
      try {
        let response;
        try {
          // A plain object by lower-case name (a later header replaces an earlier one of the
          // same name, as Headers.set does): fetch reads it faster than a Headers object.
          const headers = Object.create(null);
          const set = (name, value) => (headers[name.toLowerCase()] = value);
          set('Content-Type', contentType);
          for (const line of stored ? stored.split('\r') : []) {
            const colon = line.indexOf(':');
            set(line.slice(0, colon), line.slice(colon + 1));
          }
          for (const [name, value] of o.headers) set(name, value);
          if (o.attemptHeaders) {
            for (const [name, value] of extraHeaders(o.attemptHeaders, +n, key)) set(name, value);
          }
          set(o.keyHeader, o.keyFormat === 'bare' ? key : `"${key.replace(/["\\]/g, '\\$&')}"`);
          const init = { method, headers, credentials: o.credentials, signal: controller.signal };
          // As fetch takes it: no body for GET and HEAD.
          if (method !== 'GET' && method !== 'HEAD') init.body = body.slice(1);
          response = await fetch(url, init);
        } catch {
          // No answer: the network, an abort or the timeout.
          return done(timedOut ? 1 : 0);
        }
        let found = '';
        response.headers.forEach((value, name) => (found += name + ':' + value + '\n'));
        // The status is the answer; a body cut off (by the timeout) only loses the details.
        done(response.status, found, await response.text().catch(() => ''));
      } finally {
        clearTimeout(timer);
      }
    };
    const shared = +n > 1 || o.storage === 'local';
    Promise.resolve().then(() => underLock(shared ? slot(key) : null, go));
  }
}

// A change as listeners get it; the numbers may come as text, and a deadline below 0 is none.
const change = (state, key, attempts, next, warning = null) => ({
  state,
  key: key || null,
  attempts: +attempts,
  nextAttemptAt: next < 0 ? null : +next,
  warning,
});

// Calls a listener; a throw is reported and the others still hear.
function call(listener, change) {
  try {
    listener.call(undefined, change);
  } catch (e) {
    console.error('oncekey: an onChange listener threw', e);
  }
}

// ## An attempt

// Runs `f` under the Web Lock `name` (waiting for another tab or submitter that holds it), or
// without one where the browser has no Web Locks or refuses one (an opaque origin, say): the
// server's idempotency still holds. `f` never rejects.
async function underLock(name, f) {
  const locks = name ? globalThis.navigator?.locks : undefined;
  if (typeof locks?.request !== 'function') return f();
  let granted = false;
  try {
    return await locks.request(name, () => {
      granted = true;
      return f();
    });
  } catch {
    // Refused before it was granted: go on without.
    if (!granted) return f();
  }
}

// What options.attemptHeaders gives for this attempt. A throw, or a header that cannot be sent
// (not a string, a name that is not a token, a line break in the value), is reported on the
// console and adds nothing: the attempt still goes out.
function extraHeaders(f, attempt, key) {
  let given;
  try {
    given = f.call(null, { attempt, key });
  } catch (e) {
    warn('options.attemptHeaders threw: ' + describe(e));
    return [];
  }
  if (typeof given !== 'object' || given === null) return [];
  return Object.entries(given).filter(([name, v]) => {
    const ok = typeof v === 'string' && TOKEN.test(name) && !CONTROL.test(v);
    if (!ok) warn('options.attemptHeaders gave a header that cannot be sent: ' + JSON.stringify(name));
    return ok;
  });
}

// ## The form kit
//
// Wires a plain HTML <form> to a Submitter, following CONTRACT.md section 4 (README.md, "The form
// kit", says what it does for people): a client of the public Submitter API.

// Wires `form` to a submitter named by `options.name`, its data-oncekey attribute or its id. The
// URL and method default to the form's own action and method (POST when it has none). Returns
// { submitter, detach, tryAgain, discard }.
export function attachForm(form, options) {
  if (typeof form?.tagName !== 'string' || !sameTag(form, 'form')) throw fail('attachForm needs a <form> element');
  const prepared = prepare(form, options);
  const submitter = new Submitter(prepared.name, prepared.submitter);
  // The page keeps the kit alive through the form's listeners, whether or not it keeps this.
  return { submitter, ...wire(form, submitter, prepared) };
}

// Wires every <form data-oncekey="NAME"> on the page, with the same options for each.
export function autoAttach(options) {
  const document = globalThis.window?.document;
  if (!document) throw fail('autoAttach needs a page (window.document)');
  return Array.from(document.querySelectorAll('form[data-oncekey]'), (form) => attachForm(form, options));
}

// What the kit adds to a submitter's options.
const KIT_OPTIONS = ['name', 'clearOnSuccess', 'successMessage', 'resume'];

// A property of an object (or function); undefined for anything else, as Reflect.get fails.
const get = (o, k) => ((typeof o === 'object' && o !== null) || typeof o === 'function' ? o[k] : undefined);

const lower = (el, name) => (el.getAttribute(name) || '').toLowerCase();
const sameTag = (el, tag) => el.tagName.toLowerCase() === tag;

// Checks the kit's options and makes the submitter's: a copy without the kit's own names, with
// the form's URL and method where none are given, and never resumed by itself (the kit decides
// when to resend what it found: it may need secrets first).
function prepare(form, options) {
  if (options === undefined || options === null) {
    options = {};
  } else if (typeof options !== 'object') {
    throw fail('form kit options must be an object');
  }
  const submitter = Object.assign({}, options);
  for (const name of KIT_OPTIONS) delete submitter[name];
  if (submitter.url === undefined) submitter.url = form.action;
  if (submitter.method === undefined) {
    const method = form.getAttribute('method') ?? 'POST';
    if (/^(get|dialog)$/i.test(method)) {
      throw fail(`the form's method is ${JSON.stringify(method)}; oncekey sends a body, so use method="post"`);
    }
    submitter.method = method;
  }
  submitter.resume = false;
  let name = options.name;
  if (typeof name !== 'string') {
    name = form.getAttribute('data-oncekey') || form.id;
    if (!name) throw fail('options.name is required when the form has no data-oncekey attribute or id');
  }
  const resume = options.resume;
  if (typeof resume === 'string' && resume !== 'auto' && resume !== 'manual') {
    throw fail(`options.resume must be "auto" or "manual", not ${JSON.stringify(resume)}`);
  }
  const clear = options.clearOnSuccess;
  if (clear !== undefined && typeof clear !== 'boolean') {
    throw fail('options.clearOnSuccess must be true or false');
  }
  const success = options.successMessage;
  if (success !== undefined && typeof success !== 'string' && typeof success !== 'function') {
    throw fail('options.successMessage must be a string such as "Ticket #{id} created" or a function');
  }
  return { name, submitter, resume: resume !== 'manual', clear: clear !== false, success };
}

// Wires the form to the submitter; returns the kit's { detach, tryAgain, discard }.
function wire(form, submitter, kit) {
  const document = form.ownerDocument;
  if (!document) throw fail('the form is not in a document');
  let status = form.querySelector('[role="status"]');
  const statusMade = !status;
  if (statusMade) {
    status = document.createElement('p');
    status.setAttribute('role', 'status');
    status.setAttribute('class', 'oncekey-status');
    form.append(status);
  }
  // Focus can be moved to the status so screen readers and keyboard users hear it.
  if (!status.hasAttribute('tabindex')) status.setAttribute('tabindex', '-1');
  const secretNames = secretFieldNames(form);
  // Controls the kit disabled, to enable again (and only those).
  let locked = [];
  let controls = null;
  // Waiting for the person to fill the secret fields again after a reload.
  let askingSecrets = false;

  // Text, never HTML.
  const say = (text) => {
    status.textContent = text;
  };

  // Disables every enabled control (remembering which), sets aria-busy. With submitEnabled, the
  // form's submit buttons stay usable (they mean Try again).
  const lock = (submitEnabled) => {
    form.setAttribute('aria-busy', 'true');
    for (const el of form.elements) {
      if (controls && controls.contains(el)) continue;
      const disabled = el.disabled === true;
      if (submitEnabled && isSubmitButton(el)) {
        if (disabled && locked.includes(el)) el.disabled = false;
        continue;
      }
      if (!disabled) {
        el.disabled = true;
        if (!locked.includes(el)) locked.push(el);
      }
    }
  };

  const unlock = () => {
    for (const el of locked) el.disabled = false;
    locked = [];
    form.removeAttribute('aria-busy');
  };

  const removeControls = () => {
    controls?.remove();
    controls = null;
  };

  // Records the settled state on the form and tells listeners.
  const finish = (state, s) => {
    const detail = {};
    if (s) {
      form.setAttribute('data-oncekey-outcome', s.outcome);
      Object.assign(detail, {
        outcome: s.outcome,
        key: s.key,
        attempts: s.attempts,
        status: s.status,
        replayed: s.replayed,
        body: s.body,
      });
    }
    announce(form, state, detail);
  };

  const successText = (body) => {
    if (typeof kit.success === 'function') {
      try {
        const text = kit.success.call(null, body);
        if (typeof text === 'string') return text;
      } catch {
        // The default below.
      }
      return 'Sent.';
    }
    if (typeof kit.success === 'string') return fillTemplate(kit.success, body);
    const id = get(body, 'id');
    return id === undefined || id === null ? 'Sent and confirmed.' : `Created #${describe(id)}.`;
  };

  const settled = (s) => {
    const outcome = s.outcome;
    if (outcome === 'unsure') {
      showUnsure(
        'We could not confirm that this was received. Try again sends the same request, and the server will not do it twice; or discard it to write a new one.',
      );
      return finish('unsure', s);
    }
    unlock();
    removeControls();
    if (outcome === 'succeeded') {
      if (kit.clear) form.reset();
      say(successText(s.body));
      finish(outcome, s);
      return status.focus();
    }
    const problem = problemText(s.body, s.status);
    if (outcome === 'refused') {
      const firstInvalid = showProblem(form, s.body);
      say('Not accepted: ' + problem);
      finish(outcome, s);
      return (firstInvalid || status).focus();
    }
    // conflict, misconfigured
    console.error(`oncekey: ${outcome} for key ${s.key}: ${problem}`);
    say(
      (outcome === 'conflict'
        ? "The server holds this request's key for different content. This is a bug in the page; nothing was retried."
        : 'The server refused the idempotency key: this form is set up wrongly. Nothing was done.') +
        ` (${problem})`,
    );
    finish(outcome, s);
    status.focus();
  };

  // The submitter refused at once (nothing changed), or the submission was discarded meanwhile.
  const refusedOrDiscarded = (e) => {
    if (e?.code !== 'discarded') return say(describe(e));
    unlock();
    removeControls();
    say('Discarded. Nothing was confirmed; sending again makes a new request.');
    finish('idle', null);
  };

  // Try again: the same key and body (and the secrets held in memory).
  const resend = () => {
    removeControls();
    submitter.tryAgain().then(settled, refusedOrDiscarded);
  };

  const discard = () => submitter.discard();

  // Locked, with "Try again" and "Discard"; the form's own submit buttons are Try again too.
  // The caller announces the state, with what it knows of the submission.
  const showUnsure = (message) => {
    lock(true);
    say(message);
    if (!controls) {
      controls = document.createElement('div');
      controls.setAttribute('class', 'oncekey-actions actions');
      for (const [text, cls, f] of [
        ['Try again', 'oncekey-try-again', resend],
        ['Discard', 'oncekey-discard secondary', discard],
      ]) {
        const b = document.createElement('button');
        b.setAttribute('type', 'button');
        b.setAttribute('class', cls);
        b.textContent = text;
        b.addEventListener('click', f);
        controls.append(b);
      }
      status.after(controls);
    }
  };

  // After a reload the secrets are gone: unlock just those fields and ask for them.
  const askForSecrets = () => {
    askingSecrets = true;
    lock(true);
    const labels = [];
    for (const name of secretNames) {
      for (const el of namedControls(form, name)) {
        el.disabled = false;
        const label = labelOf(el) || name;
        if (labels[labels.length - 1] !== label) labels.push(label);
      }
    }
    // "password", "password and pin", "password, card and pin".
    const last = labels.length > 1 ? labels.pop() : null;
    const listed = last === null ? labels.join('') : `${labels.join(', ')} and ${last}`;
    const one = last === null && labels.length === 1;
    say(
      `This request was interrupted by a reload. For your safety, ${listed} ${one ? 'was' : 'were'} not kept: please enter ${one ? 'it' : 'them'} again, then send; it goes out as the same request.`,
    );
    announce(form, 'unsure', { needsSecrets: true });
    namedControls(form, secretNames[0])[0]?.focus();
  };

  const begin = () => {
    clearFieldErrors(form);
    form.removeAttribute('data-oncekey-outcome');
    const fields = readFields(form, secretNames);
    if (typeof fields === 'string') return say(fields);
    submitter.setSecrets(Object.fromEntries(fields.secrets));
    submitter.submit(fields.body).then(settled, refusedOrDiscarded);
  };

  const onSubmit = (event) => {
    event.preventDefault();
    if (askingSecrets) {
      askingSecrets = false;
      const fields = readFields(form, secretNames);
      if (typeof fields === 'string') return say(fields);
      submitter.setSecrets(Object.fromEntries(fields.secrets));
      return resend();
    }
    const state = submitter.state;
    // The person pressed Enter or the form's button while unsure: that is Try again.
    if (state === 'unsure') resend();
    // Double submit: the attempt under way answers for both.
    else if (state !== 'sending' && state !== 'waiting') begin();
  };

  const onChange = (c) => {
    // Storage degraded to memory, or an unreadable record removed: the form still works, once;
    // the submitter has said why on the console.
    if (c.warning) return;
    const state = c.state;
    if (state === 'sending') {
      lock(false);
      say(c.attempts > 1 ? `Sending again (attempt ${c.attempts}), with the same key…` : 'Sending…');
    } else if (state === 'waiting') {
      lock(false);
      const tenths = c.nextAttemptAt === null ? 0 : Math.max(0, Math.ceil((c.nextAttemptAt - Date.now()) / 100));
      say(`No answer yet. Trying again in ${Math.floor(tenths / 10)}.${tenths % 10} s; it will not be counted twice.`);
    } else {
      // Unsure and the definite outcomes are shown when the submission settles, with its
      // answer; a restored record is shown below.
      return;
    }
    const detail = {};
    if (c.key !== null) detail.key = c.key;
    detail.attempts = c.attempts;
    if (c.nextAttemptAt !== null) detail.nextAttemptAt = c.nextAttemptAt;
    announce(form, state, detail);
  };

  form.addEventListener('submit', onSubmit);
  let off = submitter.onChange(onChange);
  form.setAttribute('data-oncekey-state', submitter.state);

  // A submission found in storage: fields back, form locked, then resend (or wait).
  const pending = submitter.pending();
  if (pending) {
    const body = pending.body;
    if (typeof body === 'object' && body !== null && !Array.isArray(body)) restoreFields(form, body);
    if (secretNames.length) {
      askForSecrets();
    } else if (kit.resume) {
      resend();
    } else {
      showUnsure(
        'This request was sent before the page reloaded, and its answer was lost. Try again sends the same request; the server will not do it twice.',
      );
      announce(form, 'unsure', { key: pending.key, attempts: pending.attempts });
    }
  }

  return {
    // Undoes everything the kit did: listeners, locks, attributes, the elements it made. A
    // pending submission stays stored.
    detach() {
      off?.();
      off = null;
      form.removeEventListener('submit', onSubmit);
      removeControls();
      unlock();
      for (const attr of ['data-oncekey-state', 'data-oncekey-outcome', 'aria-busy']) form.removeAttribute(attr);
      clearFieldErrors(form);
      if (statusMade) status.remove();
      else status.textContent = '';
    },
    tryAgain: resend,
    discard,
  };
}

// Marks the form with `state` and tells listeners: an oncekey:change event whose detail is
// `detail` with its state set here. One call per change of state.
function announce(form, state, detail) {
  form.setAttribute('data-oncekey-state', state);
  detail.state = state;
  form.dispatchEvent(new CustomEvent('oncekey:change', { detail, bubbles: true }));
}

function isSubmitButton(el) {
  const kind = lower(el, 'type');
  return (
    (sameTag(el, 'button') && (kind === '' || kind === 'submit')) ||
    (sameTag(el, 'input') && (kind === 'submit' || kind === 'image'))
  );
}

function isSecret(el) {
  return (
    lower(el, 'type') === 'password' ||
    lower(el, 'autocomplete')
      .split(/\s+/)
      .some((w) => w.startsWith('cc-')) ||
    el.hasAttribute('data-oncekey-secret')
  );
}

function secretFieldNames(form) {
  const names = [];
  for (const el of form.elements) {
    const name = el.getAttribute('name');
    if (name && isSecret(el) && !names.includes(name)) names.push(name);
  }
  return names;
}

function namedControls(form, name) {
  return Array.from(form.elements).filter((el) => el.getAttribute('name') === name);
}

function labelOf(el) {
  const label = el.labels?.[0];
  return label ? label.innerText.trim() : '';
}

// The form's fields (secrets left out) as an object with its names sorted, as the browser would
// submit them (repeated names become arrays), and the secrets as [name, value] pairs; or a
// message when a file was chosen.
function readFields(form, secretNames) {
  let data;
  try {
    data = new FormData(form);
  } catch (e) {
    return describe(e);
  }
  const fields = new Map();
  const secrets = new Map();
  for (const [name, value] of data) {
    if (typeof value !== 'string') {
      // A File: only refuse it when one was chosen (an empty file input sends nothing).
      if (value.size > 0 || value.name) {
        return `The field ${JSON.stringify(name)} holds a file; oncekey cannot send files yet.`;
      }
      continue;
    }
    const target = secretNames.includes(name) ? secrets : fields;
    const first = target.get(name);
    if (first === undefined) target.set(name, value);
    else if (Array.isArray(first)) first.push(value);
    else target.set(name, [first, value]);
  }
  const body = Object.create(null);
  for (const name of [...fields.keys()].sort()) body[name] = fields.get(name);
  return { body, secrets: [...secrets] };
}

// Puts a stored body back into the fields it came from.
function restoreFields(form, fields) {
  for (const [name, value] of Object.entries(fields)) {
    const values = (Array.isArray(value) ? value : [value]).filter((v) => typeof v === 'string');
    let next = 0;
    for (const el of namedControls(form, name)) {
      const kind = lower(el, 'type');
      if (kind === 'checkbox' || kind === 'radio') {
        el.checked = values.includes(el.value);
      } else if (sameTag(el, 'select')) {
        for (const option of el.options) option.selected = values.includes(option.value);
      } else if (!['file', 'submit', 'button', 'image'].includes(kind) && next < values.length) {
        el.value = values[next++];
      }
    }
  }
}

function clearFieldErrors(form) {
  for (const n of form.querySelectorAll('.oncekey-field-error')) n.remove();
  for (const el of form.querySelectorAll('[aria-invalid][data-oncekey-invalid]')) {
    for (const attr of ['aria-invalid', 'data-oncekey-invalid', 'aria-describedby']) el.removeAttribute(attr);
  }
}

const firstString = (p, keys) => keys.map((k) => get(p, k)).find((v) => typeof v === 'string');

// Shows RFC 9457 invalid-params (or errors) next to the fields they name; returns the first
// such field.
function showProblem(form, body) {
  let params = get(body, 'invalid-params');
  if (!Array.isArray(params)) params = get(body, 'errors');
  if (!Array.isArray(params)) return null;
  let first = null;
  for (const [i, p] of params.entries()) {
    let name = firstString(p, ['name', 'field', 'pointer']);
    if (name === undefined) return null;
    name = name.replace(/^\/+/, '');
    const reason = firstString(p, ['reason', 'message', 'detail']) ?? 'is not accepted';
    const field = namedControls(form, name)[0];
    if (!field) continue;
    const id = `oncekey-error-${name.replace(/[^A-Za-z0-9]/gu, '-')}-${i}`;
    const note = form.ownerDocument.createElement('span');
    note.setAttribute('class', 'oncekey-field-error');
    note.setAttribute('id', id);
    note.textContent = `${name} ${reason}`;
    field.after(note);
    field.setAttribute('aria-invalid', 'true');
    field.setAttribute('data-oncekey-invalid', '');
    field.setAttribute('aria-describedby', id);
    first ??= field;
  }
  return first;
}

// One line for people from a problem document (or an answer's text).
function problemText(body, status) {
  const title = get(body, 'title');
  const detail = get(body, 'detail');
  const t = typeof title === 'string' ? title : null;
  const d = typeof detail === 'string' ? detail : null;
  if (t !== null) return d ? `${t}: ${d}` : t;
  if (d !== null) return d;
  if (typeof body === 'string' && body && new TextEncoder().encode(body).length < 200) return body;
  return status === null ? 'no answer' : `the server answered ${status}`;
}

// "Ticket #{id} created" with {name} replaced by the answer's fields, as text.
function fillTemplate(template, body) {
  let out = '';
  let rest = template;
  for (let open; (open = rest.indexOf('{')) >= 0; ) {
    out += rest.slice(0, open);
    const close = rest.indexOf('}', open);
    if (close < 0) {
      out += rest.slice(open);
      rest = '';
      break;
    }
    const v = get(body, rest.slice(open + 1, close));
    if (v !== undefined) out += describe(v);
    rest = rest.slice(close + 1);
  }
  return out + rest;
}
