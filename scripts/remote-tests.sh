#!/usr/bin/env bash
# The OpenMP integration programs (crates/omptarget/tests/c) run against
# `offload serve`, with only the remote plugin in the client:
#   1. a server on loopback;
#   2. a server in a separate network namespace reached over a veth pair
#      (needs root and iproute2; skipped with a note otherwise, except under
#      CI=true, where CI runs as root and a missing namespace is a failure).
# Each program's output must equal its output on LLVM's local runtime.
# Expects a built workspace (target/debug).
set -euo pipefail
cd "$(dirname "$0")/.."

OFFLOAD=target/debug/offload
[ -x "$OFFLOAD" ] || { echo "remote-tests: build the workspace first" >&2; exit 1; }
TOKEN="remote-test-$$-$RANDOM"
export OFFLOAD_REMOTE_TOKEN="$TOKEN"
LOG_DIR=$(mktemp -d)
SERVER_PID=""
NS="offload-test-$$"

cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  ip netns del "$NS" 2>/dev/null || true
  ip link del "veth-$$" 2>/dev/null || true
  rm -rf "$LOG_DIR"
}
trap cleanup EXIT

wait_listening() { # FILE -> prints the address once the server is up
  for _ in $(seq 100); do
    if grep -q "listening on" "$1" 2>/dev/null; then
      sed -n 's/.*listening on //p' "$1" | head -1
      return 0
    fi
    sleep 0.1
  done
  echo "remote-tests: server did not start:" >&2
  cat "$LOG_DIR"/*.err >&2 || true
  return 1
}

run_programs() { # ADDRESS LABEL
  echo "== OpenMP programs against a remote server ($2: $1)"
  # --workspace (not -p omptarget): the same feature set as the workspace
  # build, and Cargo.toml's [profile.dev.build-override] keeps host
  # dependencies the same whatever is built, so nothing is compiled again.
  # A sandboxed session worker has a /tmp of its own: the programs and the
  # shared libraries their device images need (shared_lib.c) are built
  # where it can read them.
  local tmp="$PWD/target/remote-tests-tmp"
  mkdir -p "$tmp" && chmod 755 "$tmp"
  TMPDIR="$tmp" OFFLOAD_TEST_REMOTE="$1" cargo test -q --workspace --test c_programs -- --test-threads=2
}

# Sessions read only system directories and what --sandbox-read names
# (Landlock): the shared libraries of shared_lib.c are built here.
SANDBOX_READ="$PWD/target/remote-tests-tmp"
mkdir -p "$SANDBOX_READ" && chmod 755 "$SANDBOX_READ"

# 1. Loopback.
OFFLOAD_HOST_DEVICES=4 "$OFFLOAD" serve --listen 127.0.0.1:0 --sandbox-read "$SANDBOX_READ" >"$LOG_DIR/lo.out" 2>"$LOG_DIR/lo.err" &
SERVER_PID=$!
ADDR=$(wait_listening "$LOG_DIR/lo.out")
run_programs "$ADDR" loopback
kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""

# 2. Across a network: the server in its own namespace.
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add "$NS" 2>/dev/null; then
  if [ "${CI:-}" = true ]; then
    echo "remote-tests: CI=true: the network-namespace run needs root and iproute2 (uid $(id -u)); not skipping" >&2
    exit 1
  fi
  echo "== network-namespace run skipped (needs root and iproute2)"
  exit 0
fi
# A /30 of our own on a veth pair that exists only inside this test.
HOST_IP=10.213.$(( $$ % 250 )).1
NS_IP=10.213.$(( $$ % 250 )).2
ip link add "veth-$$" type veth peer name eth0 netns "$NS"
ip addr add "$HOST_IP/30" dev "veth-$$"
ip link set "veth-$$" up
ip -n "$NS" addr add "$NS_IP/30" dev eth0
ip -n "$NS" link set eth0 up
ip -n "$NS" link set lo up
OFFLOAD_HOST_DEVICES=4 ip netns exec "$NS" "$OFFLOAD" serve --listen "$NS_IP:50151" --sandbox-read "$SANDBOX_READ" \
  >"$LOG_DIR/ns.out" 2>"$LOG_DIR/ns.err" &
SERVER_PID=$!
ADDR=$(wait_listening "$LOG_DIR/ns.out")
run_programs "$ADDR" "network namespace $NS"
grep -c "session opened" "$LOG_DIR/ns.err" | sed 's/^/== sessions served across the namespace: /'
