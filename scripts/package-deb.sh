#!/usr/bin/env bash
# Build the Debian packages from the install layout (scripts/install.sh with
# --prefix /usr), with dpkg-deb:
#   target/debian/offload_VERSION_ARCH.deb          the runtime
#   target/debian/offload-dbgsym_VERSION_ARCH.deb   its split debug info
#
#   scripts/package-deb.sh [--no-build] [--host-only]
# Prints the path of the runtime package on stdout.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)-1
ARCH=$(dpkg --print-architecture)
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
RUNTIME="$STAGE/offload"
DBG="$STAGE/offload-dbgsym"

echo "package-deb: building and staging the install layout (scripts/install.sh --prefix /usr)" >&2
scripts/install.sh --prefix /usr --destdir "$RUNTIME" "$@"
echo "package-deb: computing dependencies and writing the control files" >&2
mkdir -p "$DBG/usr/lib" "$RUNTIME/usr/share/doc/offload" "$DBG/usr/share/doc"
mv "$RUNTIME/usr/lib/debug" "$DBG/usr/lib/debug"
ln -s offload "$DBG/usr/share/doc/offload-dbgsym"

# Debian wants the completions of zsh under its vendor directory (as
# installed) and a copyright file.
cat >"$RUNTIME/usr/share/doc/offload/copyright" <<'COPYRIGHT'
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: offload

Files: *
License: Apache-2.0 WITH LLVM-exception
COPYRIGHT

# Shared-library dependencies, from what the binaries actually need: the
# libraries they link and the newest glibc symbol version they use.
GLIBC=$(objdump -T "$RUNTIME/usr/bin/offload" "$RUNTIME"/usr/lib/offload/*.so.22.1 \
  | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -1)
NEEDED=$(objdump -p "$RUNTIME/usr/bin/offload" "$RUNTIME"/usr/lib/offload/*.so.22.1 \
  | awk '/NEEDED/ {print $2}' | sort -u | tr '\n' ' ')
DEPENDS="libc6 (>= $GLIBC)"
case "$NEEDED" in *libgcc_s.so.1*) DEPENDS="$DEPENDS, libgcc-s1" ;; esac
for n in $NEEDED; do
  case "$n" in libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|libgcc_s.so.1|ld-linux*) ;;
    *) echo "package-deb: unexpected library dependency $n" >&2; exit 1 ;;
  esac
done
SIZE=$(du -sk "$RUNTIME" | cut -f1)
DBG_SIZE=$(du -sk "$DBG" | cut -f1)

mkdir -p "$RUNTIME/DEBIAN" "$DBG/DEBIAN"
cat >"$RUNTIME/DEBIAN/control" <<CONTROL
Package: offload
Version: $VERSION
Architecture: $ARCH
Maintainer: offload maintainers <maintainers@offload.invalid>
Installed-Size: $SIZE
Depends: $DEPENDS
Recommends: liboffload-22-dev, libomp-22-dev
Suggests: clang-22, lld-22
Section: devel
Priority: optional
Description: unified offloading runtime (OpenMP and liboffload drop-in libraries)
 Drop-in libomptarget.so.22.1 and libLLVMOffload.so.22.1 in a private
 directory (/usr/lib/offload; LLVM's own libraries are left alone), the
 offload command (info, inspect, exec, serve, record, replay, clang-flags),
 the OpenMP device runtime for NVIDIA and AMD GPUs (LLVM bitcode, for
 clang-22), C headers, a pkg-config file and man pages. OffloadAPI.h comes
 from liboffload-22-dev.
CONTROL
cat >"$DBG/DEBIAN/control" <<CONTROL
Package: offload-dbgsym
Version: $VERSION
Architecture: $ARCH
Maintainer: offload maintainers <maintainers@offload.invalid>
Installed-Size: $DBG_SIZE
Depends: offload (= $VERSION)
Section: debug
Priority: optional
Description: debug symbols for offload
 Split debug information of the offload command and drop-in libraries.
CONTROL
(cd "$RUNTIME" && find usr -type f -exec md5sum {} + >DEBIAN/md5sums)
(cd "$DBG" && find usr -type f -exec md5sum {} + >DEBIAN/md5sums)

echo "package-deb: compressing the packages (xz; about a minute)" >&2
mkdir -p target/debian
OUT="target/debian/offload_${VERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Zxz --build "$RUNTIME" "$OUT" >&2
dpkg-deb --root-owner-group -Zxz --build "$DBG" "target/debian/offload-dbgsym_${VERSION}_${ARCH}.deb" >&2
echo "package-deb: done: $OUT" >&2
echo "$OUT"
