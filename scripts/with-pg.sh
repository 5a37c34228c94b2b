#!/usr/bin/env bash
# Runs a command beside a throwaway PostgreSQL cluster: data in a temporary folder, listening on
# a free loopback port only, owned by the `postgres` user when run as root; stopped and deleted
# when the command ends. The command sees the cluster's address in ONCEKEY_PG_URL
# (postgres://postgres@127.0.0.1:PORT/postgres); each test makes its own database in it.
#
#   bash scripts/with-pg.sh cargo test --workspace
#
# If ONCEKEY_PG_URL is already set, that server is used as it is. Without PostgreSQL on the
# machine (scripts/setup.sh installs Debian's `postgresql` when it can), the command still runs,
# without ONCEKEY_PG_URL: the PostgreSQL tests then say, each by name, that they were skipped.
# A PostgreSQL that is installed but does not start is an error.
set -euo pipefail

say() { printf '[with-pg] %s\n' "$*" >&2; }

if [ -n "${ONCEKEY_PG_URL:-}" ]; then
    exec "$@"
fi

bindir=""
for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then bindir="$d"; fi
done
if [ -z "$bindir" ] && command -v initdb >/dev/null && command -v pg_ctl >/dev/null; then
    bindir="$(dirname "$(command -v initdb)")"
fi
if [ -z "$bindir" ]; then
    say "PostgreSQL is not installed (apt-get install postgresql): its tests will be skipped"
    exec "$@"
fi

# As root the cluster belongs to the `postgres` user (initdb refuses root).
as_owner=()
if [ "$(id -u)" = 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
        useradd --system --home-dir /var/lib/postgresql --shell /bin/false postgres
    fi
    as_owner=(runuser -u postgres --)
fi

dir=$(mktemp -d /tmp/oncekey-pg.XXXXXX)
chmod 0755 "$dir"
[ ${#as_owner[@]} -gt 0 ] && chown postgres "$dir"
data="$dir/data"

stop() {
    "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
}
trap stop EXIT

"${as_owner[@]}" "$bindir/initdb" -D "$data" -U postgres -A trust --no-sync -E UTF8 \
    --locale=C >"$dir/initdb.log" 2>&1 || {
    cat "$dir/initdb.log" >&2
    say "initdb failed"
    exit 1
}

# A free port: ask the kernel for one, then let PostgreSQL bind it (retrying on a race).
free_port() {
    node -e 'const s=require("net").createServer();s.listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}
started=""
for _ in 1 2 3 4 5; do
    port=$(free_port)
    if "${as_owner[@]}" "$bindir/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 30 \
        -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c max_connections=300 -c shared_buffers=64MB" \
        start >/dev/null 2>&1; then
        started=yes
        break
    fi
done
if [ -z "$started" ]; then
    cat "$dir/server.log" >&2 || true
    say "PostgreSQL did not start"
    exit 1
fi

export ONCEKEY_PG_URL="postgres://postgres@127.0.0.1:$port/postgres"
say "PostgreSQL $("$bindir/pg_ctl" --version | awk "{print \$3}") on $ONCEKEY_PG_URL (data in $data)"
set +e
"$@"
rc=$?
set -e
exit $rc
