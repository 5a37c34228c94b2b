// A reload while an answer is on its way. Script of an unloading page still runs after its
// `pagehide`: once an answer's status has come, the unload cuts off the body being read, and the
// kit settles on the status (the body only adds details) in the unload's own microtasks. Nobody
// sees that answer, so the record is kept past it: the next page finds the submission under its
// key, unsure, and asking again gets the server's replay, instead of starting empty with no word
// of what was sent. Before any status has come nothing is settled, and the next page goes on with
// the key alike. An answer can also settle while the `pagehide` is being dispatched, in the
// microtasks the browser runs after a listener the page made before the kit's: kept too (it
// fired once in the chaos run: 5 runs of 100 submissions). The browser chaos run's unload check
// (6) rests on all three (chaos/e2e/browser-chaos.mjs).
//
// A server of its own: the reference server writes each answer whole, and the status must come
// while the body is held.
import assert from 'node:assert/strict'
import { readFileSync } from 'node:fs'
import http from 'node:http'
import path from 'node:path'
import { after, before, test } from 'node:test'

import { launchBrowser, root } from './harness.mjs'

const PAGE = `<!doctype html><meta charset="utf-8"><p id="state">loading</p>
<script type="module">
  import init, { Submitter } from '/pkg/oncekey.js'
  await init()
  const submitter = new Submitter('unload', { url: '/api' })
  const show = () => { document.getElementById('state').textContent = submitter.state }
  submitter.onChange(show)
  show()
  // Not awaited by the test: the answer is held.
  window.send = () => {
    submitter.submit({ n: 1 }).catch(() => {})
  }
  window.pendingKey = () => submitter.pending()?.key ?? null
  window.tryAgain = () => {
    submitter.tryAgain().catch(() => {})
  }
</script>`

// The same page, but for a listener of its own for `pagehide`, made before its submitter, in
// which the answer lands: a `fetch` of its own holds every attempt until that listener runs,
// and answers with a 201 whose body is there at once (its `text()` already resolved), so that
// only microtasks stand between the answer and its settlement.
const EARLY_PAGE = PAGE.replace(
  "  const submitter = new Submitter('unload', { url: '/api' })",
  `  class Whole extends Response {
    text() { return Promise.resolve('{"id":1}') }
  }
  let land
  window.fetch = () => new Promise((resolve) => {
    land = () => resolve(new Whole('{"id":1}', { status: 201, headers: { 'content-type': 'application/json' } }))
  })
  addEventListener('pagehide', () => land?.())
  const submitter = new Submitter('unload', { url: '/api' })`,
)

let server
let base
let browser
/** The keys of the POSTs the server got; how it answers the next ones. */
let posts
let answer

before(async () => {
  server = http.createServer((req, res) => {
    if (req.url.startsWith('/pkg/')) {
      const file = path.join(root, 'pkg', path.basename(req.url.split('?')[0]))
      res.writeHead(200, { 'content-type': file.endsWith('.wasm') ? 'application/wasm' : 'text/javascript' })
      return res.end(readFileSync(file))
    }
    if (req.url === '/api' && req.method === 'POST') {
      posts.push(req.headers['idempotency-key'])
      req.resume()
      return req.on('end', () => answer(res))
    }
    res.writeHead(200, { 'content-type': 'text/html' })
    res.end(req.url === '/early' ? EARLY_PAGE : PAGE)
  })
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve))
  base = `http://127.0.0.1:${server.address().port}/`
  browser = await launchBrowser()
})

after(async () => {
  await browser?.close()
  server?.closeAllConnections()
  await new Promise((resolve) => server?.close(resolve))
})

/** A page that logs, in sessionStorage, what each of its documents found stored at its start,
 * what was stored at its `pagehide`, and every record removed after it. */
async function newPage(path = '') {
  const context = await browser.newContext()
  await context.addInitScript(() => {
    const log = (line) => sessionStorage.setItem('log', `${sessionStorage.getItem('log') ?? ''}${line}\n`)
    const records = () => Object.keys(sessionStorage).filter((k) => k.startsWith('oncekey:')).join(',')
    let hidden = false
    const remove = Storage.prototype.removeItem
    Storage.prototype.removeItem = function (k) {
      if (hidden && k.startsWith('oncekey:')) log(`removed ${k} after pagehide`)
      return remove.call(this, k)
    }
    // The kit's fetch resolves once an answer's status and headers have come.
    const fetch = window.fetch
    window.fetch = function (...args) {
      const answered = fetch.apply(this, args)
      answered.then(() => { window.statusCame = true }, () => {})
      return answered
    }
    log(`start [${records()}]`)
    addEventListener('pagehide', () => {
      log(`pagehide [${records()}]`)
      hidden = true
    })
  })
  const page = await context.newPage()
  await page.goto(base + path)
  await page.waitForFunction(() => document.getElementById('state').textContent === 'idle')
  return page
}

/** Sends, waits until the answer's status came (`status`) or for a while (none will come), and
 * reloads. */
async function sendAndReload(page, status) {
  posts = []
  await page.evaluate(() => window.send())
  await page.waitForFunction(() => document.getElementById('state').textContent === 'sending')
  while (posts.length === 0) await new Promise((resolve) => setTimeout(resolve, 10))
  const key = await page.evaluate(() => window.pendingKey())
  if (status) await page.waitForFunction(() => window.statusCame === true)
  else await new Promise((resolve) => setTimeout(resolve, 300))
  await page.reload()
  await page.waitForFunction(() => document.getElementById('state').textContent !== 'loading')
  const log = (await page.evaluate(() => sessionStorage.getItem('log'))).trim().split('\n')
  return { key, log }
}

test('a reload while the body of a 201 is read: the record outlives the answer, and the next page asks again under its key', async () => {
  const held = []
  answer = (res) => {
    res.writeHead(201, { 'content-type': 'application/json' })
    res.write('{"id":')
    held.push(res)
  }
  const page = await newPage()
  const { key, log } = await sendAndReload(page, true)
  for (const res of held) res.end('1}')
  // Nothing removed after the pagehide: the next page found the record.
  assert.deepEqual(log, ['start []', 'pagehide [oncekey:unload]', 'start [oncekey:unload]'])
  assert.equal(await page.textContent('#state'), 'unsure')
  assert.equal(await page.evaluate(() => window.pendingKey()), key)
  // Asked again: the same key (the server would replay its answer), and the record goes.
  answer = (res) => {
    res.writeHead(201, { 'content-type': 'application/json' })
    res.end('{"id":1}')
  }
  await page.evaluate(() => window.tryAgain())
  await page.waitForFunction(() => document.getElementById('state').textContent === 'succeeded')
  assert.deepEqual(posts, [key, key])
  assert.equal(await page.evaluate(() => Object.keys(sessionStorage).filter((k) => k.startsWith('oncekey:')).length), 0)
  await page.context().close()
})

test('a reload before any status came: the record stays, and the next page goes on with its key', async () => {
  let held = []
  answer = (res) => held.push(res)
  const page = await newPage()
  const { key, log } = await sendAndReload(page, false)
  assert.deepEqual(log, ['start []', 'pagehide [oncekey:unload]', 'start [oncekey:unload]'])
  assert.equal(await page.textContent('#state'), 'unsure')
  assert.equal(await page.evaluate(() => window.pendingKey()), key)
  for (const res of held) res.destroy()
  held = []
  await page.context().close()
})

test("an answer that lands in a pagehide listener the page made before the kit's: the record stays", async () => {
  // A browser runs the microtasks queued so far after each listener of an event it fires: the
  // answer settles right after the page's own listener, before a listener the kit made later.
  const page = await newPage('early')
  await page.evaluate(() => window.send())
  await page.waitForFunction(() => document.getElementById('state').textContent === 'sending')
  const key = await page.evaluate(() => window.pendingKey())
  await page.reload()
  await page.waitForFunction(() => document.getElementById('state').textContent !== 'loading')
  const log = (await page.evaluate(() => sessionStorage.getItem('log'))).trim().split('\n')
  assert.deepEqual(log, ['start []', 'pagehide [oncekey:unload]', 'start [oncekey:unload]'])
  assert.equal(await page.textContent('#state'), 'unsure')
  assert.equal(await page.evaluate(() => window.pendingKey()), key)
  await page.context().close()
})
