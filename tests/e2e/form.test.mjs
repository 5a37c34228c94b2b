// The form kit and the demo, end to end: headless Chromium against the built demo and the
// reference server, each test checking the server's ticket count for its own tenant.
import assert from 'node:assert/strict'
import { after, before, test } from 'node:test'

import {
  eventually,
  launchBrowser,
  launchPersistent,
  screenshot,
  startServer,
  stats,
  tickets,
  uniqueTenant,
  watchConsole,
} from './harness.mjs'
import { emulate } from './network.mjs'

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
const PLAIN = '#plain-form'

// Chromium reports a failed fetch (a lost reply, offline) on the console by itself; that is the
// network, not the page. Anything else on the console is a bug.
const pageErrors = (errors) => errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e))

async function openDemo(label, params = '') {
  const tenant = uniqueTenant(label)
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.goto(`${server.url}/?tenant=${tenant}${params}`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  return { tenant, context, page, errors }
}

async function fill(page, form, { subject, email = 'ana@example.com', body = 'Third floor.' }) {
  await page.fill(`${form} [name=subject]`, subject)
  await page.fill(`${form} [name=email]`, email)
  await page.fill(`${form} [name=body]`, body)
}

async function condition(page, value) {
  await page.check(`input[name=condition][value="${value}"]`)
}

const state = (page) => page.getAttribute(KIT, 'data-oncekey-state')
const statusText = (page, form = KIT) => page.textContent(`${form} [role=status]`)
const liveKey = (page) => page.textContent('#live-key')

async function settled(page, outcome) {
  await page.waitForSelector(`${KIT}[data-oncekey-state="${outcome}"]`, { timeout: 30000 })
}

test('a double-click on Send makes one ticket', async () => {
  const { tenant, page, context, errors } = await openDemo('double')
  await fill(page, KIT, { subject: 'Double click' })
  await page.dblclick(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  await screenshot(page, '01-succeeded')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  assert.match(await statusText(page), /#\d+/)
  // Cleared after success, unlocked, not busy.
  assert.equal(await page.inputValue(`${KIT} [name=subject]`), '')
  assert.equal(await page.isEnabled(`${KIT} [name=subject]`), true)
  assert.equal(await page.getAttribute(KIT, 'aria-busy'), null)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('the second click of a double click that lands after the answer sends nothing', async () => {
  // The reply beat the person's second click: the first click's submission is done, the form
  // cleared, Send enabled again. The late click (the browser's click count 2) sends nothing: not
  // the cleared form, not a second ticket.
  const { tenant, page, context, errors } = await openDemo('late-dblclick')
  await fill(page, KIT, { subject: 'Late second click' })
  const send = await page.$(`${KIT} button[type=submit]`)
  const box = await send.boundingBox()
  await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2)
  await page.mouse.down({ clickCount: 1 })
  await page.mouse.up({ clickCount: 1 })
  await settled(page, 'succeeded')
  await page.mouse.down({ clickCount: 2 })
  await page.mouse.up({ clickCount: 2 })
  await page.waitForTimeout(500)
  assert.equal(await state(page), 'succeeded', await statusText(page))
  assert.match(await statusText(page), /#\d+/)
  assert.equal((await tickets(server.url, tenant)).length, 1)
  assert.equal((await stats(server.url, tenant)).receipts, 1, 'one key reached the server')
  // A click of its own afterwards is a submission the person means: it goes out (the cleared
  // form, which the server refuses for its empty subject).
  await page.mouse.down({ clickCount: 1 })
  await page.mouse.up({ clickCount: 1 })
  await settled(page, 'refused')
  assert.equal((await stats(server.url, tenant)).receipts, 2)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('an attached form stays wired after the page drops its kit and garbage is collected', async () => {
  // The demo keeps no reference to what attachForm returned.
  const { tenant, page, context, errors } = await openDemo('gc')
  await page.evaluate(async () => {
    for (let i = 0; i < 5; i++) {
      window.gc()
      await new Promise((r) => setTimeout(r, 20))
    }
  })
  await fill(page, KIT, { subject: 'After GC' })
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.equal((await stats(server.url, tenant)).missing_keys, 0, 'no keyless native form post')
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('a lost reply is retried with the same key, makes one ticket, and the page shows its id', async () => {
  const { tenant, page, context, errors } = await openDemo('lost')
  await condition(page, 'drop-reply')
  await fill(page, KIT, { subject: 'Lost reply' })
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.match(await statusText(page), new RegExp(`#${list[0].id}\\b`))
  // The retry (the kit's, or Chromium's own silent resend of a POST whose connection closed
  // before any answer byte) carried the same key and was answered by a replay.
  assert.equal((await stats(server.url, tenant)).replays, 1, 'the retry was answered by a replay')
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('a reload in the middle of a slow request restores the locked form and finishes with one ticket', async () => {
  const { tenant, page, context, errors } = await openDemo('reload')
  await condition(page, 'delay=3000')
  await fill(page, KIT, { subject: 'Reloaded mid-request', body: 'Keep me' })
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[aria-busy="true"]`)
  const key = await liveKey(page)
  await screenshot(page, '02-sending')
  await page.reload()
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  // The stored body is back in the fields, and they stay locked until the outcome is definite:
  // the server holds the first request's reply (and its key) 3 s, so the resent one is under way
  // or waits after a 409, never settled yet.
  assert.equal(await page.inputValue(`${KIT} [name=subject]`), 'Reloaded mid-request')
  assert.equal(await page.inputValue(`${KIT} [name=body]`), 'Keep me')
  assert.match(await state(page), /^(sending|waiting)$/)
  assert.equal(await page.getAttribute(KIT, 'aria-busy'), 'true')
  assert.equal(await page.isEditable(`${KIT} [name=subject]`), false)
  await screenshot(page, '03-restored-locked')
  await settled(page, 'succeeded')
  assert.equal(await liveKey(page), key, 'the same key after the reload')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('offline, the form waits locked for the connection, spending nothing; back online it is sent at once, one ticket', async () => {
  const { tenant, page, context } = await openDemo('offline', '&attempts=3&base=50&budget=4000')
  await fill(page, KIT, { subject: 'Offline' })
  await page.evaluate((sel) => {
    window.changes = []
    document.querySelector(sel).addEventListener('oncekey:change', (e) => window.changes.push(e.detail))
  }, KIT)
  await context.setOffline(true)
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForFunction((sel) => document.querySelector(sel).dataset.oncekeyState === 'waiting', KIT)
  // Longer than the round's budget (4 s): offline, none of it is spent, and it never ends unsure.
  await page.waitForTimeout(4500)
  assert.equal(await state(page), 'waiting')
  const changes = await page.evaluate(() => window.changes)
  assert.deepEqual(changes.map((d) => d.state), ['waiting'], 'no attempt while offline')
  assert.equal(changes[0].waitingFor, 'online')
  assert.match(await page.textContent(`${KIT} [role=status]`), /when the connection is back/)
  assert.equal(await page.isEditable(`${KIT} [name=subject]`), false, 'locked while offline')
  assert.equal(await page.getAttribute(KIT, 'aria-busy'), 'true')
  const key = await liveKey(page)
  await screenshot(page, '04-offline')
  assert.equal((await tickets(server.url, tenant)).length, 0)
  await context.setOffline(false)
  await settled(page, 'succeeded')
  assert.equal(await liveKey(page), key, 'sent with the same key')
  const sent = await page.evaluate(() => window.changes.filter((d) => d.state === 'sending'))
  assert.equal(sent.length, 1, 'one attempt, at once')
  assert.equal(sent[0].attempts, 1)
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await context.close()
})

// Offline the browser spends no attempt (above); a connection that the server drops while the
// browser is online is what spends the budget and leaves Try again.
test('a dead connection until the budget is spent shows Try again; back, Try again makes one ticket', async () => {
  const { tenant, page, context } = await openDemo('dead', '&attempts=3&base=50&budget=4000')
  await fill(page, KIT, { subject: 'Dead connection' })
  await page.evaluate((sel) => {
    window.changes = []
    document.querySelector(sel).addEventListener('oncekey:change', (e) => window.changes.push(e.detail))
  }, KIT)
  await condition(page, 'offline')
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT} button:has-text("Try again")`, { timeout: 30000 })
  assert.equal(await state(page), 'unsure')
  const unsure = await page.evaluate(() => window.changes.filter((d) => d.state === 'unsure'))
  assert.equal(unsure.length, 1, 'one oncekey:change for one change of state')
  assert.equal(unsure[0].outcome, 'unsure')
  assert.equal(await page.isEditable(`${KIT} [name=subject]`), false, 'still locked while unsure')
  assert.equal(await page.getAttribute(KIT, 'aria-busy'), 'true')
  const key = await liveKey(page)
  await screenshot(page, '04-unsure')
  assert.equal((await tickets(server.url, tenant)).length, 0)
  await condition(page, '')
  await page.click(`${KIT} button:has-text("Try again")`)
  await settled(page, 'succeeded')
  assert.equal(await liveKey(page), key, 'Try again resends the same key')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await context.close()
})

test('a refusal unlocks the form with the fields kept; the corrected request gets a new key', async () => {
  const { tenant, page, context, errors } = await openDemo('refused')
  await fill(page, KIT, { subject: 'Bad email', email: 'not-an-email' })
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'refused')
  await screenshot(page, '05-refused')
  const firstKey = await liveKey(page)
  assert.equal(await page.inputValue(`${KIT} [name=subject]`), 'Bad email', 'fields kept')
  assert.equal(await page.isEditable(`${KIT} [name=email]`), true, 'unlocked')
  assert.equal(await page.getAttribute(`${KIT} [name=email]`, 'aria-invalid'), 'true')
  assert.match(await page.textContent(`${KIT} .oncekey-field-error`), /email/i)
  assert.equal((await tickets(server.url, tenant)).length, 0)
  await page.fill(`${KIT} [name=email]`, 'ana@example.com')
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  assert.notEqual(await liveKey(page), firstKey, 'a corrected request is a new submission')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  assert.equal(await page.locator(`${KIT} .oncekey-field-error`).count(), 0, 'old errors cleared')
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('a password field never reaches sessionStorage; after a reload the kit asks for it and resends', async () => {
  const tenant = uniqueTenant('secret')
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  const url = `${server.url}/e2e/secret.html?tenant=${tenant}`
  await page.goto(url)
  await page.waitForSelector('form[data-oncekey-state]')
  await page.evaluate(() => (window.nextFault = 'delay=2500'))
  await page.fill('[name=subject]', 'Change my password')
  await page.fill('[name=password]', 'hunter2-very-secret')
  await page.fill('[name=card]', '4242424242424242')
  await page.fill('[name=pin]', 'zq9876')
  await page.click('button[type=submit]')
  await page.waitForSelector('form[aria-busy="true"]')
  const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage }))
  assert.ok(stored.includes('Change my password'), 'the body is stored')
  for (const secret of ['hunter2', '4242424242424242', 'zq9876']) {
    assert.ok(!stored.includes(secret), `${secret} must never be stored`)
  }
  await page.reload()
  await page.waitForSelector('form[data-oncekey-state]')
  // The reload lost the secrets: the kit asks for them, with only those fields unlocked.
  await page.waitForSelector('[name=password]:not([disabled])')
  assert.equal(await page.inputValue('[name=subject]'), 'Change my password')
  assert.equal(await page.isEditable('[name=subject]'), false)
  assert.match(await page.textContent('[role=status]'), /password/i)
  await screenshot(page, '06-asks-for-secret')
  await page.fill('[name=password]', 'hunter2-very-secret')
  await page.fill('[name=card]', '4242424242424242')
  await page.fill('[name=pin]', 'zq9876')
  await page.press('[name=pin]', 'Enter')
  await page.waitForSelector('form[data-oncekey-state="succeeded"]', { timeout: 30000 })
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket, sent again with the same key')
  assert.equal((await stats(server.url, tenant)).receipts, 1)
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('keyboard-only use works and focus moves to the status', async () => {
  const { tenant, page, context } = await openDemo('keyboard')
  // Tab from the top: the language switch, the browser's network and the server faults (radio
  // groups), then the kit's subject field.
  for (let i = 0; i < 4; i++) await page.keyboard.press('Tab')
  assert.equal(await page.evaluate(() => document.activeElement.name), 'subject')
  await page.keyboard.type('Typed without a mouse')
  await page.keyboard.press('Tab')
  await page.keyboard.type('kb@example.com')
  await page.keyboard.press('Tab')
  await page.keyboard.type('All by keyboard.')
  // Past the optional attachment to the Send button.
  await page.keyboard.press('Tab')
  await page.keyboard.press('Tab')
  await page.keyboard.press('Enter')
  await settled(page, 'succeeded')
  assert.equal(await page.evaluate(() => document.activeElement.getAttribute('role')), 'status')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await screenshot(page, '07-keyboard')
  await context.close()
})

test('the plain form really makes two tickets where the kit makes one', async () => {
  const { tenant, page, context } = await openDemo('side-by-side')
  await condition(page, 'drop-reply')
  await fill(page, PLAIN, { subject: 'Plain form' })
  await page.click(`${PLAIN} button[type=submit]`)
  await eventually(async () => /created/.test(await statusText(page, PLAIN)), 'the plain form to finish')
  // Without a key every resend is a new ticket: the page's own retry, and Chromium's silent
  // resend of a POST whose connection closed before any answer byte.
  const plainCount = (await tickets(server.url, `${tenant}-plain`)).length
  assert.ok(plainCount >= 2, `without a key: ${plainCount} tickets for one intended submission`)

  await condition(page, 'drop-reply')
  await fill(page, KIT, { subject: 'Kit form' })
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  assert.equal((await tickets(server.url, tenant)).length, 1, 'with oncekey: one ticket')
  await eventually(async () => (await page.textContent('#plain-count')) === String(plainCount), 'the lists to refresh')
  await screenshot(page, '08-side-by-side')
  await context.close()
})

test('a reload in the middle of a slow upload resends the same bytes with the same key from IndexedDB', async () => {
  const { tenant, page, context, errors } = await openDemo('reload-upload')
  await fill(page, KIT, { subject: 'Reloaded mid-upload', body: 'Photo attached' })
  const bytes = Buffer.alloc(256 * 1024, 7)
  await page.setInputFiles(`${KIT} [name=attachment]`, { name: 'photo.jpg', mimeType: 'image/jpeg', buffer: bytes })
  // A phone's upstream (Chromium's own throttling): the 256 KB take about 4 s to go up.
  const cdp = await emulate(context, page, { latency: 100, downloadThroughput: -1, uploadThroughput: 64 * 1024 })
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[aria-busy="true"]`)
  // Locked at once; an upload's key is made once its files are read and hashed.
  await page.waitForSelector(`${KIT}[data-oncekey-state="sending"]`)
  const key = await liveKey(page)
  assert.match(key, /^[0-9a-f-]{36}$/)
  await page.waitForTimeout(1500)
  assert.equal((await tickets(server.url, tenant)).length, 0, 'reloaded while the upload was still going up')
  await page.reload()
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 })
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await settled(page, 'succeeded')
  assert.equal(await liveKey(page), key, 'the same key after the reload')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1)
  assert.equal(list[0].subject, 'Reloaded mid-upload')
  assert.equal(list[0].attachments.length, 1)
  assert.equal(list[0].attachments[0].name, 'photo.jpg')
  const { createHash } = await import('node:crypto')
  assert.equal(list[0].attachments[0].sha256, createHash('sha256').update(bytes).digest('hex'))
  assert.deepEqual(pageErrors(errors), [])
  await context.close()
})

test('an upload whose tab was closed mid-request is found by a new tab in IndexedDB and finished with its key', async () => {
  const { tenant, page, context, errors } = await openDemo('closed-tab-upload')
  await condition(page, 'delay=3000')
  await fill(page, KIT, { subject: 'Tab closed mid-upload', body: 'Receipt attached' })
  const bytes = Buffer.alloc(300 * 1024, 9)
  await page.setInputFiles(`${KIT} [name=attachment]`, { name: 'receipt.png', mimeType: 'image/png', buffer: bytes })
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[aria-busy="true"]`)
  // Locked at once; an upload's key is made once its files are read and hashed.
  await page.waitForSelector(`${KIT}[data-oncekey-state="sending"]`)
  const key = await liveKey(page)
  assert.match(key, /^[0-9a-f-]{36}$/)
  // Closing the tab loses its sessionStorage; the upload was kept in IndexedDB, the origin's.
  await page.close()
  const again = await context.newPage()
  const laterErrors = watchConsole(again)
  await again.goto(`${server.url}/?tenant=${tenant}`)
  await again.waitForSelector(`${KIT}[data-oncekey-state]`)
  await settled(again, 'succeeded')
  assert.equal(await liveKey(again), key, 'the new tab sent the closed tab’s key')
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket')
  assert.equal(list[0].subject, 'Tab closed mid-upload')
  assert.equal(list[0].attachments.length, 1)
  const { createHash } = await import('node:crypto')
  assert.equal(list[0].attachments[0].sha256, createHash('sha256').update(bytes).digest('hex'))
  assert.deepEqual(pageErrors([...errors, ...laterErrors]), [])
  await context.close()
})

test('an upload whose reply is lost: the plain form stores the file twice, the kit once', async () => {
  const { tenant, page, context } = await openDemo('side-by-side-upload')
  const bytes = Buffer.alloc(64 * 1024, 3)
  const file = { name: 'screenshot.png', mimeType: 'image/png', buffer: bytes }
  await condition(page, 'drop-reply')
  await fill(page, PLAIN, { subject: 'Plain upload' })
  await page.setInputFiles(`${PLAIN} [name=attachment]`, file)
  await page.click(`${PLAIN} button[type=submit]`)
  await eventually(async () => /created/.test(await statusText(page, PLAIN)), 'the plain form to finish')
  const plain = await tickets(server.url, `${tenant}-plain`)
  assert.ok(plain.length >= 2, `without a key: ${plain.length} tickets for one upload`)
  assert.ok(plain.every((t) => t.attachments.length === 1), 'each with its own copy of the file')

  await condition(page, 'drop-reply')
  await fill(page, KIT, { subject: 'Kit upload' })
  await page.setInputFiles(`${KIT} [name=attachment]`, file)
  await page.click(`${KIT} button[type=submit]`)
  await settled(page, 'succeeded')
  const kit = await tickets(server.url, tenant)
  assert.equal(kit.length, 1, 'with oncekey: one ticket')
  const { createHash } = await import('node:crypto')
  assert.equal(kit[0].attachments[0].sha256, createHash('sha256').update(bytes).digest('hex'))
  await screenshot(page, '09-side-by-side-upload')
  await context.close()
})

test('an upload pending when the browser is closed is finished with its key after a restart', async () => {
  const { mkdtempSync, rmSync } = await import('node:fs')
  const os = await import('node:os')
  const profile = mkdtempSync(`${os.tmpdir()}/oncekey-profile-`)
  const tenant = uniqueTenant('restart-upload')
  const bytes = Buffer.alloc(128 * 1024, 5)
  let context
  try {
    context = await launchPersistent(profile)
    let page = context.pages()[0] ?? (await context.newPage())
    await page.goto(`${server.url}/?tenant=${tenant}`)
    await page.waitForSelector(`${KIT}[data-oncekey-state]`)
    // The browser closes while the server holds the reply.
    await condition(page, 'delay=3000')
    await fill(page, KIT, { subject: 'Sent before a restart', body: 'Invoice attached' })
    await page.setInputFiles(`${KIT} [name=attachment]`, { name: 'invoice.pdf', mimeType: 'application/pdf', buffer: bytes })
    await page.click(`${KIT} button[type=submit]`)
    // The kit locks the form at once, but an upload's key is made only once its files are read
    // and hashed: closed when the attempt is out (its record stored in IndexedDB first).
    await page.waitForSelector(`${KIT}[data-oncekey-state="sending"]`)
    const key = await liveKey(page)
    assert.match(key, /^[0-9a-f-]{36}$/, 'the key is shown while sending')
    await context.close()

    context = await launchPersistent(profile)
    page = context.pages()[0] ?? (await context.newPage())
    await page.goto(`${server.url}/?tenant=${tenant}`)
    await page.waitForSelector(`${KIT}[data-oncekey-state]`)
    await settled(page, 'succeeded')
    assert.equal(await liveKey(page), key, 'the key from before the restart')
    const list = await tickets(server.url, tenant)
    assert.equal(list.length, 1, 'one ticket')
    const { createHash } = await import('node:crypto')
    assert.equal(list[0].attachments[0].sha256, createHash('sha256').update(bytes).digest('hex'))
  } finally {
    // Closed on a failure too, or the browser it left open keeps the test file from ending.
    await context?.close().catch(() => {})
    rmSync(profile, { recursive: true, force: true })
  }
})
