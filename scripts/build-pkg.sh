#!/usr/bin/env bash
# Builds the browser package into pkg/ (the npm package `oncekey`): wasm-pack in release, then
# binaryen's wasm-opt from npm (binaryen@132; Debian's wasm-opt breaks this rustc's modules).
set -euo pipefail
cd "$(dirname "$0")/.."

# tools/package.json pins binaryen and terser; scripts/setup.sh installs them (and this does, if
# missing).
WASM_OPT=tools/node_modules/binaryen/bin/wasm-opt
if [ ! -f "$WASM_OPT" ] || [ ! -d tools/node_modules/terser ]; then
  npm ci --prefix tools --no-audit --no-fund --loglevel=error
fi

# Nothing of an earlier build is left behind (wasm-pack keeps old snippets).
rm -rf pkg/snippets
# `package` (`small-alloc`): the package is a whole program, so it brings its own small allocator
# (src/web/alloc.rs); Rust programs that depend on the crate keep theirs.
#
# The package alone is built by a pinned nightly (scripts/pkg-toolchain) that rebuilds std for
# it (`-Z build-std`), so that a panic is at once the trap it ends in anyway in a
# wasm32-unknown-unknown module (`-Cpanic=immediate-abort`), without std's panic and formatting
# machinery or the file paths of panic locations (`-Zlocation-detail=none`): 6.1 KB less to
# download, measured (82,791 to 76,707 B gzipped). Nothing a page can see changes: on stable,
# std's panic hook writes to a stderr that does not exist there, then aborts with the same
# `unreachable` trap. Legacy symbol names, as stable's: the renaming below finds the closures'
# exports by their hashes. Without the reference-types and multivalue features, wasm-bindgen
# keeps the page's objects in the glue's own table instead of the module's externref table and
# writes no externref or multivalue shim per export: 1.3 KB less wasm for 0.2 KB more glue
# (76,707 to 75,609 B gzipped; the own cost per submission unchanged within the runs' spread).
# The crate itself builds on stable, and every test (`wasm-pack test`, the native ones) runs
# on stable; scripts/setup.sh installs this nightly.
PKG_TOOLCHAIN=$(cat scripts/pkg-toolchain)
RUSTUP_TOOLCHAIN=$PKG_TOOLCHAIN \
  RUSTFLAGS="-Zunstable-options -Cpanic=immediate-abort -Zlocation-detail=none -Csymbol-mangling-version=legacy -Ctarget-feature=-reference-types,-multivalue" \
  wasm-pack build --release --target web --out-dir pkg --out-name oncekey -- \
  --no-default-features --features package -Z build-std=std,panic_abort

before=$(wc -c < pkg/oncekey_bg.wasm)
# Two passes: the second, converging, finds a little more after the first. What the optimizer may
# assume of this module (0.4 KB gzipped): its memory starts zero-filled (a fresh instance's does),
# and nothing lives below address 1024 (rustc's wasm32 data and stack start at 1 MiB).
ASSUME="--zero-filled-memory --low-memory-unused"
node "$WASM_OPT" -Oz $ASSUME pkg/oncekey_bg.wasm -o pkg/oncekey_bg.wasm.opt
mv pkg/oncekey_bg.wasm.opt pkg/oncekey_bg.wasm
node "$WASM_OPT" -Oz --converge $ASSUME --strip-producers --strip-target-features pkg/oncekey_bg.wasm \
  -o pkg/oncekey_bg.wasm.opt
mv pkg/oncekey_bg.wasm.opt pkg/oncekey_bg.wasm
after=$(wc -c < pkg/oncekey_bg.wasm)
echo "wasm-opt -Oz --converge: $before -> $after bytes"

# The glue between the two files, minified in both: wasm-bindgen names every import and internal
# export with a 16-hex-digit hash (incompressible, and written in the .wasm and the .js alike).
# Short names instead; a rename that finds nothing to rename fails. Then terser minifies the
# glue: the page downloads it on every load, and its comments and long names are most of its
# bytes.
node - pkg/oncekey_bg.wasm pkg/oncekey.js <<'JS'
const fs = require('fs');
const { minify } = require('./tools/node_modules/terser');
const [wasmPath, jsPath] = process.argv.slice(2);
const wasm = fs.readFileSync(wasmPath);
let js = fs.readFileSync(jsPath, 'utf8');
const MODULE = './oncekey_bg.js';
const fail = (why) => { console.error(`build-pkg.sh: ${why}`); process.exit(1); };

let pos = 0;
const u32 = () => {
  let r = 0, shift = 0, b;
  do { b = wasm[pos++]; r |= (b & 127) << shift; shift += 7; } while (b & 128);
  return r >>> 0;
};
const name = () => { const n = u32(); pos += n; return wasm.toString('utf8', pos - n, pos); };
const leb = (n) => {
  const out = [];
  do { let b = n & 127; n >>>= 7; if (n) b |= 128; out.push(b); } while (n);
  return Buffer.from(out);
};
const str = (s) => { const b = Buffer.from(s, 'utf8'); return Buffer.concat([leb(b.length), b]); };
const limits = () => { const flags = wasm[pos++]; u32(); if (flags & 1) u32(); };

// New names meet no token the .js has already, so none can shadow another.
const taken = new Set(js.match(/[A-Za-z_$][\w$]*/g));
let counter = 0;
const fresh = (prefix) => {
  let n;
  do n = prefix + (counter++).toString(36); while (taken.has(n));
  return n;
};
const renames = new Map();
// An export only the glue calls (`wasm.submitter_submit(...)`, `wasm.__wbindgen_malloc`), by a
// name found nowhere else in it (not `attachForm`, which the glue also exports by that name, nor
// `memory`, which `init()` hands to the page): its name is the glue's business, so a short one.
const tokens = (re) => (js.match(re) || []).length;
const onlyGlue = (field) => {
  if (field === 'memory' || !/^[A-Za-z_$][\w$]*$/.test(field)) return false;
  const n = tokens(new RegExp(`(?<![\\w$])wasm\\.${field.replace(/\$/g, '\\$')}(?![\\w$])`, 'g'));
  return n > 0 && n === tokens(new RegExp(`(?<![\\w$])${field.replace(/\$/g, '\\$')}(?![\\w$])`, 'g'));
};

if (wasm.readUInt32LE(0) !== 0x6d736100) fail('pkg/oncekey_bg.wasm is not a wasm module');
const out = [wasm.subarray(0, 8)];
pos = 8;
while (pos < wasm.length) {
  const at = pos;
  const id = wasm[pos++];
  const size = u32();
  const end = pos + size;
  if (id !== 2 && id !== 7) {
    out.push(wasm.subarray(at, end));
    pos = end;
    continue;
  }
  const parts = [];
  const count = u32();
  parts.push(leb(count));
  for (let i = 0; i < count; i++) {
    const module = id === 2 ? name() : null;
    const field = name();
    const desc = pos;
    const kind = wasm[pos++];
    if (id === 7 || kind === 0) u32();
    else if (kind === 1) { pos++; limits(); }
    else if (kind === 2) limits();
    else if (kind === 3) pos += 2;
    else fail(`an import of kind ${kind}`);
    let renamed = field;
    if (module === MODULE) {
      renamed = fresh('$');
    } else if (id === 7 && (/_h[0-9a-f]{16}$/.test(field) || onlyGlue(field))) {
      renamed = fresh('_');
    }
    if (renamed !== field) renames.set(field, renamed);
    if (id === 2) parts.push(str(module === MODULE ? 'w' : module));
    parts.push(str(renamed), wasm.subarray(desc, pos));
  }
  if (pos !== end) fail(`section ${id} does not end where it says`);
  const body = Buffer.concat(parts);
  out.push(Buffer.from([id]), leb(body.length), body);
}

for (const [from, to] of renames) {
  const re = new RegExp(`(?<![\\w$])${from.replace(/\$/g, '\\$')}(?![\\w$])`, 'g');
  if (!re.test(js)) fail(`${from} is not in the .js`);
  js = js.replace(re, to);
}
// The declarations name the wasm's exports too (InitOutput, oncekey_bg.wasm.d.ts).
for (const path of ['pkg/oncekey.d.ts', 'pkg/oncekey_bg.wasm.d.ts']) {
  let text = fs.readFileSync(path, 'utf8');
  for (const [from, to] of renames) {
    if (to.startsWith('_')) text = text.replace(new RegExp(`\\b${from}\\b`, 'g'), to);
  }
  // The raw wasm exports (InitOutput) take and give JavaScript values wasm-bindgen types as
  // `any`; `unknown` says the same without switching off the checker for what `init()` returns.
  text = text.replace(/^(\s*(?:readonly|export const) \w+: .*)$/gm, (line) => line.replace(/\bany\b/g, 'unknown'));
  fs.writeFileSync(path, text);
}
const moduleKey = `"${MODULE}": import0`;
if (js.split(moduleKey).length !== 2) fail('the import object is not where it was');
js = js.replace(moduleKey, '"w": import0');
fs.writeFileSync(wasmPath, Buffer.concat(out));
console.log(`glue: ${renames.size} names shortened`);

// The one line of the package that cannot be Rust: before `await init()` there is no wasm module
// to ask, so the class's constructor says so itself instead of failing deep in the glue.
const ctor = /(export class Submitter \{[\s\S]*?\n    constructor\(name, options\) \{\n)/;
if (!ctor.test(js)) fail("the glue's Submitter constructor is not where it was");
js = js.replace(ctor, "$1        if (wasm === undefined) throw Object.assign(new Error('oncekey is not ready: await init() before making a Submitter'), { name: 'OncekeyError', code: 'state' });\n");
const outputs = [[jsPath, js]];
// The form kit is Rust: the glue exports it like the Submitter.
if (!/export function attachForm\b/.test(js) && !/export\s*\{[^}]*\battachForm\b/.test(js)) fail('the glue does not export attachForm');
if (fs.existsSync('pkg/snippets')) fail('the package has snippets: hand-written JavaScript in the wasm module');
(async () => {
  for (const [path, text] of outputs) {
    const min = await minify(text, { module: true, compress: { passes: 2 }, mangle: true, format: { comments: false } });
    if (typeof min.code !== 'string') fail(`terser gave nothing for ${path}`);
    fs.writeFileSync(path, min.code + '\n');
  }
  console.log(`terser: ${outputs.length} files minified`);
})().catch((e) => fail(String(e)));
JS
node scripts/pkg-adapters.mjs
