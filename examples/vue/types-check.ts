// Compiled by `make test-e2e` with tsc --strict (tests/e2e/tsconfig.frameworks.json), through
// this app's node_modules and the package's exports map: the composable's refs are typed.
// Each @ts-expect-error must be an error.
import type { Ref } from 'vue';
import { ready, useSubmitter } from 'oncekey/vue';
import type { UseSubmitter } from 'oncekey/vue';
import type { SubmitResult, SubmitterState } from 'oncekey';

interface Ticket {
  subject: string;
  email: string;
}

const tickets: UseSubmitter<Ticket> = useSubmitter<Ticket>('new-ticket', { url: '/api/tickets', resume: true });
const { state, locked, pending, settlement, submit, tryAgain, discard } = tickets;
const s: SubmitterState = state.value;
const l: boolean = locked.value;
const p: Ticket | null = pending.value;
const r: SubmitResult | null = settlement.value;
const readOnly: Readonly<Ref<boolean>> = locked;
const result: Promise<SubmitResult> = submit({ subject: 'Printer', email: 'ana@example.com' });
const again: Promise<SubmitResult> = tryAgain();
discard();
// Handed to @click as they are (README: @click="tryAgain"): the click's event is no options object.
const onClick: (event: MouseEvent) => unknown = tryAgain;
const onDiscard: (event: MouseEvent) => unknown = discard;
const started: Promise<void> = ready();
void [s, l, p, r, readOnly, result, again, started, onClick, onDiscard];

// @ts-expect-error: the body is a Ticket
submit({ subject: 1 });
// @ts-expect-error: the signal is an AbortSignal
tryAgain({ signal: 'now' });
// @ts-expect-error: url is required, as for the Submitter
useSubmitter('x', {});
// @ts-expect-error: the refs are read-only
locked.value = false;
// @ts-expect-error: state is a string union, not any
const wrong: number = state.value;
void wrong;
