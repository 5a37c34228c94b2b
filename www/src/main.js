import init, { attachForm, listPending } from 'oncekey'
import { LANGUAGES, messagesFor } from './messages.js'
import { restoreNetwork, setNetwork } from './network.js'
import './style.css'

// Each visitor (and each end-to-end test) can have its own ticket lists: /?tenant=NAME. The
// retry policy can be tried out too: /?attempts=3&base=50&budget=4000 (milliseconds), the
// storage (/?storage=local: shared by the tabs of the origin), and the kit's language
// (/?lang=fr).
const params = new URLSearchParams(location.search)
const tenant = params.get('tenant') || 'demo'
const plainTenant = `${tenant}-plain`
const retry = {}
for (const name of ['attempts', 'base', 'cap', 'budget']) {
  if (params.has(name)) retry[name] = Number(params.get(name))
}
const storage = params.get('storage')
const lang = LANGUAGES.includes(params.get('lang')) ? params.get('lang') : 'en'

const $ = (id) => document.getElementById(id)

// The network condition applies to the next request only; "offline" lasts until switched back.
function takeFault() {
  const chosen = document.querySelector('input[name="condition"]:checked')
  const fault = chosen ? chosen.value : ''
  if (fault && fault !== 'offline') {
    document.querySelector('input[name="condition"][value=""]').checked = true
  }
  return fault
}

function faultHeaders() {
  const fault = takeFault()
  return fault ? { 'X-Fault': fault } : {}
}

function renderTickets(list, count, tickets) {
  count.textContent = String(tickets.length)
  count.removeAttribute('title')
  list.replaceChildren(
    ...tickets.map((t) => {
      const li = document.createElement('li')
      const subject = document.createElement('strong')
      subject.textContent = `#${t.id} ${t.subject}`
      const who = document.createElement('span')
      who.textContent = ` ${t.email}`
      li.append(subject, who)
      for (const a of t.attachments || []) {
        const file = document.createElement('span')
        file.className = 'attachment'
        file.textContent = ` 📎 ${a.name} (${Math.ceil(a.size / 1024)} KB, sha256 ${a.sha256.slice(0, 12)}…)`
        li.append(file)
      }
      return li
    }),
  )
}

// A list that an answer has just changed: its count says so until the new list comes (on a slow
// network, "Ticket #9 created" stood above the count of the list from before).
function stale(count) {
  count.textContent = '…'
  count.title = 'refreshing'
}

async function refreshTickets() {
  for (const [t, list, count] of [
    [tenant, $('kit-tickets'), $('kit-count')],
    [plainTenant, $('plain-tickets'), $('plain-count')],
  ]) {
    try {
      const res = await fetch('/api/tickets', { headers: { 'X-Tenant': t } })
      if (res.ok) renderTickets(list, count, await res.json())
    } catch {
      // The list catches up on the next refresh.
    }
  }
}

function describeWait(detail) {
  if (detail.state === 'waiting' && detail.waitingFor === 'online') return 'the connection to be back'
  if (detail.state === 'waiting' && detail.nextAttemptAt) {
    const secs = Math.max(0, (detail.nextAttemptAt - Date.now()) / 1000)
    return `next attempt in ${secs.toFixed(1)} s`
  }
  if (detail.state === 'sending') return 'the server’s answer'
  if (detail.state === 'unsure') return 'you: Try again or Discard'
  return 'nothing'
}

let lastDetail = { state: 'idle' }

function showLive(detail) {
  lastDetail = detail
  $('live-state').textContent = detail.state
  $('live-key').textContent = detail.key || 'none yet'
  $('live-attempts').textContent = String(detail.attempts ?? 0)
  $('live-waiting').textContent = describeWait(detail)
  if (detail.outcome) {
    stale($('kit-count'))
    refreshTickets()
  }
}

// The form without a key: posts, and retries once when the connection drops, as most clients do.
function wirePlainForm(form) {
  const status = form.querySelector('[role="status"]')
  const button = form.querySelector('button')
  form.addEventListener('submit', async (event) => {
    event.preventDefault()
    const data = new FormData(form)
    const file = data.get('attachment')
    // With a file, the usual multipart upload; without, JSON. Either way no key.
    const upload = file instanceof File && (file.size > 0 || file.name !== '')
    if (!upload) data.delete('attachment')
    const send = () =>
      fetch(form.action, {
        method: 'POST',
        headers: upload
          ? { 'X-Tenant': plainTenant, ...faultHeaders() }
          : { 'Content-Type': 'application/json', 'X-Tenant': plainTenant, ...faultHeaders() },
        body: upload ? data : JSON.stringify(Object.fromEntries(data)),
      })
    button.disabled = true
    status.textContent = 'Sending…'
    try {
      let res
      try {
        res = await send()
      } catch {
        status.textContent = 'Connection lost; sending again…'
        res = await send()
      }
      const answer = await res.json().catch(() => ({}))
      status.textContent = res.ok ? `Ticket #${answer.id} created.` : `Refused: ${answer.title || res.status}`
    } catch {
      status.textContent = 'Could not reach the server. Press Send again?'
    } finally {
      button.disabled = false
      stale($('plain-count'))
      refreshTickets()
    }
  })
}

// The browser's network (a service worker plays it) and the kit's language: both switches.
function wireSwitches() {
  const network = restoreNetwork()
  const note = $('network-note')
  for (const radio of document.querySelectorAll('input[name="network"]')) {
    radio.checked = radio.value === network
    radio.addEventListener('change', async () => {
      note.textContent = 'switching…'
      try {
        await setNetwork(radio.value)
        note.textContent = ''
      } catch (e) {
        note.textContent = `could not switch: ${e.message}`
      }
      document.documentElement.dataset.network = radio.value
    })
  }
  document.documentElement.dataset.network = network
  const language = $('language')
  language.value = lang
  // The kit's texts are chosen when it attaches: a reload in the other language (a pending
  // ticket is restored, with its key).
  language.addEventListener('change', () => {
    const next = new URLSearchParams(location.search)
    if (language.value === 'en') next.delete('lang')
    else next.set('lang', language.value)
    location.search = next.toString()
  })
}

wireSwitches()
await init()
const form = $('ticket-form')
form.addEventListener('oncekey:change', (e) => showLive(e.detail))
attachForm(form, {
  headers: { 'X-Tenant': tenant },
  ...(Object.keys(retry).length ? { retry } : {}),
  ...(storage ? { storage } : {}),

  // Called for every attempt and never stored: the demo's fault goes on the next request only.
  attemptHeaders: faultHeaders,
  successMessage: (ticket) => `Ticket #${ticket.id} created: “${ticket.subject}”.`,
  // Another language: every text the kit writes (the `messages` option), its success message too.
  ...messagesFor(lang),
})
wirePlainForm($('plain-form'))
// What was not confirmed in this origin (uploads are kept in IndexedDB, across closing the tab).
async function showPending() {
  const all = [...(await listPending('session')), ...(await listPending('indexeddb'))]
  const note = $('pending-note')
  note.hidden = all.length === 0
  note.textContent = all.length
    ? `${all.length} submission${all.length > 1 ? 's' : ''} not confirmed yet: ${all.map((p) => `${p.name} (key ${p.key.slice(0, 8)}…, ${p.attempts} attempt${p.attempts === 1 ? '' : 's'})`).join(', ')}`
    : ''
}
form.addEventListener('oncekey:change', () => showPending().catch(() => {}))
showPending().catch(() => {})
refreshTickets()
setInterval(refreshTickets, 2000)
// The countdown to the next attempt.
setInterval(() => {
  if (lastDetail.state === 'waiting') $('live-waiting').textContent = describeWait(lastDetail)
}, 250)
