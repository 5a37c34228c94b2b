#!/usr/bin/env bash
# The browser SDK's tests, in headless Chromium against the reference server (faults on):
#  1. tests/web.rs through `wasm-pack test --headless --chrome` (wasm-bindgen-test), with the
#     server's address compiled in as ONCEKEY_TEST_SERVER;
#  2. the package built by scripts/build-pkg.sh, loaded by a plain <script type="module"> page
#     (tests/pages/pkg.html) that submits a ticket, driven by playwright-core;
#  3. what `npm pack` would publish: the wasm, the glue, the declarations (and what the glue
#     imports), no snippets;
#  4. its TypeScript declarations, checked with tsc against tests/pages/types-check.ts.
# Exits non-zero on any failure; the server is always killed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/web-server.sh

ensure_pkg
ensure_page_tools
start_server

CHROMEDRIVER=${CHROMEDRIVER:-$(command -v chromedriver || echo /usr/bin/chromedriver)}
export CHROMEDRIVER
export ONCEKEY_TEST_SERVER="$ONCEKEY_SERVER_URL"
export WASM_BINDGEN_TEST_TIMEOUT=${WASM_BINDGEN_TEST_TIMEOUT:-300}

echo "== wasm-bindgen-test in headless Chromium"
# With the package's own allocator (feature small-alloc), as the package is built.
wasm-pack test --headless --chrome --chromedriver "$CHROMEDRIVER" -- --lib --test web --test web_form --test web_upload --features small-alloc

echo "== the built package in a plain module page"
node tests/pages/pkg-test.mjs "$ONCEKEY_SERVER_URL"

echo "== what npm would publish"
# The wasm, the glue and the declarations, and the two license texts; no snippets (no
# hand-written JavaScript in the wasm module); and every file the glue imports, should it ever
# import one.
npm pack --dry-run --json ./pkg 2>/dev/null | node -e '
  const fs = require("fs");
  const files = JSON.parse(fs.readFileSync(0, "utf8"))[0].files.map((f) => f.path);
  const glue = fs.readFileSync("pkg/oncekey.js", "utf8");
  const imported = [...glue.matchAll(/from\s*["\x27]\.\/([^"\x27]+)["\x27]/g)].map((m) => m[1]);
  const need = ["oncekey_bg.wasm", "oncekey.js", "oncekey.d.ts", "LICENSE-MIT", "LICENSE-APACHE", ...imported];
  const missing = need.filter((n) => !files.includes(n));
  if (missing.length) { console.error("npm pack leaves out: " + missing.join(", ")); process.exit(1); }
  const snippets = files.filter((f) => f.startsWith("snippets/"));
  if (snippets.length) { console.error("npm pack ships snippets: " + snippets.join(", ")); process.exit(1); }
  console.log("npm pack: " + files.length + " files (" + files.join(", ") + ")");
'

echo "== TypeScript declarations"
node tests/pages/node_modules/typescript/bin/tsc -p tests/pages/tsconfig.json
echo "types: ok"
