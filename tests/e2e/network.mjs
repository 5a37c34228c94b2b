// What the network tests and their bench share: Chromium's network emulation through the
// DevTools protocol, and the first-paint probe.
import { eventually } from './harness.mjs'

/** DevTools' emulation of a slow network, per page (CDP Network.emulateNetworkConditions). */
export const SLOW_3G = { latency: 400, downloadThroughput: 50 * 1024, uploadThroughput: 50 * 1024 }
export const LATENCY_2S = { latency: 2000, downloadThroughput: -1, uploadThroughput: -1 }

export async function emulate(context, page, conditions) {
  const cdp = await context.newCDPSession(page)
  await cdp.send('Network.enable')
  await cdp.send('Network.emulateNetworkConditions', { offline: false, ...conditions })
  return cdp
}

/** Every ticket POST the page makes, with its key and when (the page's clock). */
export function watchPosts(page) {
  const posts = []
  page.on('request', (r) => {
    if (r.method() === 'POST' && new URL(r.url()).pathname.startsWith('/api/')) {
      posts.push({ path: new URL(r.url()).pathname, key: r.headers()['idempotency-key'] ?? null, navigation: r.isNavigationRequest() })
    }
  })
  return posts
}

/**
 * An init script: from the moment the marked form is parsed until the kit attaches, probes every
 * 10 ms whether a submit of it would be stopped (a synthetic submit event, which never posts, and
 * whose mark `data-oncekey-held` the probe puts back as it was). Records in window.__firstPaint, in
 * ms since navigation start: `formAt` (the form parsed), `protectedAt` (the first probe after
 * which none was unprotected), `attachedAt` (data-oncekey-state set: the kit attached),
 * `unprotectedMs` (protectedAt - formAt: how long a submit would have been posted natively), and
 * the probes' counts. Also wraps `fetch` to note when each keyed request leaves
 * (`window.__keyed`) and when `online` fired (`window.__onlineAt`).
 */
export function firstPaintProbe(selector) {
  const fp = { formAt: null, protectedAt: null, attachedAt: null, unprotectedMs: null, probes: 0, unprotected: 0 }
  window.__firstPaint = fp
  window.__keyed = []
  window.__onlineAt = []
  addEventListener('online', () => window.__onlineAt.push(performance.now()), true)
  const realFetch = window.fetch
  window.fetch = function (input, init) {
    const headers = new Headers((init && init.headers) || (input instanceof Request ? input.headers : undefined))
    const key = headers.get('idempotency-key')
    if (key) window.__keyed.push({ at: performance.now(), key, online: navigator.onLine })
    return realFetch.apply(this, arguments)
  }
  let form = null
  let timer = null
  const probe = () => {
    const at = performance.now()
    if (fp.formAt === null) fp.formAt = at
    if (form.hasAttribute('data-oncekey-state')) {
      fp.attachedAt = at
      if (fp.protectedAt === null) fp.protectedAt = fp.attachedAt
      fp.unprotectedMs = fp.protectedAt - fp.formAt
      clearInterval(timer)
      return
    }
    const held = form.getAttribute('data-oncekey-held')
    const event = new Event('submit', { bubbles: true, cancelable: true })
    form.dispatchEvent(event)
    if (held === null) form.removeAttribute('data-oncekey-held')
    else form.setAttribute('data-oncekey-held', held)
    fp.probes += 1
    if (event.defaultPrevented) {
      if (fp.protectedAt === null) fp.protectedAt = at
    } else {
      fp.unprotected += 1
      fp.protectedAt = null
    }
  }
  const observer = new MutationObserver(() => {
    if (form) return
    form = document.querySelector(selector)
    if (!form) return
    observer.disconnect()
    probe()
    timer = setInterval(probe, 10)
  })
  observer.observe(document, { childList: true, subtree: true })
}

/** An init script for a baseline: the page's first-paint snippet is left out (its capture-phase
 * submit listener on window is dropped), as on a page without it. */
export function withoutSnippet() {
  const add = EventTarget.prototype.addEventListener
  let dropped = false
  EventTarget.prototype.addEventListener = function (type, listener, options) {
    if (!dropped && this === window && type === 'submit' && (options === true || options?.capture)) {
      dropped = true
      return
    }
    return add.call(this, type, listener, options)
  }
}

export const firstPaint = (page) => page.evaluate(() => window.__firstPaint)

/** Waits for the probe to finish (the kit attached). */
export async function attached(page) {
  return eventually(async () => {
    const fp = await firstPaint(page)
    return fp && fp.attachedAt !== null ? fp : null
  }, 'the kit to attach', 60000)
}
