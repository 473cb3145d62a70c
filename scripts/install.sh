#!/usr/bin/env bash
# Install the offload runtime (building it first when needed).
#
#   scripts/install.sh [--prefix DIR] [--destdir DIR] [--host-only] [--no-build]
#
#   --prefix DIR   where it will live (default /usr/local)
#   --destdir DIR  stage the files under DIR instead of / (packaging)
#   --host-only    drop-in libraries with host devices only (no remote, CUDA
#                  or MPI plugin: about a third of the size)
#   --no-build     install what target/release and target/devicertl already hold
#
# Layout under PREFIX:
#   bin/offload                               the command
#   lib/offload/libomptarget.so.22.1          drop-in libraries (+ .so links),
#   lib/offload/libLLVMOffload.so.22.1        private: the system's LLVM
#                                             libraries are never touched
#   lib/offload/<triple>/libompdevice.a       the OpenMP device runtime (LLVM
#   lib/offload/<triple>/empty.bc             bitcode) for nvptx64-nvidia-cuda
#                                             and amdgcn-amd-amdhsa, found by
#                                             `offload clang-flags`
#   lib/pkgconfig/offload.pc                  pkg-config for ol* C programs
#   include/offload/{host_kernel,interop}.h   C headers
#   share/man/man1/offload*.1                 man pages
#   share/bash-completion/completions/offload, share/zsh/vendor-completions/_offload,
#   share/fish/vendor_completions.d/offload.fish
#   lib/debug/PREFIX/...                      split debug info (gdb finds it
#                                             under its debug-file-directory)
set -euo pipefail
cd "$(dirname "$0")/.."

PREFIX=/usr/local
DESTDIR=""
BUILD=1
HOST_ONLY=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) PREFIX="$2"; shift 2 ;;
    --prefix=*) PREFIX="${1#*=}"; shift ;;
    --destdir) DESTDIR="$2"; shift 2 ;;
    --destdir=*) DESTDIR="${1#*=}"; shift ;;
    --host-only) HOST_ONLY=1; shift ;;
    --no-build) BUILD=0; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "install: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$PREFIX" in /*) ;; *) echo "install: --prefix must be absolute" >&2; exit 2 ;; esac
PREFIX="${PREFIX%/}"
LLVM_INCLUDE=/usr/lib/llvm-22/include
OUT="${CARGO_TARGET_DIR:-target}/release"
# devicertl/build.sh's output (the build tree's `offload clang-flags` uses it too).
RTL="${CARGO_TARGET_DIR:-target}/devicertl"
RTL_TRIPLES=(nvptx64-nvidia-cuda amdgcn-amd-amdhsa)

# One line per phase (with how long it took); cargo shows its own progress
# (a bar on a terminal, a line per crate otherwise). A first release build
# takes minutes: one optimisation unit across crates (fat LTO).
phase_start=$(date +%s)
phase() {
  local now; now=$(date +%s)
  echo "install: [$1] $2 ($((now - phase_start)) s so far)" >&2
}
if [ "$BUILD" = 1 ]; then
  phase 1/5 "building the offload command (release, fat LTO: a first build takes several minutes)"
  cargo build --release -p offload-cli
  # The libraries in their own invocation so that --host-only's features
  # are not unified with the command's.
  phase 2/5 "building libomptarget.so and libLLVMOffload.so (release)"
  if [ "$HOST_ONLY" = 1 ]; then
    cargo build --release -p omptarget -p liboffload --no-default-features
  else
    cargo build --release -p omptarget -p liboffload
  fi
  # The OpenMP device runtime (needs clang-22 and llvm-ar-22: scripts/setup.sh).
  phase 3/5 "building the OpenMP device runtime (devicertl/build.sh)"
  devicertl/build.sh "$RTL"
fi
for f in offload libomptarget.so libLLVMOffload.so; do
  [ -f "$OUT/$f" ] || { echo "install: $OUT/$f is missing (run without --no-build)" >&2; exit 1; }
done
for t in "${RTL_TRIPLES[@]}"; do
  for f in libompdevice.a empty.bc; do
    [ -f "$RTL/$t/$f" ] || { echo "install: $RTL/$t/$f is missing (run without --no-build, or devicertl/build.sh)" >&2; exit 1; }
  done
done

ROOT="$DESTDIR$PREFIX"
phase 4/5 "installing into $ROOT (stripping, split debug info)"
DEBUG_ROOT="$ROOT/lib/debug$PREFIX"
install -d "$ROOT/bin" "$ROOT/lib/offload" "$ROOT/lib/pkgconfig" "$ROOT/include/offload" \
  "$ROOT/share/man/man1" "$ROOT/share/bash-completion/completions" \
  "$ROOT/share/zsh/vendor-completions" "$ROOT/share/fish/vendor_completions.d" \
  "$DEBUG_ROOT/bin" "$DEBUG_ROOT/lib/offload"

# install_split SRC DEST_DIR NAME: NAME stripped, its debug info beside it
# under lib/debug, tied by a .gnu_debuglink.
install_split() {
  local src="$1" dir="$2" name="$3"
  local rel="${dir#"$ROOT"}"
  local dbg="$DEBUG_ROOT$rel/$name.debug"
  install -m 755 "$src" "$dir/$name"
  objcopy --only-keep-debug "$dir/$name" "$dbg"
  chmod 644 "$dbg"
  objcopy --strip-unneeded --remove-section=.gnu_debuglink \
    --add-gnu-debuglink="$dbg" "$dir/$name"
}

install_split "$OUT/offload" "$ROOT/bin" offload
for lib in libomptarget libLLVMOffload; do
  install_split "$OUT/$lib.so" "$ROOT/lib/offload" "$lib.so.22.1"
  ln -sfn "$lib.so.22.1" "$ROOT/lib/offload/$lib.so"
done
for t in "${RTL_TRIPLES[@]}"; do
  install -d "$ROOT/lib/offload/$t"
  install -m 644 "$RTL/$t/libompdevice.a" "$RTL/$t/empty.bc" "$ROOT/lib/offload/$t/"
done
install -m 644 include/offload/host_kernel.h include/offload/interop.h "$ROOT/include/offload/"
sed -e "s|@prefix@|$PREFIX|" -e "s|@llvm_includedir@|$LLVM_INCLUDE|" \
  packaging/offload.pc.in >"$ROOT/lib/pkgconfig/offload.pc"
chmod 644 "$ROOT/lib/pkgconfig/offload.pc"

"$ROOT/bin/offload" man "$ROOT/share/man/man1"
gzip -9nf "$ROOT/share/man/man1/"offload*.1
"$ROOT/bin/offload" completions bash >"$ROOT/share/bash-completion/completions/offload"
"$ROOT/bin/offload" completions zsh >"$ROOT/share/zsh/vendor-completions/_offload"
"$ROOT/bin/offload" completions fish >"$ROOT/share/fish/vendor_completions.d/offload.fish"

echo "install: installed into $ROOT" >&2
for f in "$ROOT/bin/offload" "$ROOT/lib/offload/"*.so.22.1 "$ROOT/lib/offload/"*/libompdevice.a; do
  printf 'install:   %-50s %6s KiB\n' "${f#"$ROOT"/}" $(( $(stat -c %s "$f") / 1024 )) >&2
done
phase 5/5 "done: $ROOT"
