// The back/forward cache: a page that used the form kit comes back from it when the person goes
// back, as a page without the kit does. A page runs no script while it sits there; one that
// would (a finalizer of an object it dropped, run by the garbage collector) is evicted, and
// going back reloads it. Pages of one site share a heap, so the page the person went on to
// collects garbage here, and what the kit's page left behind is collected while it is cached.
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
