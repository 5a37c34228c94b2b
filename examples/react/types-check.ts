// Compiled by `make test-e2e` with tsc --strict (tests/e2e/tsconfig.frameworks.json), through
// this app's node_modules and the package's exports map: the hook's declarations give real types.
// Each @ts-expect-error must be an error.
import { ready, useSubmitter } from 'oncekey/react';
import type { SubmitterSnapshot, UseSubmitter } from 'oncekey/react';
import type { SubmitResult, SubmitterState } from 'oncekey';

interface Ticket {
  subject: string;
  email: string;
}

const tickets: UseSubmitter<Ticket> = useSubmitter<Ticket>('new-ticket', {
  url: '/api/tickets',
  headers: { 'X-Tenant': 'acme' },
  resume: true,
  attemptHeaders: ({ attempt }) => ({ 'X-Attempt': String(attempt) }),
});
const state: SubmitterState = tickets.state;
const locked: boolean = tickets.locked;
const pending: Ticket | null = tickets.pending;
const key: string | null = tickets.key;
const attempts: number = tickets.attempts;
const settlement: SubmitResult | null = tickets.settlement;
const code: string | undefined = tickets.error && 'code' in tickets.error ? tickets.error.code : undefined;
const result: Promise<SubmitResult> = tickets.submit({ subject: 'Printer', email: 'ana@example.com' });
const again: Promise<SubmitResult> = tickets.tryAgain();
tickets.discard();
tickets.setSecrets({ password: 'p' });
const snapshot: SubmitterSnapshot<Ticket> = tickets;
// Handed to onClick as they are (README: onClick={tickets.tryAgain}): the click's event is no
// options object. (The DOM's MouseEvent: React's has a target too.)
declare function button(props: { onClick?: (event: MouseEvent) => void }): void;
button({ onClick: tickets.tryAgain });
button({ onClick: tickets.sendAsNew });
button({ onClick: tickets.discard });
const started: Promise<void> = ready();
void [state, locked, pending, key, attempts, settlement, code, result, again, snapshot, started];

// @ts-expect-error: the body is a Ticket
tickets.submit({ subject: 1 });
// @ts-expect-error: the signal is an AbortSignal
tickets.tryAgain({ signal: 'now' });
// @ts-expect-error: url is required, as for the Submitter
useSubmitter('x', {});
// @ts-expect-error: storage is session, local or memory
useSubmitter('x', { url: '/x', storage: 'cookie' });
// @ts-expect-error: state is a string union, not any
const wrong: number = tickets.state;
// @ts-expect-error: the snapshot is read-only
tickets.locked = false;
void wrong;
