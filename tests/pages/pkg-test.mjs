// Loads the package built by scripts/build-pkg.sh in real pages (served by the reference server
// at /pkg/ and /pages/) in headless Chromium, and checks what a user would: the ticket is made
// once, a reload finds the pending submission and finishes it with the same key, and a worker
// can submit too. Usage: node tests/pages/pkg-test.mjs http://127.0.0.1:PORT
import { chromium } from 'playwright-core';
import assert from 'node:assert/strict';

const server = process.argv[2];
if (!server) throw new Error('usage: pkg-test.mjs SERVER_URL');

export const CHROMIUM_ARGS = [
  '--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run',
];

const UUID_V4 = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

async function stats(tenant) {
  const res = await fetch(`${server}/api/stats`, { headers: { 'X-Tenant': tenant } });
  return res.json();
}

async function load(page, mode, tenant) {
  await page.goto(`${server}/pages/pkg.html?mode=${mode}&tenant=${tenant}`);
  await page.waitForFunction(() => window.__result !== undefined, null, { timeout: 30_000 });
  const r = await page.evaluate(() => window.__result);
  assert.equal(r.error, undefined, `${mode}: ${r.error}`);
  return r;
}

const browser = await chromium.launch({ executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium', args: CHROMIUM_ARGS });
let failed = 0;
async function check(name, f) {
  const context = await browser.newContext();
  const page = await context.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  try {
    await f(page);
    assert.deepEqual(errors, [], 'no uncaught errors in the page');
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n${e.stack ?? e}`);
  } finally {
    await context.close();
  }
}

await check('a plain module page submits a ticket once', async (page) => {
  const tenant = `pkg-${Date.now()}`;
  const { result, states, stored, beforeInit } = await load(page, 'submit', tenant);
  assert.equal(beforeInit?.name, 'OncekeyError', 'a Submitter made before init() is refused');
  assert.equal(beforeInit.code, 'state');
  assert.match(beforeInit.message, /await init\(\)/);
  assert.equal(result.outcome, 'succeeded');
  assert.equal(result.status, 201);
  assert.match(result.key, UUID_V4);
  assert.equal(result.body.subject, 'From a plain page');
  assert.equal(result.replayed, false);
  assert.deepEqual(states, ['idle', 'sending', 'succeeded']);
  assert.equal(stored, null);
  assert.equal((await stats(tenant)).tickets, 1);
});

await check('a real reload finds the pending submission and finishes it with the same key', async (page) => {
  const tenant = `reload-${Date.now()}`;
  const left = await load(page, 'leave', tenant);
  assert.equal(left.result.outcome, 'unsure');
  assert.equal(left.result.status, 503);
  assert.ok(left.stored.includes(left.result.key), 'stored before and kept while unsure');
  const resumed = await load(page, 'resume', tenant);
  assert.equal(resumed.pending.key, left.result.key);
  assert.equal(resumed.pending.body.subject, 'From a plain page');
  assert.equal(resumed.states[0], 'unsure');
  assert.equal(resumed.result.outcome, 'succeeded');
  assert.equal(resumed.result.key, left.result.key);
  assert.equal(resumed.stored, null);
  assert.equal((await stats(tenant)).tickets, 1);
});

await check('a module worker submits too (fetch and crypto bound to the global)', async (page) => {
  const tenant = `worker-${Date.now()}`;
  const { result, warnings } = await load(page, 'worker', tenant);
  assert.equal(result.outcome, 'succeeded');
  assert.match(result.key, UUID_V4);
  assert.equal(warnings.length, 1, 'no sessionStorage in a worker: memory, with a warning');
  assert.equal((await stats(tenant)).tickets, 1);
});

await browser.close();
if (failed) {
  console.log(`${failed} page test(s) failed`);
  process.exit(1);
}
console.log('page tests: 3 passed');
