#!/usr/bin/env bash
# Set everything up, then run every check CI runs: formatting, clippy, and
# all tests (unit, integration with clang-22-built C programs, doctests).
set -euo pipefail
cd "$(dirname "$0")/.."

# section NAME COMMAND...: run one step, then say how long it took
# (`== NAME: N s`; on failure `== NAME: failed (exit N) after N s`), so a
# CI log shows where the time goes. The total comes last.
ci_start=$SECONDS
section() {
  local name=$1 start=$SECONDS rc=0
  shift
  "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "== $name: failed (exit $rc) after $((SECONDS - start)) s"
    exit "$rc"
  fi
  echo "== $name: $((SECONDS - start)) s"
}
# Installs packages and the CUDA tools, builds the OpenMP device runtime
# (devicertl/build.sh: a failure to build it stops here) and the workspace
# (debug): the integration tests load the drop-in libraries, run the
# `offload` binary and build GPU programs with `offload clang-flags`.
section setup ./scripts/setup.sh --debug
section fmt cargo fmt --all -- --check
section clippy cargo clippy --workspace --all-targets --quiet -- -D warnings
# The device runtime's logic on the host: compiled for x86_64 against an
# emulation of blocks, warps, barriers and shared memory on threads.
section devicertl-emu ./devicertl/emu/run.sh
section cargo-test cargo test --workspace --no-fail-fast
# The remote plugin's tests run their queues through shared memory (the
# server is on loopback); these run the queue, copy and failure tests again
# with queues over the gRPC stream, as for a server on another machine.
# (`--workspace`: the binaries cargo-test built, not a rebuild with the
# plugin's own feature set; only the remote plugin has tests of these names.)
section remote-grpc-queues env OFFLOAD_REMOTE_LOCAL_QUEUES=0 \
  cargo test --workspace --test kernels --test data --test failures
section light-deps ./scripts/check-light-deps.sh   # an outside crate on offload-runtime's default features: <= 60 crates, builds offline
# The GPU bundle (scripts/gpu-tests.sh) rehearsed against the fake CUDA
# driver: built from the debug build above, then run as on a GPU machine
# (no clang or cargo on PATH). Only its checks count; its timings mean nothing.
section gpu-rehearsal ./scripts/gpu-tests.sh rehearse
# OpenMP programs against `offload serve` (loopback: same-host queues; then
# a network namespace: gRPC queues).
section remote-tests ./scripts/remote-tests.sh
# The MPI plugin under mpirun: the OpenMP programs on 2 serving ranks,
# rank-to-rank copies, a killed rank.
section mpi-tests ./scripts/mpi-tests.sh
# Install script and Debian package, used as a newcomer would (release build).
section package-tests ./scripts/package-tests.sh
# The Python package in a fresh virtual environment: example and pytest.
section python-tests ./scripts/python-tests.sh
echo "== all checks passed: $((SECONDS - ci_start)) s"
