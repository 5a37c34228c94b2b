// The framework examples as the end-to-end and SSR tests use them: where each is built (React's
// also against React 18, in tests/e2e/react18), where the reference server mounts it, whether it
// renders on a server, and its server render (the app's SSR build, rendered by its
// framework's own renderToString into the built index.html, as Next.js or Nuxt would serve it).
import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { pathToFileURL } from 'node:url'

import { root } from './harness.mjs'

const ALL = [
  { name: 'react', label: 'React (production build)', framework: 'react', dir: 'examples/react', dist: 'examples/react/dist', mount: '/react', ssr: true, version: /^19\./ },
  { name: 'react-dev', label: 'React (development build: strict mode runs effects twice)', framework: 'react', dir: 'examples/react', dist: 'examples/react/dist-dev', mount: '/react-dev', ssr: true },
  { name: 'react18', label: 'React 18 (development build: strict mode runs effects twice)', framework: 'react', dir: 'tests/e2e/react18', dist: 'tests/e2e/react18/dist', mount: '/react18', ssr: true, version: /^18\./ },
  { name: 'vue', label: 'Vue', framework: 'vue', dir: 'examples/vue', dist: 'examples/vue/dist', mount: '/vue', ssr: true, version: /^3\.5\./ },
  // Client-side rendered, on the crate's Rust Submitter (wasm-bindgen's output beside index.html).
  { name: 'leptos', label: 'Leptos (Rust)', framework: 'leptos', dir: 'examples/leptos', dist: 'examples/leptos/dist', mount: '/leptos', ssr: false },
]

// ONCEKEY_APPS=leptos,vue runs the tests of those only.
const only = process.env.ONCEKEY_APPS?.split(',')
export const APPS = only ? ALL.filter((a) => only.includes(a.name)) : ALL

/** Imports `specifier` as the example's own code would (its node_modules, its exports map). */
export function importFrom(dir, specifier) {
  const require = createRequire(path.join(root, dir, 'package.json'))
  return import(pathToFileURL(require.resolve(specifier)).href)
}

/** The app rendered on the server, as HTML. */
export async function renderApp(app) {
  const ssr = path.join(root, app.dir, 'dist-ssr/App.js')
  const module = await import(pathToFileURL(ssr).href)
  if (app.framework === 'react') {
    const { createElement } = await importFrom(app.dir, 'react')
    const { renderToString } = await importFrom(app.dir, 'react-dom/server')
    return renderToString(createElement(module.App))
  }
  const { createSSRApp } = await importFrom(app.dir, 'vue')
  const { renderToString } = await importFrom(app.dir, 'vue/server-renderer')
  return renderToString(createSSRApp(module.default))
}

/** The built index.html with the server's render in its root element. */
export async function serverRendered(app) {
  const page = readFileSync(path.join(root, app.dist, 'index.html'), 'utf8')
  const html = await renderApp(app)
  const empty = /<div id="(root|app)"><\/div>/
  if (!empty.test(page)) throw new Error(`${app.dist}/index.html has no empty root element`)
  return page.replace(empty, (_, id) => `<div id="${id}">${html}</div>`)
}
