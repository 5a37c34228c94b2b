// Fast refresh: examples/react served by Vite's dev server (strict mode on, React Refresh
// through @vitejs/plugin-react), its API proxied to the reference server. The component that
// holds a submission under way is edited and refreshed in place; the submission goes on, with
// its one request and its key, and makes one ticket.
import assert from 'node:assert/strict'
import { cpSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import path from 'node:path'
import { after, before, test } from 'node:test'

import { importFrom } from './frameworks.mjs'
import { eventually, launchBrowser, root, startServer, tickets, uniqueTenant, watchConsole } from './harness.mjs'

const APP = path.join(root, 'examples/react')
// A copy of the app beside it, to edit (at the same depth, for its import of www/'s stylesheet),
// with its node_modules.
const copy = path.join(root, 'examples', `.react-fast-refresh-${process.pid}`)

let server
let vite
let browser

before(async () => {
  server = await startServer()
  for (const f of ['index.html', 'vite.config.js', 'src']) cpSync(path.join(APP, f), path.join(copy, f), { recursive: true })
  symlinkSync(path.join(APP, 'node_modules'), path.join(copy, 'node_modules'))
  const { createServer } = await importFrom('examples/react', 'vite')
  vite = await createServer({
    root: copy,
    configFile: path.join(copy, 'vite.config.js'),
    logLevel: 'error',
    server: { host: '127.0.0.1', port: 0, proxy: { '/api': server.url }, fs: { allow: [root] } },
  })
  await vite.listen()
  browser = await launchBrowser()
})

after(async () => {
  await browser?.close()
  await vite?.close()
  await server?.stop()
  rmSync(copy, { recursive: true, force: true })
})

test('a fast refresh of the form mid-request sends nothing again and makes one ticket', async () => {
  const tenant = uniqueTenant('refresh')
  const page = await browser.newPage()
  const errors = watchConsole(page)
  const keys = []
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname === '/api/tickets') keys.push(r.headers()['idempotency-key'])
  })
  await page.goto(`${vite.resolvedUrls.local[0]}?tenant=${tenant}`)
  await page.waitForSelector('#ticket-form[data-state="idle"]')
  await page.check('input[name=condition][value="delay=3000"]')
  await page.fill('#ticket-form [name=subject]', 'Edited mid-request')
  await page.fill('#ticket-form [name=email]', 'ana@example.com')
  await page.click('#ticket-form button[type=submit]')
  await page.waitForSelector('#ticket-form[data-state="sending"]')
  const key = await page.textContent('#live-key')
  await page.evaluate(() => (window.notReloaded = true))

  const file = path.join(copy, 'src/App.jsx')
  const source = readFileSync(file, 'utf8')
  assert.ok(source.includes('Message <textarea'))
  writeFileSync(file, source.replace('Message <textarea', 'Your message <textarea'))
  await page.waitForSelector('#ticket-form label:has-text("Your message")')
  assert.equal(await page.evaluate(() => window.notReloaded), true, 'refreshed in place, not reloaded')
  assert.equal(await page.textContent('#live-key'), key, 'the same submission after the refresh')
  assert.equal(await page.inputValue('#ticket-form [name=subject]'), 'Edited mid-request', 'state kept')

  await page.waitForSelector('#ticket-form[data-state="succeeded"]', { timeout: 30000 })
  assert.deepEqual(keys, [key], 'one request, with the key the page showed')
  assert.equal((await tickets(server.url, tenant)).length, 1)
  await eventually(async () => /#\d+/.test(await page.textContent('#ticket-form [role=status]')), 'the ticket id')
  assert.deepEqual(errors.filter((e) => !/Failed to load resource|net::ERR_/.test(e)), [])
  await page.close()
})
