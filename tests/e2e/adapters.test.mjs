// The adapters' shared part (adapters/store.js) against a stand-in Submitter with the package's
// public API, to see what a framework does to it: strict mode's subscribe, unsubscribe,
// subscribe; many components of one name; a submit before init() is done; an unmount. (The real
// Submitter, the real server and real React and Vue are the frameworks browser test's.)
import assert from 'node:assert/strict'
import { beforeEach, test } from 'node:test'

import { entryFor, ready } from '../../adapters/store.js'

// The store works in a page only.
globalThis.document ??= {}

let made
let inits
// Behaves as the package's Submitter does for these calls: onChange calls the listener at once,
// submit of the same body joins, a settled submission has no pending body, `{ signal }` aborts a
// wait (and, when nobody else waits, the round: unsure).
class FakeSubmitter {
  listeners = new Set()
  state = 'idle'
  key = null
  body = null
  waiters = []
  storage = 'session'
  constructor(name, options) {
    this.name = name
    this.options = options
    this.calls = []
    made.push(this)
    if (options.found) Object.assign(this, { state: options.resume ? 'sending' : 'unsure', key: 'k-found', body: options.found })
  }
  onChange(listener) {
    const entry = (c) => listener(c)
    this.listeners.add(entry)
    listener(this.change())
    return () => this.listeners.delete(entry)
  }
  change() {
    return { state: this.state, key: this.key, attempts: this.key ? 1 : 0, nextAttemptAt: null, warning: null }
  }
  emit() {
    for (const l of this.listeners) l(this.change())
  }
  pending() {
    return this.body === null ? null : { key: this.key, body: structuredClone(this.body), attempts: 1, startedAt: 0 }
  }
  submit(body, options) {
    this.calls.push(['submit', body])
    if (options?.signal?.aborted) return Promise.reject(aborted())
    if (this.body !== null && JSON.stringify(body) !== JSON.stringify(this.body)) {
      return Promise.reject(Object.assign(new Error('another body is pending'), { name: 'OncekeyError', code: 'pending' }))
    }
    if (this.body === null) {
      Object.assign(this, { state: 'sending', key: `k${made.length}-${this.calls.length}`, body })
      this.emit()
    }
    return this.wait(options)
  }
  tryAgain(options) {
    this.calls.push(options === undefined ? ['tryAgain'] : ['tryAgain', options])
    if (options?.signal?.aborted) return Promise.reject(aborted())
    return this.wait(options)
  }
  wait(options) {
    return new Promise((resolve, reject) => {
      this.waiters.push(resolve)
      options?.signal?.addEventListener('abort', () => {
        if (!this.waiters.includes(resolve)) return
        this.waiters = this.waiters.filter((w) => w !== resolve)
        if (this.waiters.length === 0) {
          this.state = 'unsure'
          this.emit()
        }
        reject(aborted())
      })
    })
  }
  sendAsNew() {
    this.calls.push(['sendAsNew'])
    return new Promise((resolve) => this.waiters.push(resolve))
  }
  discard() {
    this.calls.push(['discard'])
  }
  setSecrets(fields) {
    this.calls.push(['setSecrets', fields])
  }
  // The server answered.
  settle(outcome = 'succeeded') {
    const key = this.key
    Object.assign(this, { state: outcome, body: null })
    this.emit()
    for (const w of this.waiters.splice(0)) w({ outcome, key, status: 201, body: { id: 7 }, replayed: false, attempts: 1, gaveUp: null })
  }
}

const aborted = () => Object.assign(new Error('aborted'), { name: 'OncekeyError', code: 'aborted' })
// The calls' names: the entry's own join passes a signal of its own.
const called = (s) => s.calls.map(([name]) => name)

const PKG = {
  init: async () => {
    inits += 1
  },
  Submitter: FakeSubmitter,
}
const tick = () => new Promise((r) => setTimeout(r, 0))

let names = 0
const fresh = () => `form-${++names}`

beforeEach(() => {
  made = []
  inits = 0
  delete globalThis[Symbol.for('oncekey.adapters.entries')]
  delete globalThis[Symbol.for('oncekey.adapters.init')]
})

test("strict mode's subscribe, unsubscribe, subscribe makes one Submitter and leaves one listener", async () => {
  const name = fresh()
  const entry = entryFor(name, { url: '/x' }, PKG)
  const seen = []
  const off = entry.subscribe(() => seen.push(entry.read().state))
  off()
  const offAgain = entry.subscribe(() => seen.push(entry.read().state))
  await tick()
  assert.equal(made.length, 1, 'one Submitter')
  assert.equal(made[0].listeners.size, 1, 'one onChange listener')
  assert.equal(entry.read().ready, true)
  offAgain()
  assert.equal(made[0].listeners.size, 0, 'the last unmount removed the listener')
})

test('components of one name share one Submitter; init() runs once for all names', async () => {
  const name = fresh()
  const a = entryFor(name, { url: '/x' }, PKG)
  const b = entryFor(name, { url: '/other' }, PKG)
  assert.equal(a, b)
  a.subscribe(() => {})
  b.subscribe(() => {})
  entryFor(fresh(), { url: '/y' }, PKG).subscribe(() => {})
  await tick()
  assert.equal(made.length, 2)
  assert.equal(made[0].options.url, '/x', 'the first options are used')
  assert.equal(inits, 1, 'init() once per page')
  assert.equal(made[0].listeners.size, 1, 'one listener for the name, however many components')
  await ready(PKG.init)
  assert.equal(inits, 1)
})

test('a submit before init() is done is held, then sent once; the settlement is in the snapshot', async () => {
  const entry = entryFor(fresh(), { url: '/x' }, PKG)
  entry.subscribe(() => {})
  entry.setSecrets({ password: 'p' })
  const first = entry.submit({ subject: 'a' })
  const second = entry.submit({ subject: 'a' })
  await tick()
  const s = made[0]
  assert.deepEqual(s.calls.map((c) => c[0]), ['setSecrets', 'submit', 'submit'], 'secrets first, then the submits')
  const sending = entry.read()
  assert.equal(sending.state, 'sending')
  assert.equal(sending.locked, true)
  assert.deepEqual(sending.pending, { subject: 'a' })
  s.emit()
  assert.equal(entry.read().pending, sending.pending, 'the same pending object while the key is the same')
  s.settle()
  const [r1, r2] = await Promise.all([first, second])
  assert.equal(r1.key, r2.key)
  const done = entry.read()
  assert.equal(done.state, 'succeeded')
  assert.equal(done.locked, false)
  assert.equal(done.pending, null)
  assert.deepEqual(done.settlement.body, { id: 7 })
})

test('a refused call is in the snapshot, and its promise rejects handled', async () => {
  const entry = entryFor(fresh(), { url: '/x' }, PKG)
  entry.subscribe(() => {})
  await tick()
  entry.submit({ subject: 'a' })
  const other = entry.submit({ subject: 'b' })
  await assert.rejects(other, { code: 'pending' })
  assert.equal(entry.read().error.code, 'pending')
})

test('a pending submission resumed at start-up is joined, so its settlement is heard', async () => {
  const entry = entryFor(fresh(), { url: '/x', resume: true, found: { subject: 'found' } }, PKG)
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  assert.deepEqual(called(s), ['tryAgain'], 'joined once')
  assert.deepEqual(entry.read().pending, { subject: 'found' })
  assert.equal(entry.read().locked, true)
  s.settle()
  await tick()
  assert.equal(entry.read().settlement.outcome, 'succeeded')
})

test('a pending submission not resumed waits unsure, locked, with its body', async () => {
  const entry = entryFor(fresh(), { url: '/x', found: { subject: 'found' } }, PKG)
  entry.subscribe(() => {})
  await tick()
  assert.deepEqual(made[0].calls, [], 'nothing sent')
  const s = entry.read()
  assert.equal(s.state, 'unsure')
  assert.equal(s.locked, true)
  assert.deepEqual(s.pending, { subject: 'found' })
})

test("attemptHeaders is called through the latest render's options", async () => {
  const entry = entryFor(fresh(), { url: '/x', attemptHeaders: () => ({ 'X-N': '1' }) }, PKG)
  entry.subscribe(() => {})
  await tick()
  entry.update({ url: '/x', attemptHeaders: () => ({ 'X-N': '2' }) })
  assert.deepEqual(made[0].options.attemptHeaders({ attempt: 1, key: 'k' }), { 'X-N': '2' })
})

test('init() failing is in the snapshot and rejects calls; a later call asks again', async () => {
  let fail = true
  const pkg = {
    init: async () => {
      if (fail) throw new Error('no wasm')
    },
    Submitter: FakeSubmitter,
  }
  const entry = entryFor(fresh(), { url: '/x' }, pkg)
  entry.subscribe(() => {})
  await assert.rejects(entry.submit({ subject: 'a' }), /no wasm/)
  assert.equal(entry.read().error.message, 'no wasm')
  fail = false
  const sent = entry.submit({ subject: 'a' })
  await tick()
  assert.equal(made.length, 1)
  assert.equal(entry.read().error, null)
  made[0].settle()
  assert.equal((await sent).outcome, 'succeeded')
})

test("waitingFor, sendAsNew and a call's { signal } reach the Submitter; a click event given to tryAgain does not", async () => {
  const entry = entryFor(fresh(), { url: '/x' }, PKG)
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  assert.equal(entry.read().waitingFor, null)
  Object.assign(s, { state: 'waiting', key: 'k-off' })
  const change = s.change
  s.change = () => ({ ...change.call(s), waitingFor: 'online' })
  s.emit()
  assert.equal(entry.read().waitingFor, 'online', 'offline: the snapshot says it waits for the connection')
  assert.equal(entry.read().locked, true)
  const signal = new AbortController().signal
  entry.tryAgain({ signal })
  entry.tryAgain({ target: {}, preventDefault() {} })
  entry.sendAsNew()
  assert.deepEqual(s.calls, [['tryAgain', { signal }], ['tryAgain'], ['sendAsNew']])
})

test('a resumed submission waiting for the connection at load is joined once it sends, and its settlement is heard', async () => {
  // Offline at load: the Submitter took the record up and waits for the connection.
  const Offline = class extends FakeSubmitter {
    constructor(name, options) {
      super(name, options)
      this.state = 'waiting'
    }
  }
  const entry = entryFor(fresh(), { url: '/y', resume: true, found: { subject: 'offline' } }, { init: PKG.init, Submitter: Offline })
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  assert.deepEqual(s.calls, [], 'a waiting round is not restarted by the adapter')
  assert.equal(entry.read().locked, true)
  // Online again: the Submitter sends with the same key (its attempt, then a retry's).
  s.state = 'sending'
  s.emit()
  s.emit()
  await tick()
  assert.deepEqual(called(s), ['tryAgain'], 'joined once, when it sent')
  s.settle()
  await tick()
  const snap = entry.read()
  assert.equal(snap.settlement?.outcome, 'succeeded', 'the settlement of the resumed round is in the snapshot')
  assert.equal(snap.settlement.key, 'k-found')
  assert.equal(snap.locked, false)
})

test('a record found a moment after the Submitter was made (IndexedDB) is joined when it sends', async () => {
  const entry = entryFor(fresh(), { url: '/x', resume: true }, PKG)
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  assert.equal(entry.read().state, 'idle')
  // The upload's record is read from IndexedDB and resent.
  Object.assign(s, { state: 'sending', key: 'k-idb', body: { fields: { subject: 'x' }, files: [] } })
  s.emit()
  await tick()
  assert.deepEqual(called(s), ['tryAgain'])
  s.settle()
  await tick()
  assert.equal(entry.read().settlement?.key, 'k-idb')
})

test("the entry's own submit is not joined again; a round started on the Submitter itself is joined once", async () => {
  const entry = entryFor(fresh(), { url: '/x' }, PKG)
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  const sent = entry.submit({ subject: 'a' })
  await tick()
  assert.deepEqual(s.calls, [['submit', { subject: 'a' }]], 'no tryAgain beside its own submit')
  s.settle()
  await sent
  // A round started by the Submitter used directly, then another body refused meanwhile.
  s.submit({ subject: 'direct' })
  await tick()
  assert.deepEqual(s.calls[1], ['submit', { subject: 'direct' }])
  assert.deepEqual(called(s).slice(1), ['submit', 'tryAgain'], 'joined')
  await assert.rejects(entry.submit({ subject: 'other' }), { code: 'pending' })
  await tick()
  assert.equal(s.calls.filter((c) => c[0] === 'tryAgain').length, 1, 'joined once')
  s.settle()
  await tick()
  assert.equal(entry.read().settlement?.outcome, 'succeeded')
})

test('the Submitter is made with the options of the first use, whatever a later render passes before init() is done', async () => {
  const name = fresh()
  const entry = entryFor(name, { url: '/first' }, PKG)
  entry.subscribe(() => {})
  entry.update({ url: '/second' })
  entryFor(name, { url: '/third' }, PKG).update({ url: '/third' })
  await tick()
  assert.equal(made.length, 1)
  assert.equal(made[0].options.url, '/first')
})

test('secrets the Submitter refuses are said in the snapshot, and the entry keeps its one Submitter', async () => {
  const pkg = {
    init: PKG.init,
    Submitter: class extends FakeSubmitter {
      setSecrets(fields) {
        if (Array.isArray(fields)) throw Object.assign(new Error('secrets must be an object'), { code: 'option' })
        super.setSecrets(fields)
      }
    },
  }
  const entry = entryFor(fresh(), { url: '/x' }, pkg)
  entry.setSecrets([1])
  entry.subscribe(() => {})
  await tick()
  assert.equal(entry.read().error?.code, 'option')
  assert.equal(entry.read().ready, true)
  entry.subscribe(() => {})
  entry.discard()
  const sent = entry.submit({ subject: 'a' })
  await tick()
  assert.equal(made.length, 1, 'one Submitter for the name')
  made[0].settle()
  assert.equal((await sent).outcome, 'succeeded')
})

test('a refused call is still in the snapshot when the entry then joins a round under way', async () => {
  // submit(another body) before init(), while the Submitter resumed a record at once: the
  // call is refused ('pending') and the entry joins the resumed round, which cleared the
  // error it had just set.
  const entry = entryFor(fresh(), { url: '/x', resume: true, found: { subject: 'found' } }, PKG)
  entry.subscribe(() => {})
  const refused = entry.submit({ subject: 'other' })
  await assert.rejects(refused, { code: 'pending' })
  await tick()
  const s = made[0]
  assert.deepEqual(s.calls[0], ['submit', { subject: 'other' }])
  assert.deepEqual(called(s), ['submit', 'tryAgain'], 'refused, then joined')
  assert.equal(entry.read().error?.code, 'pending', 'the refusal is still said')
  s.settle()
  await tick()
  assert.equal(entry.read().settlement?.outcome, 'succeeded')
  assert.equal(entry.read().error?.code, 'pending', 'a join settling clears no error of a call')
})

test("a page's call aborted while it waits on a round the entry joined stops the join too; one aborted before it began does not", async () => {
  const entry = entryFor(fresh(), { url: '/x', resume: true, found: { subject: 'found' } }, PKG)
  entry.subscribe(() => {})
  await tick()
  const s = made[0]
  assert.equal(s.waiters.length, 1, 'the entry joined the resumed round')
  const early = new AbortController()
  early.abort()
  await assert.rejects(entry.tryAgain({ signal: early.signal }), { code: 'aborted' })
  await assert.rejects(entry.submit({ subject: 'found' }, { signal: early.signal }), { code: 'aborted' })
  assert.equal(s.waiters.length, 1, 'calls that never began leave the join waiting')
  assert.equal(s.state, 'sending')
  const controller = new AbortController()
  const call = entry.tryAgain({ signal: controller.signal })
  assert.equal(s.waiters.length, 2)
  controller.abort()
  await assert.rejects(call, { code: 'aborted' })
  await tick()
  assert.equal(s.waiters.length, 0, 'nobody waits: the retries stop')
  assert.equal(s.state, 'unsure')
  assert.equal(entry.read().state, 'unsure')
  assert.equal(entry.read().error?.code, 'aborted')
  assert.equal(called(s).filter((n) => n === 'tryAgain').length, 3, 'not joined again')
})
