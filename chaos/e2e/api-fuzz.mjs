// The API fuzz run: headless Chromium drives the package's JavaScript API at random, as a page
// could (where browser-chaos.mjs drives the demo's form as a person does), against the
// reference server with random faults (--fault-rate). Each run opens two tabs of one browser
// context; each tab lives one to three lives, reloaded while its calls are under way, is now
// and then duplicated (its sessionStorage copied into a new tab, which lives one life and is
// closed mid-call), and the context goes offline now and then. A life makes Submitters of two names over session, local,
// memory and IndexedDB storage, and forms wired by attachForm, and calls at random: submit (a new
// JSON body or an upload, or the pending body again), tryAgain, sendAsNew, discard, setSecrets,
// aborts, pending(), listPending(), free(), listeners that stop themselves, and the kit's Send,
// Try again, Discard and Send as new; some of those from inside the package's own callbacks (an
// onChange listener, a form's oncekey:change, attemptHeaders), nested. A life also starts
// dedicated workers (api-fuzz-worker.js) whose Submitters, of the same names, keep their
// records in IndexedDB or memory and share the page's Web Locks, and kills them while their
// calls are under way (terminate(), as a crashed worker). Then the guarantees:
//   1. nothing throws what is not an OncekeyError (a panic in the module is a `RuntimeError`,
//      and leaves it unusable for the page), and the page logs no error (the browser's line for
//      each failed request and the package's for a conflict aside);
//   2. every promise the last lives got settles (a killed worker's aside);
//   3. the server holds at most one ticket of each body submitted once (a body whose submission
//      was discarded or sent as new may go again under a new key, deliberately: those are left
//      out), at least one of each body a call saw succeed, and none nobody submitted;
//   4. the package still works afterwards: a fresh Submitter sends a fresh body and succeeds.
// Prints a table; the last line is "guarantee violations 0", or the script exits 1 listing them.
// A planted mistake (a new key on every retry, in src/web/attempt.rs) made 3 violations in
// `--runs 1 --steps 200`, the size `make test` runs.
//
//   node chaos/e2e/api-fuzz.mjs [--seed 1] [--runs 1] [--steps 300] [--fault-rate 0.3]
//   FUZZ_TRACE=1 prints every call and settlement of a run that breaks check 3 (2: every
//   change too, through listeners of its own, which change what is kept alive).
//
// Needs the built package (pkg) and the reference server (ONCEKEY_SERVER_BIN, else
// target/debug/oncekey-server), like tests/e2e.
import path from 'node:path'
import { cliArgs, launchBrowser, root, startServer } from '../../tests/e2e/harness.mjs'

const args = cliArgs()
const SEED = Number(args.seed ?? 1)
const RUNS = Number(args.runs ?? 1)
const STEPS = Number(args.steps ?? 300)
const FAULT_RATE = Number(args['fault-rate'] ?? 0.3)

/** Runs in the page: `steps` random calls of the API (fewer when node stops it, before a reload
 * or a close), then (when `last`) waits for every promise. What a check needs is told to node
 * as it happens (`window.fuzzReport`), so that a reload in the middle loses none of it. */
async function fuzz({ seed, steps, tenant, last, tracing }) {
  // Told to node at once, and kept in the page for node to collect before it reloads or closes
  // the page (a binding call made just before may not arrive).
  window.fuzzLog = window.fuzzLog || []
  const report = (kind, what) => {
    if (kind === 'submitted' || kind === 'tainted' || kind === 'succeeded') window.fuzzLog.push([kind, String(what)])
    window.fuzzReport(kind, String(what))
  }
  const trace = (line) => (tracing ? report('trace', `${seed} ${performance.now().toFixed(0)} ${line}`) : undefined)
  const m = await import('/pkg/oncekey.js')
  const { subjectOf, upload } = await import('/fuzz/api-fuzz-bodies.js')
  await m.default()
  report('ready', '')
  // mulberry32: small, seeded, good enough to pick calls.
  let a = seed >>> 0
  const rnd = () => {
    a = (a + 0x6d2b79f5) | 0
    let t = Math.imul(a ^ (a >>> 15), 1 | a)
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const pick = (xs) => xs[Math.floor(rnd() * xs.length)]
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms))
  const count = (what) => report('count', what)
  const expected = (e) => e && e.name === 'OncekeyError'
  const caught = (where, e) => {
    if (expected(e)) report('code', e.code)
    else report('violation', `${where}: ${e && e.name}: ${e && e.message}`)
  }
  const open = new Map()
  let nextPromise = 0
  const track = (what, promise) => {
    const id = nextPromise++
    trace(`#${id} ${what} started`)
    open.set(id, what)
    promise.then(
      (r) => {
        open.delete(id)
        count(`${what} -> ${r.outcome}`)
        trace(`#${id} ${what} -> ${r.outcome} key=${r.key} status=${r.status} subject=${r.body && r.body.subject}`)
        const subject = r.body && typeof r.body === 'object' ? r.body.subject : undefined
        if (r.outcome === 'succeeded' && typeof subject === 'string') report('succeeded', subject)
      },
      (e) => {
        open.delete(id)
        count(`${what} -> rejected`)
        trace(`#${id} ${what} -> rejected ${e && e.code}`)
        caught(`${what} rejected`, e)
      },
    )
    return id
  }
  // Workers of this life, each with its Submitters (by slot) and its calls under way.
  const workers = []
  const startWorker = () => {
    const w = { worker: new Worker('/fuzz/api-fuzz-worker.js', { type: 'module' }), calls: new Map(), slots: [], next: 0 }
    w.label = `W${workers.length + 1}`
    w.worker.onmessage = ({ data }) => {
      if (data.ready) return (w.ready = true)
      if (data.report) return report(...data.report)
      if ('taint' in data) {
        // Told to node before the worker lets the body go; never once node collects this
        // life's reports: the worker then waits, and lets nothing go.
        if (window.fuzzStop) return
        report('tainted', data.taint)
        return w.worker.postMessage({ acked: data.ack })
      }
      const call = w.calls.get(data.id)
      if (!call) return
      w.calls.delete(data.id)
      if (data.error) call.reject(data.error)
      else call.resolve(data.value)
    }
    w.worker.onerror = (e) => {
      // Its script not loaded (begun while offline): a worker that never ran, whose calls are
      // never answered.
      if (!w.ready) return end(w, 'worker not loaded')
      report('violation', `worker error: ${e.message}`)
    }
    workers.push(w)
    return w
  }
  const inWorker = (what, w, message) => {
    const id = w.next++
    const call = {}
    const promise = new Promise((resolve, reject) => Object.assign(call, { resolve, reject }))
    w.calls.set(id, call)
    w.worker.postMessage({ id, ...message })
    // Tracked as the page's own promises are; a kill takes it out of the count.
    call.open = track(`worker ${what}`, promise)
  }
  // The worker is gone (killed, or never loaded): its calls under way are out of the count.
  const end = (w, why) => {
    w.worker.terminate()
    if (workers.includes(w)) workers.splice(workers.indexOf(w), 1)
    count(why)
    for (const call of w.calls.values()) {
      open.delete(call.open)
      count(`${why}, a call under way`)
    }
    trace(`${w.label}: ${why}, ${w.calls.size} calls under way`)
  }
  const workerAct = (what) => {
    if (what === 'worker new') {
      if (workers.length >= 2) return
      const w = startWorker()
      for (let i = 0; i < 1 + Math.floor(rnd() * 2); i++) {
        const slot = w.slots.length
        w.slots.push(slot)
        // No function crosses to a worker: the options without attemptHeaders. Session and
        // local storage are not there: memory, with a warning.
        const { attemptHeaders, ...o } = options()
        inWorker('new Submitter', w, { op: 'make', slot, name: pick(['a', 'b']), options: { url: '/api/tickets', headers: { 'X-Tenant': tenant }, resume: rnd() < 0.5, ...o } })
      }
      return
    }
    if (!workers.length) return
    const w = pick(workers)
    if (what === 'worker kill') return end(w, 'worker killed')
    const slot = pick(w.slots)
    const op = pick(['submit', 'submit', 'submit', 'submit again', 'tryAgain', 'tryAgain', 'sendAsNew', 'discard', 'read'])
    trace(`${w.label}/${slot} ${op}`)
    if (op === 'submit') {
      const upload = rnd() < 0.3
      inWorker(op, w, { op, slot, upload, body: { subject: newSubject(), body: 'API fuzz, in a worker', email: 'fuzz@example.com' } })
    } else {
      inWorker(op, w, { op, slot })
    }
  }
  const live = []
  const kits = []
  const kitOwned = new WeakSet()
  const labels = new Map()
  const stops = []
  const controllers = []
  let intent = 0
  let depth = 0
  const newSubject = () => {
    const subject = `fuzz ${seed} intent ${intent++}`
    report('submitted', subject)
    return subject
  }
  const pendingSubject = (s) => {
    try {
      return subjectOf(s.pending())
    } catch (e) {
      caught('pending', e)
    }
  }
  const taint = (s) => {
    const subject = pendingSubject(s)
    if (subject) report('tainted', subject)
  }
  const signal = () => {
    if (rnd() < 0.8) return undefined
    const c = new AbortController()
    controllers.push(c)
    return { signal: c.signal }
  }
  const nested = (where) => {
    if (depth >= 2 || rnd() >= 0.2) return
    depth++
    count(`nested in ${where}`)
    try {
      act()
    } finally {
      depth--
    }
  }
  // Options as pages set them, now and then at their edges: keys that expire within the run
  // (expired, then Send as new), an attempt timeout shorter than the server's answer, a form
  // encoding, the key as a structured-field string, a small body limit.
  const options = () => ({
    storage: pick(['session', 'local', 'memory', 'indexeddb']),
    timeoutMs: rnd() < 0.1 ? 30 : 800,
    retry: { attempts: 3, base: 20, cap: 200, budget: 2000 },
    ...(rnd() < 0.2 ? { keyLifetimeMs: pick([1500, 4000]) } : {}),
    ...(rnd() < 0.1 ? { encoding: 'form' } : {}),
    ...(rnd() < 0.2 ? { keyFormat: 'sf-string' } : {}),
    ...(rnd() < 0.05 ? { maxBodyBytes: 64 } : {}),
    attemptHeaders: () => {
      nested('attemptHeaders')
      return {}
    },
  })
  const make = () => {
    try {
      const s = new m.Submitter(pick(['a', 'b']), {
        url: '/api/tickets',
        headers: { 'X-Tenant': tenant },
        resume: rnd() < 0.5,
        ...options(),
      })
      live.push(s)
      const label = `S${live.length}:${s.name}/${s.storage}`
      labels.set(s, label)
      trace(`${label} made, state ${s.state}, pending ${pendingSubject(s)}`)
      if (tracing > 1) s.onChange((c) => trace(`${label} ${c.state} key=${c.key} attempts=${c.attempts}`))
      if (rnd() < 0.8) stops.push(s.onChange(() => nested('onChange')))
    } catch (e) {
      caught('new Submitter', e)
    }
  }
  // A form the kit sends: the same three fields, and a file input.
  const attach = () => {
    const form = document.createElement('form')
    form.action = '/api/tickets'
    form.method = 'post'
    for (const name of ['subject', 'body', 'email']) {
      const input = document.createElement('input')
      input.name = name
      form.append(input)
    }
    const file = document.createElement('input')
    file.type = 'file'
    file.name = 'attachment'
    form.append(file)
    const send = document.createElement('button')
    send.type = 'submit'
    form.append(send)
    document.body.append(form)
    try {
      const kit = m.attachForm(form, { name: pick(['a', 'b', 'c']), headers: { 'X-Tenant': tenant }, resume: pick(['auto', 'manual']), ...options() })
      kits.push({ kit, form })
      const label = `K${kits.length}:${kit.submitter.name}/${kit.submitter.storage}`
      labels.set(kit.submitter, label)
      trace(`${label} attached, state ${kit.submitter.state}, pending ${pendingSubject(kit.submitter)}`)
      if (tracing > 1) kit.submitter.onChange((c) => trace(`${label} ${c.state} key=${c.key} attempts=${c.attempts}`))
      form.addEventListener('oncekey:change', () => nested('oncekey:change'))
    } catch (e) {
      caught('attachForm', e)
      form.remove()
    }
  }
  const act = () => {
    if (window.fuzzStop) return
    if (live.length === 0) return make()
    const s = pick(live)
    const k = kits.length ? pick(kits) : null
    const what = pick([
      'new', 'submit', 'submit', 'submit', 'submit again', 'tryAgain', 'tryAgain', 'sendAsNew',
      'discard', 'secrets', 'abort', 'stop', 'read', 'list', 'free',
      'form', 'form send', 'form send', 'form tryAgain', 'form discard', 'form sendAsNew', 'form submitter',
      'worker new', 'worker call', 'worker call', 'worker call', 'worker kill',
    ])
    count(what)
    const on = what.startsWith('form') && k ? k.kit.submitter : s
    trace(`${what} on ${labels.get(on)} (state ${on.state}, pending ${pendingSubject(on)})`)
    if (what.startsWith('worker')) return workerAct(what)
    try {
      switch (what) {
        case 'new':
          if (live.length < 6) make()
          break
        case 'submit': {
          let body = { subject: newSubject(), body: 'API fuzz', email: 'fuzz@example.com' }
          const odd = rnd()
          if (odd < 0.1) {
            // Text a page may hold: other scripts, astral characters, a lone surrogate (which
            // JSON cannot carry as UTF-8: refused, code "body"), a long body.
            body.body = pick(['日本語のチケット 🎫', 'a\u0000b', '\ud800 lone', 'x'.repeat(20000), '"quoted" \\ <b>'])
          } else if (odd < 0.15) {
            // Values JSON has no room for, or that a form encoding cannot flatten: refused.
            body.extra = pick([NaN, Infinity, { nested: { deep: [1, 2, { x: null }] } }, [1, 'two'], -0, 1e308])
          } else if (odd < 0.4) {
            // An upload: a form with a file (stored in IndexedDB whatever the storage).
            body = upload(body)
          }
          track('submit', s.submit(body, signal()))
          break
        }
        case 'submit again': {
          const p = s.pending()
          if (p) track('submit again', s.submit(p.body, signal()))
          break
        }
        case 'tryAgain':
          track('tryAgain', s.tryAgain(signal()))
          break
        case 'sendAsNew':
          taint(s)
          track('sendAsNew', s.sendAsNew())
          break
        case 'discard':
          taint(s)
          s.discard()
          break
        case 'secrets':
          s.setSecrets(rnd() < 0.5 ? {} : { body: 'a secret body' })
          break
        case 'abort':
          if (controllers.length) controllers.splice(Math.floor(rnd() * controllers.length), 1)[0].abort()
          break
        case 'stop':
          if (stops.length) stops.splice(Math.floor(rnd() * stops.length), 1)[0]()
          break
        case 'read':
          void [s.state, s.name, s.storage, s.pending()]
          break
        case 'list':
          track('listPending', m.listPending(pick(['session', 'local', 'indexeddb'])).then(() => ({ outcome: 'listed' })))
          break
        case 'free':
          if (rnd() < 0.3 && !kitOwned.has(s)) {
            live.splice(live.indexOf(s), 1)
            s.free()
          }
          break
        case 'form':
          if (kits.length < 4) attach()
          break
        case 'form send':
          if (k) {
            // As a person does: fields filled (unless the kit locked them), Send pressed.
            const fields = k.form.elements
            if (!fields.subject.disabled) {
              fields.subject.value = newSubject()
              trace(`form send of ${fields.subject.value} by ${labels.get(k.kit.submitter)}`)
              fields.body.value = 'API fuzz, the form kit'
              fields.email.value = rnd() < 0.1 ? 'not an email' : 'fuzz@example.com'
            }
            k.form.requestSubmit()
          }
          break
        case 'form tryAgain':
          if (k) k.kit.tryAgain()
          break
        case 'form discard':
          if (k) {
            taint(k.kit.submitter)
            k.kit.discard()
          }
          break
        case 'form sendAsNew':
          if (k) {
            taint(k.kit.submitter)
            k.kit.sendAsNew()
          }
          break
        case 'form submitter':
          // The kit's submitter, as a page reaches it (the same object each time: not freed
          // here, as the kit's other users would find it freed).
          if (k && !live.includes(k.kit.submitter)) {
            kitOwned.add(k.kit.submitter)
            live.push(k.kit.submitter)
          }
          break
      }
    } catch (e) {
      // Documented (README): free() from a callback that runs inside a call of the same object
      // is refused by wasm-bindgen; the object is then unusable (it left `live` already).
      if (what === 'free' && depth > 0 && e.message === 'attempted to take ownership of Rust value while it was borrowed') count('free refused inside a call')
      else caught(what, e)
    }
  }
  for (let i = 0; i < steps && !window.fuzzStop; i++) {
    act()
    if (rnd() < 0.5) await sleep(Math.floor(rnd() * 60))
  }
  if (!last) return
  report('settling', '')
  // Every promise settles: attempts time out after 0.8 s, retries stop within their budget.
  const until = Date.now() + 20000
  while (open.size && Date.now() < until) await sleep(100)
  for (const what of open.values()) report('violation', `a promise of ${what} never settled`)
  // The package still works.
  try {
    const s = new m.Submitter('after', { url: '/api/tickets', headers: { 'X-Tenant': tenant, 'X-Fault': 'delay=1' }, storage: 'memory' })
    const subject = newSubject()
    const r = await s.submit({ subject, body: 'API fuzz', email: 'fuzz@example.com' })
    if (r.outcome !== 'succeeded') report('violation', `a fresh submitter afterwards: ${r.outcome} (${r.status})`)
    else report('succeeded', subject)
  } catch (e) {
    report('violation', `a fresh submitter afterwards: ${e && e.name}: ${e && e.message}`)
  }
}

const server = await startServer([
  '--fault-rate', String(FAULT_RATE),
  '--seed', String(SEED),
  '--mount', `/fuzz=${path.join(root, 'chaos/e2e')}`,
])
const browser = await launchBrowser()
const all = []
const totals = { steps: 0, submitted: 0, tainted: 0, succeeded: 0, tickets: 0, reloads: 0, offline: 0, duplicated: 0 }
const TABS = 2
const TRACE = Number(process.env.FUZZ_TRACE || 0)
const counts = {}
const codes = {}
const bump = (map, k) => (map[k] = (map[k] || 0) + 1)
try {
  for (let run = 0; run < RUNS; run++) {
    const seed = SEED * 1000 + run
    const tenant = `api-fuzz-${seed}`
    const seen = { submitted: new Set(), tainted: new Set(), succeeded: new Set(), violations: [] }
    const context = await browser.newContext()
    // Two tabs of one browser at once (localStorage, IndexedDB and Web Locks shared), each
    // living a few lives: each life but the last is reloaded while its calls are under way
    // (its sessionStorage kept), after a random part of its steps. Meanwhile the browser goes
    // offline now and then, until the tabs wait for their last promises.
    let settling = 0
    // A life is not begun offline, nor taken offline before the module is in (a page that cannot
    // load its script is no test of the script).
    let starting = 0
    let offlineNow = false
    const until = async (ok) => {
      while (!ok()) await new Promise((r) => setTimeout(r, 20))
    }
    const traces = []
    await context.exposeFunction('fuzzReport', (kind, what) => {
      if (kind === 'count') bump(counts, what)
      else if (kind === 'code') bump(codes, what)
      else if (kind === 'violation') seen.violations.push(what)
      else if (kind === 'settling') settling++
      else if (kind === 'ready') starting--
      else if (kind === 'trace') traces.push(what)
      else seen[kind].add(what)
    })
    const collect = async (page) => {
      // No call is made after this (those under way go on), so nothing made is left untold.
      const log = await page
        .evaluate(() => {
          window.fuzzStop = true
          return window.fuzzLog || []
        })
        .catch(() => [])
      for (const [kind, what] of log) seen[kind].add(what)
    }
    const watch = (page) => {
      page.on('pageerror', (e) => seen.violations.push(`page error: ${e}`))
      page.on('console', (msg) => {
        // The browser logs every failed request (a 409, a dropped connection): the faults'.
        // The package says a conflict (409/422 for the key: the secrets set here change the
        // body under a key) on the console too.
        const text = msg.text()
        if (msg.type() === 'error' && !text.startsWith('Failed to load resource') && !/^oncekey: conflict for key /.test(text)) {
          seen.violations.push(`console error: ${text}`)
        }
      })
    }
    const tab = async (t) => {
      const page = await context.newPage()
      watch(page)
      const lives = 1 + ((seed + t) % 3)
      for (let life = 0; life < lives; life++) {
        const last = life === lives - 1
        if (life > 0) await collect(page)
        starting++
        await until(() => !offlineNow)
        await page.goto(`${server.url}/fuzz/api-fuzz.html`)
        const running = page.evaluate(fuzz, { seed: seed * 100 + t * 10 + life, steps: STEPS, tenant, last, tracing: TRACE })
        if (TRACE) traces.push(`${seed * 100 + t * 10 + life} life begins (tab ${t})`)
        totals.steps += STEPS
        if (last) {
          await running
        } else {
          running.catch(() => {})
          const wait = 500 + ((seed * 7919 + t * 15485863 + life * 104729) % 4000)
          await new Promise((r) => setTimeout(r, wait / 2))
          // Now and then the tab is duplicated mid-life: a new tab whose sessionStorage starts
          // as a copy of this one's (records and all, as the browser's "Duplicate tab" makes
          // it), which lives one life of its own and is closed while its calls are under way.
          if ((seed + t + life) % 2 === 0) duplicates.push(duplicate(page, seed * 100 + 50 + t * 10 + life))
          await new Promise((r) => setTimeout(r, wait / 2))
          totals.reloads++
        }
      }
    }
    const duplicates = []
    const duplicate = async (page, lifeSeed) => {
      const copy = await page.evaluate(() => Object.entries(sessionStorage)).catch(() => null)
      if (!copy) return
      starting++
      await until(() => !offlineNow)
      const twin = await context.newPage()
      await twin.addInitScript((entries) => {
        // Once: a reload of the twin keeps its own storage, as a duplicated tab's would.
        if (sessionStorage.getItem('fuzz-twin')) return
        sessionStorage.setItem('fuzz-twin', '1')
        for (const [k, v] of entries) sessionStorage.setItem(k, v)
      }, copy)
      watch(twin)
      totals.duplicated++
      await twin.goto(`${server.url}/fuzz/api-fuzz.html`)
      twin.evaluate(fuzz, { seed: lifeSeed, steps: STEPS, tenant, last: false, tracing: TRACE }).catch(() => {})
      totals.steps += STEPS
      await new Promise((r) => setTimeout(r, 1000 + (lifeSeed % 3000)))
      await collect(twin)
      await twin.close()
    }
    // Set when a tab failed: the spells stop, so that the tab's error is the one told.
    let stopped = false
    // Playwright sets every page of the context offline; a page closing meanwhile (a duplicated
    // tab) fails the call ("Target page, context or browser has been closed"): tried again.
    let contextClosed = false
    context.on('close', () => (contextClosed = true))
    const setOffline = async (offline) => {
      for (let i = 0; ; i++) {
        try {
          return await context.setOffline(offline)
        } catch (e) {
          if (contextClosed || i >= 5 || !/has been closed/.test(String(e))) throw e
          await new Promise((r) => setTimeout(r, 50))
        }
      }
    }
    const offline = (async () => {
      for (let i = 0; settling < TABS && !stopped; i++) {
        await new Promise((r) => setTimeout(r, 1000 + ((seed * 31 + i * 7) % 3000)))
        await until(() => starting === 0 || settling >= TABS || stopped)
        if (settling >= TABS || stopped) break
        offlineNow = true
        await setOffline(true)
        totals.offline++
        await new Promise((r) => setTimeout(r, 200 + ((seed * 17 + i * 13) % 1500)))
        await setOffline(false)
        offlineNow = false
      }
      await setOffline(false)
      offlineNow = false
    })()
    try {
      await Promise.all([...Array.from({ length: TABS }, (_, t) => tab(t)), offline])
      await Promise.all(duplicates)
    } catch (e) {
      stopped = true
      await offline.catch(() => {})
      throw e
    }
    const held = await (await fetch(`${server.url}/api/tickets?limit=500`, { headers: { 'X-Tenant': tenant } })).json()
    if (held.length >= 500) seen.violations.push('500 tickets or more: the list is cut, the checks cannot be made')
    const bySubject = new Map()
    for (const t of held) bySubject.set(t.subject, (bySubject.get(t.subject) || 0) + 1)
    const violations = [...seen.violations]
    for (const [subject, n] of bySubject) {
      if (!seen.submitted.has(subject)) violations.push(`a ticket nobody submitted: ${subject}`)
      else if (n > 1 && !seen.tainted.has(subject)) {
        violations.push(`${n} tickets of ${subject}, submitted once (ids ${held.filter((x) => x.subject === subject).map((x) => x.id).join(', ')})`)
        if (TRACE) for (const line of traces) console.log(`TRACE ${line}`)
      }
    }
    for (const subject of seen.succeeded) {
      if (!bySubject.has(subject)) violations.push(`${subject} succeeded, and the server has no ticket of it`)
    }
    for (const v of violations) all.push(`seed ${seed}: ${v}`)
    totals.submitted += seen.submitted.size
    totals.tainted += seen.tainted.size
    totals.succeeded += seen.succeeded.size
    totals.tickets += held.length
    await context.close()
  }
} finally {
  await browser.close()
  await server.stop()
}
const row = (k, v) => console.log(`${k.padEnd(28)} ${v}`)
const list = (filter) => Object.entries(counts).filter(([k]) => filter(k)).sort().map(([k, v]) => `${k} ${v}`).join(', ')
console.log(`oncekey API fuzz: seed ${SEED}, ${RUNS} runs of ${TABS} tabs, ${totals.steps} steps, ${totals.reloads} reloads mid-run, ${totals.duplicated} tabs duplicated, ${totals.offline} offline spells, fault rate ${FAULT_RATE}`)
row('bodies submitted', `${totals.submitted} (discarded or sent as new: ${totals.tainted}; seen to succeed: ${totals.succeeded})`)
row('tickets', totals.tickets)
row('calls', list((k) => !k.includes('->') && !k.startsWith('nested')))
row('nested calls', list((k) => k.startsWith('nested')))
row('settled', list((k) => k.includes('->')))
row('OncekeyError codes', Object.entries(codes).sort().map(([k, v]) => `${k} ${v}`).join(', '))
for (const v of all) console.log(`VIOLATION ${v}`)
console.log(`guarantee violations ${all.length}`)
process.exit(all.length ? 1 : 0)
