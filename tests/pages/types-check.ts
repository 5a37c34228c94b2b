// Compiled with tsc (scripts/test-web.sh): the package's declarations give real types for the
// options, the results and the events, not `any`. Each @ts-expect-error must be an error.
import init, { Submitter, attachForm, autoAttach, listPending } from '../../pkg/oncekey.js';
import type { FormKit, FormKitMessages, FormKitOptions, Outcome, PendingEntry, SubmitResult, SubmitterChange, SubmitterState } from '../../pkg/oncekey.js';

await init();
const tickets = new Submitter('new-ticket', {
  url: '/api/tickets',
  headers: { 'X-Tenant': 'acme' },
  keyFormat: 'sf-string',
  timeoutMs: 10_000,
  retry: { attempts: 5, base: 250, cap: 10_000, budget: 60_000 },
  storage: 'local',
  credentials: 'include',
  encoding: 'form',
  keyLifetimeMs: 12 * 3600_000,
});
const result: SubmitResult = await tickets.submit({ subject: 'Printer' });
const outcome: Outcome = result.outcome;
const status: number | null = result.status;
const key: string = result.key;
const pending = tickets.pending();
if (pending !== null) {
  const startedAt: number = pending.startedAt;
  void startedAt;
}
const stop: () => void = tickets.onChange((change: SubmitterChange) => {
  const state: SubmitterState = change.state;
  const warning: string | null = change.warning;
  void state;
  void warning;
});
const again: SubmitResult = await tickets.tryAgain();
const controller = new AbortController();
const held: Promise<SubmitResult> = tickets.submit({ subject: 'Printer' }, { signal: controller.signal });
const retried: Promise<SubmitResult> = tickets.tryAgain({ signal: controller.signal });
const asNew: SubmitResult = await tickets.sendAsNew();
void [held, retried, asNew];
tickets.onChange((change: SubmitterChange) => {
  const why: 'retry' | 'online' | null = change.waitingFor;
  void why;
});
// @ts-expect-error: the signal is an AbortSignal
tickets.submit({}, { signal: 'stop' });
// @ts-expect-error: keyLifetimeMs is a number of milliseconds
new Submitter('x', { url: '/x', keyLifetimeMs: '24h' });
const state: SubmitterState = tickets.state;
tickets.discard();
stop();
void [outcome, status, key, again, state];

// @ts-expect-error: url is required
new Submitter('x', {});
// @ts-expect-error: storage is session, local or memory
new Submitter('x', { url: '/x', storage: 'cookie' });
// @ts-expect-error: retry.attempts is a number
new Submitter('x', { url: '/x', retry: { attempts: 'many' } });
// @ts-expect-error: the outcome is a string union, not any
const wrong: number = result.outcome;
void wrong;
// @ts-expect-error: onChange takes a listener of SubmitterChange
tickets.onChange((n: number) => n);

// The form kit.
const form = document.querySelector('form');
if (form !== null) {
  const kit: FormKit = attachForm(form, { name: 'ticket', resume: 'manual', successMessage: 'Ticket #{id} created' });
  const kitState: SubmitterState = kit.submitter.state;
  kit.detach();
  void kitState;
  // @ts-expect-error: the kit's resume is "auto" or "manual"
  attachForm(form, { resume: true });
  // A submitter's options pass through; the message may be made from the answer.
  const options: FormKitOptions = {
    url: '/api/tickets',
    retry: { attempts: 3 },
    clearOnSuccess: false,
    successMessage: (body: unknown) => `Created ${String(body)}`,
  };
  const other: FormKit = attachForm(form, options);
  other.tryAgain();
  other.sendAsNew();
  other.discard();
  const messages: FormKitMessages = { sending: 'Envoi…', tryAgain: 'Réessayer', sendAsNew: 'Envoyer comme nouveau ticket' };
  attachForm(form, { messages });
  // @ts-expect-error: a message key the kit does not know
  attachForm(form, { messages: { tryagain: 'Réessayer' } });
  // @ts-expect-error: messages are strings
  attachForm(form, { messages: { discard: 5 } });
  // @ts-expect-error: successMessage is a string or a function
  attachForm(form, { successMessage: 5 });
  // @ts-expect-error: clearOnSuccess is true or false
  attachForm(form, { clearOnSuccess: 'yes' });
  // @ts-expect-error: the form kit needs a form
  attachForm(document.body, {});
}
const kits: FormKit[] = autoAttach({ headers: { 'X-Tenant': 'acme' } });
void kits;
const storage: 'session' | 'local' | 'memory' | 'indexeddb' = tickets.storage;
void storage;
// The storage is sessionStorage when left out.
const listed: PendingEntry[] = [...(await listPending()), ...(await listPending('indexeddb'))];
void listed;
// @ts-expect-error: not a storage listPending reads
void listPending('cookies');
// A translation table's missing entry: the kit's own text.
attachForm(document.forms[0], { messages: { tryAgain: undefined, discard: 'Verwerfen' } });
// A JSON body kept in IndexedDB too.
const kept = new Submitter('kept', { url: '/api/tickets', storage: 'indexeddb' });
void kept;
