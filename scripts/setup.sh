#!/usr/bin/env bash
# Install what the project needs on Debian bookworm (with Rust already
# installed) and build the workspace. Safe to run again: installed packages
# are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(clang-22 lld-22 llvm-22 llvm-22-tools libomp-22-dev liboffload-22-dev iproute2)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v cargo >/dev/null || { echo "setup: cargo not found; install Rust (rustup) first" >&2; exit 1; }
rustup component add clippy rustfmt >/dev/null 2>&1 || true

echo "setup: building the workspace (release)" >&2
cargo build --release --workspace --quiet
# Lay out the drop-in library directory next to the `offload` binary.
./target/release/offload lib-dir >/dev/null
