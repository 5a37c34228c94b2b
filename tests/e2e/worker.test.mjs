// The Submitter in a dedicated worker (issue 17: "the same in a worker"): offline, the worker's
// submission waits without spending an attempt or its budget, and is sent with its key once the
// connection is back; one ticket.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { eventually, launchBrowser, startServer, stats, tickets, uniqueTenant, watchConsole } from './harness.mjs'

let server
let browser

before(async () => {
  server = await startServer()
  browser = await launchBrowser()
})

after(async () => {
  await browser?.close()
  await server?.stop()
})

test('in a worker, offline spends nothing; back online the same key makes one ticket', async () => {
  const tenant = uniqueTenant('worker-offline')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.goto(`${server.url}/e2e/worker.html`)
  await page.evaluate(() => window.__ready)
  await context.setOffline(true)
  await page.evaluate(([t]) => window.__submit(t, { subject: 'From a worker', email: 'ana@example.com', body: 'Offline.' }), [tenant])
  await eventually(
    async () => (await page.evaluate(() => window.__changes)).some((c) => c.waitingFor === 'online'),
    'the worker says it waits for the connection',
  )
  // Longer offline than the whole retry budget (3 s): nothing is sent, nothing is spent.
  await page.waitForTimeout(4000)
  const offline = await page.evaluate(() => window.__changes)
  assert.ok(offline.every((c) => c.state !== 'unsure'), `never unsure offline: ${JSON.stringify(offline)}`)
  assert.deepEqual(await page.evaluate(() => window.__results), [], 'still waiting')
  assert.equal((await tickets(server.url, tenant)).length, 0)
  const key = offline.at(-1).key
  assert.ok(key, 'the key was made before anything was sent')

  // What the worker sent (its fetch, counted in worker.js) and said, up to the moment the
  // connection comes back: no request with the key, no attempt, never sending.
  const [changes, keyed] = await page.evaluate(() => [window.__changes, window.__keyed])
  assert.equal(keyed, 0, 'no request with a key went out offline')
  assert.ok(
    changes.every((c) => c.state !== 'sending' && (c.attempts ?? 0) === 0),
    `no attempt spent offline: ${JSON.stringify(changes)}`,
  )
  await context.setOffline(false)
  await eventually(async () => (await page.evaluate(() => window.__results)).length === 1, 'the worker settled')
  const [result] = await page.evaluate(() => window.__results)
  assert.equal(result.outcome, 'succeeded', JSON.stringify(result))
  assert.equal(result.key, key, 'sent with the key made offline')
  assert.equal(result.attempts, 1, `one attempt, sent once back online: ${JSON.stringify(result)}`)
  assert.equal(await page.evaluate(() => window.__keyed), 1, 'one request with a key in all')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.equal(list[0].subject, 'From a worker')
  assert.equal((await stats(server.url, tenant)).created, 1, "created once by the server")
  assert.deepEqual(errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e)), [])
  await context.close()
})
