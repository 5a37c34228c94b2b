// Server-side rendering: in Node (as Next.js, Nuxt or Vite SSR run it), the package and its
// adapters import without throwing, through the examples' own node_modules and the package's
// exports map, and a component using useSubmitter renders idle, keeps no state between requests,
// and sends nothing. (That the browser then resumes the pending submission is the frameworks
// browser test's "server-rendered page" case.)
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { APPS, importFrom, renderApp } from './frameworks.mjs'

const REACT = 'examples/react'
const VUE = 'examples/vue'
const ENTRIES = Symbol.for('oncekey.adapters.entries')
const INIT = Symbol.for('oncekey.adapters.init')

test('oncekey, oncekey/react and oncekey/vue import in Node', async () => {
  assert.equal(typeof document, 'undefined', 'this is a server: no document')
  const pkg = await importFrom(REACT, 'oncekey')
  assert.equal(typeof pkg.default, 'function', 'init')
  assert.equal(typeof pkg.Submitter, 'function')
  for (const [dir, adapter] of [[REACT, 'oncekey/react'], [VUE, 'oncekey/vue']]) {
    const m = await importFrom(dir, adapter)
    assert.deepEqual(Object.keys(m).sort(), ['ready', 'useSubmitter'], adapter)
  }
})

// What a component shows of the hook, as text the test can read back.
const show = (s) =>
  `state=${s.state} ready=${s.ready} locked=${s.locked} pending=${JSON.stringify(s.pending)} key=${s.key} attempts=${s.attempts} settlement=${s.settlement}`
const IDLE_TEXT = 'state=idle ready=false locked=false pending=null key=null attempts=0 settlement=null'

test('React: renderToString renders the hook idle, and nothing is kept or sent', async () => {
  const { createElement } = await importFrom(REACT, 'react')
  const { renderToString } = await importFrom(REACT, 'react-dom/server')
  const { useSubmitter, ready } = await importFrom(REACT, 'oncekey/react')
  let hook
  const Form = () => {
    hook = useSubmitter('new-ticket', { url: '/api/tickets', resume: true })
    return createElement('p', null, show(hook))
  }
  for (let i = 0; i < 2; i++) assert.equal(renderToString(createElement(Form)), `<p>${IDLE_TEXT}</p>`)
  assert.equal(globalThis[ENTRIES], undefined, 'no submitter registry on the server')
  await assert.rejects(hook.submit({ subject: 'x' }), { name: 'OncekeyError', code: 'state' })
  await assert.rejects(hook.tryAgain(), { code: 'state' })
  await assert.rejects(ready(), { code: 'state' })
  assert.equal(globalThis[INIT], undefined, 'init() was never called')
})

test('Vue: renderToString renders the composable idle, and nothing is kept or sent', async () => {
  const { createSSRApp, defineComponent, h } = await importFrom(VUE, 'vue')
  const { renderToString } = await importFrom(VUE, 'vue/server-renderer')
  const { useSubmitter } = await importFrom(VUE, 'oncekey/vue')
  let refs
  const Form = defineComponent({
    setup() {
      refs = useSubmitter('new-ticket', { url: '/api/tickets', resume: true })
      const value = () => Object.fromEntries(Object.entries(refs).map(([k, r]) => [k, r?.value]))
      return () => h('p', show(value()))
    },
  })
  for (let i = 0; i < 2; i++) assert.equal(await renderToString(createSSRApp(Form)), `<p>${IDLE_TEXT}</p>`)
  assert.equal(globalThis[ENTRIES], undefined, 'no submitter registry on the server')
  await assert.rejects(refs.submit({ subject: 'x' }), { name: 'OncekeyError', code: 'state' })
  assert.equal(globalThis[INIT], undefined, 'init() was never called')
})

test('the examples render on the server: the form idle and unlocked', async () => {
  for (const app of APPS.filter((a) => a.ssr && a.version)) {
    const framework = await importFrom(app.dir, app.framework)
    assert.match(framework.version, app.version, `${app.name} renders with ${app.framework} ${framework.version}`)
    const html = await renderApp(app)
    assert.match(html, /<form id="ticket-form"[^>]*aria-busy="false"[^>]*data-state="idle"/, app.name)
    assert.doesNotMatch(html, /<fieldset[^>]*disabled/, `${app.name}: inputs not locked`)
    assert.match(html, /<dd id="live-key">none yet<\/dd>/, app.name)
  }
})
