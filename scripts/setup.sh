#!/usr/bin/env bash
# Install what the project needs on Debian bookworm (with Rust already
# installed) and build the workspace. Safe to run again: installed packages
# are skipped.
#
#   scripts/setup.sh            install, then build release (what the demo uses)
#   scripts/setup.sh --debug    install, then build debug (what the tests use)
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(clang-22 lld-22 llvm-22 llvm-22-tools libomp-22-dev liboffload-22-dev iproute2 openmpi-bin libopenmpi-dev mpich python3-venv)

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

PROFILE=release
[ "${1:-}" = "--debug" ] && PROFILE=debug
echo "setup: building the workspace ($PROFILE)" >&2
if [ "$PROFILE" = release ]; then
  # The Python extension is built by pip (scripts/python-tests.sh), not here.
  cargo build --release --workspace --exclude offload-python --quiet
else
  cargo build --workspace --quiet
fi
# Lay out the drop-in library directory next to the `offload` binary.
"./target/$PROFILE/offload" lib-dir >/dev/null
