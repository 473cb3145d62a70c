#!/usr/bin/env bash
# Set everything up, then run every check CI runs: formatting, clippy, and
# all tests (unit, integration with clang-22-built C programs, doctests).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --quiet -- -D warnings
# Build the drop-in libraries first: integration tests load them.
cargo build --workspace --quiet
cargo test --workspace --no-fail-fast
