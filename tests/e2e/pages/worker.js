// The worker of tests/e2e/pages/worker.html: a Submitter in a dedicated worker, where the package
// binds fetch, timers, crypto, Web Locks and navigator.onLine to the worker's global.
import init, { Submitter } from '/pkg/oncekey.js'

// Every request that carries an Idempotency-Key (an attempt) is counted and posted, so the test
// sees what the worker sent, not only what it said.
const plainFetch = self.fetch
self.fetch = (input, init) => {
  if (new Headers(init?.headers).has('Idempotency-Key')) postMessage({ keyed: true })
  return plainFetch(input, init)
}
await init()
let submitter
self.onmessage = async ({ data }) => {
  submitter ??= new Submitter('worker-ticket', {
    url: '/api/tickets',
    headers: { 'X-Tenant': data.tenant },
    // A small budget, spent in seconds were the time offline counted.
    retry: { attempts: 3, base: 50, cap: 200, budget: 3000 },
  })
  submitter.onChange((c) => postMessage({ change: { state: c.state, key: c.key, attempts: c.attempts, waitingFor: c.waitingFor ?? null } }))
  const result = await submitter.submit(data.body).catch((e) => ({ error: String(e), code: e.code }))
  postMessage({ result: { outcome: result.outcome, status: result.status, key: result.key, attempts: result.attempts, error: result.error } })
}
postMessage({ ready: true })
