// Two builds of the browser package side by side in one page, for a before/after on a machine
// whose load drifts: both are loaded (as /a and /b) into one headless Chromium page against one
// reference server, and measured in turn, so that a burst of load falls on both alike.
//  - own cost: N submissions with a fetch that answers at once (as bench-web's), per storage,
//    A then B then B then A..., ROUNDS times; the median of the rounds per side;
//  - overhead: N rounds of plain fetch, A and B against the server, one of each in turn (the
//    order rotated), and each side's median time over plain fetch's median.
// Usage: node scripts/bench-web-ab.mjs SERVER_BIN PKG_A PKG_B [ROUNDS] [N]
import { openIsolated, pages, serveAndLaunch } from './page-server.mjs';

const [bin, a, b] = process.argv.slice(2, 5);
const ROUNDS = Number(process.argv[5] || 5);
const N = Number(process.argv[6] || 1000);
const { url, server, browser } = await serveAndLaunch(bin, ['--faults',
  '--mount', `/pages=${pages}`, '--mount', `/a=${a}`, '--mount', `/b=${b}`, '--pkg', a]);
const median = (xs) => {
  const s = [...xs].sort((x, y) => x - y);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const spread = (xs) => `${Math.min(...xs).toFixed(0)}-${Math.max(...xs).toFixed(0)}`;
try {
  const page = await browser.newPage();
  await openIsolated(page, `${url}/pages/bench.html`);
  await page.evaluate(async () => {
    const load = async (side) => {
      const m = await import(`/${side}/oncekey.js`);
      await m.default({ module_or_path: `/${side}/oncekey_bg.wasm` });
      return m;
    };
    window.ab = { a: await load('a'), b: await load('b') };
  });
  await page.waitForFunction(() => window.benchReady === true);
  const own = { a: { session: [], memory: [] }, b: { session: [], memory: [] } };
  for (let r = 0; r < ROUNDS; r++) {
    for (const side of r % 2 ? ['b', 'a'] : ['a', 'b']) {
      // bench.html's own measure, given this side's build (milliseconds per submission).
      const ms = await page.evaluate(([side, n, r]) => window.ownCost(n, window.ab[side], `ab-${side}-${r}`), [side, N, r]);
      own[side].session.push(ms.session * 1000);
      own[side].memory.push(ms.memory * 1000);
    }
  }
  for (const side of ['a', 'b']) {
    const o = own[side];
    console.log(`own cost ${side}: sessionStorage median ${median(o.session).toFixed(0)} µs (${spread(o.session)}: ${o.session.map((x) => x.toFixed(0)).join(' ')}), memory median ${median(o.memory).toFixed(0)} µs (${spread(o.memory)})`);
  }
  const times = await page.evaluate(async (n) => {
    const tenant = `ab-${Date.now()}`;
    const plain = () => window.plain(tenant);
    const via = (side) => {
      const s = new window.ab[side].Submitter(`ab-${side}`, { url: '/api/tickets', headers: { 'X-Tenant': tenant } });
      return async () => {
        const r = await s.submit(window.ticket);
        if (r.outcome !== 'succeeded') throw new Error(`${side}: ${r.outcome}`);
      };
    };
    const sides = [['plain', plain], ['a', via('a')], ['b', via('b')]];
    for (let i = 0; i < 20; i++) for (const [, send] of sides) await send();
    const times = { plain: [], a: [], b: [] };
    for (let i = 0; i < n; i++) {
      for (let j = 0; j < 3; j++) {
        const [side, send] = sides[(i + j) % 3];
        const t = performance.now();
        await send();
        times[side].push(performance.now() - t);
      }
    }
    return times;
  }, Number(process.env.AB_OVERHEAD_N || 300));
  const m = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, median(v)]));
  const mean = Object.fromEntries(Object.entries(times).map(([k, v]) => [k, v.reduce((x, y) => x + y, 0) / v.length]));
  console.log(`overhead: medians plain ${m.plain.toFixed(2)} ms, a ${m.a.toFixed(2)} ms (ratio ${(m.a / m.plain).toFixed(3)}), b ${m.b.toFixed(2)} ms (ratio ${(m.b / m.plain).toFixed(3)}); means plain ${mean.plain.toFixed(3)} ms, a ${mean.a.toFixed(3)} (${(mean.a / mean.plain).toFixed(3)}), b ${mean.b.toFixed(3)} (${(mean.b / mean.plain).toFixed(3)})`);
} finally {
  await browser.close();
  server.kill('SIGTERM');
}
