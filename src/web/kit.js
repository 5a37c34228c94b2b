// The form kit, until the Rust form kit lands: wires a plain HTML <form> to the package's
// Submitter (the Rust driver, exported by wasm-bindgen), following CONTRACT.md section 4.
// scripts/build-pkg.sh copies this file into the package and re-exports it from oncekey.js;
// src/web/kit_js.rs carries its TypeScript declarations. A client of the public Submitter API
// only: nothing here sends, stores or retries.
import { Submitter } from './oncekey.js';

// An Error named OncekeyError with its code, as the Submitter's own errors.
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
