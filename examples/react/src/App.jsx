import { useEffect, useRef, useState } from 'react'
import { useSubmitter } from 'oncekey/react'

// Each visitor (and each end-to-end test) can have its own tickets: ?tenant=NAME (read in the
// browser only: a server render has no location).
const tenant = (typeof location === 'undefined' ? null : new URLSearchParams(location.search).get('tenant')) || 'demo'
const EMPTY = { subject: '', email: '', body: '' }
const CONDITIONS = [
  ['', 'Normal'],
  ['drop-reply', 'Lose the reply'],
  ['delay=3000', 'Slow (3 s)'],
]

export function App() {
  const [view, setView] = useState('form')
  return (
    <main>
      <header className="top">
        <h1>
          Help desk <span className="brand">React + oncekey</span>
        </h1>
        <p className="lede">A ticket form with controlled inputs: however bad the connection, one ticket per Send.</p>
        <nav className="actions">
          <button type="button" className={view === 'form' ? '' : 'secondary'} onClick={() => setView('form')}>
            New ticket
          </button>
          <button type="button" className={view === 'list' ? '' : 'secondary'} onClick={() => setView('list')}>
            All tickets
          </button>
        </nav>
      </header>
      {view === 'form' ? <TicketForm /> : <Tickets />}
    </main>
  )
}

function TicketForm() {
  // The network condition goes on the next attempt only, as an X-Fault header the reference
  // server's --faults understands; attemptHeaders is called through the latest render's options.
  const [condition, setCondition] = useState('')
  const next = useRef('')
  next.current = condition
  const tickets = useSubmitter('new-ticket', {
    url: '/api/tickets',
    headers: { 'X-Tenant': tenant },
    resume: true,
    attemptHeaders: () => {
      const fault = next.current
      next.current = ''
      if (fault) setCondition('')
      return fault ? { 'X-Fault': fault } : {}
    },
  })
  const [fields, setFields] = useState(EMPTY)

  // After a reload the stored body comes back into the inputs (they stay locked until the
  // outcome is known); after a success they are cleared, after a refusal kept.
  useEffect(() => {
    if (tickets.pending) setFields({ ...EMPTY, ...tickets.pending })
  }, [tickets.pending])
  // Cleared in the render that unlocks the form, not in an effect after it: an effect runs after
  // the unlocked form is on screen, and the second click of a double click landing in between
  // would send the filled form again, under a new key (a second ticket).
  const [cleared, setCleared] = useState(tickets.settlement)
  if (cleared !== tickets.settlement) {
    setCleared(tickets.settlement)
    if (tickets.settlement?.outcome === 'succeeded') setFields(EMPTY)
  }

  const onSubmit = (event) => {
    event.preventDefault()
    // A second click while one is under way joins it (the same body): still one ticket.
    tickets.submit(fields).catch(() => {})
  }
  const field = (name) => ({
    name,
    value: fields[name],
    onChange: (e) => setFields((f) => ({ ...f, [name]: e.target.value })),
  })

  return (
    <section className="panel">
      <div className="choices" role="radiogroup" aria-label="Network condition for the next request">
        {CONDITIONS.map(([value, label]) => (
          <label key={value}>
            <input
              type="radio"
              name="condition"
              value={value}
              checked={condition === value}
              onChange={() => setCondition(value)}
            />{' '}
            {label}
          </label>
        ))}
      </div>
      <form id="ticket-form" onSubmit={onSubmit} aria-busy={tickets.locked} data-state={tickets.state} noValidate>
        <fieldset disabled={tickets.locked}>
          <label>
            Subject <input {...field('subject')} autoComplete="off" />
          </label>
          <label>
            Email <input {...field('email')} type="email" autoComplete="email" />
          </label>
          <label>
            Message <textarea {...field('body')} rows={4} />
          </label>
          <div className="actions">
            {/* Nothing to send until there is a subject: also after a success clears the form,
                when the second click of a double click lands. */}
            <button type="submit" disabled={!fields.subject.trim()}>
              Send ticket
            </button>
          </div>
        </fieldset>
        {(tickets.state === 'unsure' || tickets.state === 'expired') && (
          <div className="actions">
            {tickets.state === 'unsure' ? (
              <button type="button" onClick={() => tickets.tryAgain().catch(() => {})}>
                Try again
              </button>
            ) : (
              // Deliberate: the person checked that the first one did not arrive.
              <button type="button" onClick={() => tickets.sendAsNew().catch(() => {})}>
                Send as new
              </button>
            )}
            <button type="button" className="secondary" onClick={tickets.discard}>
              Discard
            </button>
          </div>
        )}
        <p role="status" className="status">
          {say(tickets)}
        </p>
      </form>
      <dl className="live" aria-label="What the submitter is doing">
        <div>
          <dt>State</dt>
          <dd id="live-state">{tickets.state}</dd>
        </div>
        <div>
          <dt>Key</dt>
          <dd id="live-key">{tickets.key ?? 'none yet'}</dd>
        </div>
        <div>
          <dt>Attempt</dt>
          <dd id="live-attempts">{tickets.attempts}</dd>
        </div>
      </dl>
    </section>
  )
}

// What the status line says, as text.
function say({ state, attempts, settlement, error }) {
  if (error) return error.message
  const answer = settlement?.body
  switch (state) {
    case 'sending':
      return attempts > 1 ? `Sending again (attempt ${attempts}), with the same key…` : 'Sending…'
    case 'waiting':
      return 'No answer yet; trying again with the same key…'
    case 'unsure':
      return 'The answer was lost. Try again sends the same request; the server will not do it twice.'
    case 'expired':
      return 'The key is now too old to resend safely, so whether the ticket was created cannot be known: check All tickets before you send it as new.'
    case 'succeeded':
      return answer ? `Ticket #${answer.id} created.` : 'Ticket created.'
    case 'refused':
      return `Not sent: ${answer?.detail ?? answer?.title ?? `status ${settlement?.status}`}`
    case 'conflict':
    case 'misconfigured':
      return `The server refused this request's key (${state}); nothing was retried.`
    default:
      return ''
  }
}

function Tickets() {
  const [list, setList] = useState(null)
  useEffect(() => {
    let live = true
    fetch('/api/tickets', { headers: { 'X-Tenant': tenant } })
      .then((r) => r.json())
      .then((l) => live && setList(l), () => live && setList([]))
    return () => {
      live = false
    }
  }, [])
  if (list === null) return <section className="panel">Loading…</section>
  return (
    <section className="panel">
      <h2>
        Tickets <span className="count">{list.length}</span>
      </h2>
      <ol className="tickets">
        {list.map((t) => (
          <li key={t.id}>
            <strong>
              #{t.id} {t.subject}
            </strong>{' '}
            {t.email}
          </li>
        ))}
      </ol>
    </section>
  )
}
