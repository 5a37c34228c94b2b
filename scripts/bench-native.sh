#!/usr/bin/env bash
# Benchmarks the native client on loopback against the reference server (both built in release
# with opt-level 3: the workspace's release profile is tuned for the size of the wasm package).
# Usage: scripts/bench-native.sh [N]   (N submissions per run, 2000 by default)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
# Faster builds on small machines; the figures are about I/O and syncs, not inlining across crates.
export CARGO_PROFILE_RELEASE_LTO=${CARGO_PROFILE_RELEASE_LTO:-false}
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=${CARGO_PROFILE_RELEASE_CODEGEN_UNITS:-16}
# Symbols for a profiler (perf); no effect on speed.
export CARGO_PROFILE_RELEASE_DEBUG=${CARGO_PROFILE_RELEASE_DEBUG:-1}
target=${CARGO_TARGET_DIR:-target}
cargo build --release -p oncekey-server
cargo build --release --example bench_native
"$target/release/examples/bench_native" "$target/release/oncekey-server" "${1:-2000}"

# The fleet: PostgresStore with 1, 2 and 4 processes beside SqliteStore (run under
# scripts/with-pg.sh, which sets ONCEKEY_PG_URL).
if [ -n "${ONCEKEY_PG_URL:-}" ]; then
    cargo build --release --features postgres --example bench_fleet
    "$target/release/examples/bench_fleet" "$target/release/oncekey-server" "$ONCEKEY_PG_URL" "${1:-2000}"
else
    echo "SKIPPED the fleet benchmark: no PostgreSQL (ONCEKEY_PG_URL is unset)"
fi
