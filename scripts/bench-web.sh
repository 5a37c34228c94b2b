#!/usr/bin/env bash
# The browser package's benchmark: size (gzip -9 of everything a page downloads: the .wasm, the
# glue and any JavaScript it imports), where the wasm's bytes go (twiggy, by crate), and the
# overhead ratio of 200 sequential submissions through Submitter against 200 plain fetch calls, in
# headless Chromium against the reference server. Builds pkg/ first when it is missing or stale.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/web-server.sh

ensure_pkg
ensure_page_tools

# Where the bytes go: the package's own build (target/.../release/oncekey.wasm, left by
# scripts/build-pkg.sh), through wasm-bindgen and wasm-opt -Oz as the package is, but keeping the
# function names (-g) so that twiggy can tell whose each function is.
if ! command -v twiggy >/dev/null; then
  cargo install -q twiggy --version 0.8.0
fi
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
NAMED=$(mktemp -d -t oncekey-named.XXXXXX)
trap 'rm -rf "$NAMED"' EXIT
wasm-bindgen --target web --out-dir "$NAMED" --out-name oncekey "$TARGET_DIR/wasm32-unknown-unknown/release/oncekey.wasm"
node tools/node_modules/binaryen/bin/wasm-opt -Oz -g "$NAMED/oncekey_bg.wasm" -o "$NAMED/named.wasm"
twiggy top -n 100000 --format csv "$NAMED/named.wasm" > "$NAMED/top.csv"
export ONCEKEY_TWIGGY_CSV="$NAMED/top.csv"

start_server
node scripts/bench-web.mjs "$ONCEKEY_SERVER_URL"
