#!/usr/bin/env bash
# An outside crate depending on `offload-runtime` with default features
# stays light: it builds offline (path dependency, this checkout's
# Cargo.lock) and its dependency tree has at most MAX crates (default 60;
# tonic, tokio and protox come only with the `remote` feature).
#
#   scripts/check-light-deps.sh [--no-build]
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
MAX=${MAX:-60}
BUILD=1
[ "${1:-}" = --no-build ] && BUILD=0

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/src"
cat >"$WORK/Cargo.toml" <<TOML
[package]
name = "outside-user"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
offload-runtime = { path = "$ROOT/crates/offload-runtime" }

[workspace]
TOML
cat >"$WORK/src/main.rs" <<'RS'
fn main() -> offload_runtime::Result<()> {
    let device = offload_runtime::Device::host()?;
    let buf = device.buffer_from(&[1u32, 2, 3])?;
    assert_eq!(buf.to_vec()?, vec![1, 2, 3]);
    println!("outside-user: OK on {device}");
    Ok(())
}
RS
# This checkout's versions, so nothing is resolved anew (offline).
cp "$ROOT/Cargo.lock" "$WORK/Cargo.lock"

echo "check-light-deps: counting the dependency tree of an outside crate (default features)" >&2
tree=$(cd "$WORK" && cargo tree --offline --edges normal,build --prefix none --format '{p}' 2>&1) || {
  echo "$tree" >&2
  echo "check-light-deps: cargo tree failed" >&2
  exit 1
}
# Unique packages, without the outside crate itself.
n=$(echo "$tree" | sed 's/ (\*)$//' | sort -u | grep -cv '^outside-user ')
echo "check-light-deps: $n crates (limit $MAX)" >&2
if [ "$n" -gt "$MAX" ]; then
  echo "$tree" | sed 's/ (\*)$//' | sort -u >&2
  echo "check-light-deps: FAILED: $n crates > $MAX" >&2
  exit 1
fi
for heavy in tonic tokio protox; do
  if echo "$tree" | grep -q "^$heavy v"; then
    echo "check-light-deps: FAILED: $heavy is in the default tree" >&2
    exit 1
  fi
done
if [ "$BUILD" = 1 ]; then
  echo "check-light-deps: building and running it (offline)" >&2
  (cd "$WORK" && CARGO_TARGET_DIR="$ROOT/target/light-deps" cargo run --offline --quiet)
fi
echo "check-light-deps: OK" >&2
