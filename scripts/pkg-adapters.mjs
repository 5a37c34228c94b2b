// Adds the framework adapters (adapters/) to the built package in pkg/: oncekey/react and
// oncekey/vue, minified as the rest of the package is, beside their declarations; and the
// package.json's subpath exports, each with its types, with React and Vue as optional peer
// dependencies (never bundled: the app's own copy is used). Run by scripts/build-pkg.sh, after
// wasm-pack wrote pkg/package.json; running it again gives the same package.
import { copyFileSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import path from 'node:path'
import { fileURLToPath } from 'node:url'

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..')
const { minify } = createRequire(path.join(root, 'tools/package.json'))('terser')
const at = (...p) => path.join(root, ...p)
const fail = (why) => {
  console.error(`pkg-adapters.mjs: ${why}`)
  process.exit(1)
}

// The shared part first: the adapters import it (and the package) by relative path.
const SOURCES = ['store.js', 'react.js', 'vue.js']
const DECLARATIONS = ['store.d.ts', 'react.d.ts', 'vue.d.ts']

for (const file of SOURCES) {
  const text = readFileSync(at('adapters', file), 'utf8')
  for (const [, spec] of text.matchAll(/from '([^']+)'/g)) {
    if (spec.startsWith('.') && !['./oncekey.js', './store.js'].includes(spec)) fail(`${file} imports ${spec}`)
  }
  const min = await minify(text, { module: true, compress: { passes: 2 }, mangle: true, format: { comments: false } })
  if (typeof min.code !== 'string') fail(`terser gave nothing for ${file}`)
  writeFileSync(at('pkg', file), min.code + '\n')
}
for (const file of DECLARATIONS) copyFileSync(at('adapters', file), at('pkg', file))

const manifest = JSON.parse(readFileSync(at('pkg/package.json'), 'utf8'))
if (manifest.name !== 'oncekey') fail('pkg/package.json is not the oncekey package')
const entry = (name) => ({ types: `./${name}.d.ts`, default: `./${name}.js` })
// The license texts wasm-pack copies beside the package: npm publishes LICENSE-MIT and
// LICENSE-APACHE only when they are listed (it adds a plain LICENSE by itself).
const LICENSES = readdirSync(at('pkg')).filter((f) => /^LICENSE-/.test(f))
if (LICENSES.length !== 2) fail(`pkg/ holds ${LICENSES.length} LICENSE-* files, not the two of "MIT OR Apache-2.0"`)
manifest.files = [...new Set([...(manifest.files ?? []), ...SOURCES, ...DECLARATIONS, ...LICENSES])]
manifest.exports = {
  '.': entry('oncekey'),
  './react': entry('react'),
  './vue': entry('vue'),
  // For init(url) or initSync(bytes) with a bundler's asset URL.
  './oncekey_bg.wasm': './oncekey_bg.wasm',
  './package.json': './package.json',
}
manifest.peerDependencies = { react: '^18.0.0 || ^19.0.0', vue: '^3.3.0' }
manifest.peerDependenciesMeta = { react: { optional: true }, vue: { optional: true } }
writeFileSync(at('pkg/package.json'), JSON.stringify(manifest, null, 2) + '\n')
console.log(`adapters: ${SOURCES.length} files minified, exports ${Object.keys(manifest.exports).join(' ')}`)
