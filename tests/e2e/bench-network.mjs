// Slow and dead connections, as figures (issue 17): on Chromium's emulated Slow 3G (DevTools
// protocol: 400 ms, 50 KB/s), how long the demo's ticket form is unprotected (could be posted
// natively, without a key) and when it is protected and when the kit attaches, with the
// first-paint snippet and without it; and, after an offline spell (context.setOffline), the time
// from the `online` event to the resent request. Medians of N runs; prints figures, asserts
// nothing (the tests do: tests/e2e/network.test.mjs).
import { launchBrowser, startServer, uniqueTenant } from './harness.mjs'
import { SLOW_3G, attached, emulate, firstPaintProbe, withoutSnippet } from './network.mjs'

const runs = Number(process.argv[2] || 3)
const KIT = '#ticket-form'
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2
}
const ms = (x) => `${x.toFixed(0).padStart(6)} ms`

const server = await startServer()
const browser = await launchBrowser()
try {
  const load = { snippet: [], bare: [] }
  for (let i = 0; i < runs; i++) {
    for (const which of i % 2 ? ['bare', 'snippet'] : ['snippet', 'bare']) {
      const context = await browser.newContext()
      const page = await context.newPage()
      if (which === 'bare') await page.addInitScript(withoutSnippet)
      await page.addInitScript(firstPaintProbe, KIT)
      await emulate(context, page, SLOW_3G)
      await page.goto(`${server.url}/?tenant=${uniqueTenant('bench-fp')}`, { waitUntil: 'commit' })
      load[which].push(await attached(page))
      await context.close()
    }
  }
  console.log(`first paint on emulated Slow 3G (400 ms, 50 KB/s), median of ${runs} loads of the demo:`)
  console.log('                          unprotected   form parsed   protected at   kit attached')
  for (const which of ['snippet', 'bare']) {
    const l = load[which]
    const label = which === 'snippet' ? 'with the snippet  ' : 'without (baseline)'
    console.log(
      `  ${label}    ${ms(median(l.map((f) => f.unprotectedMs)))}     ${ms(median(l.map((f) => f.formAt)))}     ${ms(median(l.map((f) => f.protectedAt)))}      ${ms(median(l.map((f) => f.attachedAt)))}`,
    )
  }
  console.log('  (ms since navigation start; "protected at" is the first moment a submit is stopped, from which on it always is)')

  const resend = []
  for (let i = 0; i < Math.max(9, runs); i++) {
    const context = await browser.newContext()
    const page = await context.newPage()
    await page.addInitScript(firstPaintProbe, KIT)
    await page.goto(`${server.url}/?tenant=${uniqueTenant('bench-online')}`)
    await page.waitForSelector(`${KIT}[data-oncekey-state]`)
    await page.fill(`${KIT} [name=subject]`, 'Back online')
    await page.fill(`${KIT} [name=email]`, 'ana@example.com')
    await context.setOffline(true)
    await page.click(`${KIT} button[type=submit]`)
    await page.waitForTimeout(300)
    await context.setOffline(false)
    await page.waitForSelector(`${KIT}[data-oncekey-state="succeeded"]`, { timeout: 30000 })
    const m = await page.evaluate(() => ({ keyed: window.__keyed, online: window.__onlineAt }))
    const sent = m.keyed.find((k) => k.at >= m.online[0])
    if (sent) resend.push(sent.at - m.online[0])
    await context.close()
  }
  const r = [...resend].sort((a, b) => a - b)
  console.log(`offline spell (context.setOffline), ${resend.length} runs: online event -> resent request`)
  console.log(`  median ${(median(r)).toFixed(1)} ms, worst ${r[r.length - 1].toFixed(1)} ms (goal < 100 ms); each: ${r.map((x) => x.toFixed(1)).join(', ')}`)
} finally {
  await browser.close()
  await server.stop()
}
