// Slow and dead connections, end to end (issue 17): Chromium's own network emulation (DevTools
// protocol: Slow 3G, 2 s latency), a form pressed before the module has loaded, offline spells
// (context.setOffline), real tabs on one record, the demo's network switch and its language
// switch. Each test checks what a person would: one ticket, with one key, and a form that stayed
// locked until the outcome was known.
import assert from 'node:assert/strict'
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, test } from 'node:test'
import { gzipSync } from 'node:zlib'

import { launchBrowser, root, screenshot, startServer, stats, tickets, uniqueTenant, watchConsole } from './harness.mjs'
import { LATENCY_2S, SLOW_3G, attached, emulate, firstPaint, firstPaintProbe, watchPosts } from './network.mjs'

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

const KIT = '#ticket-form'

test("the first-paint snippet in the README is the demo's, with its size and CSP hash as given", () => {
  const readme = readFileSync(path.join(root, 'README.md'), 'utf8')
  const demo = readFileSync(path.join(root, 'www/index.html'), 'utf8')
  const inDemo = demo.match(/<script>(.*?)<\/script>/)[1]
  const inReadme = readme.match(/```html\n<script>(.*?)<\/script>\n```/)[1]
  assert.equal(inReadme, inDemo)
  const bytes = Buffer.byteLength(inDemo)
  const gzipped = gzipSync(inDemo, { level: 9 }).length
  const hash = `'sha256-${createHash('sha256').update(inDemo).digest('base64')}'`
  assert.ok(readme.includes(`It is ${bytes} bytes of script (${gzipped} gzipped`), `${bytes} bytes, ${gzipped} gzipped`)
  assert.ok(readme.includes(hash), hash)
  assert.ok(readFileSync(path.join(root, 'tests/e2e/csp.test.mjs'), 'utf8').includes(hash), 'the CSP test allows it by that hash')
})

const pageErrors = (errors) => errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e))

async function fill(page, { subject, email = 'ana@example.com', body = 'Third floor.' }) {
  await page.fill(`${KIT} [name=subject]`, subject)
  await page.fill(`${KIT} [name=email]`, email)
  await page.fill(`${KIT} [name=body]`, body)
}

const condition = (page, value) => page.check(`input[name=condition][value="${value}"]`)
const settled = (page, outcome, timeout = 60000) =>
  page.waitForSelector(`${KIT}[data-oncekey-state="${outcome}"]`, { timeout })

/** Records, in the page, every change of the form's lock from now on: each `aria-busy` change
 * with the state and outcome the form had then. */
async function watchLock(page) {
  await page.evaluate((sel) => {
    const form = document.querySelector(sel)
    window.__lock = []
    new MutationObserver(() => {
      window.__lock.push({
        busy: form.getAttribute('aria-busy'),
        state: form.getAttribute('data-oncekey-state'),
        outcome: form.getAttribute('data-oncekey-outcome'),
        editable: !form.querySelector('[name=subject]').disabled,
      })
    }).observe(form, { attributes: true, subtree: true, attributeFilter: ['aria-busy', 'disabled', 'data-oncekey-state'] })
  }, KIT)
}

/** The form was locked from the submit until the outcome, and unlocked only with it. */
async function lockedThroughout(page, outcome) {
  const changes = await page.evaluate(() => window.__lock)
  const settledAt = changes.findIndex((c) => c.outcome === outcome || c.state === outcome)
  assert.ok(settledAt > 0, `the form settled ${outcome}: ${JSON.stringify(changes)}`)
  const lockedAt = changes.findIndex((c) => c.busy === 'true' && !c.editable)
  assert.ok(lockedAt >= 0 && lockedAt < settledAt, `locked before it settled: ${JSON.stringify(changes)}`)
  for (const c of changes.slice(lockedAt, settledAt)) {
    assert.deepEqual([c.busy, c.editable], ['true', false], `unlocked before the outcome: ${JSON.stringify(changes)}`)
  }
}

/** Sends one ticket on an emulated network, its first reply lost: one ticket, one key. */
async function oneTicketOn(conditions, label) {
  const tenant = uniqueTenant(label)
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  const posts = watchPosts(page)
  await page.goto(`${server.url}/?tenant=${tenant}`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await emulate(context, page, conditions)
  await condition(page, 'drop-reply')
  await fill(page, { subject: `On ${label}` })
  await watchLock(page)
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  await lockedThroughout(page, 'succeeded')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket')
  assert.equal(list[0].subject, `On ${label}`)
  const keys = new Set(posts.filter((p) => p.path === '/api/tickets').map((p) => p.key))
  assert.deepEqual([...keys], [await page.textContent('#live-key')], 'every attempt with the one key')
  // The retry (the kit's, or Chromium's own silent resend of a POST whose connection closed
  // before any answer byte) carried the same key and was answered by a replay.
  const counts = await stats(server.url, tenant)
  assert.deepEqual([counts.created, counts.replays, counts.missing_keys], [1, 1, 0], JSON.stringify(counts))
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
}

test('on emulated Slow 3G (400 ms, 50 KB/s) a lost reply makes one ticket, with one key, the form locked throughout', () =>
  oneTicketOn(SLOW_3G, 'slow-3g'))

test('with 2 s of latency a lost reply makes one ticket, with one key, the form locked throughout', () =>
  oneTicketOn(LATENCY_2S, 'latency-2s'))

test('on Slow 3G, Send pressed before the module has loaded is held, never posted without a key, and sent once with the typed values', async () => {
  const tenant = uniqueTenant('first-paint')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  const posts = watchPosts(page)
  await page.addInitScript(firstPaintProbe, KIT)
  await emulate(context, page, SLOW_3G)
  await page.goto(`${server.url}/?tenant=${tenant}`, { waitUntil: 'commit' })
  // As soon as the form can be seen: type and press Send.
  await page.waitForSelector(`${KIT} button[type=submit]`, { state: 'visible', timeout: 60000 })
  await fill(page, { subject: 'Before the module', body: 'Typed on a slow phone.' })
  const attachedWhenPressed = await page.getAttribute(KIT, 'data-oncekey-state')
  await page.click(`${KIT} button[type=submit]`)
  assert.equal(attachedWhenPressed, null, 'Send was pressed before the kit attached (else this test proves nothing)')
  assert.equal(await page.getAttribute(KIT, 'data-oncekey-held'), '["",""]', 'the snippet held the submit, noting the button pressed (the demo\'s has no name)')
  await screenshot(page, 'network-01-held-before-the-module')
  const fp = await attached(page)
  await settled(page, 'succeeded')
  assert.equal(fp.unprotectedMs, 0, `the form was never unprotected: ${JSON.stringify(fp)}`)
  assert.equal(fp.unprotected, 0)
  assert.ok(fp.probes > 0, 'the probe ran before the kit attached')
  assert.equal(new URL(page.url()).pathname, '/', 'no native post navigated away')
  assert.equal(await page.getAttribute(KIT, 'data-oncekey-held'), null, 'the kit took the held submit')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'the ticket was made once')
  assert.deepEqual([list[0].subject, list[0].body], ['Before the module', 'Typed on a slow phone.'])
  assert.deepEqual(posts.filter((p) => !p.key), [], 'no request without a key')
  assert.equal(posts.filter((p) => p.navigation).length, 0, 'no native form post')
  assert.equal((await stats(server.url, tenant)).missing_keys, 0)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('the markup-only guard: a submit button disabled until the kit attaches, which enables it', async () => {
  const tenant = uniqueTenant('wait-markup')
  const context = await browser.newContext()
  const page = await context.newPage()
  await emulate(context, page, SLOW_3G)
  await page.goto(`${server.url}/e2e/first-paint-markup.html?tenant=${tenant}`, { waitUntil: 'commit' })
  await page.waitForSelector('form input[name=subject]', { state: 'visible', timeout: 60000 })
  await page.fill('form [name=subject]', 'Strict CSP page')
  // Enter in a field: implicit submission does nothing while the default button is disabled.
  await page.press('form [name=subject]', 'Enter')
  assert.equal(await page.getAttribute('form', 'data-oncekey-state'), null, 'pressed before the kit attached')
  assert.equal(await page.isDisabled('form button[type=submit]'), true)
  await page.waitForSelector('form[data-oncekey-state] button[type=submit]:not([disabled])', { timeout: 60000 })
  assert.equal(await page.getAttribute('form button[type=submit]', 'data-oncekey-wait'), null)
  assert.equal(await page.inputValue('form [name=subject]'), 'Strict CSP page', 'the typed value is kept')
  assert.equal(new URL(page.url()).pathname, '/e2e/first-paint-markup.html', 'nothing was posted natively')
  assert.equal((await stats(server.url, tenant)).missing_keys, 0)
  await page.click('form button[type=submit]')
  await page.waitForSelector('form[data-oncekey-state="succeeded"]', { timeout: 60000 })
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await context.close()
})

test('offline, no attempt is spent; back online the same key is sent at once and makes one ticket', async () => {
  const tenant = uniqueTenant('offline-spell')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.addInitScript(firstPaintProbe, KIT)
  // A small budget: spent in a few seconds, were the time offline counted.
  await page.goto(`${server.url}/?tenant=${tenant}&attempts=3&base=50&budget=3000`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await fill(page, { subject: 'Written offline' })
  await page.evaluate((sel) => {
    window.__changes = []
    document.querySelector(sel).addEventListener('oncekey:change', (e) => window.__changes.push(e.detail))
  }, KIT)
  await watchLock(page)
  await context.setOffline(true)
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[aria-busy="true"]`)
  // Longer offline than the whole budget: nothing is sent, nothing spent, the form waits locked.
  await page.waitForTimeout(4000)
  await screenshot(page, 'network-02-offline-spell')
  const offline = await page.evaluate(() => ({ keyed: window.__keyed, changes: window.__changes }))
  assert.deepEqual(offline.keyed.filter((k) => k.online), [], 'no request sent while online was false')
  assert.equal(offline.keyed.length, 0, `no attempt while offline: ${JSON.stringify(offline.keyed)}`)
  assert.ok(offline.changes.every((c) => c.state !== 'unsure'), `never unsure offline: ${JSON.stringify(offline.changes)}`)
  assert.ok(offline.changes.every((c) => (c.attempts ?? 0) <= 1), `no attempt spent: ${JSON.stringify(offline.changes)}`)
  assert.equal(await state(page), 'waiting')
  assert.match(await page.textContent(`${KIT} [role=status]`), /offline|connection/i)
  assert.equal(await page.isEditable(`${KIT} [name=subject]`), false)
  const key = await page.textContent('#live-key')
  assert.equal((await tickets(server.url, tenant)).length, 0)
  await context.setOffline(false)
  await settled(page, 'succeeded')
  await lockedThroughout(page, 'succeeded')
  const sent = await page.evaluate(() => ({ keyed: window.__keyed, online: window.__onlineAt }))
  assert.equal(sent.keyed.length, 1, 'sent once, when back online')
  assert.equal(sent.keyed[0].key, key, 'with the same key')
  assert.ok(sent.keyed[0].at >= sent.online[0], 'after the online event')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.equal(list[0].subject, 'Written offline')
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

const state = (page) => page.getAttribute(KIT, 'data-oncekey-state')

test('two tabs on one localStorage record: one ticket, one key, both tabs end definite', async () => {
  const tenant = uniqueTenant('two-tabs')
  const url = `${server.url}/?tenant=${tenant}&storage=local`
  const context = await browser.newContext()
  const first = await context.newPage()
  const posts = [...[first].map(watchPosts)]
  await first.goto(url)
  await first.waitForSelector(`${KIT}[data-oncekey-state]`)
  await condition(first, 'delay=3000')
  await fill(first, { subject: 'Two tabs, one record' })
  await first.click(`${KIT} button[type=submit]`)
  await first.waitForSelector(`${KIT}[aria-busy="true"]`)
  const key = await first.textContent('#live-key')
  // The second tab opens while the first one's reply is held, and finds the record.
  const second = await context.newPage()
  posts.push(watchPosts(second))
  await second.goto(url)
  await second.waitForSelector(`${KIT}[data-oncekey-state]`)
  assert.equal(await second.inputValue(`${KIT} [name=subject]`), 'Two tabs, one record', 'the record is restored in the second tab')
  for (const page of [first, second]) await settled(page, 'succeeded')
  await screenshot(second, 'network-03-second-tab')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket')
  const keys = new Set(posts.flat().filter((p) => p.path === '/api/tickets').map((p) => p.key))
  assert.deepEqual([...keys], [key], 'one key in both tabs')
  assert.equal(await first.evaluate(() => Object.keys(localStorage).filter((k) => k.startsWith('oncekey')).length), 0, 'the record is gone')
  await context.close()
})

test('a tab duplicated while its reply is held sends nothing beside it: one ticket, one key', async () => {
  const tenant = uniqueTenant('duplicated')
  const context = await browser.newContext()
  const first = await context.newPage()
  const posts = [watchPosts(first)]
  await first.goto(`${server.url}/?tenant=${tenant}`)
  await first.waitForSelector(`${KIT}[data-oncekey-state]`)
  await condition(first, 'delay=3000')
  await fill(first, { subject: 'Duplicated tab' })
  await first.click(`${KIT} button[type=submit]`)
  await first.waitForSelector(`${KIT}[aria-busy="true"]`)
  const key = await first.textContent('#live-key')
  // A same-origin window.open copies the opener's sessionStorage (Chromium), as "Duplicate" does.
  const [copy] = await Promise.all([context.waitForEvent('page'), first.evaluate(() => window.open(location.href))])
  posts.push(watchPosts(copy))
  await copy.waitForSelector(`${KIT}[data-oncekey-state]`)
  assert.equal(await copy.inputValue(`${KIT} [name=subject]`), 'Duplicated tab', 'the copy found the record')
  for (const page of [first, copy]) await settled(page, 'succeeded')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket')
  const keys = new Set(posts.flat().filter((p) => p.path === '/api/tickets').map((p) => p.key))
  assert.deepEqual([...keys], [key], 'one key in both tabs')
  // The first attempt holds the key's Web Lock, so the copy waited for it instead of sending
  // beside it (which the server would have answered 409, in progress).
  assert.equal((await stats(server.url, tenant)).in_progress, 0, 'the copy never sent beside the first attempt')
  await context.close()
})

test('in French (the demo\'s language switch, the kit\'s messages option) the form speaks French throughout', async () => {
  const tenant = uniqueTenant('french')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.goto(`${server.url}/?tenant=${tenant}&attempts=2&base=50&budget=2000`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await Promise.all([page.waitForURL(/lang=fr/), page.selectOption('#language', 'fr')])
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  assert.equal(await page.inputValue('#language'), 'fr')
  // The server drops every connection: the attempts run out, and the kit says so in French.
  await condition(page, 'offline')
  await fill(page, { subject: 'En français' })
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT} button:has-text("Réessayer")`, { timeout: 30000 })
  assert.match(await page.textContent(`${KIT} [role=status]`), /Nous n’avons pas pu confirmer/)
  assert.equal(await page.locator(`${KIT} button:has-text("Abandonner")`).count(), 1)
  await screenshot(page, 'network-04-french-unsure')
  await condition(page, '')
  await page.click(`${KIT} button:has-text("Réessayer")`)
  await settled(page, 'succeeded')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.equal(await page.textContent(`${KIT} [role=status]`), `Ticket n° ${list[0].id} créé : « En français ».`)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test("the demo's browser network switch: Slow 3G and offline played by its service worker, one ticket each", async () => {
  const tenant = uniqueTenant('demo-switch')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.goto(`${server.url}/?tenant=${tenant}`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await screenshot(page, 'network-10-demo-normal')

  // Slow 3G: a reload comes slowly (the worker plays the network for the page and its module),
  // and a Send pressed meanwhile is held and sent by the kit.
  await page.check('input[name=network][value="slow-3g"]')
  await page.waitForFunction(() => document.documentElement.dataset.network === 'slow-3g' && navigator.serviceWorker.controller)
  await page.reload({ waitUntil: 'commit' })
  await page.waitForSelector(`${KIT} button[type=submit]`, { state: 'visible' })
  await fill(page, { subject: 'Through the slow worker' })
  const early = await page.getAttribute(KIT, 'data-oncekey-state')
  await page.click(`${KIT} button[type=submit]`)
  assert.equal(early, null, 'pressed before the kit attached')
  await screenshot(page, 'network-11-demo-slow-3g-held')
  await settled(page, 'succeeded')
  assert.equal(await page.isChecked('input[name=network][value="slow-3g"]'), true, 'the switch is kept across the reload')
  await screenshot(page, 'network-12-demo-slow-3g')
  assert.deepEqual((await tickets(server.url, tenant)).map((t) => t.subject), ['Through the slow worker'])

  // Offline: the page is told, the form waits locked, and goes when switched back.
  await page.check('input[name=network][value="offline"]')
  await page.waitForFunction(() => navigator.onLine === false)
  await fill(page, { subject: 'Through the offline worker' })
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[aria-busy="true"]`)
  await page.waitForTimeout(1500)
  await screenshot(page, 'network-13-demo-offline')
  assert.equal(await state(page), 'waiting')
  assert.match(await page.textContent(`${KIT} [role=status]`), /offline/i)
  assert.equal(await page.textContent('#live-waiting'), 'the connection to be back')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await page.check('input[name=network][value="normal"]')
  await settled(page, 'succeeded')
  const subjects = (await tickets(server.url, tenant)).map((t) => t.subject).sort()
  assert.deepEqual(subjects, ['Through the offline worker', 'Through the slow worker'])
  assert.equal((await stats(server.url, tenant)).missing_keys, 0)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})
