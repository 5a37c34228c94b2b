#!/usr/bin/env bash
# The large chaos run for `make bench` / `make chaos`: release build, 20 runs of 500 submissions
# by 8 workers (override with arguments, e.g. `chaos/run-bench.sh --runs 40`), then each
# --break case, each of which must be caught, then the browser run (100 submissions).
# CHAOS_SEED picks the seed (1 by default); CHAOS_BREAKS=0 skips the --break cases.
set -euo pipefail
cd "$(dirname "$0")/.."
source chaos/lib.sh

seed=${CHAOS_SEED:-1}
build_chaos release

echo "== chaos: large run (seed $seed)"
"$chaos" --runs 20 --submissions 500 --workers 8 --seed "$seed" "$@"

if [ -n "${ONCEKEY_PG_URL:-}" ]; then
    echo "== chaos: large run on PostgreSQL (seed $seed)"
    "$chaos" --runs 5 --submissions 500 --workers 8 --seed "$seed" --db "$ONCEKEY_PG_URL" "$@"
fi

if [ "${CHAOS_BREAKS:-1}" != 0 ]; then
    for mistake in new-key timeout-refusal store-after-send; do
        expect_caught "$mistake" 500 8
    done
fi
browser_run 100 4
