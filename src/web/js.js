// One attempt's trip over the network, for js.rs: under a Web Lock, fetch with a timeout, and
// the answer read. Written in JavaScript because it is promises and web APIs end to end, which
// wasm reaches only through bindings and an executor many times this size.

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

// What a thrown value says, without assuming it is an Error (error.rs `describe`).
function describe(v) {
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
}

// What options.attemptHeaders gives for this attempt. A throw or a value that is not an object
// of strings is reported on the console and adds nothing: the attempt still goes out.
function extraHeaders(f, attempt, key) {
  let given;
  try {
    given = f.call(null, { attempt, key });
  } catch (e) {
    console.warn('oncekey: options.attemptHeaders threw: ' + describe(e));
    return [];
  }
  if (typeof given !== 'object' || given === null) return [];
  return Object.entries(given).filter(([, v]) => typeof v === 'string');
}

// Sends one attempt; calls done(status, headers, text) once: status 0 when no answer came (the
// network, an abort, or a body that cannot be sent: false), 1 when the timeout fired; headers
// as "name:value" lines. Starts after the current task (as a spawned future did), and returns
// a function that aborts it.
export function attempt(url, method, headers, body, credentials, timeoutMs, lock, f, number, key, keyHeader, keyValue, done) {
  const controller = new AbortController();
  let timedOut = false;
  const send = async () => {
    if (controller.signal.aborted || body === false) return done(0, '', '');
    const timer = timeoutMs > 0 ? setTimeout(() => ((timedOut = true), controller.abort()), timeoutMs) : undefined;
    try {
      let response;
      try {
        const h = new Headers();
        for (const line of headers.split('\n')) {
          const colon = line.indexOf(':');
          if (colon > 0) h.set(line.slice(0, colon), line.slice(colon + 1));
        }
        if (f) for (const [name, value] of extraHeaders(f, number, key)) h.set(name, value);
        h.set(keyHeader, keyValue);
        const init = { method, headers: h, credentials, signal: controller.signal };
        if (body != null) init.body = body;
        response = await fetch(url, init);
      } catch {
        return done(timedOut ? 1 : 0, '', '');
      }
      const found = [...response.headers].map(([name, value]) => name + ':' + value).join('\n');
      // The status is the answer; a body cut off (by the timeout) only loses the details.
      const text = await response.text().catch(() => '');
      done(response.status, found, text);
    } finally {
      clearTimeout(timer);
    }
  };
  Promise.resolve().then(() => underLock(lock, send));
  return () => controller.abort();
}
