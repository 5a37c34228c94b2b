#!/usr/bin/env bash
# Where the browser driver's time goes per submission: a CPU profile (Chromium's sampling
# profiler, through playwright-core) of N submissions through Submitter with a fetch that answers
# at once (the bench's "own cost"), in memory and in sessionStorage, against the package's own
# build with function names kept (wasm-bindgen and wasm-opt -Oz -g, as scripts/bench-web.sh does
# for twiggy). Prints microseconds per submission by function, inclusive and self. A tool for
# finding what to cut; the figures to compare are bench-web's. Usage: bash scripts/profile-web.sh [N]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/web-server.sh

ensure_pkg
ensure_page_tools
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
NAMED=$(mktemp -d -t oncekey-profile.XXXXXX)
trap 'rm -rf "$NAMED"' EXIT
wasm-bindgen --target web --out-dir "$NAMED" --out-name oncekey "$TARGET_DIR/wasm32-unknown-unknown/release/oncekey.wasm"
node tools/node_modules/binaryen/bin/wasm-opt -Oz -g "$NAMED/oncekey_bg.wasm" -o "$NAMED/named.wasm"
mv "$NAMED/named.wasm" "$NAMED/oncekey_bg.wasm"
node scripts/profile-web.mjs "$(server_bin)" "$NAMED" "${1:-2000}"
