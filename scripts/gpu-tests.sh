#!/usr/bin/env bash
# GPU checks of the CUDA plugin, for a machine with an NVIDIA GPU.
#
# NOT RUN YET: written without access to a GPU. The target machine is one
# H100 (sm_90), a CUDA 13 driver, Ubuntu 24.04, /usr/local/cuda with
# nvcc/ptxas, and no Rust or clang. So the work is split:
#
#   scripts/gpu-tests.sh bundle [DIR]   # here (Rust + clang-22): build DIR
#                                       # (default target/gpu-bundle)
#   DIR/gpu-tests.sh run                # there: run from the bundle
#
# The bundle holds the `offload` command and both drop-in libraries
# (release), PTX kernels made by clang-22 (saxpy, reduce), an ol* C program
# against them (ol_saxpy), and a baseline doing the same work straight on
# the driver (raw_saxpy). `run` checks `offload info` sees the GPU, runs
# ol_saxpy on PTX, then on a cubin and a fatbinary made there by ptxas /
# nvcc, and prints launch latency and copy bandwidth of both programs.
# Exit status: 0 all good, 1 a check failed.
set -euo pipefail

mode=${1:-run}
here=$(cd "$(dirname "$0")" && pwd)

if [[ $mode == bundle ]]; then
    root=$(cd "$here/.." && pwd)
    out=${2:-$root/target/gpu-bundle}
    rm -rf "$out"
    mkdir -p "$out/lib"
    (cd "$root" && cargo build --release -p offload-cli -p liboffload -p omptarget)
    cp "$root/target/release/offload" "$out/"
    cp "$root/target/release/libLLVMOffload.so" "$out/lib/libLLVMOffload.so.22.1"
    cp "$root/target/release/libomptarget.so" "$out/lib/libomptarget.so.22.1"
    src=$root/plugins/cuda/tests/gpu
    clang-22 --target=nvptx64-nvidia-cuda -march=sm_80 -Xclang -target-feature -Xclang +ptx78 \
        -nogpulib -ffreestanding -O2 -S "$src/kernels.c" -o "$out/kernels.ptx"
    clang-22 -O2 -I/usr/lib/llvm-22/include/offload "$src/ol_saxpy.c" -o "$out/ol_saxpy" \
        "$out/lib/libLLVMOffload.so.22.1" -Wl,-rpath,'$ORIGIN/lib'
    clang-22 -O2 -Wno-deprecated-non-prototype "$src/raw_saxpy.c" -o "$out/raw_saxpy" -ldl
    cp "$0" "$out/gpu-tests.sh"
    echo "bundle: $out (copy it to the GPU machine and run ./gpu-tests.sh run)"
    exit 0
fi

[[ $mode == run ]] || { echo "usage: $0 bundle [DIR] | run" >&2; exit 2; }
cd "$here"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
check() { if "$@"; then echo "PASS: $*"; else echo "FAIL: $*"; fail=1; fi; }

nvidia-smi -L || true
echo "== offload info"
OFFLOAD_PLUGINS=cuda ./offload info | tee info.txt
check grep -q "backend cuda, [1-9]" info.txt
check grep -q "sm_90" info.txt

echo "== ol* saxpy + reduce on PTX (JIT by the driver)"
check env OFFLOAD_PLUGINS=host,cuda ./ol_saxpy kernels.ptx 10000

cuda=${CUDA_HOME:-/usr/local/cuda}
if [[ -x $cuda/bin/ptxas ]]; then
    echo "== cubin (ptxas -arch=sm_90)"
    "$cuda/bin/ptxas" -arch=sm_90 kernels.ptx -o kernels.cubin
    check ./offload inspect kernels.cubin
    check env OFFLOAD_PLUGINS=host,cuda ./ol_saxpy kernels.cubin 1000
fi
if [[ -x $cuda/bin/nvcc ]]; then
    echo "== fatbinary (nvcc -fatbin: sm_90 cubin + compute_80 PTX)"
    if "$cuda/bin/nvcc" -fatbin -arch=sm_90 kernels.ptx -o kernels.fatbin 2>/dev/null; then
        check ./offload inspect kernels.fatbin
        check env OFFLOAD_PLUGINS=host,cuda ./ol_saxpy kernels.fatbin 1000
    else
        echo "SKIP: nvcc -fatbin from PTX failed"
    fi
fi

echo "== benchmark: ol* API through the plugin vs raw driver calls (same card)"
OFFLOAD_PLUGINS=host,cuda ./ol_saxpy kernels.ptx 100000 | grep bench || fail=1
./raw_saxpy kernels.ptx 100000 || fail=1

exit $fail
