#!/usr/bin/env bash
# Builds the browser package into pkg/ (the npm package `oncekey`): wasm-pack in release, then
# binaryen's wasm-opt from npm (binaryen@132; Debian's wasm-opt breaks this rustc's modules).
set -euo pipefail
cd "$(dirname "$0")/.."

BINARYEN_VERSION=132.0.0
TOOLS=.tools
WASM_OPT="$TOOLS/node_modules/binaryen/bin/wasm-opt"

if [ ! -x "$WASM_OPT" ] || ! grep -q "\"version\": \"$BINARYEN_VERSION\"" "$TOOLS/node_modules/binaryen/package.json" 2>/dev/null; then
  npm i --prefix "$TOOLS" -E "binaryen@$BINARYEN_VERSION" --no-audit --no-fund --loglevel=error
fi

wasm-pack build --release --target web --out-dir pkg --out-name oncekey

before=$(wc -c < pkg/oncekey_bg.wasm)
node "$WASM_OPT" -Oz pkg/oncekey_bg.wasm -o pkg/oncekey_bg.wasm.opt
mv pkg/oncekey_bg.wasm.opt pkg/oncekey_bg.wasm
after=$(wc -c < pkg/oncekey_bg.wasm)
echo "wasm-opt -Oz: $before -> $after bytes"
