#!/usr/bin/env bash
# The browser package's benchmark: size (gzip -9 of .wasm + .js) and the overhead ratio of 200
# sequential submissions through Submitter against 200 plain fetch calls, in headless Chromium
# against the reference server. Builds pkg/ first when it is missing or stale.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/web-server.sh

ensure_pkg
ensure_page_tools
start_server
node scripts/bench-web.mjs "$ONCEKEY_SERVER_URL"
