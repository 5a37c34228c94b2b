// The package and the demo under a strict Content Security Policy, sent by the reference server
// (--csp): scripts only from the page's origin, WebAssembly compiled but no eval, no inline script
// but the first-paint snippet (allowed by its hash), and Trusted Types enforced, so any string
// written into an HTML or script sink throws. A server's problem details carrying HTML are shown
// as text.
import assert from 'node:assert/strict'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import path from 'node:path'
import { after, before, test } from 'node:test'

import { launchBrowser, screenshot, startServer, tickets, uniqueTenant, watchConsole } from './harness.mjs'

const POLICY = [
  "default-src 'self'",
  // The demo's favicon is a data: URL.
  "img-src 'self' data:",
  // The demo's first-paint snippet, by its hash (README.md, "Protected from the first paint").
  "script-src 'self' 'wasm-unsafe-eval' 'sha256-KDopf7/8u3A6KFj/TkTdtvdbThQ3KzhjkWRrGWJVZU0='",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
  "require-trusted-types-for 'script'",
].join('; ')

const KIT = '#ticket-form'

// A plain page that loads the package straight from /pkg/ (no bundler), its script a file of its
// own: an inline one would be refused by the policy.
const PLAIN_HTML = `<!doctype html>
<html lang="en">
  <head><meta charset="utf-8" /><title>oncekey under CSP</title><link rel="icon" href="data:," /></head>
  <body>
    <form data-oncekey="csp-ticket" action="/api/tickets" method="post">
      <label>Subject <input name="subject" /></label>
      <label>Email <input name="email" value="csp@example.com" /></label>
      <label>Message <textarea name="body">Under a strict policy.</textarea></label>
      <button type="submit">Send</button>
      <p role="status"></p>
    </form>
    <script type="module" src="plain.js"></script>
    <script>window.__inlineRan = true</script>
  </body>
</html>
`
const PLAIN_JS = `import init, { autoAttach, Submitter } from '/pkg/oncekey.js'
// The page's own code may not eval: the policy has no 'unsafe-eval'.
try {
  window.__evalProbe = String(eval('1 + 1'))
} catch (e) {
  window.__evalProbe = e.name
}
await init()
const tenant = new URLSearchParams(location.search).get('tenant')
autoAttach({ headers: { 'X-Tenant': tenant } })
window.submitDirectly = async (subject) => {
  const submitter = new Submitter('csp-direct', { url: '/api/tickets', headers: { 'X-Tenant': tenant } })
  const settled = await submitter.submit({ subject, body: 'Straight from the Submitter.', email: 'csp@example.com' })
  return { outcome: settled.outcome, status: settled.status }
}
document.body.dataset.ready = 'yes'
`

let server
let browser
let pages

before(async () => {
  pages = mkdtempSync(path.join(tmpdir(), 'oncekey-csp-'))
  writeFileSync(path.join(pages, 'plain.html'), PLAIN_HTML)
  writeFileSync(path.join(pages, 'plain.js'), PLAIN_JS)
  server = await startServer(['--csp', POLICY, '--mount', `/csp=${pages}`])
  browser = await launchBrowser()
})

after(async () => {
  await browser?.close()
  await server?.stop()
  if (pages) rmSync(pages, { recursive: true, force: true })
})

/** A page whose policy violations are collected from the first script on. */
async function open(url) {
  const context = await browser.newContext()
  const page = await context.newPage()
  const errors = watchConsole(page)
  await page.addInitScript(() => {
    window.__violations = []
    document.addEventListener('securitypolicyviolation', (e) => {
      window.__violations.push(`${e.violatedDirective}: ${e.blockedURI || e.sample || '(inline)'}`)
    })
  })
  const response = await page.goto(url)
  return { context, page, errors, response }
}

const violations = (page) => page.evaluate(() => window.__violations)

/** Proves the policy is in force on the page, so the other checks mean something: a plain string
 * into an HTML or script sink throws (Trusted Types), and an inline script does not run. (Code
 * the test evaluates through DevTools is exempt from the policy's eval rule; the plain page's own
 * script checks that one.) Run last: the probes are violations. */
async function policyInForce(page) {
  const probe = await page.evaluate(() => {
    const result = {}
    try {
      document.createElement('div').innerHTML = '<b>x</b>'
      result.innerHTML = 'assigned'
    } catch (e) {
      result.innerHTML = e.name
    }
    try {
      document.createElement('script').src = '/nowhere.js'
      result.scriptSrc = 'assigned'
    } catch (e) {
      result.scriptSrc = e.name
    }
    return result
  })
  assert.deepEqual(probe, { innerHTML: 'TypeError', scriptSrc: 'TypeError' })
  await page.addScriptTag({ content: 'window.__inlineRan = true' }).catch(() => {})
  assert.equal(await page.evaluate(() => window.__inlineRan ?? false), false, 'an inline script ran')
}

test('the server sends the policy with the demo and the package', async () => {
  for (const p of ['/', '/pkg/oncekey.js', '/api/stats']) {
    const res = await fetch(`${server.url}${p}`)
    assert.equal(res.headers.get('content-security-policy'), POLICY, p)
    await res.arrayBuffer()
  }
})

test('the demo works under the policy: a ticket is sent once, nothing is refused by it', async () => {
  const tenant = uniqueTenant('csp-demo')
  const { context, page, errors, response } = await open(`${server.url}/?tenant=${tenant}`)
  assert.equal(response.headers()['content-security-policy'], POLICY)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  await page.fill(`${KIT} [name=subject]`, 'Under CSP')
  await page.fill(`${KIT} [name=email]`, 'ana@example.com')
  await page.fill(`${KIT} [name=body]`, 'Strict policy, Trusted Types.')
  await page.dblclick(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[data-oncekey-state="succeeded"]`, { timeout: 30000 })
  await screenshot(page, 'csp-01-demo-succeeded')
  assert.match(await page.textContent(`${KIT} [role=status]`), /#\d+/)
  assert.equal((await tickets(server.url, tenant)).length, 1)
  assert.deepEqual(await violations(page), [])
  assert.deepEqual(errors.filter((e) => !/Failed to load resource/.test(e)), [])
  await policyInForce(page)
  await context.close()
})

test('the package loaded from /pkg/ on a plain page works under the policy', async () => {
  const tenant = uniqueTenant('csp-plain')
  const { context, page, errors } = await open(`${server.url}/csp/plain.html?tenant=${tenant}`)
  await page.waitForSelector('body[data-ready="yes"]', { timeout: 20000 })
  // The page's own eval and inline script were refused, and reported; nothing else was.
  assert.equal(await page.evaluate(() => window.__evalProbe), 'EvalError')
  assert.equal(await page.evaluate(() => window.__inlineRan ?? false), false)
  const refused = await violations(page)
  // The eval is refused by Trusted Types first (a string where a TrustedScript is required).
  const directives = refused.map((v) => v.split(':')[0]).sort()
  assert.equal(directives.length, 2, refused.join('; '))
  assert.match(directives[0], /^(require-trusted-types-for|script-src)$/, refused.join('; '))
  assert.equal(directives[1], 'script-src-elem', refused.join('; '))
  await page.evaluate(() => window.__violations.splice(0))
  // Chromium logs the two refusals on the console too; anything after them is a finding.
  assert.equal(errors.length, 2, errors.join('\n'))
  errors.splice(0)
  // The form kit, attached by autoAttach.
  await page.fill('form [name=subject]', 'Plain page under CSP')
  await page.click('form button[type=submit]')
  await page.waitForSelector('form[data-oncekey-state="succeeded"]', { timeout: 30000 })
  // The Submitter, straight.
  const direct = await page.evaluate(() => window.submitDirectly('Submitter under CSP'))
  assert.deepEqual(direct, { outcome: 'succeeded', status: 201 })
  const subjects = (await tickets(server.url, tenant)).map((t) => t.subject).sort()
  assert.deepEqual(subjects, ['Plain page under CSP', 'Submitter under CSP'])
  assert.deepEqual(await violations(page), [])
  assert.deepEqual(errors.filter((e) => !/Failed to load resource/.test(e)), [])
  await policyInForce(page)
  await context.close()
})

test("a server's problem details carrying HTML are shown as text", async () => {
  const tenant = uniqueTenant('csp-html')
  const { context, page, errors } = await open(`${server.url}/?tenant=${tenant}`)
  await page.waitForSelector(`${KIT}[data-oncekey-state]`)
  const html = {
    title: '<img src=x onerror="window.__pwned=1">Refused',
    detail: '<script>window.__pwned=2</script><b>bold</b>',
  }
  // A server that puts markup in its problem details (the reference server never does).
  await page.route('**/api/tickets', (route) =>
    route.request().method() === 'POST'
      ? route.fulfill({
          status: 400,
          contentType: 'application/problem+json',
          body: JSON.stringify({
            type: 'urn:test:html',
            status: 400,
            ...html,
            'invalid-params': [{ name: 'subject', reason: '<img src=y onerror="window.__pwned=3">is wrong' }],
          }),
        })
      : route.continue(),
  )
  await page.fill(`${KIT} [name=subject]`, 'Markup in the answer')
  await page.fill(`${KIT} [name=email]`, 'ana@example.com')
  await page.fill(`${KIT} [name=body]`, 'The answer carries HTML.')
  await page.click(`${KIT} button[type=submit]`)
  await page.waitForSelector(`${KIT}[data-oncekey-state="refused"]`, { timeout: 30000 })
  await screenshot(page, 'csp-02-html-as-text')
  const shown = await page.evaluate((sel) => {
    const form = document.querySelector(sel)
    return {
      text: form.textContent,
      markup: form.querySelectorAll('img, script, b').length,
      pwned: window.__pwned ?? null,
    }
  }, KIT)
  assert.equal(shown.pwned, null, 'no markup from the answer ran')
  assert.equal(shown.markup, 0, 'no element was made from the answer')
  for (const words of [html.title, html.detail, '<img src=y onerror="window.__pwned=3">is wrong']) {
    assert.ok(shown.text.includes(words), `${words} is shown, as text: ${shown.text}`)
  }
  // Had the kit written the answer as HTML, Trusted Types would have thrown and logged it.
  assert.deepEqual(await violations(page), [])
  assert.deepEqual(errors.filter((e) => !/Failed to load resource/.test(e)), [])
  assert.equal((await tickets(server.url, tenant)).length, 0)
  await context.close()
})

