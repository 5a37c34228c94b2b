#!/usr/bin/env bash
# The large chaos run for `make bench` / `make chaos`: release build; 100,000 native submissions
# with client and server SIGKILLs (80 runs of 1,000 on SQLite files, then, beside PostgreSQL,
# 20 runs of 1,000 with the server and every worker's store on PostgreSQL); then each --break
# case, each of which must be caught; then the browser run (1,000 submissions over 4 tabs of one
# browser context) and the API fuzz run (20 runs of two tabs, 400 calls per life of a tab).
# Extra arguments go to both native runs (e.g. `--workers 4`).
# CHAOS_SEED picks the seed (1 by default); CHAOS_RUNS, CHAOS_PG_RUNS, CHAOS_SUBMISSIONS,
# CHAOS_BROWSER_SUBMISSIONS, CHAOS_BROWSER_TABS and CHAOS_FUZZ_RUNS the sizes; CHAOS_BREAKS=0
# skips the --break cases, CHAOS_BROWSER=0 the browser and API fuzz runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source chaos/lib.sh

seed=${CHAOS_SEED:-1}
runs=${CHAOS_RUNS:-80}
pg_runs=${CHAOS_PG_RUNS:-20}
submissions=${CHAOS_SUBMISSIONS:-1000}
build_chaos release

echo "== chaos: large run on SQLite, $runs runs of $submissions (seed $seed)"
"$chaos" --runs "$runs" --submissions "$submissions" --workers 8 --seed "$seed" "$@"

if [ -n "${ONCEKEY_PG_URL:-}" ]; then
    echo "== chaos: large run on PostgreSQL, $pg_runs runs of $submissions (seed $seed)"
    "$chaos" --runs "$pg_runs" --submissions "$submissions" --workers 8 --seed "$seed" --db "$ONCEKEY_PG_URL" "$@"
else
    echo "SKIPPED chaos on PostgreSQL: no PostgreSQL (ONCEKEY_PG_URL is unset; make chaos starts one)"
fi

if [ "${CHAOS_BREAKS:-1}" != 0 ]; then
    for mistake in new-key timeout-refusal store-after-send; do
        expect_caught "$mistake" 500 8
    done
fi
browser_run "${CHAOS_BROWSER_SUBMISSIONS:-1000}" "${CHAOS_BROWSER_TABS:-4}"
fuzz_run "${CHAOS_FUZZ_RUNS:-20}" 400
