// scripts/profile-web.sh's browser half: starts the reference server serving the named package
// at /pkg, profiles N submissions per storage with a fetch that answers at once, and prints
// microseconds per submission by function (inclusive: the function and all it calls; self:
// its own code). Usage: node scripts/profile-web.mjs SERVER_BIN NAMED_PKG_DIR N
import { pages, serveAndLaunch } from './page-server.mjs';

const [bin, pkg, n] = [process.argv[2], process.argv[3], Number(process.argv[4] || 2000)];
const { url, server, browser } = await serveAndLaunch(bin, ['--mount', `/pages=${pages}`, '--pkg', pkg]);
// The functions of one node of the profile: a wasm function's name without its hash. With
// PROFILE_PLACES=1, an anonymous function is named by its place (file:line:column), so that
// the glue's wrappers can be told apart. PROFILE_TOP=N prints N lines (40 by default).
const place = (frame) => `(anonymous ${frame.url.split('/').pop()}:${frame.lineNumber}:${frame.columnNumber})`;
const label = (frame) =>
  (frame.functionName || (frame.url && process.env.PROFILE_PLACES ? place(frame) : '(anonymous)'))
    .replace(/::h[0-9a-f]{16}/g, '')
    .slice(0, 130);
try {
  const page = await browser.newPage();
  await page.goto(`${url}/pages/bench.html`);
  await page.waitForFunction(() => window.benchReady === true);
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Profiler.enable');
  await cdp.send('Profiler.setSamplingInterval', { interval: 20 });
  for (const storage of ['memory', 'session']) {
    const run = (count) =>
      page.evaluate(
        async ([storage, count]) => {
          const m = await import('/pkg/oncekey.js');
          await m.default();
          const real = globalThis.fetch;
          globalThis.fetch = async () =>
            new Response('{"id":1,"subject":"Bench"}', { status: 201, headers: { 'Content-Type': 'application/json' } });
          try {
            const s = new m.Submitter(`profile-${storage}-${count}`, { url: '/api/tickets', headers: { 'X-Tenant': 'p' }, storage });
            const t = performance.now();
            for (let i = 0; i < count; i++) await s.submit({ subject: 'Bench', body: 'overhead', email: 'ana@example.com' });
            return (performance.now() - t) / count;
          } finally {
            globalThis.fetch = real;
          }
        },
        [storage, count],
      );
    await run(200); // warm-up
    await cdp.send('Profiler.start');
    const ms = await run(n);
    const { profile } = await cdp.send('Profiler.stop');
    const byId = new Map(profile.nodes.map((node) => [node.id, node]));
    const parent = new Map();
    for (const node of profile.nodes) for (const c of node.children || []) parent.set(c, node.id);
    const inclusive = new Map();
    const self = new Map();
    profile.samples.forEach((id, i) => {
      const dt = profile.timeDeltas[i] || 0;
      const seen = new Set();
      for (let at = id; at !== undefined; at = parent.get(at)) {
        const name = label(byId.get(at).callFrame);
        if (at === id) self.set(name, (self.get(name) || 0) + dt);
        if (!seen.has(name)) inclusive.set(name, (inclusive.get(name) || 0) + dt);
        seen.add(name);
      }
    });
    const skip = /^\((root|idle|program|anonymous)\)$/;
    const top = (map, count) =>
      [...map].filter(([k]) => !skip.test(k)).sort((a, b) => b[1] - a[1]).slice(0, count)
        .map(([k, us]) => `  ${(us / n).toFixed(1).padStart(7)} µs  ${k}`).join('\n');
    console.log(`profile, ${storage} storage: ${n} submissions, ${(ms * 1000).toFixed(0)} µs each (profiled, so slower than bench-web's own cost)`);
    const many = Number(process.env.PROFILE_TOP || 40);
    // The time no function of the page is charged with: the browser's own work (program), waits
    // (idle), and functions without a name.
    const whole = [...self].filter(([k]) => skip.test(k)).map(([k, us]) => `${k} ${(us / n).toFixed(1)} µs`).join(', ');
    console.log(`outside the page's functions, per submission: ${whole}`);
    console.log(`inclusive:\n${top(inclusive, many)}\nself:\n${top(self, Math.max(25, many / 2))}\n`);
  }
} finally {
  await browser.close();
  server.kill('SIGTERM');
}
