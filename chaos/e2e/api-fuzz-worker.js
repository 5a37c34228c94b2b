// The API fuzz run's worker (chaos/e2e/api-fuzz.mjs): Submitters in a dedicated module worker,
// where there is no window and no Web Storage (IndexedDB, or memory with a warning), driven by
// the page's messages. They share their names, IndexedDB records and Web Locks with the page's
// submitters, and the page kills the worker now and then while its calls are under way
// (`terminate()`, as a crashed worker: no event, no chance to finish anything).
//
// Messages from the page: `{ id, op, slot, ... }` (an answer `{ id, value }` or `{ id, error }`
// follows), and `{ acked }`. To the page: answers, `{ report: [kind, what] }`, and `{ taint,
// ack }` before a discard or a send-as-new, which waits for the page's `{ acked }`: the page
// tells node first, so that a second ticket of that body is known to be deliberate even if the
// page goes away the moment after.
import init, { Submitter } from '/pkg/oncekey.js'
import { subjectOf, upload } from '/fuzz/api-fuzz-bodies.js'

// The module can fail to load (the worker begun while offline): told as such, not as a call's error.
const ready = init().then(
  () => true,
  () => false,
)
ready.then((loaded) => self.postMessage({ ready: loaded }))
const submitters = new Map()
const waiting = new Map()
let nextAck = 0

const report = (kind, what) => self.postMessage({ report: [kind, what] })
self.addEventListener('error', (e) => report('violation', `worker error: ${e.message}`))
self.addEventListener('unhandledrejection', (e) => report('violation', `worker: unhandled rejection: ${e.reason}`))

// What a settlement tells the page (a settlement's body may hold what cannot be posted).
const told = (r) => ({
  outcome: r.outcome,
  key: r.key,
  status: r.status,
  body: r.body && typeof r.body === 'object' ? { subject: r.body.subject } : null,
})

// Tells the page which body is let go, and goes on once the page has told node.
const taint = (s) => {
  const subject = subjectOf(s.pending())
  if (!subject) return Promise.resolve()
  const ack = nextAck++
  return new Promise((resolve) => {
    waiting.set(ack, resolve)
    self.postMessage({ taint: subject, ack })
  })
}

const body = (data) => (data.upload ? upload(data.body) : data.body)

const run = async (data) => {
  if (data.op === 'make') {
    const s = new Submitter(data.name, data.options)
    submitters.set(data.slot, s)
    return { outcome: 'made', storage: s.storage, subject: subjectOf(s.pending()) }
  }
  const s = submitters.get(data.slot)
  // Its making failed (an option refused): told then.
  if (!s) return { outcome: 'no submitter' }
  switch (data.op) {
    case 'submit':
      return told(await s.submit(body(data)))
    case 'submit again': {
      const p = s.pending()
      return p ? told(await s.submit(p.body)) : { outcome: 'nothing pending' }
    }
    case 'tryAgain':
      return told(await s.tryAgain())
    case 'sendAsNew':
      await taint(s)
      return told(await s.sendAsNew())
    case 'discard':
      await taint(s)
      s.discard()
      return { outcome: 'discarded' }
    default:
      void [s.state, s.name, s.storage, s.pending()]
      return { outcome: 'read' }
  }
}

self.onmessage = async ({ data }) => {
  if ('acked' in data) {
    waiting.get(data.acked)?.()
    waiting.delete(data.acked)
    return
  }
  if (!(await ready)) return self.postMessage({ id: data.id, value: { outcome: 'not loaded' } })
  try {
    self.postMessage({ id: data.id, value: await run(data) })
  } catch (e) {
    self.postMessage({ id: data.id, error: { name: e && e.name, code: e && e.code, message: e && e.message } })
  }
}
