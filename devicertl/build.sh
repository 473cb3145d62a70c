#!/usr/bin/env bash
# Build the OpenMP device runtime into bitcode archives, one per GPU triple:
#
#   devicertl/build.sh [OUTDIR]     (default: target/devicertl)
#
# DEVICERTL_CFLAGS: more compiler flags, e.g. -DRTL_WIDEN_MAX=1 for the
# variants scripts/gpu-tests.sh compares on a GPU.
#
#   OUTDIR/nvptx64-nvidia-cuda/libompdevice.a
#   OUTDIR/amdgcn-amd-amdhsa/libompdevice.a
#   OUTDIR/<triple>/empty.bc        (for clang's --libomptarget-*-bc-path)
#
# The archives hold LLVM bitcode: clang's device link (LTO) takes what a
# program uses, and -fvisibility=hidden lets everything else drop.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/../target/devicertl}"
CLANG="${CLANG:-clang-22}"
AR="${LLVM_AR:-llvm-ar-22}"
command -v "$CLANG" >/dev/null || { echo "devicertl: $CLANG not found (scripts/setup.sh installs it)" >&2; exit 1; }
command -v "$AR" >/dev/null || { echo "devicertl: $AR not found (scripts/setup.sh installs llvm-22)" >&2; exit 1; }

resource="$("$CLANG" -print-resource-dir)"
COMMON=(-std=c11 -O2 -ffreestanding -nostdinc -isystem "$resource/include" -nogpulib
        -fvisibility=hidden -fno-exceptions -fomit-frame-pointer
        -Wall -Wextra -Werror -Wno-unused-parameter -I "$here/src")
read -ra extra <<< "${DEVICERTL_CFLAGS:-}" # one flag per word, no globbing
COMMON+=("${extra[@]}")

build_one() {
  local triple="$1"; shift
  local dir="$out/$triple"
  mkdir -p "$dir/obj"
  rm -f "$dir/obj/"*.bc "$dir/libompdevice.a"
  for src in "$here"/src/*.c; do
    "$CLANG" --target="$triple" "${COMMON[@]}" "$@" -emit-llvm -c "$src" \
      -o "$dir/obj/$(basename "${src%.c}").bc"
  done
  "$AR" rcs "$dir/libompdevice.a" "$dir/obj/"*.bc
  echo "" | "$CLANG" --target="$triple" -nogpulib "$@" -x c -emit-llvm -c - -o "$dir/empty.bc"
}

# NVPTX: generic bitcode; PTX 6.3 is the oldest ISA with the *.sync
# warp primitives (sm_70 and later); the program's own arch decides the rest.
build_one nvptx64-nvidia-cuda -Xclang -target-feature -Xclang +ptx63
# AMDGPU: generic bitcode; wavefront size is asked at run time.
build_one amdgcn-amd-amdhsa
echo "devicertl: built $out/{nvptx64-nvidia-cuda,amdgcn-amd-amdhsa}/libompdevice.a" >&2
