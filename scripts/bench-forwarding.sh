#!/usr/bin/env bash
# What OpenMP target regions cost when forwarded (remote and MPI plugins)
# against the same binary on a local host device, side by side in one run:
#
#   scripts/bench-forwarding.sh [--quick] [BUILD_DIR]   (default target/release)
#
# Builds crates/offload-bench/c/omp_regions.c with clang-22 and runs each
# case (tofrom: one `map(tofrom:)` int per region; empty; compute: a
# compute-bound region over device-resident data), alternating
#   local   our libomptarget with OFFLOAD_PLUGINS=host
#   llvm    LLVM 22's libomptarget (Debian's) on its host device
#   remote  OFFLOAD_PLUGINS=remote against `offload serve --listen
#           127.0.0.1:0` (a sandboxed worker process per session, as
#           deployed): queues in shared memory (same-host queues)
#   grpc    the same with OFFLOAD_REMOTE_LOCAL_QUEUES=0: queues over the
#           gRPC stream, as for a server on another machine
#   mpi     `mpirun --bind-to none -np 1 omp_regions : -np 1 offload serve
#           --mpi` with OFFLOAD_PLUGINS=mpi (skipped without mpirun)
# for ROUNDS rounds (5; --quick: 2, with fewer regions), and prints per
# case and mode the median time per region and its ratio to local.
# BUILD_DIR holds `offload` and `libomptarget.so` (a release build:
# `cargo build --release -p offload-cli -p omptarget`).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
dir=${1:-target/release}
for f in "$dir/offload" "$dir/libomptarget.so"; do
  [ -e "$f" ] || { echo "bench-forwarding: $f missing (cargo build --release -p offload-cli -p omptarget)" >&2; exit 1; }
done
command -v clang-22 >/dev/null || { echo "bench-forwarding: clang-22 not found" >&2; exit 1; }
dir=$(cd "$dir" && pwd)
work=$(mktemp -d)
server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
# The programs ask for libomptarget.so.22.1: ours under that name, first
# on the library path (else the loader finds LLVM's).
mkdir -p "$work/lib"
ln -s "$dir/libomptarget.so" "$work/lib/libomptarget.so.22.1"
lib="$work/lib"
clang-22 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 \
  crates/offload-bench/c/omp_regions.c -o "$work/omp_regions"
chmod 755 "$work" "$work/omp_regions" # a sandboxed worker reads the image
ldd "$work/omp_regions" | grep -q 'libomptarget.so.22.1 => /' ||
  { echo "bench-forwarding: LLVM 22's libomptarget.so.22.1 not found (liboffload-22-dev)" >&2; exit 1; }

if [ $quick = 1 ]; then rounds=2; cases="tofrom:2000 empty:2000 compute:4"
else rounds=5; cases="tofrom:100000 empty:20000 compute:20"; fi

"$dir/offload" serve --listen 127.0.0.1:0 >"$work/serve.out" 2>"$work/serve.err" &
server=$!
addr=""
for _ in $(seq 100); do
  addr=$(grep -o '127\.0\.0\.1:[0-9]*' "$work/serve.out" | head -1 || true)
  [ -n "$addr" ] && break
  sleep 0.1
done
[ -n "$addr" ] || { echo "bench-forwarding: the server did not start:" >&2; cat "$work/serve.err" >&2; exit 1; }

have_mpi=0
command -v mpirun >/dev/null && have_mpi=1
run() { # MODE CASE N -> microseconds per region
  local out
  case $1 in
    local) out=$(LD_LIBRARY_PATH="$lib" OFFLOAD_PLUGINS=host "$work/omp_regions" "$2" "$3") ;;
    llvm) out=$("$work/omp_regions" "$2" "$3") ;;
    remote) out=$(LD_LIBRARY_PATH="$lib" OFFLOAD_PLUGINS=remote OFFLOAD_REMOTE="$addr" \
      "$work/omp_regions" "$2" "$3") ;;
    grpc) out=$(LD_LIBRARY_PATH="$lib" OFFLOAD_PLUGINS=remote OFFLOAD_REMOTE="$addr" \
      OFFLOAD_REMOTE_LOCAL_QUEUES=0 "$work/omp_regions" "$2" "$3") ;;
    # The serving rank reads OFFLOAD_PLUGINS=mpi as "every local plugin".
    mpi) out=$(LD_LIBRARY_PATH="$lib" OFFLOAD_PLUGINS=mpi OFFLOAD_LOG=warn timeout 600 \
      mpirun --oversubscribe --allow-run-as-root --bind-to none \
      -np 1 "$work/omp_regions" "$2" "$3" : -np 1 "$dir/offload" serve --mpi \
      2>"$work/mpi.err" | grep '^regions') ||
      { echo "bench-forwarding: the MPI run failed:" >&2; cat "$work/mpi.err" >&2; exit 1; } ;;
  esac
  echo "$out" | awk '{print $5}'
}
median() { sort -g | awk '{v[NR]=$1} END{print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

modes="local llvm remote grpc"
[ $have_mpi = 1 ] && modes="$modes mpi"
printf '%-8s %-7s %8s %14s %10s\n' case mode regions "us/region" "x local"
for c in $cases; do
  name=${c%%:*}; n=${c##*:}
  declare -A samples=()
  for _ in $(seq "$rounds"); do
    for m in $modes; do samples[$m]+="$(run "$m" "$name" "$n") "; done
  done
  loc=$(echo "${samples[local]}" | tr ' ' '\n' | grep . | median)
  for m in $modes; do
    med=$(echo "${samples[$m]}" | tr ' ' '\n' | grep . | median)
    printf '%-8s %-7s %8s %14.2f %10.2f\n' "$name" "$m" "$n" "$med" "$(echo "$med $loc" | awk '{print $1/$2}')"
  done
  unset samples
done
[ $have_mpi = 1 ] || echo "(mpi: mpirun not found, not run)"
