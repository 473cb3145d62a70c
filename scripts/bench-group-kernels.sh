#!/usr/bin/env bash
# GPU-style kernels on our CPU device against PoCL's CPU device, side by
# side in one run (issue 24's comparison):
#
#   scripts/bench-group-kernels.sh [--quick] [BUILD_DIR]   (default target/release)
#
# Builds plugins/host/tests/kernels/group_kernels.c (the kernels against
# include/offload/host_kernel.h, clang-22 -O2), crates/offload-bench/c/
# ol_group_kernels.c (runs them through our libLLVMOffload.so on the first
# CPU device) and cl_group_kernels.c (the same kernels in OpenCL C, on the
# first OpenCL CPU device: PoCL, Debian's pocl-opencl-icd), then runs the
# two programs alternately for ROUNDS rounds (7; --quick: 2), each measure
# best of 5 launches (enqueue + wait). Prints per kernel the median and
# quartiles of ours / PoCL within a round (rates: higher is better for us;
# launch: time, lower is better), and the absolute ranges.
#
# The barrier kernels are compared three ways: `matmul_tiled` /
# `reduce_dynamic` as written, from the shared object (our per-item
# function, run as coroutines switching at each barrier); the same from
# LLVM bitcode (`bc:`: the JIT gives them work-item loops); and
# `matmul_loops` / `reduce_loops` (the group form a kernel's author may
# write, OFFLOAD_HOST_KERNEL_GROUP); each against PoCL's one OpenCL version.
# BUILD_DIR holds libLLVMOffload.so (`cargo build --release -p liboffload`).
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
dir=${1:-target/release}
[ -e "$dir/libLLVMOffload.so" ] ||
  { echo "bench-group-kernels: $dir/libLLVMOffload.so missing (cargo build --release -p liboffload)" >&2; exit 1; }
command -v clang-22 >/dev/null || { echo "bench-group-kernels: clang-22 not found" >&2; exit 1; }
[ -e /usr/include/CL/cl.h ] && [ -n "$(ls /etc/OpenCL/vendors/*pocl* 2>/dev/null)" ] ||
  { echo "bench-group-kernels: PoCL not installed (pocl-opencl-icd, ocl-icd-opencl-dev; scripts/setup.sh installs them)" >&2; exit 1; }
dir=$(cd "$dir" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib" "$work/jit"
chmod 700 "$work/jit"
ln -s "$dir/libLLVMOffload.so" "$work/lib/libLLVMOffload.so.22.1"

clang-22 -O2 -fPIC -shared -Iinclude plugins/host/tests/kernels/group_kernels.c -o "$work/group_kernels.so"
# The same kernels as LLVM bitcode: loading compiles them (the JIT), and
# the barrier kernels get work-item loops instead of coroutines.
clang-22 -O2 -fPIC -emit-llvm -c -Iinclude plugins/host/tests/kernels/group_kernels.c -o "$work/group_kernels.bc"
clang-22 -O2 -I/usr/lib/llvm-22/include/offload crates/offload-bench/c/ol_group_kernels.c \
  -L"$work/lib" -l:libLLVMOffload.so.22.1 -Wl,-rpath,"$work/lib" -o "$work/ol_group_kernels"
clang-22 -O2 crates/offload-bench/c/cl_group_kernels.c -lOpenCL -o "$work/cl_group_kernels"

rounds=7
[ $quick = 1 ] && rounds=2
# One line per measure: NAME VALUE (GFLOP/s, M items/s, GB/s; us for launch).
measures() {
  awk '/^WRONG/ { print "bench-group-kernels: " $0 > "/dev/stderr"; bad = 1 }
       /^(matmul|reduce|write_global_id|saxpy)/ { print $1, ($NF == "items/s" ? $(NF - 2) : $(NF - 1)) + 0 }
       /^launch/ { print "launch", $(NF - 1) + 0 }
       END { exit bad }'
}
for r in $(seq "$rounds"); do
  OFFLOAD_PLUGINS=host "$work/ol_group_kernels" "$work/group_kernels.so" 5 | measures | sed "s/^/$r ours /"
  for k in matmul_tiled reduce_dynamic; do
    OFFLOAD_PLUGINS=host OFFLOAD_JIT_CACHE="$work/jit" "$work/ol_group_kernels" "$work/group_kernels.bc" 5 $k |
      measures | sed "s/^/$r ours bc:/"
  done
  "$work/cl_group_kernels" 5 | measures | sed "s/^/$r pocl /"
done >"$work/all"

quartiles() { # values on stdin -> "median (q1-q3)"
  sort -g | awk '{ v[NR] = $1 }
    function at(p,  i) { i = 1 + p * (NR - 1); return v[int(i)] + (i - int(i)) * (v[int(i) + 1] - v[int(i)]) }
    END { printf "%.2f (%.2f-%.2f)", at(0.5), at(0.25), at(0.75) }'
}
range() { sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%g-%g", lo, hi }'; }
printf '%-16s %-8s %-22s %-20s %-20s\n' kernel "vs PoCL" "ours/PoCL median (IQR)" ours PoCL
for pair in matmul_tiled:matmul_tiled bc:matmul_tiled:matmul_tiled matmul_loops:matmul_tiled \
  reduce_dynamic:reduce_dynamic bc:reduce_dynamic:reduce_dynamic reduce_loops:reduce_dynamic \
  write_global_id:write_global_id saxpy:saxpy launch:launch; do
  ours=${pair%:*} theirs=${pair##*:}
  ratios=$(awk -v a="$ours" -v b="$theirs" '
    $2 == "ours" && $3 == a { o[$1] = $4 } $2 == "pocl" && $3 == b { p[$1] = $4 }
    END { for (r in o) if (p[r] > 0) print o[r] / p[r] }' "$work/all")
  [ -n "$ratios" ] || continue
  printf '%-16s %-8s %-22s %-20s %-20s\n' "$ours" "$theirs" "$(echo "$ratios" | quartiles)" \
    "$(awk -v a="$ours" '$2 == "ours" && $3 == a { print $4 }' "$work/all" | range)" \
    "$(awk -v b="$theirs" '$2 == "pocl" && $3 == b { print $4 }' "$work/all" | range)"
done
echo "# units: matmul GFLOP/s, reduce and write_global_id M items/s, saxpy GB/s, launch us (a time: lower is better)"
echo "# $rounds rounds, load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
