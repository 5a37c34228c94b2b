// End-to-end harness: the reference server (a child process on a loopback port, serving the built
// demo and package) and Debian's headless Chromium driven by playwright-core.
import { spawn } from 'node:child_process'
import { mkdirSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..')
const require = createRequire(path.join(root, 'tests/pages/package.json'))
const { chromium } = require('playwright-core')

export const CHROMIUM_ARGS = [
  '--headless=new',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-dev-shm-usage',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
]

/** A script's `--name value` arguments, as an object (the chaos scripts'). */
export function cliArgs(argv = process.argv.slice(2)) {
  return Object.fromEntries(
    argv.reduce((pairs, arg, i, all) => {
      if (arg.startsWith('--')) pairs.push([arg.slice(2), all[i + 1]])
      return pairs
    }, []),
  )
}

/** Starts the reference server on a free loopback port; resolves to { url, stop }. */
export function startServer(extra = []) {
  const bin = process.env.ONCEKEY_SERVER_BIN || path.join(root, 'target/debug/oncekey-server')
  const args = [
    '--addr', '127.0.0.1:0',
    '--db', ':memory:',
    '--faults',
    '--www', path.join(root, 'www/dist'),
    '--pkg', path.join(root, 'pkg'),
    '--mount', `/e2e=${path.join(root, 'tests/e2e/pages')}`,
    ...extra,
  ]
  const child = spawn(bin, args, { stdio: ['ignore', 'pipe', 'inherit'] })
  return new Promise((resolve, reject) => {
    let seen = ''
    const onData = (chunk) => {
      seen += chunk
      const m = seen.match(/listening on (http:\/\/[\d.:]+)/)
      if (m) {
        child.stdout.off('data', onData)
        child.stdout.resume()
        resolve({
          url: m[1],
          stop: () =>
            new Promise((done) => {
              if (child.exitCode !== null) return done()
              child.once('exit', done)
              child.kill('SIGTERM')
            }),
        })
      }
    }
    child.stdout.setEncoding('utf8')
    child.stdout.on('data', onData)
    child.once('error', reject)
    child.once('exit', (code) => reject(new Error(`oncekey-server exited early (${code}); is ${bin} built?`)))
  })
}

export function launchBrowser({ bfcache = false } = {}) {
  // --expose-gc: a test collects garbage to show attached forms stay wired.
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: [...CHROMIUM_ARGS, '--js-flags=--expose-gc'],
    // Playwright switches the back/forward cache off; `bfcache` leaves it on, as in a browser.
    ignoreDefaultArgs: bfcache ? ['--disable-back-forward-cache'] : [],
  })
}

/** A browser whose profile lives in `dir`: closed and launched again on the same folder, it is a
 * browser restarted (IndexedDB and localStorage kept, sessionStorage gone). */
export function launchPersistent(dir) {
  return chromium.launchPersistentContext(dir, { executablePath: '/usr/bin/chromium', args: CHROMIUM_ARGS })
}

/** The tickets the server holds for a tenant. */
export async function tickets(base, tenant) {
  const res = await fetch(`${base}/api/tickets`, { headers: { 'X-Tenant': tenant } })
  if (!res.ok) throw new Error(`GET /api/tickets: ${res.status}`)
  return res.json()
}

/** The server's counts for a tenant. */
export async function stats(base, tenant) {
  const res = await fetch(`${base}/api/stats`, { headers: { 'X-Tenant': tenant } })
  return res.json()
}

let tenantCounter = 0
export function uniqueTenant(label) {
  tenantCounter += 1
  return `e2e-${label}-${process.pid}-${tenantCounter}-${Date.now() % 100000}`
}

const shots = path.join(root, 'tests/e2e/screenshots')
/** Saves a screenshot of the page (git-ignored folder) for a person to look at. */
export async function screenshot(page, name) {
  mkdirSync(shots, { recursive: true })
  await page.screenshot({ path: path.join(shots, `${name}.png`), fullPage: true })
}

/** Collects console errors and page errors, to assert a clean console. */
export function watchConsole(page) {
  const errors = []
  page.on('console', (m) => {
    if (m.type() === 'error') errors.push(m.text())
  })
  page.on('pageerror', (e) => errors.push(String(e)))
  return errors
}

/** Resolves when `check()` is truthy, polling; rejects with `what` after `ms`. */
export async function eventually(check, what, ms = 20000) {
  const until = Date.now() + ms
  let last
  while (Date.now() < until) {
    try {
      last = await check()
      if (last) return last
    } catch (e) {
      last = e
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  throw new Error(`timed out waiting for ${what} (last: ${last})`)
}
