// The demo's browser-side network switch (www/src/network.js): a page cannot throttle its own
// requests, so this service worker plays the network for every request of the demo's pages.
//   normal   nothing: the browser fetches as usual
//   slow-3g  400 ms each way, 50 KB/s up and down (DevTools' "Slow 3G" and the e2e tests' CDP
//            emulation), for the page, its module, its wasm and every API request
//   offline  every request to the server fails as a lost network does (a TypeError in fetch);
//            the page's own files still come, as a browser cache would give them
// The mode is kept in the Cache API too, since the browser stops an idle worker and a new one
// starts with empty globals.
const STORE = 'oncekey-demo-network'
const MODE_URL = '/__oncekey-demo-network-mode'
const LATENCY_MS = 400
const BYTES_PER_S = 50 * 1024

let mode

async function currentMode() {
  if (mode === undefined) {
    const cache = await caches.open(STORE)
    const saved = await cache.match(MODE_URL)
    mode = saved ? await saved.text() : 'normal'
  }
  return mode
}

self.addEventListener('install', () => self.skipWaiting())
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()))

self.addEventListener('message', (event) => {
  const next = event.data && event.data.network
  if (!['normal', 'slow-3g', 'offline'].includes(next)) return
  mode = next
  event.waitUntil(
    caches
      .open(STORE)
      .then((cache) => cache.put(MODE_URL, new Response(next)))
      .then(() => event.source && event.source.postMessage({ network: next })),
  )
})

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))
const transfer = (bytes) => (bytes / BYTES_PER_S) * 1000

async function slow(request) {
  // Up: the latency and the body at 50 KB/s, then the real request.
  const sent = request.method === 'GET' || request.method === 'HEAD' ? null : await request.clone().arrayBuffer()
  await sleep(LATENCY_MS + transfer(sent ? sent.byteLength : 0))
  const response = await fetch(request)
  // Down: the whole answer at 50 KB/s, then handed to the page.
  const body = await response.arrayBuffer()
  await sleep(LATENCY_MS + transfer(body.byteLength))
  return new Response(request.method === 'HEAD' || [204, 304].includes(response.status) ? null : body, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  })
}

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url)
  if (url.origin !== self.location.origin || url.pathname === MODE_URL) return
  // Known and normal: the browser fetches it itself.
  if (mode === 'normal') return
  event.respondWith(
    currentMode().then((m) => {
      if (m === 'offline' && url.pathname.startsWith('/api/')) return Response.error()
      if (m === 'slow-3g') return slow(event.request)
      return fetch(event.request)
    }),
  )
})
