// What the garbage collector may do to a page that uses oncekey: nothing it can see. A page that
// drops what oncekey gave it (the kit's object, a listener's stop function) keeps its form wired
// and its listener hearing; and it comes back from the back/forward cache when the person goes
// back, as a page without oncekey does. A page runs no script while it sits there; one that
// would (a finalizer of an object it dropped) is evicted, and going back reloads it. Pages of one
// site share a heap, so the page the person went on to collects garbage here, and what the
// first page left behind is collected while it is cached.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import { eventually, launchBrowser, startServer, tickets, uniqueTenant, watchConsole } from './harness.mjs'

let server
let browser

before(async () => {
  server = await startServer()
  browser = await launchBrowser({ bfcache: true })
})

after(async () => {
  await browser?.close()
  await server?.stop()
})

// The other page is the server's JSON, which has no icon: the browser's request for one is the
// browser's, not the page's.
const pageErrors = (errors) => errors.filter((e) => !/Failed to load resource/.test(e))

/** Goes on to another page of the site, collects garbage there, and goes back: whether the page
 * came back from the cache (its script's state kept) and, if not, why not. */
async function leaveAndComeBack(page) {
  await page.evaluate(() => {
    window.stillHere = true
  })
  await page.goto(`${server.url}/api/stats`)
  await page.evaluate(() => {
    gc()
    gc()
  })
  await page.waitForTimeout(200)
  await page.goBack({ waitUntil: 'commit' })
  await page.waitForFunction(() => document.readyState === 'complete')
  return page.evaluate(() => ({
    cached: window.stillHere === true,
    why: JSON.stringify(performance.getEntriesByType('navigation')[0].notRestoredReasons),
  }))
}

/** Submits the kit's form and waits for its ticket and its success. */
async function send(page, form, tenant, subject) {
  const before = (await tickets(server.url, tenant)).length
  await page.fill(`${form} [name=subject]`, subject)
  await page.click(`${form} button`)
  await eventually(async () => (await tickets(server.url, tenant)).length === before + 1, `ticket ${before + 1}`)
  await page.waitForSelector(`${form}[data-oncekey-state="succeeded"]`)
}

test('a page whose kit (attachForm, its object dropped) sent a ticket comes back from the back/forward cache, still wired', async () => {
  const tenant = uniqueTenant('bfcache-attach')
  const page = await browser.newPage()
  const errors = watchConsole(page)
  try {
    // bench-form.html drops what attachForm returns, as many pages do.
    await page.goto(`${server.url}/e2e/bench-form.html?tenant=${tenant}`)
    await page.waitForFunction(() => window.benchReady === true)
    for (const round of [1, 2]) {
      await send(page, '#kit', tenant, `Cached ${round}`)
      const back = await leaveAndComeBack(page)
      assert.ok(back.cached, `round ${round}: the page was not restored from the back/forward cache: ${back.why}`)
    }
    // Still wired after coming back: Send makes the next ticket (a key of its own: the same key
    // would have been answered with the first ticket again).
    await send(page, '#kit', tenant, 'After the cache')
    const made = await tickets(server.url, tenant)
    assert.deepEqual(made.map((t) => t.subject).sort(), ['After the cache', 'Cached 1', 'Cached 2'])
    assert.deepEqual(pageErrors(errors), [])
  } finally {
    await page.close()
  }
})

test('a page whose kits autoAttach made sent a ticket comes back from the back/forward cache', async () => {
  const tenant = uniqueTenant('bfcache-auto')
  const page = await browser.newPage()
  const errors = watchConsole(page)
  try {
    await page.goto(`${server.url}/e2e/first-paint-markup.html?tenant=${tenant}`)
    const form = 'form[data-oncekey]'
    await page.waitForSelector(`${form}[data-oncekey-state="idle"]`)
    for (const round of [1, 2]) {
      await send(page, form, tenant, `Auto ${round}`)
      const back = await leaveAndComeBack(page)
      assert.ok(back.cached, `round ${round}: the page was not restored from the back/forward cache: ${back.why}`)
    }
    assert.deepEqual((await tickets(server.url, tenant)).map((t) => t.subject).sort(), ['Auto 1', 'Auto 2'])
    assert.deepEqual(pageErrors(errors), [])
  } finally {
    await page.close()
  }
})

/** A submitter of the page `bench-form.html` (it loads the package), as `window.tickets`. */
async function submitterPage(tenant) {
  const page = await browser.newPage()
  await page.goto(`${server.url}/e2e/bench-form.html?tenant=${tenant}`)
  await page.waitForFunction(() => window.benchReady === true)
  await page.evaluate(async (tenant) => {
    const { Submitter } = await import('/pkg/oncekey.js')
    window.tickets = new Submitter('gc-tickets', { url: '/api/tickets', headers: { 'X-Tenant': tenant } })
  }, tenant)
  return page
}

const submit = (page, subject) =>
  page.evaluate(async (subject) => (await window.tickets.submit({ subject, email: 'gc@example.com', body: 'x' })).outcome, subject)

test('an onChange listener whose stop function the page dropped still hears after a garbage collection; a kept one stops when called', async () => {
  const tenant = uniqueTenant('gc-listener')
  const page = await submitterPage(tenant)
  try {
    await page.evaluate(() => {
      window.heard = { dropped: [], kept: [] }
      // As README's example does: the stop function is not kept.
      window.tickets.onChange((c) => window.heard.dropped.push(c.state))
      window.stopKept = window.tickets.onChange((c) => window.heard.kept.push(c.state))
    })
    assert.equal(await submit(page, 'Before'), 'succeeded')
    await page.evaluate(async () => {
      for (let i = 0; i < 3; i++) {
        gc()
        await new Promise((r) => setTimeout(r, 50))
      }
    })
    assert.equal(await submit(page, 'After the collection'), 'succeeded')
    const heard = await page.evaluate(() => window.heard)
    assert.deepEqual(heard.dropped, ['idle', 'sending', 'succeeded', 'sending', 'succeeded'])
    assert.deepEqual(heard.kept, heard.dropped)
    // The kept function stops its listener, and only that one.
    await page.evaluate(() => window.stopKept())
    assert.equal(await submit(page, 'After stop'), 'succeeded')
    const after = await page.evaluate(() => window.heard)
    assert.equal(after.kept.length, 5)
    assert.equal(after.dropped.length, 7)
    assert.equal((await tickets(server.url, tenant)).length, 3)
  } finally {
    await page.close()
  }
})

test('a page that listened with onChange and dropped the stop function comes back from the back/forward cache', async () => {
  const tenant = uniqueTenant('bfcache-listener')
  const page = await submitterPage(tenant)
  const errors = watchConsole(page)
  try {
    await page.evaluate(() => {
      window.heard = []
      window.tickets.onChange((c) => window.heard.push(c.state))
    })
    for (const round of [1, 2]) {
      assert.equal(await submit(page, `Listened ${round}`), 'succeeded')
      const back = await leaveAndComeBack(page)
      assert.ok(back.cached, `round ${round}: the page was not restored from the back/forward cache: ${back.why}`)
    }
    assert.equal((await page.evaluate(() => window.heard)).filter((s) => s === 'succeeded').length, 2)
    assert.deepEqual(pageErrors(errors), [])
  } finally {
    await page.close()
  }
})
