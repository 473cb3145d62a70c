#!/usr/bin/env bash
# Install what the project needs on Debian bookworm (with Rust already
# installed) and build the workspace. Safe to run again: installed packages
# are skipped.
#
#   scripts/setup.sh            install, then build release (what the demo uses)
#   scripts/setup.sh --debug    install, then build debug (what the tests use)
#
# Besides the Debian packages it installs CUDA 13.0's ptxas, nvlink,
# libdevice and headers from PyPI into target/cuda-tools (clang-22 builds
# OpenMP programs for NVIDIA GPUs with them: `offload clang-flags`), and
# builds the OpenMP device runtime (devicertl/build.sh) into target/devicertl.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(clang-22 lld-22 llvm-22 llvm-22-tools libomp-22-dev liboffload-22-dev iproute2 openmpi-bin libopenmpi-dev mpich python3-venv python3-pip
  # PoCL's CPU device: what scripts/bench-group-kernels.sh compares ours with.
  pocl-opencl-icd ocl-icd-opencl-dev)

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

TARGET="${CARGO_TARGET_DIR:-target}"

# CUDA tools for building NVIDIA OpenMP programs (no GPU or driver needed):
# 13.0 matches the GPU machines' driver (580). nvidia-cuda-nvcc has ptxas,
# nvlink and libdevice; -runtime and -crt the headers clang reads the
# version from. `pip --target` installs into a folder of ours, nothing else.
CUDA_PIP=('nvidia-cuda-nvcc==13.0.*' 'nvidia-nvvm==13.0.*' 'nvidia-cuda-runtime==13.0.*' 'nvidia-cuda-crt==13.0.*')
CUDA_TOOLS="$TARGET/cuda-tools"
CUDA="$CUDA_TOOLS/nvidia/cu13"
cuda_ok() {
  [ -x "$CUDA/bin/ptxas" ] && [ -x "$CUDA/bin/nvlink" ] && [ -f "$CUDA/nvvm/libdevice/libdevice.10.bc" ] \
    && [ -f "$CUDA/include/cuda.h" ] && [ "$(cat "$CUDA_TOOLS/.packages" 2>/dev/null)" = "${CUDA_PIP[*]}" ]
}
if ! cuda_ok; then
  echo "setup: installing CUDA 13.0 tools from PyPI into $CUDA_TOOLS (about 250 MB)" >&2
  rm -rf "$CUDA_TOOLS"
  python3 -m pip install --quiet --no-warn-script-location --root-user-action=ignore --target "$CUDA_TOOLS" "${CUDA_PIP[@]}"
  chmod +x "$CUDA"/bin/* "$CUDA"/nvvm/bin/* 2>/dev/null || true
  echo "${CUDA_PIP[*]}" >"$CUDA_TOOLS/.packages"
  cuda_ok || { echo "setup: the CUDA tools in $CUDA are incomplete (ptxas, nvlink, libdevice, cuda.h)" >&2; exit 1; }
fi

# The OpenMP device runtime (bitcode archives for nvptx64 and amdgcn), where
# the build tree's `offload clang-flags` finds it.
devicertl/build.sh "$TARGET/devicertl"

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
