// The adapters' shared part (adapters/store.js, as the package ships it) on the real Submitter and
// the reference server, in a page with no framework (tests/e2e/pages/store.html): what the stand-in
// Submitter of adapters.test.mjs cannot show.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { launchBrowser, startServer, uniqueTenant, watchConsole } from './harness.mjs'

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

const BODY = { subject: 'Joined', email: 'ana@example.com', body: 'Third floor.' }

// A round resumed after a reload is the Submitter's; the entry joins it (a tryAgain() of its own)
// to hear its settlement. A page's call with a signal that waits on the same round and is
// aborted must still stop the retries, as SubmitOptions and the README say ("unless another call
// waits"): the entry's join is nobody's call.
for (const call of ['tryAgain', 'submit']) {
  test(`a page's ${call}({ signal }) on a resumed round the entry joined: aborted, the retries stop and it is unsure`, async () => {
    const tenant = uniqueTenant(`store-${call}`)
    const context = await browser.newContext()
    const page = await context.newPage()
    const errors = watchConsole(page)
    const posts = []
    page.on('request', (r) => {
      if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/tickets') posts.push(r.headers()['idempotency-key'])
    })
    await page.goto(`${server.url}/e2e/store.html?tenant=${tenant}&fault=delay=3000`)
    await page.waitForFunction(() => window.entry?.read().ready)
    await page.evaluate((body) => void window.entry.submit(body).catch(() => {}), BODY)
    await page.waitForFunction(() => window.entry.read().state === 'sending')
    const key = await page.evaluate(() => window.entry.read().key)
    // Reloaded mid-request: resumed at once, and every attempt from now on fails before any work
    // (503), so it is retried.
    await page.goto(`${server.url}/e2e/store.html?tenant=${tenant}&fault=fail-before`)
    await page.waitForFunction(() => window.entry?.read().locked)
    await page.waitForFunction((n) => window.entry.read().attempts > n, 2)
    const got = await page.evaluate(
      async ([call, body]) => {
        const controller = new AbortController()
        const { signal } = controller
        const p = call === 'submit' ? window.entry.submit(body, { signal }) : window.entry.tryAgain({ signal })
        const settled = p.then((r) => `resolved ${r.outcome}`, (e) => e.code)
        await new Promise((r) => setTimeout(r, 300))
        controller.abort()
        return settled
      },
      [call, BODY],
    )
    assert.equal(got, 'aborted')
    // An attempt the abort caught in flight may still be reported; none may follow it.
    await page.waitForTimeout(500)
    const sent = posts.length
    await page.waitForTimeout(4000)
    assert.equal(posts.length, sent, `no attempt after the abort (${sent} before it)`)
    const now = await page.evaluate(() => {
      const { state, locked, key, error } = window.entry.read()
      return { submitter: window.entry.submitter.state, state, locked, key, error: error?.code }
    })
    assert.equal(now.submitter, 'unsure', "the Submitter's state")
    assert.equal(now.state, 'unsure', "the entry's snapshot")
    assert.equal(now.locked, true, 'still pending, locked')
    assert.equal(now.key, key, 'with its key')
    assert.equal(now.error, 'aborted')
    assert.deepEqual(new Set(posts), new Set([key]), 'every attempt with the one key')
    assert.deepEqual(errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e)), [])
    await context.close()
  })
}
