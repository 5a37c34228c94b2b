#!/usr/bin/env bash
# The large chaos run for `make bench` / `make chaos`: release build, 20 runs of 500 submissions
# by 8 workers (override with arguments, e.g. `chaos/run-bench.sh --runs 40`), then each
# --break case, each of which must be caught. CHAOS_SEED picks the seed (1 by default);
# CHAOS_BREAKS=0 skips the --break cases.
set -euo pipefail
cd "$(dirname "$0")/.."

seed=${CHAOS_SEED:-1}
# The workspace's release profile is tuned for the wasm package's size.
export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
cargo build --release -p oncekey-server -p oncekey-chaos
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
chaos="$target/release/oncekey-chaos"
export ONCEKEY_SERVER_BIN="$target/release/oncekey-server"

echo "== chaos: large run (seed $seed)"
"$chaos" --runs 20 --submissions 500 --workers 8 --seed "$seed" "$@"

if [ "${CHAOS_BREAKS:-1}" != 0 ]; then
    for mistake in new-key timeout-refusal store-after-send; do
        echo "== chaos: --break $mistake must be caught"
        set +e
        out=$("$chaos" --runs 1 --submissions 500 --workers 8 --seed "$seed" --break "$mistake")
        code=$?
        set -e
        printf '%s\n' "$out" | awk '/^  run /{if(++n>5)next} {print}'
        if [ "$code" -ne 1 ] || ! printf '%s\n' "$out" | grep -q '^guarantee violations [1-9]'; then
            echo "FAIL: the planted mistake --break $mistake was not reported (exit $code)" >&2
            exit 1
        fi
        echo "ok: --break $mistake was caught"
    done
fi

# The browser run (headless Chromium through the demo's form kit, 100 submissions); CHAOS_BROWSER=0
# skips it. Needs the built demo (www/dist) and package (pkg), as tests/e2e does.
if [ "${CHAOS_BROWSER:-1}" != 0 ]; then
    if [ ! -f www/dist/index.html ] || [ ! -f pkg/oncekey.js ]; then
        echo "FAIL: the browser chaos run needs the built demo (www/dist) and package (pkg); build them first, or set CHAOS_BROWSER=0" >&2
        exit 1
    fi
    echo "== chaos: browser run (seed $seed)"
    # The server logs every injected fault; only the table matters here.
    RUST_LOG=off node chaos/e2e/browser-chaos.mjs --submissions 100 --pages 4 --seed "$seed"
fi
