#!/usr/bin/env bash
# Installs what oncekey's build and tests need, idempotently: a second run does nothing.
# Where it cannot install (not root, no network), it says what is missing and how to get it.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[setup] %s\n' "$*"; }
missing=()

# The wasm32 target.
if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
    say "adding the wasm32-unknown-unknown target"
    rustup target add wasm32-unknown-unknown
fi

# The pinned nightly that builds the npm package with std rebuilt for it (scripts/build-pkg.sh
# says why): its std's source and the wasm32 target (which wasm-pack checks for). The crate and
# its tests build on stable.
PKG_TOOLCHAIN=$(cat scripts/pkg-toolchain)
if ! rustup toolchain list | grep -q "^$PKG_TOOLCHAIN" ||
    ! rustup component list --toolchain "$PKG_TOOLCHAIN" --installed | grep -q '^rust-src' ||
    ! rustup target list --toolchain "$PKG_TOOLCHAIN" --installed | grep -qx wasm32-unknown-unknown; then
    say "installing $PKG_TOOLCHAIN with rust-src and wasm32 (for the npm package's build)"
    rustup toolchain install "$PKG_TOOLCHAIN" --profile minimal --component rust-src \
        --target wasm32-unknown-unknown
fi

# wasm-pack, pinned so every machine builds the package the same way.
WASM_PACK_VERSION=0.15.1
if ! wasm-pack --version 2>/dev/null | grep -q "$WASM_PACK_VERSION"; then
    say "installing wasm-pack $WASM_PACK_VERSION (about 4 minutes)"
    cargo install wasm-pack --version "$WASM_PACK_VERSION"
fi

# wasm-bindgen-cli at exactly the wasm-bindgen version in Cargo.lock, or wasm-pack tries to
# download one (and fails without network). Not --locked: one of its pinned dependencies is
# missing from the registry here.
if [ ! -f Cargo.lock ]; then
    cargo generate-lockfile
fi
WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$WB_VERSION" ]; then
    say "no wasm-bindgen in Cargo.lock; resolving the wasm32 dependencies"
    cargo fetch --target wasm32-unknown-unknown
    WB_VERSION=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
fi
if ! wasm-bindgen --version 2>/dev/null | grep -q " $WB_VERSION\b"; then
    say "installing wasm-bindgen-cli $WB_VERSION (to match Cargo.lock)"
    cargo install wasm-bindgen-cli --version "$WB_VERSION" --force
fi

# Debian's Chromium and ChromeDriver for the headless browser tests. Never a browser download.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's chromium and chromium-driver"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium chromium-driver >/dev/null
    else
        missing+=("chromium and chromedriver at /usr/bin (as root: apt-get install chromium chromium-driver)")
    fi
fi

# PostgreSQL for the fleet tests (scripts/with-pg.sh starts a throwaway cluster from it).
# Optional: without it those tests are skipped by name and the rest of the suite runs.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        say "installing Debian's postgresql"
        apt-get update -qq || true
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null ||
            say "WARNING: postgresql could not be installed; its tests will be skipped"
    else
        say "WARNING: no PostgreSQL (as root: apt-get install postgresql); its tests will be skipped"
    fi
fi

# npm tools: binaryen 132's wasm-opt (Debian's binaryen breaks this rustc's modules), and for
# the browser tests playwright-core (drives /usr/bin/chromium; never downloads a browser) and
# TypeScript (checks the package's declarations).
if ! command -v npm >/dev/null; then
    missing+=("Node.js 20 and npm (apt-get install nodejs npm)")
else
    if [ ! -d tools/node_modules/binaryen ]; then
        say "installing binaryen (wasm-opt) from npm"
        npm ci --prefix tools --no-audit --no-fund --loglevel=error
    fi
    if [ ! -d tests/pages/node_modules/playwright-core ] || [ ! -d tests/pages/node_modules/typescript ]; then
        say "installing playwright-core and typescript for the browser tests"
        npm ci --prefix tests/pages --no-audit --no-fund --loglevel=error
    fi
fi

if [ ${#missing[@]} -gt 0 ]; then
    say "cannot install these here; please install them and run again:"
    for m in "${missing[@]}"; do say "  - $m"; done
    exit 1
fi
say "ready: wasm32 target, $PKG_TOOLCHAIN, wasm-pack $WASM_PACK_VERSION, wasm-bindgen-cli $WB_VERSION, chromium, npm tools"
