# Sourced by scripts/test-web.sh and scripts/bench-web.sh: starts the reference server on a
# loopback port with faults on, serving tests/pages at /pages and pkg/ at /pkg, and sets
# ONCEKEY_SERVER_URL. The server is killed when the calling script exits.

server_bin() {
  if [ -n "${ONCEKEY_SERVER_BIN:-}" ] && [ -x "$ONCEKEY_SERVER_BIN" ]; then
    echo "$ONCEKEY_SERVER_BIN"
    return
  fi
  cargo build -q -p oncekey-server >&2
  local target
  target=$(cargo metadata --format-version 1 --no-deps | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).target_directory))')
  echo "$target/debug/oncekey-server"
}

start_server() {
  local bin log
  bin=$(server_bin)
  log=$(mktemp -t oncekey-server.XXXXXX)
  SERVER_OUT=$(mktemp -t oncekey-server-out.XXXXXX)
  "$bin" --addr 127.0.0.1:0 --db :memory: --faults --mount /pages=tests/pages --pkg pkg \
    >"$SERVER_OUT" 2>"$log" &
  SERVER_PID=$!
  trap 'kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 1 200); do
    if grep -q '^listening on ' "$SERVER_OUT"; then
      break
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "the reference server exited:" >&2
      cat "$log" >&2
      return 1
    fi
    sleep 0.05
  done
  ONCEKEY_SERVER_URL=$(sed -n 's/^listening on \(http:\/\/[^ ]*\).*/\1/p' "$SERVER_OUT" | head -n1)
  if [ -z "$ONCEKEY_SERVER_URL" ]; then
    echo "the reference server did not say where it listens" >&2
    return 1
  fi
  export ONCEKEY_SERVER_URL
  echo "reference server: $ONCEKEY_SERVER_URL (pid $SERVER_PID)" >&2
}

ensure_page_tools() {
  if [ ! -d tests/pages/node_modules/playwright-core ] || [ ! -d tests/pages/node_modules/typescript ]; then
    npm ci --prefix tests/pages --no-audit --no-fund --loglevel=error
  fi
}

ensure_pkg() {
  # The page test loads the very package `make pkg` builds; build it when it is missing or
  # older than the sources.
  if [ ! -f pkg/oncekey_bg.wasm ] || [ -n "$(find src Cargo.toml -newer pkg/oncekey_bg.wasm -print -quit)" ]; then
    bash scripts/build-pkg.sh
  fi
}
