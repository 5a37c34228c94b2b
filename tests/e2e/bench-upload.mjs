// Uploads' cost (issue 18's figures): headless Chromium against the reference server on loopback,
// the release package (make pkg). Prints figures; asserts nothing.
// (a) 5 MB file: time from submit() to the fetch() call in the page (a wrapped window.fetch: the
//     Submitter's SHA-256 of the file and its IndexedDB write come before it), and to the answer,
//     median over N runs each, beside a plain fetch of the same FormData; ratio of medians.
// (b) 20 MB file: the page's peak memory above what it held before the send, sampled every 10 ms
//     by CDP: Runtime.getHeapUsage's usedSize plus backingStorageSize (ArrayBuffers' bytes, such
//     as the one the SHA-256 reads the file into), and Performance.getMetrics' JSHeapUsedSize
//     (the JS heap alone), for the Submitter and for a plain fetch.
// (c) the package's size: wasm and glue, gzip -9 (the feature has no switch; its cost, from git
//     history, is printed beside it).
import { readFileSync } from 'node:fs'
import path from 'node:path'
import { gzipSync } from 'node:zlib'
import { launchBrowser, root, startServer, uniqueTenant } from './harness.mjs'

const runs = Number(process.argv[2] || 9)
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const MB = 1000 * 1000

process.env.RUST_LOG ||= 'warn' // the server's log off the figures
const server = await startServer()
const browser = await launchBrowser()
try {
  const page = await browser.newPage()
  await page.goto(`${server.url}/e2e/bench-upload.html?tenant=${uniqueTenant('bench-upload')}`)
  await page.waitForFunction(() => window.benchReady === true)

  // (a)
  const times = { kit: { request: [], response: [] }, plain: { request: [], response: [] } }
  await page.evaluate(() => window.benchSend('kit', 1000)) // warm: the database opened once
  for (let i = 0; i < runs; i++) {
    for (const which of i % 2 ? ['plain', 'kit'] : ['kit', 'plain']) {
      const m = await page.evaluate(([w, n]) => window.benchSend(w, n), [which, 5 * MB])
      times[which].request.push(m.request)
      times[which].response.push(m.response)
    }
  }
  const ms = (x) => `${x.toFixed(1).padStart(7)} ms`
  console.log(`uploads, 5 MB file, median of ${runs} sends each (headless Chromium, loopback server):`)
  console.log('                         submit -> fetch() called    submit -> answer read')
  for (const which of ['kit', 'plain']) {
    const label = which === 'kit' ? 'Submitter (IndexedDB)' : 'plain fetch          '
    console.log(`  ${label}  ${ms(median(times[which].request))}               ${ms(median(times[which].response))}`)
  }
  const r = (k) => (median(times.kit[k]) / median(times.plain[k])).toFixed(2)
  console.log(`  ratio Submitter/plain                              ${r('response')}`)
  console.log('  (fetch() called: "first byte" as the page hands the body to the network; the Submitter hashes')
  console.log('   the file and writes it to IndexedDB first. A plain fetch is called at once.)')

  // (b)
  const cdp = await page.context().newCDPSession(page)
  await cdp.send('Performance.enable')
  const sample = async () => {
    const [{ metrics }, usage] = await Promise.all([cdp.send('Performance.getMetrics'), cdp.send('Runtime.getHeapUsage')])
    return {
      heap: metrics.find((m) => m.name === 'JSHeapUsedSize').value,
      all: usage.usedSize + (usage.backingStorageSize || 0),
    }
  }
  const peak = async (which) => {
    await page.evaluate(() => window.gc && window.gc())
    const base = await sample()
    const top = { ...base }
    let done = false
    const sending = page.evaluate(([w, n]) => window.benchSend(w, n), [which, 20 * MB]).finally(() => (done = true))
    while (!done) {
      const s = await sample()
      top.heap = Math.max(top.heap, s.heap)
      top.all = Math.max(top.all, s.all)
      await new Promise((res) => setTimeout(res, 10))
    }
    await sending
    return { heap: top.heap - base.heap, all: top.all - base.all }
  }
  const peaks = { kit: [], plain: [] }
  for (let i = 0; i < 3; i++) for (const which of ['kit', 'plain']) peaks[which].push(await peak(which))
  const mb = (x) => `${(x / MB).toFixed(1).padStart(5)} MB`
  console.log('uploads, 20 MB file: peak memory of the page above before the send, median of 3 (CDP, sampled every 10 ms):')
  console.log('                         heap + ArrayBuffers    JS heap alone')
  for (const which of ['kit', 'plain']) {
    const label = which === 'kit' ? 'Submitter (IndexedDB)' : 'plain fetch          '
    console.log(`  ${label}  ${mb(median(peaks[which].map((p) => p.all)))}               ${mb(median(peaks[which].map((p) => p.heap)))}`)
  }
  console.log('  (the file is a Blob made in the page before the send, outside both; the Submitter reads it once')
  console.log('   into an ArrayBuffer for its SHA-256; the browser holds the Blob itself for IndexedDB and fetch)')
} finally {
  await browser.close()
  await server.stop()
}

// (c)
const gz = (f) => gzipSync(readFileSync(path.join(root, 'pkg', f)), { level: 9 }).length
const wasm = gz('oncekey_bg.wasm')
const glue = gz('oncekey.js')
console.log(`package (pkg/, gzip -9): oncekey_bg.wasm ${wasm} B + oncekey.js ${glue} B = ${wasm + glue} B`)
console.log('  uploads, IndexedDB and listPending have no build switch; from git history they added +13,074 B gzipped')
