#!/usr/bin/env bash
# The chaos harness in `make test`: a small seeded native run that must end with
# "guarantee violations 0", and one planted mistake (--break new-key) that must be caught: the
# harness must exit 1 and report violations. Debug build by default (CHAOS_PROFILE=release for
# an optimized one); CHAOS_SEED picks the seed (1 by default).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${CHAOS_PROFILE:-debug}
seed=${CHAOS_SEED:-1}
if [ "$profile" = release ]; then
    # The workspace's release profile is tuned for the wasm package's size.
    export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
    cargo build --release -p oncekey-server -p oncekey-chaos
else
    cargo build -p oncekey-server -p oncekey-chaos
fi
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
chaos="$target/$profile/oncekey-chaos"
export ONCEKEY_SERVER_BIN="$target/$profile/oncekey-server"

echo "== chaos: small seeded run (seed $seed)"
"$chaos" --runs 2 --submissions 150 --workers 6 --seed "$seed"

echo "== chaos: --break new-key must be caught"
set +e
out=$("$chaos" --runs 1 --submissions 200 --workers 6 --seed "$seed" --break new-key)
code=$?
set -e
# The table, with the first few violating submissions.
printf '%s\n' "$out" | awk '/^  run /{if(++n>5)next} {print}'
if [ "$code" -ne 1 ] || ! printf '%s\n' "$out" | grep -q '^guarantee violations [1-9]'; then
    echo "FAIL: the planted mistake --break new-key was not reported (exit $code)" >&2
    exit 1
fi
echo "ok: --break new-key was caught (exit 1, as it must)"

# The browser run (headless Chromium through the demo's form kit, small); CHAOS_BROWSER=0
# skips it. Needs the built demo (www/dist) and package (pkg), as tests/e2e does.
if [ "${CHAOS_BROWSER:-1}" != 0 ]; then
    if [ ! -f www/dist/index.html ] || [ ! -f pkg/oncekey.js ]; then
        echo "FAIL: the browser chaos run needs the built demo (www/dist) and package (pkg); build them first, or set CHAOS_BROWSER=0" >&2
        exit 1
    fi
    echo "== chaos: browser run (seed $seed)"
    # The server logs every injected fault; only the table matters here.
    RUST_LOG=off node chaos/e2e/browser-chaos.mjs --submissions 24 --pages 3 --seed "$seed"
fi
