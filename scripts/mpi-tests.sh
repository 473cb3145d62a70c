#!/usr/bin/env bash
# The MPI plugin under a real launcher (Open MPI's mpirun, --oversubscribe):
#   1. the OpenMP programs of the remote suite (crates/omptarget/tests/c),
#      each started as `mpirun -np 1 PROGRAM : -np 2 offload serve --mpi`
#      with only the mpi plugin: every target region runs on a serving rank;
#   2. copies between the devices of two serving ranks go rank to rank
#      (plugins/mpi/tests/c/peer_copy.c; the serving ranks log each side);
#   3. a serving rank that dies ends the job with an error, not a hang
#      (plugins/mpi/tests/c/killed_rank.c);
#   4. nothing links libmpi, and a program run without a launcher, or as
#      an ordinary MPI job (`mpirun -np 2 PROGRAM`), never loads it;
#   5. an MPI+OpenMP program (plugins/mpi/tests/c/mpi_app.c, built with
#      mpicc) that initialises and finalizes MPI itself, with two
#      application ranks talking over MPI: MPI is not initialised twice,
#      the goodbye reaches the serving ranks before its MPI_Finalize, and a
#      thread level below MPI_THREAD_SERIALIZED gets one warning per rank;
#   6. the same programs under MPICH (its hydra `mpiexec.mpich`, its
#      libmpich, `OFFLOAD_PLUGINS=host,mpi` since hydra does not say how
#      many programs it started).
# Without mpirun or clang-22 the script skips with a note, except under
# CI=true, where that is a failure. Expects a built workspace (target/debug).
set -euo pipefail
cd "$(dirname "$0")/.."

OFFLOAD=$PWD/target/debug/offload
[ -x "$OFFLOAD" ] || { echo "mpi-tests: build the workspace first" >&2; exit 1; }
for tool in mpirun mpicc mpiexec.mpich mpicc.mpich clang-22; do
  if ! command -v "$tool" >/dev/null; then
    if [ "${CI:-}" = true ]; then
      echo "mpi-tests: CI=true: $tool not installed; not skipping" >&2
      exit 1
    fi
    echo "== MPI tests skipped ($tool not installed; scripts/setup.sh installs it)"
    exit 0
  fi
done
"$OFFLOAD" lib-dir >/dev/null
LIB_DIR=$PWD/target/debug/offload-lib
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
MPIRUN=(mpirun --oversubscribe --allow-run-as-root)
# Open MPI's point-to-point layer: ob1, the one its default selection picks
# here anyway (Debian's openmpi-mca-params.conf rules out ucx; `--mca
# pml_base_verbose 10` says "selected ob1"). Naming it skips loading and
# probing the cm layer and its PSM libraries in every rank's MPI_Init:
# ~0.2 s of each of the ~130 Open MPI jobs below. Reaches mpirun's ranks
# (OMPI_MCA_* is forwarded), the OpenMP suite's included; MPICH ignores it.
export OMPI_MCA_pml=ob1
# One host device per serving rank: device N is rank N+1.
export OFFLOAD_HOST_DEVICES=1

echo "== nothing links libmpi"
for f in "$OFFLOAD" "$LIB_DIR/libomptarget.so.22.1" "$LIB_DIR/libLLVMOffload.so.22.1"; do
  if ldd "$f" | grep libmpi >/dev/null; then
    echo "mpi-tests: $f links libmpi" >&2
    exit 1
  fi
done

for prog in peer_copy killed_rank; do
  clang-22 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu -O1 \
    "plugins/mpi/tests/c/$prog.c" -o "$WORK/$prog"
done
export LD_LIBRARY_PATH="$LIB_DIR:/usr/lib/llvm-22/lib"

echo "== without a launcher libmpi is not loaded"
OFFLOAD_HOST_DEVICES=2 LD_DEBUG=libs "$WORK/peer_copy" >"$WORK/plain.out" 2>"$WORK/plain.err"
if grep -q libmpi "$WORK/plain.err"; then
  echo "mpi-tests: a run without mpirun loaded libmpi" >&2
  exit 1
fi

echo "== an ordinary MPI job (one program on every rank) is left alone"
# No serving ranks: the plugin must not start MPI (its collectives would
# hang such a job); each rank sees only its own devices.
OFFLOAD_HOST_DEVICES=2 timeout 60 "${MPIRUN[@]}" -np 2 -x LD_DEBUG=libs "$WORK/peer_copy" \
  >"$WORK/spmd.out" 2>"$WORK/spmd.err" || true
if [ "$(grep -c '^devices: 2$' "$WORK/spmd.out" || true)" != 2 ] || grep libmpi "$WORK/spmd.err" >/dev/null; then
  echo "mpi-tests: mpirun -np 2 PROGRAM did not run on local devices only" >&2
  cat "$WORK/spmd.out" >&2
  exit 1
fi

echo "== rank-to-rank copies (mpirun: 1 application rank, 2 serving ranks)"
OFFLOAD_LOG=offload_server::mpi=debug timeout 120 "${MPIRUN[@]}" -np 1 "$WORK/peer_copy" : \
  -np 2 "$OFFLOAD" serve --mpi >"$WORK/peer.out" 2>"$WORK/peer.err" || {
  cat "$WORK/peer.out" "$WORK/peer.err" >&2
  exit 1
}
cat "$WORK/peer.out"
# Device 0 is the application's own host device, 1 and 2 the ranks'.
peer_expected="devices: 3
device 0: sum 499500
device 1: sum 499500
device 2: sum 499500
rank-to-rank copies of 4096 bytes: ok
rank-to-rank copies of 3145728 bytes: ok"
[ "$(cat "$WORK/peer.out")" = "$peer_expected" ] || { echo "mpi-tests: unexpected output" >&2; cat "$WORK/peer.err" >&2; exit 1; }
# Each copy: one rank logs sending straight to the other, which logs receiving.
sent=$(grep -c "peer copy sent" "$WORK/peer.err" || true)
received=$(grep -c "peer copy received" "$WORK/peer.err" || true)
[ "$sent" -eq 4 ] && [ "$received" -eq 4 ] || {
  echo "mpi-tests: expected 4 rank-to-rank sends and receives, got $sent/$received" >&2
  cat "$WORK/peer.err" >&2
  exit 1
}
echo "   4 copies went rank to rank"

echo "== a region with map(tofrom:) is one round trip (its copies in, launch and read back batched)"
clang-22 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu -O1 \
  crates/offload-bench/c/omp_regions.c -o "$WORK/omp_regions"
OFFLOAD_PLUGINS=mpi OFFLOAD_LOG=offload_server::mpi=info timeout 120 "${MPIRUN[@]}" \
  -np 1 "$WORK/omp_regions" tofrom 500 : -np 1 "$OFFLOAD" serve --mpi \
  >"$WORK/regions.out" 2>"$WORK/regions.err" || {
  cat "$WORK/regions.out" "$WORK/regions.err" >&2
  exit 1
}
grep -q "^regions tofrom 500 " "$WORK/regions.out" || { cat "$WORK/regions.out" "$WORK/regions.err" >&2; exit 1; }
# 501 regions (one warm-up) and the session's set-up and teardown (hello,
# image, kernels, allocations, unload: a few dozen); three per region
# before the batching.
requests=$(sed -n 's/.*session closed.*requests=\([0-9]*\).*/\1/p' "$WORK/regions.err" | head -n 1)
[ -n "$requests" ] && [ "$requests" -ge 501 ] && [ "$requests" -le 600 ] || {
  echo "mpi-tests: 501 tofrom regions took ${requests:-no logged} requests (one each expected)" >&2
  cat "$WORK/regions.err" >&2
  exit 1
}
echo "   501 regions: $requests requests"

echo "== a serving rank is killed"
start=$SECONDS
set +e
timeout 120 "${MPIRUN[@]}" -np 1 "$WORK/killed_rank" : -np 2 "$OFFLOAD" serve --mpi \
  >"$WORK/kill.out" 2>"$WORK/kill.err"
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || grep -q unreachable "$WORK/kill.out"; then
  echo "mpi-tests: killed rank: exit $rc (0: not noticed, 124: hung)" >&2
  cat "$WORK/kill.out" "$WORK/kill.err" >&2
  exit 1
fi
grep -qi "signal 9\|killed" "$WORK/kill.err" "$WORK/kill.out" || {
  echo "mpi-tests: killed rank: no message saying so" >&2
  cat "$WORK/kill.out" "$WORK/kill.err" >&2
  exit 1
}
echo "   job ended with exit $rc after $((SECONDS - start)) s: $(grep -hi "signal 9\|killed" "$WORK/kill.err" "$WORK/kill.out" | head -1 | sed 's/^ *//')"

echo "== an MPI+OpenMP program initialises and finalizes MPI itself"
OMPI_CC=clang-22 mpicc -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu -O1 \
  plugins/mpi/tests/c/mpi_app.c -o "$WORK/mpi_app"
for variant in serialized single; do
  arg=""
  [ "$variant" = single ] && arg=single
  timeout 120 "${MPIRUN[@]}" -np 2 "$WORK/mpi_app" $arg : -np 2 "$OFFLOAD" serve --mpi \
    >"$WORK/app.out" 2>"$WORK/app.err" || {
    echo "mpi-tests: MPI+OpenMP program ($variant) failed" >&2
    cat "$WORK/app.out" "$WORK/app.err" >&2
    exit 1
  }
  # Ranks 0 and 1 of the application, ranks 2 and 3 serving: device 1 + r.
  expected="devices 3, sums 499500 500500, on host 0"
  if ! grep -qx "$expected" "$WORK/app.out" || [ "$(grep -c finalized "$WORK/app.out")" != 2 ]; then
    echo "mpi-tests: MPI+OpenMP program ($variant): unexpected output" >&2
    cat "$WORK/app.out" "$WORK/app.err" >&2
    exit 1
  fi
  warnings=$({ grep -o "initialised MPI at MPI_THREAD_SINGLE" "$WORK/app.err" || true; } | wc -l)
  want=0
  [ "$variant" = single ] && want=2
  [ "$warnings" = "$want" ] || {
    echo "mpi-tests: MPI+OpenMP program ($variant): $warnings thread-level warnings, expected $want" >&2
    cat "$WORK/app.err" >&2
    exit 1
  }
  closed=$(grep -c "session closed" "$WORK/app.err" || true)
  [ "$closed" = 4 ] || {
    echo "mpi-tests: MPI+OpenMP program ($variant): $closed sessions closed, expected 4" >&2
    cat "$WORK/app.err" >&2
    exit 1
  }
  echo "   $variant: $expected; both ranks finalized, 4 sessions closed, $warnings warnings"
done

echo "== MPICH: the same programs under hydra"
MPICH_CC=clang-22 mpicc.mpich -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu -O1 \
  plugins/mpi/tests/c/mpi_app.c -o "$WORK/mpi_app_mpich"
MPIEXEC=(env OFFLOAD_PLUGINS=host,mpi timeout 120 mpiexec.mpich)
"${MPIEXEC[@]}" -n 1 "$WORK/peer_copy" : -n 2 "$OFFLOAD" serve --mpi \
  >"$WORK/mpich-peer.out" 2>"$WORK/mpich-peer.err" || {
  cat "$WORK/mpich-peer.out" "$WORK/mpich-peer.err" >&2
  exit 1
}
[ "$(cat "$WORK/mpich-peer.out")" = "$peer_expected" ] || {
  echo "mpi-tests: MPICH: unexpected peer_copy output" >&2
  cat "$WORK/mpich-peer.out" "$WORK/mpich-peer.err" >&2
  exit 1
}
"${MPIEXEC[@]}" -n 2 "$WORK/mpi_app_mpich" : -n 2 "$OFFLOAD" serve --mpi \
  >"$WORK/mpich-app.out" 2>"$WORK/mpich-app.err" || {
  cat "$WORK/mpich-app.out" "$WORK/mpich-app.err" >&2
  exit 1
}
if ! grep -qx "devices 3, sums 499500 500500, on host 0" "$WORK/mpich-app.out" ||
  [ "$(grep -c finalized "$WORK/mpich-app.out")" != 2 ]; then
  echo "mpi-tests: MPICH: unexpected mpi_app output" >&2
  cat "$WORK/mpich-app.out" "$WORK/mpich-app.err" >&2
  exit 1
fi
set +e
"${MPIEXEC[@]}" -n 1 "$WORK/killed_rank" : -n 2 "$OFFLOAD" serve --mpi \
  >"$WORK/mpich-kill.out" 2>"$WORK/mpich-kill.err"
rc=$?
set -e
if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || ! grep -qi "signal 9\|killed" "$WORK/mpich-kill.out" "$WORK/mpich-kill.err"; then
  echo "mpi-tests: MPICH: killed rank: exit $rc (0: not noticed, 124: hung)" >&2
  cat "$WORK/mpich-kill.out" "$WORK/mpich-kill.err" >&2
  exit 1
fi
echo "   peer copies, the MPI+OpenMP program and a killed rank (exit $rc) under MPICH"

echo "== OpenMP programs on 2 serving ranks"
unset OFFLOAD_HOST_DEVICES LD_LIBRARY_PATH
OFFLOAD_TEST_MPI=2 OFFLOAD_TEST_MPI_SERVER="$OFFLOAD" OFFLOAD_HOST_DEVICES=1 \
  cargo test -q --workspace --test c_programs -- --test-threads=2
