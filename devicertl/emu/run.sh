#!/usr/bin/env bash
# Host tests of the OpenMP device runtime (devicertl/src) on the GPU
# emulation (devicertl/emu/emu.c): no GPU needed.
#
#   devicertl/emu/run.sh [BUILDDIR]    (default: target/devicertl-emu)
#
# 1. builds src/*.c (the whole runtime) + emu.c + each tests/test_*.c with
#    clang-22 for x86_64 and runs every test; then runs them again with
#    EMU_ACTIVE_MASK=self (plat_active_mask = the caller's lane only);
#    the plain build also runs devicertl/tests/schedule_coverage.c
#    (workshare.c alone, rtl.h stubbed: millions of schedule cases);
# 2. does it again with -fsanitize=thread and runs them under TSan
#    (TSAN_OPTIONS=halt_on_error=1: a race fails the test), in quick mode
#    (TF_QUICK=1: fewer sizes);
# 3. builds the runtime with -fsanitize=address,undefined and runs the tests
#    in quick mode under it.
# Fails (non-zero) when clang-22 is missing, a build fails, or any test
# fails, times out or races. Environment: CLANG (default clang-22),
# EMU_MODES (default "plain self tsan asan"), EMU_TIMEOUT (seconds per test
# program, default 90), EMU_TESTS (space-separated test names to run,
# default all), TF_VERBOSE=1 (name each case as it starts), TF_SKIP='a|b'
# (skip the cases whose names contain a or b; they are reported as skipped),
# EMU_HANG_SECONDS (default 15: the emulator reports a wait this long as a
# hang).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/target/devicertl-emu}"
CLANG="${CLANG:-clang-22}"
MODES="${EMU_MODES:-plain self tsan asan}"
TIMEOUT="${EMU_TIMEOUT:-90}"
# A wait this long in the emulator is reported as a hang (the program then
# aborts with what every thread is doing): far above any legitimate wait.
export EMU_HANG_SECONDS="${EMU_HANG_SECONDS:-15}"

if ! command -v "$CLANG" >/dev/null 2>&1; then
  echo "devicertl/emu: $CLANG not found: the host tests need it (scripts/setup.sh installs clang-22)" >&2
  exit 1
fi
command -v timeout >/dev/null || { echo "devicertl/emu: 'timeout' (coreutils) not found" >&2; exit 1; }

srcs=("$root"/devicertl/src/*.c)
tests=()
for t in "$here"/tests/test_*.c; do
  name="$(basename "${t%.c}")"
  if [ -n "${EMU_TESTS:-}" ] && [[ " $EMU_TESTS " != *" $name "* ]]; then continue; fi
  tests+=("$name")
done
[ ${#tests[@]} -gt 0 ] || { echo "devicertl/emu: no tests selected" >&2; exit 1; }

jobs_max="$(nproc 2>/dev/null || echo 2)"
start_all=$(date +%s)
failures=()
summary=()
built_plain=0
ulimit -c 0 2>/dev/null || true

# compile OUT SRC FLAGS...: one object, its diagnostics in OUT.log
compile() {
  local obj="$1" src="$2"; shift 2
  "$CLANG" "$@" -c "$src" -o "$obj" >"$obj.log" 2>&1
}

build_mode() {
  local mode="$1" dir="$out/$mode"; shift
  local flags=(-std=c11 -O1 -g -pthread -I "$root/devicertl/src" -I "$here" "$@")
  mkdir -p "$dir/obj"
  rm -f "$dir/obj/"*.o "$dir/obj/"*.log "$dir/"test_*
  local pids=() objs=() all=("${srcs[@]}" "$here/emu.c")
  for t in "${tests[@]}"; do all+=("$here/tests/$t.c"); done
  for src in "${all[@]}"; do
    local base; base="$(basename "${src%.c}")"
    local extra=()
    case "$src" in
      "$here"/*) extra=(-Wall -Wextra) ;;       # the emulator and the tests
      *) extra=(-Wall -Wno-unused-parameter) ;; # the runtime, as build.sh builds it
    esac
    compile "$dir/obj/$base.o" "$src" "${flags[@]}" "${extra[@]}" &
    pids+=($!)
    if [ ${#pids[@]} -ge "$jobs_max" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
  done
  wait
  local ok=1
  for src in "${all[@]}"; do
    local base; base="$(basename "${src%.c}")"
    if [ ! -s "$dir/obj/$base.o" ]; then
      echo "devicertl/emu [$mode]: compiling $src failed:" >&2
      cat "$dir/obj/$base.o.log" >&2
      ok=0
    elif [ -s "$dir/obj/$base.o.log" ]; then
      echo "devicertl/emu [$mode]: warnings in $(basename "$src"):" >&2
      cat "$dir/obj/$base.o.log" >&2
    fi
  done
  [ $ok = 1 ] || return 1
  local rt=()
  for src in "${srcs[@]}"; do rt+=("$dir/obj/$(basename "${src%.c}").o"); done
  for t in "${tests[@]}"; do
    if ! "$CLANG" "${flags[@]}" "${rt[@]}" "$dir/obj/emu.o" "$dir/obj/$t.o" -o "$dir/$t" \
        >"$dir/$t.link.log" 2>&1; then
      echo "devicertl/emu [$mode]: linking $t failed:" >&2
      cat "$dir/$t.link.log" >&2
      ok=0
    fi
  done
  [ $ok = 1 ]
}

run_mode() {
  local mode="$1" dir="$out/$mode"; shift
  local t
  for t in "${tests[@]}"; do
    local log="$dir/$t.out" t0 t1 rc line
    if [ ! -x "$dir/$t" ]; then
      summary+=("FAIL [$mode] $t: not built")
      failures+=("[$mode] $t (build)")
      continue
    fi
    t0=$(date +%s.%N)
    env "$@" timeout -k 5 "$TIMEOUT" "$dir/$t" >"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    line="$(grep -E '^test_[a-z_]+: [0-9]+ passed, [0-9]+ failed' "$log" | tail -n1)"
    local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    if [ $rc -eq 0 ] && [ -n "$line" ] && ! grep -q "WARNING: ThreadSanitizer\|ERROR: AddressSanitizer\|runtime error:" "$log"; then
      summary+=("PASS [$mode] $line (${secs}s)")
    else
      local why="exit status $rc"
      [ $rc -eq 124 ] || [ $rc -eq 137 ] && why="timed out after ${TIMEOUT}s"
      grep -q "WARNING: ThreadSanitizer" "$log" && why="$why, data race"
      grep -q "ERROR: AddressSanitizer" "$log" && why="$why, AddressSanitizer error"
      grep -q "runtime error:" "$log" && why="$why, undefined behaviour"
      summary+=("FAIL [$mode] $t: ${line:-no summary line} ($why, ${secs}s)")
      failures+=("[$mode] $t")
      echo "----- devicertl/emu [$mode] $t failed ($why); the end of its output ($log):" >&2
      tail -n 60 "$log" >&2
      echo "-----" >&2
    fi
  done
}

# workshare.c alone against stubbed rtl.h functions (devicertl/tests/):
# millions of schedule cases, every iteration once, one "last". Also with
# the variants scripts/gpu-tests.sh times (RTL_WIDEN_MAX=1: clang's chunks)
# and with one chunk per team (RTL_TEAM_CHUNKS=1).
run_schedule_unit() {
  local define="$1" t0 line name="schedule_coverage"
  local bin="$out/plain/schedule_coverage${define:+_${define//[^A-Za-z0-9]/_}}"
  [[ -z "$define" ]] || name+=" ($define)"
  t0=$(date +%s)
  if ! "$CLANG" -std=c11 -O1 -g -pthread ${define:+"-D$define"} -I "$root/devicertl/src" \
      "$root/devicertl/tests/schedule_coverage.c" "$root/devicertl/src/workshare.c" \
      -o "$bin" >"$bin.log" 2>&1; then
    summary+=("FAIL [plain] $name: not built (see $bin.log)")
    failures+=("[plain] $name")
    return
  fi
  if line="$(timeout "$TIMEOUT" "$bin" 2>&1 | tail -1)" && [[ "$line" == *": ok" ]]; then
    summary+=("PASS [plain] $name: ${line#*: } ($(( $(date +%s) - t0 ))s)")
  else
    summary+=("FAIL [plain] $name: ${line:-no output}")
    failures+=("[plain] $name")
  fi
}

for mode in $MODES; do
  t0=$(date +%s)
  case "$mode" in
    plain)
      build_mode plain || failures+=("[plain] build")
      built_plain=1
      run_mode plain
      for d in "" RTL_WIDEN_MAX=1 RTL_TEAM_CHUNKS=1; do run_schedule_unit "$d"; done ;;
    self)
      # The plain build again, with plat_active_mask = the caller's lane only
      # (what sm_70+ hardware may return in diverged code).
      [ "$built_plain" = 1 ] || { build_mode plain || failures+=("[plain] build"); built_plain=1; }
      mkdir -p "$out/self"
      rm -f "$out/self/"test_*
      for t in "${tests[@]}"; do [ -x "$out/plain/$t" ] && cp "$out/plain/$t" "$out/self/$t"; done
      run_mode self EMU_ACTIVE_MASK=self ;;
    tsan)
      build_mode tsan -fsanitize=thread || failures+=("[tsan] build")
      run_mode tsan TF_QUICK=1 \
        TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" ;;
    asan)
      # -fno-sanitize=function: outlined regions are called through a generic
      # pointer type, as in clang's IR (the C prototypes of the tests differ).
      build_mode asan -fsanitize=address,undefined -fno-sanitize=function \
        -fno-sanitize-recover=undefined -fno-omit-frame-pointer || failures+=("[asan] build")
      run_mode asan TF_QUICK=1 \
        ASAN_OPTIONS="detect_leaks=0 abort_on_error=0 ${ASAN_OPTIONS:-}" \
        UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}" ;;
    *) echo "devicertl/emu: unknown mode '$mode' (plain, self, tsan, asan)" >&2; exit 1 ;;
  esac
  echo "devicertl/emu: [$mode] done in $(( $(date +%s) - t0 ))s" >&2
done

echo
echo "devicertl/emu summary ($(( $(date +%s) - start_all ))s, runtime: ${#srcs[@]} files of devicertl/src, modes: $MODES):"
for s in "${summary[@]}"; do echo "  $s"; done
if [ ${#failures[@]} -gt 0 ]; then
  echo "devicertl/emu: FAILED: ${failures[*]}"
  exit 1
fi
echo "devicertl/emu: all ${#tests[@]} test programs passed in every mode"
