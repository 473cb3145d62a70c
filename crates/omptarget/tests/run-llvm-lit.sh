#!/bin/bash
# Runs LLVM's offload lit tests (fetched separately into $LIT_DIR, default
# /tmp/llvm-lit-tests; they are LLVM's code and are never committed here)
# against LLVM's libomptarget.so.22.1 and against ours, and prints a table.
#
# usage: run-llvm-lit.sh [our-lib-dir] [test-name-filter]
#   our-lib-dir defaults to a temp dir linking target/debug/libomptarget.so.
#
# This is a small stand-in for lit with LLVM's offload/test/lit.cfg for the
# current target x86_64-unknown-linux-gnu:
#   * substitutions %libomptarget-{compile,compilexx,compileopt,compileoptxx}
#     [-run-and-check|-and-run]-{generic,<triple>}, %libomptarget-run[-fail]-*,
#     %fcheck-*, %clang[xx]-*, %not, %s, %t; RUN lines for other triples become
#     `echo ignored-command` like lit does;
#   * features: x86_64-unknown-linux-gnu, unified_shared_memory (lit.cfg assumes
#     it for every non-GPU target); REQUIRES needs all of its features,
#     UNSUPPORTED skips on any, XFAIL inverts the result on any.
# Results: PASS, FAIL, UNSUP (skipped by UNSUPPORTED/REQUIRES), XFAIL, XPASS.
set -u
LIT_DIR=${LIT_DIR:-/tmp/llvm-lit-tests}
LLVM_LIB=/usr/lib/llvm-22/lib
HERE=$(cd "$(dirname "$0")" && pwd)
OURS=${1:-}
FILTER=${2:-}
if [ -z "$OURS" ]; then
  OURS=$(mktemp -d)
  ln -sf "$HERE/../../../target/debug/libomptarget.so" "$OURS/libomptarget.so.22.1"
fi
WORK=$(mktemp -d)
TRIPLE=x86_64-unknown-linux-gnu
OTHER_TRIPLES="aarch64-unknown-linux-gnu powerpc64le-ibm-linux-gnu powerpc64-ibm-linux-gnu nvptx64-nvidia-cuda amdgcn-amd-amdhsa"
FEATURES=" $TRIPLE unified_shared_memory "
CLANG="clang-22 -fopenmp -fopenmp-targets=$TRIPLE"
CLANGXX="clang++-22 -fopenmp -fopenmp-targets=$TRIPLE"
NOT=/usr/lib/llvm-22/bin/not
FC=FileCheck-22
TIMEOUT=${LIT_TIMEOUT:-300}

# Directive lines (RUN, REQUIRES, ...) of file $2, continued lines joined.
directive() {
  grep -E "^[[:space:]]*//[[:space:]]*$1:" "$2" | sed -E "s@^[[:space:]]*//[[:space:]]*$1:[[:space:]]?@@" |
    awk '{ if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 } else { print buf $0; buf = "" } }'
}

# 0 if any comma-separated feature expression in $1 holds (only plain names).
any_feature() {
  local f
  IFS=',' read -ra fs <<<"$1"
  for f in "${fs[@]}"; do
    f=$(echo "$f" | tr -d '[:space:]')
    [ -z "$f" ] && continue
    [[ $FEATURES == *" $f "* ]] && return 0
  done
  return 1
}
all_features() {
  local f
  IFS=',' read -ra fs <<<"$1"
  for f in "${fs[@]}"; do
    f=$(echo "$f" | tr -d '[:space:]')
    [ -z "$f" ] && continue
    [[ $FEATURES == *" $f "* ]] || return 1
  done
  return 0
}

# Expand one RUN line ($4) for source $1, binary $2, library path $3.
expand() {
  local src=$1 exe=$2 lp=$3 line=$4 t
  local run="env LD_LIBRARY_PATH=$lp timeout $TIMEOUT $exe"
  for t in $OTHER_TRIPLES; do
    line=$(echo "$line" | sed -E "s@%(libomptarget-[a-z-]+|clang|clangxx|fcheck)-$t@echo ignored-command@g")
  done
  line=${line//-generic/-$TRIPLE}
  local cc="$CLANG $src -o $exe" cxx="$CLANGXX $src -o $exe"
  local cco="$CLANG -O3 $src -o $exe" cxxo="$CLANGXX -O3 $src -o $exe"
  local chk="$FC $src"
  line=${line//%libomptarget-compilexx-run-and-check-$TRIPLE/$cxx \&\& $run | $chk}
  line=${line//%libomptarget-compileoptxx-run-and-check-$TRIPLE/$cxxo \&\& $run | $chk}
  line=${line//%libomptarget-compileopt-run-and-check-$TRIPLE/$cco \&\& $run | $chk}
  line=${line//%libomptarget-compile-run-and-check-$TRIPLE/$cc \&\& $run | $chk}
  line=${line//%libomptarget-compilexx-and-run-$TRIPLE/$cxx \&\& $run}
  line=${line//%libomptarget-compileoptxx-and-run-$TRIPLE/$cxxo \&\& $run}
  line=${line//%libomptarget-compileopt-and-run-$TRIPLE/$cco \&\& $run}
  line=${line//%libomptarget-compile-and-run-$TRIPLE/$cc \&\& $run}
  line=${line//%libomptarget-compileoptxx-$TRIPLE/$cxxo}
  line=${line//%libomptarget-compileopt-$TRIPLE/$cco}
  line=${line//%libomptarget-compilexx-$TRIPLE/$cxx}
  line=${line//%libomptarget-compile-$TRIPLE/$cc}
  line=${line//%libomptarget-run-fail-$TRIPLE/$NOT --crash $run}
  line=${line//%libomptarget-run-$TRIPLE/$run}
  line=${line//%fcheck-$TRIPLE/$chk}
  line=${line//%clangxx-$TRIPLE/$CLANGXX}
  line=${line//%clang-$TRIPLE/$CLANG}
  line=${line//%not/$NOT}
  line=${line//%s/$src}
  line=${line//%t/$exe.t}
  echo "$line" | sed -E "s@(^|[|&;] *)not @\1$NOT @g"
}

# Runs test $1 with library path $2; prints PASS/FAIL/UNSUP/XFAIL/XPASS.
run_test() {
  local src=$1 lp=$2 tag=$3 l cmd ok=1 xfail=0
  local exe="$WORK/$(basename "$src").$tag"
  while IFS= read -r l; do any_feature "$l" && { echo UNSUP; return; }; done < <(directive UNSUPPORTED "$src")
  while IFS= read -r l; do all_features "$l" || { echo UNSUP; return; }; done < <(directive REQUIRES "$src")
  while IFS= read -r l; do any_feature "$l" && xfail=1; done < <(directive XFAIL "$src")
  : >"$exe.log"
  while IFS= read -r l; do
    cmd=$(expand "$src" "$exe" "$lp" "$l")
    echo "\$ $cmd" >>"$exe.log"
    (cd "$WORK" && bash -o pipefail -c "$cmd") >>"$exe.log" 2>&1 || { ok=0; break; }
  done < <(directive RUN "$src")
  case $ok$xfail in 10) echo PASS ;; 00) echo FAIL ;; 01) echo XFAIL ;; 11) echo XPASS ;; esac
}

printf "%-70s %-6s %-6s\n" TEST LLVM OURS
pl=0; po=0; ul=0; n=0; same=0
while IFS= read -r f; do
  [ -n "$FILTER" ] && [[ $f != *$FILTER* ]] && continue
  n=$((n + 1))
  rl=$(run_test "$f" "$LLVM_LIB" llvm)
  ro=$(run_test "$f" "$OURS:$LLVM_LIB" ours)
  [ "$rl" = PASS ] && pl=$((pl + 1)); [ "$ro" = PASS ] && po=$((po + 1))
  [ "$rl" = UNSUP ] && ul=$((ul + 1))
  [ "$rl" = "$ro" ] && same=$((same + 1))
  printf "%-70s %-6s %-6s\n" "${f#"$LIT_DIR"/}" "$rl" "$ro"
done < <(find "$LIT_DIR" \( -name '*.c' -o -name '*.cpp' \) | sort)
echo "passed: LLVM $pl/$n, ours $po/$n; unsupported $ul; same result $same/$n   (logs in $WORK)"
