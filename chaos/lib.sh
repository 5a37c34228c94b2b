# Sourced by chaos/run-tests.sh and chaos/run-bench.sh (from the repository's root).

# Builds the server and the harness with cargo's profile $1 (debug or release) and sets
# $chaos and ONCEKEY_SERVER_BIN to the binaries.
build_chaos() {
    local profile=$1
    if [ "$profile" = release ]; then
        # The workspace's release profile is tuned for the wasm package's size.
        export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
        cargo build --release -p oncekey-server -p oncekey-chaos
    else
        cargo build -p oncekey-server -p oncekey-chaos
    fi
    local target
    target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    chaos="$target/$profile/oncekey-chaos"
    export ONCEKEY_SERVER_BIN="$target/$profile/oncekey-server"
}

# Runs one planted mistake ($1) with $2 submissions by $3 workers; it must be caught: the harness
# exits 1 and reports violations. Prints the table with the first few violating submissions.
expect_caught() {
    local mistake=$1 submissions=$2 workers=$3 out code
    echo "== chaos: --break $mistake must be caught"
    set +e
    out=$("$chaos" --runs 1 --submissions "$submissions" --workers "$workers" --seed "$seed" --break "$mistake")
    code=$?
    set -e
    printf '%s\n' "$out" | awk '/^  run /{if(++n>5)next} {print}'
    if [ "$code" -ne 1 ] || ! printf '%s\n' "$out" | grep -q '^guarantee violations [1-9]'; then
        echo "FAIL: the planted mistake --break $mistake was not reported (exit $code)" >&2
        exit 1
    fi
    echo "ok: --break $mistake was caught (exit 1, as it must)"
}

# The browser run: headless Chromium through the demo's form kit, $1 submissions over $2 tabs of one
# browser context.
# CHAOS_BROWSER=0 skips it. Needs the built demo (www/dist) and package (pkg), as tests/e2e does.
browser_run() {
    [ "${CHAOS_BROWSER:-1}" != 0 ] || return 0
    if [ ! -f www/dist/index.html ] || [ ! -f pkg/oncekey.js ]; then
        echo "FAIL: the browser chaos run needs the built demo (www/dist) and package (pkg); build them first, or set CHAOS_BROWSER=0" >&2
        exit 1
    fi
    echo "== chaos: browser run (seed $seed)"
    # The server logs every injected fault; only the table matters here.
    RUST_LOG=off node chaos/e2e/browser-chaos.mjs --submissions "$1" --pages "$2" --seed "$seed"
}

# The API fuzz run (chaos/e2e/api-fuzz.mjs): $1 runs of two tabs, $2 calls per life of a tab.
fuzz_run() {
    [ "${CHAOS_BROWSER:-1}" != 0 ] || return 0
    if [ ! -f pkg/oncekey.js ]; then
        echo "FAIL: the API fuzz run needs the built package (pkg); build it first, or set CHAOS_BROWSER=0" >&2
        exit 1
    fi
    echo "== chaos: API fuzz run (seed $seed)"
    RUST_LOG=off node chaos/e2e/api-fuzz.mjs --runs "$1" --steps "$2" --seed "$seed"
}
