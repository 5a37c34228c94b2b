# oncekey: every command installs what it is missing first (scripts/setup.sh), so a fresh
# machine needs nothing else.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

WASM := wasm32-unknown-unknown
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
export ONCEKEY_SERVER_BIN := $(TARGET_DIR)/debug/oncekey-server
# The Leptos example is a workspace of its own (its own Cargo.lock and features): its own target
# directory, or its wasm-bindgen build and the browser tests' meet in one deps folder and rustc
# sees two different JsValue types.
LEPTOS_TARGET := $(TARGET_DIR)/leptos
# Benchmarks and the demo run optimized native code; the release profile itself is tuned for
# the size of the browser package.
RELEASE_NATIVE := CARGO_PROFILE_RELEASE_OPT_LEVEL=3

.PHONY: help setup lint server test test-native test-web test-e2e test-chaos pkg www frameworks leptos demo bench chaos

help:
	@echo "make demo   build everything and serve the demo on http://127.0.0.1:8080"
	@echo "make test   every test: lints, native, headless browser, end-to-end, chaos"
	@echo "make bench  benchmarks (sizes, throughput, overhead), printed as figures"
	@echo "make chaos  the large chaos run"
	@echo "make pkg    the npm package in pkg/ (release, wasm-opt'd)"
	@echo "make setup  install what is missing (wasm32 target, wasm-pack, wasm-bindgen-cli, chromium, npm tools)"

setup:
	@bash scripts/setup.sh

lint: setup
	cargo fmt --all --check
	# cargo fmt does not reach modules declared inside a macro (src/lib.rs's if_native! and
	# if_wasm!): the native client and the browser SDK are checked file by file.
	rustfmt --edition 2021 --check $$(git ls-files 'src/native/*.rs' 'src/web/*.rs')
	cargo clippy --workspace --all-targets --all-features -- -D warnings
	cargo clippy -p oncekey --all-targets --target $(WASM) --features small-alloc -- -D warnings
	cargo clippy -p oncekey --lib --target $(WASM) --no-default-features --features package -- -D warnings
	# Without the JavaScript face (feature js), as a Rust frontend depends on it.
	cargo clippy -p oncekey --lib --target $(WASM) --no-default-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps --all-features -p oncekey -p oncekey-server
	# With the default features too, as docs.rs and a user's `cargo doc` build them.
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p oncekey
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p oncekey --target $(WASM) --features small-alloc
	cargo fmt --manifest-path examples/leptos/Cargo.toml --check
	CARGO_TARGET_DIR=$(LEPTOS_TARGET) cargo clippy --manifest-path examples/leptos/Cargo.toml --target $(WASM) -- -D warnings

# The reference server: the peer of the native, browser, end-to-end and chaos tests.
server: setup
	cargo build -p oncekey-server

# The PostgreSQL tests run beside a throwaway cluster on loopback (scripts/with-pg.sh); without
# PostgreSQL they say, each by name, that they were skipped.
test-native: server
	bash scripts/with-pg.sh cargo test --workspace --all-features

test-web: server
	bash scripts/test-web.sh

pkg: setup
	bash scripts/build-pkg.sh

# The demo imports the package through npm ("oncekey": "file:../pkg"), as a user's app would.
www: pkg
	npm ci --prefix www --no-audit --no-fund --loglevel=error
	npm run --prefix www build

# The React and Vue examples import it through npm too ("oncekey": "file:../../pkg", copied into
# node_modules as a registry install is: their .npmrc sets install-links). React is also built
# for development, where strict mode runs every effect twice, and both for server rendering;
# tests/e2e/react18 builds the React example against React 18.
frameworks: pkg leptos
	for app in examples/react examples/vue tests/e2e/react18; do \
		npm ci --prefix $$app --no-audit --no-fund --loglevel=error; done
	npm run --prefix examples/react build
	npm run --prefix examples/react build:dev
	npm run --prefix examples/react build:ssr
	npm run --prefix examples/vue build
	npm run --prefix examples/vue build:ssr
	npm run --prefix tests/e2e/react18 build
	npm run --prefix tests/e2e/react18 build:ssr

# The Leptos example (its own cargo workspace, sharing this target directory): built for wasm32,
# wasm-bindgen's output beside its page and the demo's stylesheet.
LEPTOS_WASM := $(LEPTOS_TARGET)/$(WASM)/debug/oncekey_example_leptos.wasm
leptos: setup
	CARGO_TARGET_DIR=$(LEPTOS_TARGET) cargo build --manifest-path examples/leptos/Cargo.toml --target $(WASM)
	rm -rf examples/leptos/dist
	wasm-bindgen --target web --no-typescript --out-dir examples/leptos/dist/pkg $(LEPTOS_WASM)
	cp examples/leptos/index.html www/src/style.css examples/leptos/dist/

test-e2e: server www frameworks
	node tests/pages/node_modules/typescript/bin/tsc -p tests/e2e/tsconfig.frameworks.json
	node --test --test-concurrency=1 tests/e2e/

test-chaos: server
	bash scripts/with-pg.sh bash chaos/run-tests.sh

test: lint test-native test-web test-e2e test-chaos

demo: www
	$(RELEASE_NATIVE) cargo build --release -p oncekey-server
	@echo "== the demo: http://127.0.0.1:8080"
	$(TARGET_DIR)/release/oncekey-server --addr 127.0.0.1:8080 --db oncekey-demo.db \
		--www www/dist --pkg pkg --faults

bench: server
	@echo "== browser package: size and overhead (against the reference server built for speed)"
	$(RELEASE_NATIVE) cargo build --release -p oncekey-server
	ONCEKEY_SERVER_BIN=$(TARGET_DIR)/release/oncekey-server bash scripts/bench-web.sh
	@echo "== form kit: submit to locked form and to first request, beside a hand-written form"
	$(MAKE) -s www
	node tests/e2e/bench-form.mjs 100
	@echo "== slow and dead connections: first paint on Slow 3G, online to the resent request"
	node tests/e2e/bench-network.mjs 3
	@echo "== uploads: submit to fetch() and to the answer for 5 MB, peak memory for 20 MB, beside a plain fetch"
	node tests/e2e/bench-upload.mjs 9
	@echo "== native client: throughput against plain reqwest, peak memory; the fleet on PostgreSQL"
	bash scripts/with-pg.sh bash scripts/bench-native.sh
	@echo "== reference server: the key check's cost, with the load example's keys and with browser-shaped UUID v4 keys"
	$(RELEASE_NATIVE) cargo run -q --release -p oncekey-server --example load -- \
		--requests 20000 --concurrency 64 --rounds 9
	$(RELEASE_NATIVE) cargo run -q --release -p oncekey-server --example load -- \
		--requests 20000 --concurrency 64 --rounds 9 --uuid-keys
	@echo "== chaos: the large run"
	bash scripts/with-pg.sh bash chaos/run-bench.sh

chaos: server
	bash scripts/with-pg.sh bash chaos/run-bench.sh
