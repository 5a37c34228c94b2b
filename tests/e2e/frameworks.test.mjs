// The framework examples end to end: examples/react (a production build, a development build
// where strict mode runs every effect twice, and the same against React 18), examples/vue and
// examples/leptos, built by `make test-e2e`, served by the reference server (tests/e2e/
// frameworks.mjs says where), and driven in headless Chromium. Each test checks what a person would: one ticket on the server for its own tenant,
// every request of it sent with the one key the page showed, the inputs locked while the
// outcome is unknown.
import assert from 'node:assert/strict'
import { after, before, describe, test } from 'node:test'

import { eventually, launchBrowser, root, screenshot, startServer, stats, tickets, uniqueTenant, watchConsole } from './harness.mjs'
import { APPS, serverRendered } from './frameworks.mjs'

let server
let browser

before(async () => {
  server = await startServer(APPS.flatMap((app) => ['--mount', `${app.mount}=${root}/${app.dist}`]))
  browser = await launchBrowser()
})

after(async () => {
  await browser?.close()
  await server?.stop()
})

const FORM = '#ticket-form'
const SUBJECT = `${FORM} [name=subject]`

// Chromium reports a failed fetch (a lost reply) on the console by itself; that is the network,
// not the page. Anything else there (a hydration mismatch, a React or Vue warning) is a bug.
const pageErrors = (errors) => errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e))

async function open(app, label) {
  const tenant = uniqueTenant(`${app.name}-${label}`)
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  // The idempotency key of every ticket request the page sends, across reloads.
  const keys = []
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/tickets') keys.push(r.headers()['idempotency-key'])
  })
  const url = `${server.url}${app.mount}/?tenant=${tenant}`
  await page.goto(url)
  await ready(page)
  return { tenant, context, page, errors, keys, url }
}

// The app has rendered and its submitter is made (its state is shown from the hook).
const ready = (page) => page.waitForSelector(`${FORM}[data-state]`)

async function fill(page, { subject, email = 'ana@example.com', body = 'Third floor.' }) {
  await page.fill(SUBJECT, subject)
  await page.fill(`${FORM} [name=email]`, email)
  await page.fill(`${FORM} [name=body]`, body)
}

const condition = (page, value) => page.check(`input[name=condition][value="${value}"]`)
const shownKey = (page) => page.textContent('#live-key')
const statusText = (page) => page.textContent(`${FORM} [role=status]`)
async function settled(page, state = 'succeeded') {
  try {
    await page.waitForSelector(`${FORM}[data-state="${state}"]`, { timeout: 30000 })
  } catch (e) {
    // Say where it stopped instead.
    const at = await page.evaluate(() => [...document.querySelectorAll('#live-state, #live-key, #live-attempts, [role=status]')].map((el) => el.textContent))
    throw new Error(`not ${state}: the page shows ${JSON.stringify(at)} (${e.message.split('\n')[0]})`)
  }
}

// Sends a ticket whose reply the server holds 3 s; resolves to the key the page shows once it is
// under way.
async function sendSlowly(page, fields) {
  await condition(page, 'delay=3000')
  await fill(page, fields)
  await page.click(`${FORM} button[type=submit]`)
  await page.waitForSelector(`${FORM}[data-state="sending"]`)
  return shownKey(page)
}

// Locked while the outcome is unknown: busy, and no input or the Send button can be used.
async function assertLocked(page) {
  assert.equal(await page.getAttribute(FORM, 'aria-busy'), 'true')
  for (const sel of [SUBJECT, `${FORM} [name=email]`, `${FORM} [name=body]`]) {
    assert.equal(await page.isEditable(sel), false, `${sel} is locked`)
  }
  assert.equal(await page.isEnabled(`${FORM} button[type=submit]`), false, 'Send is locked')
}

// The first ticket request the page sends is held (never answered, never reaching the server),
// so that its submission stays under way; the others go through.
async function holdFirstSend(page) {
  let held = false
  await page.route(
    (url) => url.pathname === '/api/tickets',
    (route) => {
      if (route.request().method() !== 'POST' || held) return route.continue()
      held = true
    },
  )
}

// A submission whose first attempt was two days ago (a tab left open, a laptop asleep): its key
// is past its lifetime. Sent, held unanswered, its record aged, and the page reloaded; resolves
// to its key.
async function expire(page, fields) {
  await holdFirstSend(page)
  await fill(page, fields)
  await page.click(`${FORM} button[type=submit]`)
  await page.waitForSelector(`${FORM}[data-state="sending"]`)
  const key = await shownKey(page)
  await page.evaluate(() => {
    const name = 'oncekey:new-ticket'
    const record = JSON.parse(sessionStorage.getItem(name))
    record.startedAt = Date.now() - 2 * 86400000
    sessionStorage.setItem(name, JSON.stringify(record))
  })
  await page.reload()
  await settled(page, 'expired')
  return key
}

const button = (page, label) => page.locator(`${FORM} button`, { hasText: label })

// Expired (CONTRACT.md section 4): locked, the status says the outcome cannot be known and asks
// the person to check, and "Send as new" and "Discard" are offered (not "Try again").
async function assertExpiredShown(page, subject) {
  await eventually(async () => (await page.inputValue(SUBJECT)) === subject, 'the restored subject')
  await assertLocked(page)
  const status = await statusText(page)
  assert.match(status, /cannot be known|too old/, `the status says so: ${JSON.stringify(status)}`)
  assert.match(status, /check/i, 'and asks to check')
  for (const offered of ['Send as new', 'Discard']) {
    assert.equal(await button(page, offered).count(), 1, `${offered} is offered`)
    assert.equal(await button(page, offered).isEnabled(), true, `${offered} can be used`)
  }
  assert.equal(await button(page, 'Try again').count(), 0, 'no Try again: the key is too old')
}

// One ticket for the tenant, every request with the key the page showed, and the page says
// which ticket it made.
async function assertOneTicket(page, tenant, keys, key) {
  const list = await tickets(server.url, tenant)
  assert.equal(list.length, 1, 'one ticket')
  assert.ok(keys.length >= 1, 'a request was sent')
  assert.deepEqual(new Set(keys), new Set([key]), `every request carried the key ${key}: ${keys}`)
  assert.match(await statusText(page), new RegExp(`#${list[0].id}\\b`))
  return list[0]
}

for (const app of APPS) {
  describe(app.label, () => {
    test('a double click on Send makes one ticket, with one key', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'double')
      await fill(page, { subject: 'Double click' })
      await page.dblclick(`${FORM} button[type=submit]`)
      await settled(page)
      await screenshot(page, `${app.name}-01-succeeded`)
      const key = await shownKey(page)
      await assertOneTicket(page, tenant, keys, key)
      assert.equal(keys.length, 1, 'the second click joined the first: one request')
      // Cleared after the success (the controlled inputs' state), unlocked, not busy.
      assert.equal(await page.inputValue(SUBJECT), '')
      assert.equal(await page.isEditable(SUBJECT), true)
      assert.equal(await page.getAttribute(FORM, 'aria-busy'), 'false')
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('a lost reply is retried with the same key and makes one ticket', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'lost')
      await condition(page, 'drop-reply')
      await fill(page, { subject: 'Lost reply' })
      await page.click(`${FORM} button[type=submit]`)
      await settled(page)
      await assertOneTicket(page, tenant, keys, await shownKey(page))
      // The retry (the package's, or Chromium's own silent resend of a POST whose connection
      // closed before any answer byte) carried the same key and was answered by a replay.
      assert.equal((await stats(server.url, tenant)).replays, 1, 'the retry was answered by a replay')
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('a reload mid-request restores the locked inputs and finishes with one ticket', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'reload')
      const key = await sendSlowly(page, { subject: 'Reloaded mid-request', body: 'Keep me' })
      await assertLocked(page)
      await screenshot(page, `${app.name}-02-sending`)
      await page.reload()
      await ready(page)
      // The stored body is back in the inputs (through the hook's `pending`), locked until the
      // outcome is definite; the reply the reload lost is still held by the server.
      await eventually(async () => (await page.inputValue(SUBJECT)) === 'Reloaded mid-request', 'the restored subject')
      assert.equal(await page.inputValue(`${FORM} [name=body]`), 'Keep me')
      assert.equal(await shownKey(page), key, 'the same key after the reload')
      await assertLocked(page)
      await screenshot(page, `${app.name}-03-restored-locked`)
      await settled(page)
      await assertOneTicket(page, tenant, keys, key)
      assert.ok(keys.length >= 2, 'the reload resent the submission')
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('leaving the form mid-request and coming back shows it locked, and one ticket', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'remount')
      const key = await sendSlowly(page, { subject: 'Unmounted mid-request' })
      await page.click('nav button:has-text("All tickets")')
      await page.waitForSelector(FORM, { state: 'detached' })
      await page.click('nav button:has-text("New ticket")')
      await ready(page)
      // The form mounted again finds the same submission, never a new one: still under way (the
      // server holds its reply 3 s), and locked.
      assert.equal(await shownKey(page), key)
      assert.equal(await page.getAttribute(FORM, 'data-state'), 'sending')
      await assertLocked(page)
      await settled(page)
      await assertOneTicket(page, tenant, keys, key)
      assert.equal(keys.length, 1, 'remounting sent nothing')
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('an expired submission after a reload says so; Send as new makes one ticket under a new key', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'expired-new')
      const old = await expire(page, { subject: 'Left overnight' })
      await assertExpiredShown(page, 'Left overnight')
      await screenshot(page, `${app.name}-04-expired`)
      assert.deepEqual(keys, [old], 'nothing is sent with a key past its lifetime')
      await button(page, 'Send as new').click()
      await settled(page)
      const list = await tickets(server.url, tenant)
      assert.equal(list.length, 1, 'one ticket')
      assert.equal(list[0].subject, 'Left overnight')
      const sent = keys.slice(1)
      assert.ok(sent.length >= 1 && sent.every((k) => k === sent[0]), `one new key: ${keys}`)
      assert.notEqual(sent[0], old, 'a new key')
      assert.match(await statusText(page), new RegExp(`#${list[0].id}\\b`))
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('an expired submission after a reload is unlocked by Discard, with nothing sent', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'expired-discard')
      await expire(page, { subject: 'Never mind' })
      await assertExpiredShown(page, 'Never mind')
      await button(page, 'Discard').click()
      await settled(page, 'idle')
      assert.equal(await page.isEditable(SUBJECT), true, 'unlocked')
      assert.equal(await page.getAttribute(FORM, 'aria-busy'), 'false')
      assert.equal(await button(page, 'Send as new').count(), 0)
      assert.equal(await button(page, 'Discard').count(), 0)
      // Gone from storage too: a reload finds nothing pending.
      await page.reload()
      await ready(page)
      assert.equal(await page.getAttribute(FORM, 'data-state'), 'idle')
      assert.equal(keys.length, 1, 'nothing sent after the first, held attempt')
      assert.equal((await tickets(server.url, tenant)).length, 0)
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('a submission resumed while offline is sent once back online, and the page says which ticket it made', async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'offline')
      await holdFirstSend(page)
      await fill(page, { subject: 'Resumed offline' })
      await page.click(`${FORM} button[type=submit]`)
      await page.waitForSelector(`${FORM}[data-state="sending"]`)
      const key = await shownKey(page)
      // The reloaded page starts offline, and goes online when the test says.
      await page.addInitScript(() => {
        let online = false
        Object.defineProperty(Navigator.prototype, 'onLine', { configurable: true, get: () => online })
        window.goOnline = () => {
          online = true
          window.dispatchEvent(new Event('online'))
        }
      })
      await page.reload()
      await settled(page, 'waiting')
      await page.waitForTimeout(300)
      assert.equal(keys.length, 1, 'nothing sent while offline')
      await page.evaluate(() => window.goOnline())
      await settled(page)
      await assertOneTicket(page, tenant, keys, key)
      assert.deepEqual(pageErrors(errors), [])
      await context.close()
    })

    test('a server-rendered page hydrates idle and resumes the pending submission', { skip: !app.ssr && 'client-side rendered' }, async () => {
      const { tenant, page, context, errors, keys } = await open(app, 'ssr')
      const key = await sendSlowly(page, { subject: 'Resumed after hydration' })
      // The next load of the page is the server's render (idle, as a server knows nothing of
      // the tab's storage) of the same app, which the browser hydrates.
      const html = await serverRendered(app)
      assert.match(html, /data-state="idle"/)
      const document = (url) => url.pathname === `${app.mount}/`
      await page.route(document, (route) => route.fulfill({ contentType: 'text/html', body: html }))
      await page.reload()
      await ready(page)
      await eventually(async () => (await page.inputValue(SUBJECT)) === 'Resumed after hydration', 'the restored subject')
      assert.equal(await shownKey(page), key, 'the same key after hydration')
      await settled(page)
      await assertOneTicket(page, tenant, keys, key)
      assert.deepEqual(pageErrors(errors), [], 'no hydration mismatch')
      await context.close()
    })
  })
}
