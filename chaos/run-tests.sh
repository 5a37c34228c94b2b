#!/usr/bin/env bash
# The chaos harness in `make test`: a small seeded native run that must end with
# "guarantee violations 0", one planted mistake (--break new-key) that must be caught (the
# harness must exit 1 and report violations), a small browser run and a small API fuzz run. Debug build by default
# (CHAOS_PROFILE=release for an optimized one); CHAOS_SEED picks the seed (1 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
source chaos/lib.sh

seed=${CHAOS_SEED:-1}
build_chaos "${CHAOS_PROFILE:-debug}"

echo "== chaos: small seeded run (seed $seed)"
"$chaos" --runs 2 --submissions 150 --workers 6 --seed "$seed"

expect_caught new-key 200 6

# PostgreSQL: the server's receipts and tickets and every worker's store in one database of
# the cluster scripts/with-pg.sh started (make test-chaos runs this script under it).
if [ -n "${ONCEKEY_PG_URL:-}" ]; then
    echo "== chaos: small seeded run on PostgreSQL (seed $seed)"
    "$chaos" --runs 1 --submissions 150 --workers 6 --seed "$seed" --db "$ONCEKEY_PG_URL"
else
    echo "SKIPPED chaos on PostgreSQL: no PostgreSQL (ONCEKEY_PG_URL is unset; make test starts one)"
fi
browser_run 24 4
fuzz_run 1 200
