#!/usr/bin/env bash
# Builds the browser package into pkg/ (the npm package `oncekey`): wasm-pack in release, then
# binaryen's wasm-opt from npm (binaryen@132; Debian's wasm-opt breaks this rustc's modules).
set -euo pipefail
cd "$(dirname "$0")/.."

# tools/package.json pins binaryen; scripts/setup.sh installs it (and this does, if missing).
WASM_OPT=tools/node_modules/binaryen/bin/wasm-opt
if [ ! -f "$WASM_OPT" ]; then
  npm ci --prefix tools --no-audit --no-fund --loglevel=error
fi

# `oncekey_pkg`: the package is a whole program, so it brings its own small allocator
# (src/web/alloc.rs); Rust programs that depend on the crate keep theirs.
RUSTFLAGS="${RUSTFLAGS:-} --cfg oncekey_pkg" wasm-pack build --release --target web --out-dir pkg --out-name oncekey

before=$(wc -c < pkg/oncekey_bg.wasm)
node "$WASM_OPT" -Oz pkg/oncekey_bg.wasm -o pkg/oncekey_bg.wasm.opt
mv pkg/oncekey_bg.wasm.opt pkg/oncekey_bg.wasm
after=$(wc -c < pkg/oncekey_bg.wasm)
echo "wasm-opt -Oz: $before -> $after bytes"
