#!/usr/bin/env bash
# Set everything up, then run the demo: a C kernel built with clang-22,
# loaded and run on the host device through the Rust API.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./target/release/offload info
cargo run --release --quiet -p offload-runtime --example demo
