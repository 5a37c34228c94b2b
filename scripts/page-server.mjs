// For the page benchmarks and the profiler (scripts/profile-web.mjs, scripts/bench-web-ab.mjs):
// the reference server started on a free loopback port with `args` (in-memory database), and
// headless Chromium. Resolves to { url, server, browser }; kill the server and close the
// browser when done.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';

const require = createRequire(new URL('../tests/pages/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const pages = new URL('../tests/pages', import.meta.url).pathname;

export async function serveAndLaunch(bin, args) {
  const server = spawn(bin, ['--addr', '127.0.0.1:0', '--db', ':memory:', ...args], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const url = await new Promise((resolve, reject) => {
    let seen = '';
    server.stdout.on('data', (d) => {
      const m = (seen += d).match(/listening on (http:\/\/[\d.:]+)/);
      if (m) resolve(m[1]);
    });
    server.once('exit', (code) => reject(new Error(`oncekey-server exited (${code})`)));
  });
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    args: ['--headless=new', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
      '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
  });
  return { url, server, browser };
}

// Opens `url` in `page` cross-origin isolated (the document's own COOP and COEP headers, added
// on its way in), so that performance.now() is precise to 5 µs instead of the 100 µs Chromium
// coarsens it to otherwise: a median of a few milliseconds read in 100 µs steps moves a ratio of
// medians by up to 3 %. Everything the page loads is same-origin, so nothing else changes. The
// route is taken away once the page is there: while one is set, Playwright intercepts every
// request of the page, the benchmark's own fetches too, and would add its round trip to them.
export async function openIsolated(page, url) {
  const pattern = new URL(url).pathname;
  await page.route((u) => u.pathname === pattern, async (route) => {
    const response = await route.fetch();
    await route.fulfill({
      response,
      headers: { ...response.headers(), 'cross-origin-opener-policy': 'same-origin', 'cross-origin-embedder-policy': 'require-corp' },
    });
  });
  await page.goto(url);
  await page.unrouteAll();
  if (!(await page.evaluate(() => window.crossOriginIsolated))) throw new Error(`${url}: not cross-origin isolated; its timer is coarse`);
}
