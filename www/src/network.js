// The browser-side network switch: normal, Slow 3G, offline (www/public/network-sw.js plays
// them). Offline also tells the page so, as a real one would: navigator.onLine reads false and
// `offline` fires; back, it reads true and `online` fires. The choice is kept across reloads
// (localStorage), so a reload on Slow 3G shows the page loading slowly.
const KEY = 'oncekey-demo-network'
export const MODES = ['normal', 'slow-3g', 'offline']

const saved = () => {
  try {
    const m = localStorage.getItem(KEY)
    return MODES.includes(m) ? m : 'normal'
  } catch {
    return 'normal'
  }
}

let current = 'normal'
const realOnLine = Object.getOwnPropertyDescriptor(Navigator.prototype, 'onLine')

function tellPage(mode) {
  const wasOffline = current === 'offline'
  current = mode
  if (mode === 'offline') {
    Object.defineProperty(navigator, 'onLine', { configurable: true, get: () => false })
    if (!wasOffline) window.dispatchEvent(new Event('offline'))
  } else {
    // The browser's own value again.
    Object.defineProperty(navigator, 'onLine', { configurable: true, get: () => realOnLine.get.call(navigator) })
    if (wasOffline) window.dispatchEvent(new Event('online'))
  }
}

async function worker() {
  if (!('serviceWorker' in navigator)) return null
  const registration = await navigator.serviceWorker.register('/network-sw.js', { scope: '/' })
  await navigator.serviceWorker.ready
  // The worker plays the network for this page once it controls it (clients.claim()).
  if (!navigator.serviceWorker.controller) {
    await new Promise((resolve) => navigator.serviceWorker.addEventListener('controllerchange', resolve, { once: true }))
  }
  return registration.active
}

function post(target, mode) {
  return new Promise((resolve) => {
    const done = (event) => {
      if (event.data && event.data.network === mode) {
        navigator.serviceWorker.removeEventListener('message', done)
        resolve()
      }
    }
    navigator.serviceWorker.addEventListener('message', done)
    target.postMessage({ network: mode })
  })
}

/** Switches the network; resolves once the worker plays it. */
export async function setNetwork(mode) {
  try {
    localStorage.setItem(KEY, mode)
  } catch {
    // Kept for this page only.
  }
  // The worker is registered on first use only: a page that never switches has none.
  if (mode !== 'normal' || navigator.serviceWorker?.controller) {
    const active = await worker()
    if (active) await post(active, mode)
  }
  tellPage(mode)
}

/** The mode chosen before a reload, told to the page before the kit starts. */
export function restoreNetwork() {
  const mode = saved()
  if (mode === 'offline') tellPage(mode)
  current = mode
  return mode
}
