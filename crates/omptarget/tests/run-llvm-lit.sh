#!/bin/bash
# Runs LLVM's offload lit tests (fetched separately into $LIT_DIR, default
# /tmp/llvm-lit-tests; they are LLVM's code and are never committed here)
# against LLVM's libomptarget.so.22.1 and against ours, and prints a table.
#
# usage: run-llvm-lit.sh [our-lib-dir]   (default: a temp dir linking target/debug/libomptarget.so)
# Supported RUN substitutions (x86_64-unknown-linux-gnu only):
#   %libomptarget-compile-generic, %libomptarget-compile-run-and-check-generic,
#   %libomptarget-run-generic, %libomptarget-run-fail-generic, %fcheck-generic,
#   %not, not --crash; extra flags after the compile substitution are kept.
set -u
LIT_DIR=${LIT_DIR:-/tmp/llvm-lit-tests}
LLVM_LIB=/usr/lib/llvm-22/lib
HERE=$(cd "$(dirname "$0")" && pwd)
OURS=${1:-}
if [ -z "$OURS" ]; then
  OURS=$(mktemp -d)
  ln -sf "$HERE/../../../target/debug/libomptarget.so" "$OURS/libomptarget.so.22.1"
fi
WORK=$(mktemp -d)
CC="clang-22 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu"
CXX="clang++-22 -fopenmp -fopenmp-targets=x86_64-unknown-linux-gnu"
NOT=/usr/lib/llvm-22/bin/not
FC=FileCheck-22

# Join continued RUN lines of file $1, one command per line.
run_lines() {
  grep -E '^[[:space:]]*//[[:space:]]*RUN:' "$1" | sed -E 's@^[[:space:]]*//[[:space:]]*RUN:[[:space:]]?@@' |
    awk '{ if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 } else { print buf $0; buf = "" } }'
}

# Expand substitutions of one RUN line for file $1, binary $2, lib path $3.
expand() {
  local line=$4 src=$1 exe=$2 lp=$3 cc=$CC
  [[ $src == *.cpp ]] && cc=$CXX
  local run="env LD_LIBRARY_PATH=$lp $exe"
  line=${line//%libomptarget-compile-run-and-check-generic/$cc $src -o $exe \&\& $run | $FC $src}
  line=${line//%libomptarget-compilexx-run-and-check-generic/$CXX $src -o $exe \&\& $run | $FC $src}
  line=${line//%libomptarget-compileopt-generic/$cc -O3 $src -o $exe}
  line=${line//%libomptarget-compile-generic/$cc $src -o $exe}
  line=${line//%libomptarget-compilexx-generic/$CXX $src -o $exe}
  line=${line//%libomptarget-run-fail-generic/$NOT --crash $run}
  line=${line//%libomptarget-run-generic/$run}
  line=${line//%fcheck-generic/$FC $src}
  line=${line//%not --crash/$NOT --crash}
  line=${line//%not/$NOT}
  line=${line//%s/$src}
  line=${line//%t/$exe.t}
  line=$(echo "$line" | sed -E "s@(^|[|&;] *)not @\1$NOT @g")
  echo "$line"
}

run_test() { # file lib-path tag -> 0 pass
  local src=$1 lp=$2 tag=$3
  local exe="$WORK/$(basename "$src").$tag"
  grep -qE '^[[:space:]]*//[[:space:]]*(REQUIRES|UNSUPPORTED):.*(x86_64-unknown-linux-gnu|host|libc|gpu)[^a-z]' "$src" && {
    grep -qE 'UNSUPPORTED:.*x86_64' "$src" && return 2
  }
  while IFS= read -r l; do
    cmd=$(expand "$src" "$exe" "$lp" "$l")
    (cd "$WORK" && bash -o pipefail -c "$cmd") >"$exe.log" 2>&1 || return 1
  done < <(run_lines "$src")
  return 0
}

printf "%-70s %-6s %-6s\n" TEST LLVM OURS
pl=0; po=0; n=0
while IFS= read -r f; do
  n=$((n + 1))
  run_test "$f" "$LLVM_LIB" llvm; rl=$?
  run_test "$f" "$OURS:$LLVM_LIB" ours; ro=$?
  s() { case $1 in 0) echo PASS;; 2) echo UNSUP;; *) echo FAIL;; esac; }
  [ $rl = 0 ] && pl=$((pl + 1)); [ $ro = 0 ] && po=$((po + 1))
  printf "%-70s %-6s %-6s\n" "${f#$LIT_DIR/}" "$(s $rl)" "$(s $ro)"
done < <(find "$LIT_DIR" -name '*.c' -o -name '*.cpp' | sort)
echo "passed: LLVM $pl/$n, ours $po/$n   (logs in $WORK)"
