#!/usr/bin/env bash
# GPU checks and benchmarks of the CUDA plugin, for a machine with an
# NVIDIA GPU.
#
# Written for a machine like the one it ran on (2026-11-26, results in
# BENCHMARKS.md): one H200 or H100 (sm_90), a CUDA 13 driver, Ubuntu 24.04,
# /usr/local/cuda with nvcc/ptxas, and no Rust or clang. So the work is
# split:
#
#   scripts/gpu-tests.sh bundle [DIR]    # here (Rust + clang-22): build DIR
#                                        # (default target/gpu-bundle)
#   DIR/gpu-tests.sh run                 # there: run from the bundle
#   scripts/gpu-tests.sh carry [DIR [CARRY]]  # here: DIR packed to travel
#                                        # (default target/gpu-carry, under
#                                        # 64 MiB with the working tree);
#                                        # there: CARRY/run-there.sh
#   scripts/gpu-tests.sh rehearse [DIR]  # here: bundle + run against the
#                                        # fake driver (what CI runs)
#
# The bundle (plain files; copy the directory over keeping modes, e.g.
# `tar czf gpu-bundle.tgz -C target gpu-bundle`) holds:
#   offload, lib/libLLVMOffload.so.22.1, lib/libomptarget.so.22.1
#                the command and both drop-in libraries (debug info stripped)
#   offload-bench  the project's benchmark harness (queue-memory mode)
#   lib/libomp.so.5  LLVM 22's OpenMP runtime (the GPU machine has no LLVM)
#   kernels.ptx  saxpy and reduce (plugins/cuda/tests/gpu/kernels.c, clang-22)
#   gpu_api      the Rust API tests (plugins/cuda/tests/gpu_api.rs), built
#                by `cargo test --no-run`
#   ol_saxpy     ol* program: saxpy + reduce checked; --bench times the cases
#   raw_saxpy    the same cases straight on the driver (the baseline)
#   omp_api      OpenMP API on the CUDA device: omp_target_* memory routines,
#                an interop object's offload table launching saxpy
#   omp_checks, omp_bench   OpenMP programs with target regions for
#                ${GPU_OMP_ARCH:-sm_90} (plugins/cuda/tests/gpu/omp_*.c), built
#                with `offload clang-flags` against our device runtime; or
#                OMP-SKIP, saying why they could not be built; with
#                omp_bench_nolto (--no-lto), omp_bench_reloc and
#                omp_checks_reloc (--ptxas-relocatable), omp_bench_widen1
#                (a device runtime built with -DRTL_WIDEN_MAX=1: clang's
#                distribute chunks) and omp_bench_noil (--interleave 1) as
#                references
#   omp_progs/   the 16 crates/omptarget/tests/c programs of gpu_build.rs,
#                built the same way
#   cuda_bench.cu  the CUDA C baselines, compiled there with nvcc
#   llvm22/      LLVM 22's libomptarget.so.22.1 (its CUDA plugin is inside)
#                and the libraries it needs (libLLVM.so.22.1, libz3.so.4,
#                libicu*.so.72, ...), each `zstd -19 --long=27`, plus a zstd
#                to unpack them there (GPU_BUNDLE_LLVM_RUNTIME=0: left out;
#                about 50 MB: with the rest the bundle may pass a 64 MiB
#                transfer limit, so llvm22/ may travel on its own and `run`
#                finds it through GPU_LLVM22_DIR)
#   BUNDLE-INFO  commit and profile it was built from
#
# `run` (needs bash, coreutils, grep, sed, awk; nothing from Rust or LLVM):
#   1. `offload info` sees a CUDA device (its name, arch, driver version);
#   2. gpu_api (OFFLOAD_GPU_TEST_PTX=kernels.ptx ./gpu_api --test-threads=1
#      --nocapture);
#   3. ol_saxpy on the PTX (JIT by the driver), then on a cubin (ptxas) and
#      a fatbinary (nvcc, else the fatbinary tool) made there from it:
#      SKIP lines without ${CUDA_HOME:-/usr/local/cuda};
#   4. omp_api with OFFLOAD_PLUGINS=cuda;
#   5. `offload serve` (CUDA plugin) on loopback, ol_saxpy --bench 2000
#      through the remote plugin (its timings: a reference, no goal);
#   6. offload-bench queue-memory (stream-ordered queue memory against
#      plain allocations; a reference, no goal);
#   7. OpenMP target regions on the GPU (issue 21; first ran on an H200
#      on 2026-11-27, partly: see BENCHMARKS.md; the rehearsal's fake
#      driver cannot run nvptx code, so only the host fallback runs there):
#      omp_checks in host fallback (OMP_TARGET_OFFLOAD=DISABLED), then on
#      the GPU (MANDATORY) through our libomptarget and through LLVM 22's
#      (LD_LIBRARY_PATH=llvm22/lib), each output equal to the fallback's
#      (diagnostic reruns in the log when ours differs); the
#      LIBOMPTARGET_INFO=16 launch lines; omp_checks_reloc (built with
#      `clang-flags --ptxas-relocatable`) on ours, a check like the others
#      (so a fault of the whole-program ptxas build shows as such, and one
#      of the relocatable build fails the run too); each omp_progs/ program exits 0
#      on the GPU with ours and prints what it prints with LLVM's; then
#      ${GPU_BENCH_ROUNDS:-5} rounds of omp_bench on both runtimes and
#      cuda_bench (nvcc there), best round kept: empty `target teams
#      distribute parallel for` launch + sync <= 1.10x raw_saxpy's driver
#      launch + sync and <= 1.00x LLVM's libomptarget; STREAM triad over
#      2^27 doubles >= 0.90x the CUDA C kernel; a 2^27-double sum
#      reduction >= 0.80x a two-pass CUDA reduction; omp_bench built with
#      `clang-flags --no-lto` and with `--ptxas-relocatable`, and against
#      a device runtime keeping clang's distribute chunks (omp_bench_widen1)
#      and without loop interleaving (omp_bench_noil), once each, as
#      references; the grids both
#      runtimes launched omp_bench's kernels with (LIBOMPTARGET_INFO=16, in
#      gpu-run.log) and omp_bench on both without block reuse
#      (LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT=0: one team per 128
#      iterations), references; then, as diagnostics in omp-profile.txt
#      (GPU_PROFILE=0: not), nsys per-kernel GPU times of omp_bench and
#      raw_saxpy where nsys is installed and ncu sections (speed of light,
#      occupancy, launch, instructions, warp states, memory) of the first
#      triad and reduction kernels;
#   8. benchmarks, ${GPU_BENCH_ROUNDS:-5} rounds of ol_saxpy --bench and
#      raw_saxpy alternating (${GPU_BENCH_ITERS:-20000} launches, 16 copies
#      of 64 MiB each way), the best round of each kept, against the goals
#      of issue 13: launch + sync per iteration <= 1.10x cuLaunchKernel +
#      cuStreamSynchronize; pinned copies >= 0.95x cuMemcpy{HtoD,DtoH}Async
#      + cuStreamSynchronize per copy, each direction.
# It prints, and writes to DIR/gpu-results.md, a table of the checks and
# benchmarks with `nvidia-smi -L`, the date and the driver version; every
# program's output goes to DIR/gpu-run.log.
# Exit status: 0 every check passed and every goal met; 1 a check failed;
# 3 every check passed but a speed goal was missed; 2 usage or setup.
#
# `rehearse` builds the bundle (profile ${GPU_BUNDLE_PROFILE:-debug} there;
# `bundle` defaults to release) into DIR (default: a temporary directory),
# builds the fake driver (plugins/cuda/tests/fake_cuda/fake_cuda.c) next to
# it, and runs `DIR/bundle/gpu-tests.sh run` with OFFLOAD_CUDA_DRIVER naming
# the fake and a PATH holding only the tools `run` may use (no clang, no
# cargo). It passes when `run` exits 0 or 3: the fake's timings mean
# nothing (its table says so), only the checks count.
set -euo pipefail

mode=${1:-run}
here=$(cd "$(dirname "$0")" && pwd)

# Dynamic libraries a bundle may take from the GPU machine (Ubuntu 24.04
# base system); anything else must be in DIR/lib.
SYSTEM_LIBS=" linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libgcc_s.so.1 libstdc++.so.6 "
SYSTEM_LIBS+=" libpthread.so.0 libdl.so.2 librt.so.1 "
# Newest glibc symbol version Ubuntu 24.04 provides.
MAX_GLIBC=2.39
# Tools `run` uses (the rehearsal runs it with only these on PATH).
RUN_TOOLS="bash env awk grep sed date tee cat dirname uname timeout sleep head diff mkdir basename ln"

die() { echo "gpu-tests: $*" >&2; exit 2; }

# crates/omptarget/tests/c programs run on the GPU (as in gpu_build.rs).
OMP_PROGRAMS="basic.c collapse.c declare_target_vars.c deep_copy.c firstprivate_big.c globals.c
    implicit.c nested_data.c reductions.c structs.c target_in_parallel.c threads_nowait.c
    update_strided.c cxx_classes.cpp lambda_ref.cpp mapper.cpp"

# OpenMP programs for the GPU (issue 21), built with `offload clang-flags`
# against our device runtime. What cannot be built (no device runtime, no
# CUDA tools) is written to OUT/OMP-SKIP and `run` skips the section.
build_openmp() { # build_openmp OUT TARGETDIR ROOT
    local out=$1 t=$2 root=$3 arch=${GPU_OMP_ARCH:-sm_90} flags ref p
    local src=$root/plugins/cuda/tests/gpu
    rm -f "$out/OMP-SKIP"
    if ! flags=$("$t/offload" clang-flags --offload-arch="$arch" 2> "$out/omp-flags.err"); then
        echo "offload clang-flags --offload-arch=$arch failed: $(tr '\n' ' ' < "$out/omp-flags.err")" > "$out/OMP-SKIP"
        echo "gpu-tests: bundle: OpenMP GPU programs left out: $(cat "$out/OMP-SKIP")" >&2
        rm -f "$out/omp-flags.err"
        return 0
    fi
    rm -f "$out/omp-flags.err"
    # The programs are built through the CUDA tool shim (whole-program
    # ptxas); without it omp_bench and omp_bench_reloc would be one build.
    [[ $flags == *--cuda-path=*cuda-shim-* ]] \
        || die "offload clang-flags gave no CUDA tool shim (its warning says why): $flags"
    for p in omp_checks omp_bench; do
        # One flag per word, as clang-flags promises for $(...).
        # shellcheck disable=SC2086
        clang-22 -fopenmp $flags -O2 -Wall -Werror -Wno-pass-failed "$src/$p.c" -o "$out/$p" \
            || die "building $p for $arch failed"
    done
    # The benchmark without device LTO too (the runtime called, not
    # inlined): how much the inlining is worth on the GPU.
    ref=$("$t/offload" clang-flags --no-lto --offload-arch="$arch") || die "clang-flags --no-lto failed"
    # shellcheck disable=SC2086
    clang-22 -fopenmp $ref -O2 -Wall -Werror -Wno-pass-failed "$src/omp_bench.c" -o "$out/omp_bench_nolto" \
        || die "building omp_bench without LTO for $arch failed"
    # And with clang's relocatable ptxas compile (no CUDA tool shim): what
    # compiling the whole program (fewer registers per thread) is worth.
    ref=$("$t/offload" clang-flags --ptxas-relocatable --offload-arch="$arch") \
        || die "clang-flags --ptxas-relocatable failed"
    # shellcheck disable=SC2086
    clang-22 -fopenmp $ref -O2 -Wall -Werror -Wno-pass-failed "$src/omp_bench.c" -o "$out/omp_bench_reloc" \
        || die "building omp_bench with relocatable ptxas for $arch failed"
    # The checks that way too: should the whole-program build fail on the
    # GPU, this one tells whether ptxas -ewp is the cause.
    # shellcheck disable=SC2086
    clang-22 -fopenmp $ref -O2 -Wall -Werror -Wno-pass-failed "$src/omp_checks.c" -o "$out/omp_checks_reloc" \
        || die "building omp_checks with relocatable ptxas for $arch failed"
    # And against a device runtime that keeps clang's `distribute` chunks
    # (devicertl/README, "Wider distribute chunks"), and without the loop
    # interleaving clang-flags asks the device LTO for: what each is worth.
    DEVICERTL_CFLAGS=-DRTL_WIDEN_MAX=1 bash "$root/devicertl/build.sh" "$out/devicertl-widen1" \
        || die "building the device runtime with RTL_WIDEN_MAX=1 failed"
    ref=$(OFFLOAD_DEVICERTL_DIR="$out/devicertl-widen1" "$t/offload" clang-flags --offload-arch="$arch") \
        || die "clang-flags with the RTL_WIDEN_MAX=1 runtime failed"
    # shellcheck disable=SC2086
    clang-22 -fopenmp $ref -O2 -Wall -Werror -Wno-pass-failed "$src/omp_bench.c" -o "$out/omp_bench_widen1" \
        || die "building omp_bench with RTL_WIDEN_MAX=1 for $arch failed"
    rm -rf "$out/devicertl-widen1"
    ref=$("$t/offload" clang-flags --interleave 1 --offload-arch="$arch") || die "clang-flags --interleave 1 failed"
    # shellcheck disable=SC2086
    clang-22 -fopenmp $ref -O2 -Wall -Werror -Wno-pass-failed "$src/omp_bench.c" -o "$out/omp_bench_noil" \
        || die "building omp_bench without interleaving for $arch failed"
    cp "$src/cuda_bench.cu" "$out/cuda_bench.cu"
    echo "$arch" > "$out/OMP-ARCH"
    # The project's OpenMP test programs that make sense on a GPU (the
    # ones crates/offload-cli/tests/gpu_build.rs builds), for this arch.
    mkdir -p "$out/omp_progs"
    local c cc
    for c in $OMP_PROGRAMS; do
        cc=clang-22
        [[ $c == *.cpp ]] && cc=clang++-22
        # shellcheck disable=SC2086
        "$cc" -fopenmp $flags -O2 "$root/crates/omptarget/tests/c/$c" -o "$out/omp_progs/${c%.*}" \
            || die "building $c for $arch failed"
    done
    # LLVM's libomptarget also dlopens "libomp.so": the same file as the
    # libomp.so.5 already loaded, or libomp runs twice (OMP Error #15).
    ln -sf libomp.so.5 "$out/lib/libomp.so"
    if [[ ${GPU_BUNDLE_LLVM_RUNTIME:-1} == 1 ]]; then
        pack_llvm_runtime "$out/llvm22"
    fi
}

# LLVM 22's libomptarget.so.22.1 and every library it needs beyond glibc,
# libstdc++ and libomp (in lib/ already), each compressed with
# `zstd -19 --long=27` (about 49 MB: the bundle must stay under 64 MiB),
# and a zstd to unpack them with.
pack_llvm_runtime() { # pack_llvm_runtime DIR
    local dir=$1 llvm=/usr/lib/llvm-22/lib lib where f
    command -v zstd >/dev/null || die "zstd not found (apt install zstd), or set GPU_BUNDLE_LLVM_RUNTIME=0"
    [[ -f $llvm/libomptarget.so.22.1 ]] || die "$llvm/libomptarget.so.22.1 missing (libomp-22-dev)"
    rm -rf "$dir"
    mkdir -p "$dir"
    local libs=("$llvm/libomptarget.so.22.1")
    while read -r lib where; do
        [[ -n $where && -f $where ]] || die "LLVM's libomptarget: $lib not found"
        [[ $SYSTEM_LIBS == *" $lib "* || $lib == libomp.so.5 ]] && continue
        libs+=("$where")
    done < <(ldd "$llvm/libomptarget.so.22.1" | sed -n 's/^[[:space:]]*\([^ ]*\) => \([^ ]*\) .*/\1 \2/p')
    for f in "${libs[@]}"; do
        zstd -q -19 --long=27 -T0 -f "$(readlink -f "$f")" -o "$dir/$(basename "$f").zst"
    done
    cp -L "$(command -v zstd)" "$dir/zstd"
    echo "gpu-tests: bundle: LLVM 22's libomptarget: ${#libs[@]} libraries, $(du -sh "$dir" | cut -f1) packed" >&2
}

build_bundle() { # build_bundle DIR PROFILE
    local out=$1 profile=$2 root json exe ver
    root=$(cd "$here/.." && pwd)
    command -v cargo >/dev/null || die "cargo not found"
    command -v clang-22 >/dev/null || die "clang-22 not found (scripts/setup.sh installs it)"
    local llvm=/usr/lib/llvm-22
    [[ -f $llvm/include/offload/OffloadAPI.h ]] || die "$llvm/include/offload/OffloadAPI.h missing (liboffload-22-dev)"
    [[ -f $llvm/lib/libomp.so.5 ]] || die "$llvm/lib/libomp.so.5 missing (libomp-22-dev)"
    local flags=() target=debug
    case $profile in
        # What scripts/setup.sh builds for each profile: nothing is rebuilt.
        release) flags=(--release --workspace --exclude offload-python); target=release ;;
        debug) flags=(--workspace) ;;
        *) die "GPU_BUNDLE_PROFILE must be release or debug, not '$profile'" ;;
    esac
    rm -rf "$out"
    mkdir -p "$out/lib"
    out=$(cd "$out" && pwd)
    (cd "$root" && cargo build --quiet "${flags[@]}")
    json=$(cd "$root" && cargo test "${flags[@]}" --test gpu_api --no-run --message-format=json)
    exe=$(printf '%s\n' "$json" | grep '"name":"gpu_api"' | grep -o '"executable":"[^"]*"' \
        | tail -n 1 | sed 's/^"executable":"//; s/"$//' || true)
    [[ -n $exe && -x $exe ]] || die "no gpu_api test executable in cargo's output"
    local t=$root/target/$target
    objcopy --strip-debug "$t/offload" "$out/offload"
    objcopy --strip-debug "$t/libLLVMOffload.so" "$out/lib/libLLVMOffload.so.22.1"
    objcopy --strip-debug "$t/libomptarget.so" "$out/lib/libomptarget.so.22.1"
    objcopy --strip-debug "$exe" "$out/gpu_api"
    objcopy --strip-debug "$t/offload-bench" "$out/offload-bench"
    cp -L "$llvm/lib/libomp.so.5" "$out/lib/"
    local src=$root/plugins/cuda/tests/gpu
    clang-22 --target=nvptx64-nvidia-cuda -march=sm_80 -Xclang -target-feature -Xclang +ptx78 \
        -nogpulib -ffreestanding -O2 -S "$src/kernels.c" -o "$out/kernels.ptx"
    clang-22 -O2 -Wall -Werror -I"$llvm/include/offload" "$src/ol_saxpy.c" -o "$out/ol_saxpy" \
        "$out/lib/libLLVMOffload.so.22.1" -Wl,-rpath,'$ORIGIN/lib'
    clang-22 -O2 -Wall -Werror "$src/raw_saxpy.c" -o "$out/raw_saxpy" -ldl
    # libomp first, as clang orders a -fopenmp-targets program's libraries.
    clang-22 -fopenmp -O1 -Wall -Werror -I"$root/include" -I"$llvm/include/offload" \
        -I"$root/crates/omptarget/tests/interop" \
        "$src/omp_api.c" -o "$out/omp_api" -lomp "$out/lib/libomptarget.so.22.1" \
        -Wl,-rpath,'$ORIGIN/lib'
    build_openmp "$out" "$t" "$root"
    cp "$here/gpu-tests.sh" "$out/gpu-tests.sh"
    # Everything must load from the bundle plus Ubuntu's base libraries.
    local f lib where glibc
    local programs=("$out"/offload "$out"/offload-bench "$out"/gpu_api "$out"/ol_saxpy "$out"/raw_saxpy "$out"/omp_api)
    [[ -f $out/omp_checks ]] && programs+=("$out"/omp_checks "$out"/omp_checks_reloc "$out"/omp_bench "$out"/omp_bench_nolto "$out"/omp_bench_reloc "$out"/omp_bench_widen1 "$out"/omp_bench_noil "$out"/omp_progs/*)
    for f in "${programs[@]}" "$out"/lib/*.so*; do
        while read -r lib where; do
            [[ $lib == /* ]] && lib=${lib##*/}
            if [[ $where == "not found" ]]; then
                die "$f: $lib not found"
            elif [[ $SYSTEM_LIBS != *" $lib "* && $where != "$out/lib/"* ]]; then
                die "$f needs $lib ($where), neither in the bundle nor in Ubuntu's base system"
            fi
        done < <(LD_LIBRARY_PATH=$out/lib ldd "$f" | sed -n 's/^[[:space:]]*\([^ ]*\)\( => \([^(]*\)\)\{0,1\}.*/\1 \3/p' \
            | sed 's/ *$//; s/ \(not found\)$/ not found/')
        glibc=$(readelf --version-info -W "$f" | grep -o 'GLIBC_2\.[0-9]*' | sed 's/GLIBC_//' \
            | sort -t. -k2,2n | tail -n 1 || true)
        if [[ -n $glibc && ${glibc#2.} -gt ${MAX_GLIBC#2.} ]]; then
            die "$f needs glibc $glibc (Ubuntu 24.04 has $MAX_GLIBC): build the bundle on an older system"
        fi
    done
    ver=$(cd "$root" && git rev-parse --short HEAD 2>/dev/null || echo unknown)
    if ! (cd "$root" && git diff --quiet HEAD -- 2>/dev/null); then ver="$ver (with uncommitted changes)"; fi
    {
        echo "commit: $ver"
        echo "profile: $profile"
        echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(uname -n)"
    } > "$out/BUNDLE-INFO"
}

# A bundle made small enough to travel to a lent GPU machine (its
# transfer limit: 64 MiB with the working tree): everything but llvm22/ in
# one `zstd -19 --long=27` tar, llvm22/ as it is (already compressed, with
# the zstd that unpacks both), and run-there.sh, which unpacks into a
# folder there, runs the checks and copies the results to $OUT.
pack_carry() { # pack_carry BUNDLE CARRY
    local bundle=$1 carry=$2 root size limit=$((64 * 1024 * 1024)) tree
    root=$(cd "$here/.." && pwd)
    [[ -x $bundle/gpu-tests.sh ]] || die "$bundle is not a bundle (scripts/gpu-tests.sh bundle makes one)"
    [[ -x $bundle/llvm22/zstd ]] || die "$bundle/llvm22/zstd missing (bundle with GPU_BUNDLE_LLVM_RUNTIME=1)"
    rm -rf "$carry"
    mkdir -p "$carry"
    tar -C "$bundle" --exclude=./llvm22 -cf - . | "$bundle/llvm22/zstd" -q -19 -T0 --long=27 -o "$carry/bundle.tar.zst"
    cp -r "$bundle/llvm22" "$carry/llvm22"
    rm -rf "$carry/llvm22/lib"
    cat > "$carry/run-there.sh" <<'SCRIPT'
#!/usr/bin/env bash
# Unpacks the bundle into ${GPU_RUN_DIR:-/tmp/gpu-bundle} and runs
# gpu-tests.sh there; its log, results and program outputs go to $OUT.
set -uo pipefail
carry=$(cd "$(dirname "$0")" && pwd)
dir=${GPU_RUN_DIR:-/tmp/gpu-bundle}
out=${OUT:-$dir/out}
mkdir -p "$dir" "$out"
"$carry/llvm22/zstd" -q -d --long=27 -c "$carry/bundle.tar.zst" | tar -C "$dir" -xf - || exit 2
cp -r "$carry/llvm22" "$dir/" || exit 2
cd "$dir" || exit 2
command -v nvidia-smi > /dev/null && nvidia-smi -L
timeout "${GPU_RUN_TIMEOUT:-540}" ./gpu-tests.sh run > "$out/stdout.txt" 2>&1
rc=$?
cp gpu-run.log gpu-results.md "$out/" 2> /dev/null
tar czf "$out/outputs.tgz" info.txt omp-*.txt omp_progs.* 2> /dev/null
echo "gpu-tests.sh run exited $rc (0 all passed and goals met, 1 a check failed, 3 a goal missed, 124 timed out)"
tail -c 6000 "$out/stdout.txt"
exit "$rc"
SCRIPT
    chmod +x "$carry/run-there.sh"
    size=$(du -sb "$carry" | cut -f1)
    tree=$(cd "$root" && { git ls-files -z; git ls-files -z --others --exclude-standard; } \
        | du -cb --files0-from=- 2> /dev/null | tail -n 1 | cut -f1)
    echo "gpu-tests: carry: $carry, $((size / 1024 / 1024)) MiB + working tree $((tree / 1024 / 1024)) MiB" >&2
    ((size + tree < limit)) || die "carry folder + working tree pass 64 MiB"
}

case $mode in
carry)
    root=$(cd "$here/.." && pwd)
    pack_carry "${2:-$root/target/gpu-bundle}" "${3:-$root/target/gpu-carry}"
    echo "carry: ${3:-$root/target/gpu-carry} (there: target/gpu-carry/run-there.sh)"
    exit 0
    ;;
bundle)
    root=$(cd "$here/.." && pwd)
    out=${2:-$root/target/gpu-bundle}
    build_bundle "$out" "${GPU_BUNDLE_PROFILE:-release}"
    echo "bundle: $out (copy it to the GPU machine and run ./gpu-tests.sh run there)"
    exit 0
    ;;
rehearse)
    root=$(cd "$here/.." && pwd)
    if [[ -n ${2:-} ]]; then
        work=$2
        mkdir -p "$work"
    else
        work=$(mktemp -d)
        trap 'rm -rf "$work"' EXIT
    fi
    echo "== rehearsal: building the bundle (${GPU_BUNDLE_PROFILE:-debug}) in $work/bundle"
    # LLVM's runtime takes minutes to compress and cannot run nvptx code
    # on the fake driver either: left out unless asked for.
    GPU_BUNDLE_LLVM_RUNTIME=${GPU_BUNDLE_LLVM_RUNTIME:-0} build_bundle "$work/bundle" "${GPU_BUNDLE_PROFILE:-debug}"
    mkdir -p "$work/fake" "$work/bin"
    clang-22 -shared -fPIC -O1 -Wall -Werror "$root/plugins/cuda/tests/fake_cuda/fake_cuda.c" \
        -o "$work/fake/libcuda.so.1" -lpthread
    for t in $RUN_TOOLS; do
        p=$(command -v "$t") || die "rehearsal: $t not found"
        ln -sf "$p" "$work/bin/$t"
    done
    echo "== rehearsal: DIR/gpu-tests.sh run against the fake driver (PATH: $RUN_TOOLS)"
    st=0
    env -i HOME="${HOME:-/root}" PATH="$work/bin" LANG=C \
        OFFLOAD_CUDA_DRIVER="$work/fake/libcuda.so.1" FAKE_CUDA_DEVICES=1 GPU_TESTS_FAKE=1 \
        GPU_BENCH_ITERS="${GPU_BENCH_ITERS:-20000}" GPU_BENCH_ROUNDS="${GPU_BENCH_ROUNDS:-3}" \
        GPU_QUEUE_MEMORY_ITERS="${GPU_QUEUE_MEMORY_ITERS:-10}" \
        "$work/bundle/gpu-tests.sh" run || st=$?
    results=$work/bundle/gpu-results.md
    [[ -s $results ]] || { echo "gpu-tests: rehearsal: no $results" >&2; exit 1; }
    grep 'fake driver: timings meaningless' "$results" >/dev/null \
        || { echo "gpu-tests: rehearsal: results not labelled as fake" >&2; exit 1; }
    grep '^| launch_sync_us ' "$results" >/dev/null \
        || { echo "gpu-tests: rehearsal: no benchmark table" >&2; exit 1; }
    case $st in
    0 | 3)
        echo "gpu-tests: rehearsal OK: every check passed against the fake driver (run exited $st;"
        echo "  speed verdicts against the fake mean nothing: it runs kernels on the host)"
        ;;
    *)
        echo "gpu-tests: rehearsal FAILED: run exited $st (see $work/bundle/gpu-run.log)" >&2
        [[ -n ${2:-} ]] || cat "$work/bundle/gpu-run.log" >&2
        exit 1
        ;;
    esac
    exit 0
    ;;
run) ;;
*)
    echo "usage: $0 bundle [DIR] | carry [DIR [CARRY]] | run | rehearse [DIR]" >&2
    exit 2
    ;;
esac

# ---------------------------------------------------------------- run mode
cd "$here"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Only the CUDA plugin (liboffload keeps its host device): a missing driver
# is an error, not an empty device list.
export OFFLOAD_PLUGINS=cuda
log=$here/gpu-run.log
results=$here/gpu-results.md
: > "$log"
fail=0
checks=()
pass() { checks+=("PASS: $1"); echo "PASS: $1"; }
failed() { checks+=("FAIL: $1"); echo "FAIL: $1"; fail=1; }
skip() { checks+=("SKIP: $1"); echo "SKIP: $1"; }
limit=${GPU_TEST_TIMEOUT:-600}
# check NAME COMMAND...: run it (output to the screen and the log).
check() {
    local name=$1
    shift
    echo "== $name" | tee -a "$log"
    if timeout "$limit" "$@" 2>&1 | tee -a "$log"; then pass "$name"; else failed "$name"; fi
}

fake=${GPU_TESTS_FAKE:-0}
smi="nvidia-smi: not present"
if command -v nvidia-smi >/dev/null; then
    smi=$(nvidia-smi -L 2>&1 || true)
fi
echo "$smi"

check "offload info lists a CUDA device" bash -c './offload info > info.txt && cat info.txt && grep "backend cuda, [1-9]" info.txt >/dev/null'
# The first CUDA device's facts, from its section of `offload info`.
fact() {
    [[ -f info.txt ]] || return 0
    awk -v key="$1" '/backend cuda,/ { c = 1 } c && $0 ~ "^ +" key ":" { sub("^ +" key ": *", ""); print; exit }' info.txt
}
name=$(fact Name)
arch=$(fact Arch)
driver_version=$(fact "Driver Version")
[[ $name == Fake* ]] && fake=1
if [[ $arch =~ ^sm_[0-9]+[a-z]?$ ]]; then pass "device arch $arch"; else failed "device arch '${arch}' is not sm_XX"; fi
if [[ -n ${GPU_EXPECT_ARCH:-} ]]; then
    if [[ $arch == "$GPU_EXPECT_ARCH" ]]; then pass "arch is GPU_EXPECT_ARCH=$GPU_EXPECT_ARCH"; else failed "arch $arch, not GPU_EXPECT_ARCH=$GPU_EXPECT_ARCH"; fi
fi

check "Rust API tests (gpu_api)" env OFFLOAD_GPU_TEST_PTX="$here/kernels.ptx" ./gpu_api --test-threads=1 --nocapture
check "ol* saxpy + reduce on PTX (JIT by the driver)" ./ol_saxpy kernels.ptx

cuda=${CUDA_HOME:-/usr/local/cuda}
if [[ -x $cuda/bin/ptxas && -n $arch ]]; then
    check "ptxas -arch=$arch: cubin" "$cuda/bin/ptxas" -arch="$arch" kernels.ptx -o kernels.cubin
    check "offload inspect kernels.cubin" ./offload inspect kernels.cubin
    check "ol* saxpy + reduce on the cubin" ./ol_saxpy kernels.cubin
else
    skip "cubin: no $cuda/bin/ptxas"
fi
if [[ -x $cuda/bin/nvcc && -n $arch ]]; then
    # A fatbinary from the PTX: nvcc, else the fatbinary tool on the cubin
    # and the PTX. Failing to make one is the toolkit's matter: SKIP.
    echo "== fatbinary from kernels.ptx" | tee -a "$log"
    made=
    if "$cuda/bin/nvcc" -fatbin -arch="$arch" kernels.ptx -o kernels.fatbin >> "$log" 2>&1; then
        made="nvcc -fatbin -arch=$arch"
    elif [[ -s kernels.cubin && -x $cuda/bin/fatbinary ]] &&
        "$cuda/bin/fatbinary" --create=kernels.fatbin --image3=kind=elf,sm="${arch#sm_}",file=kernels.cubin \
            --image3=kind=ptx,sm=80,file=kernels.ptx >> "$log" 2>&1; then
        made="fatbinary (the cubin + the PTX)"
    fi
    if [[ -n $made && -s kernels.fatbin ]]; then
        pass "fatbinary made by $made"
        check "offload inspect kernels.fatbin" ./offload inspect kernels.fatbin
        check "ol* saxpy + reduce on the fatbinary" ./ol_saxpy kernels.fatbin
    else
        skip "fatbinary: neither nvcc -fatbin nor fatbinary made one from the PTX (see gpu-run.log)"
    fi
else
    skip "fatbinary: no $cuda/bin/nvcc"
fi

check "OpenMP API on the CUDA device (omp_api: omp_target_*, interop table)" ./omp_api kernels.ptx

# The GPU served to a remote client: `offload serve` on loopback with the
# CUDA plugin, ol_saxpy through the remote plugin (its bench lines are
# tagged `remote`: a reference, no goal).
echo "== offload serve (CUDA plugin) on loopback" | tee -a "$log"
token="gpu-tests-$$-$RANDOM"
# Emptied here, before the server starts: the loop below must never read a
# missing file (set -e) or an earlier run's address.
: > serve.out
: > serve.err
# On a GPU the session workers are sandboxed (the GPU must work from one);
# the rehearsal's fake driver lies in a private temporary folder, which a
# sandboxed worker (its own /tmp) cannot see.
serve_flags=()
[[ $fake == 1 ]] && serve_flags=(--insecure-no-sandbox)
OFFLOAD_PLUGINS=cuda OFFLOAD_REMOTE_TOKEN=$token ./offload serve --listen 127.0.0.1:0 \
    "${serve_flags[@]}" > serve.out 2> serve.err &
serve_pid=$!
# The server goes, whatever ends the script.
trap 'kill "$serve_pid" 2> /dev/null || true' EXIT
addr=
for ((i = 0; i < 100; i++)); do
    addr=$(sed -n 's/.*listening on //p' serve.out 2> /dev/null | head -n 1 || true)
    [[ -n $addr ]] && break
    sleep 0.1
done
if [[ -n $addr ]]; then
    check "remote: a served CUDA device runs ol* saxpy + reduce (client: remote plugin only)" \
        env OFFLOAD_PLUGINS=remote OFFLOAD_REMOTE="$addr" OFFLOAD_REMOTE_TOKEN="$token" \
        bash -c 'set -o pipefail; ./ol_saxpy kernels.ptx --bench 2000 | sed "s/^\(bench [A-Za-z0-9_]*\) ol /\1 remote /"'
else
    failed "remote: offload serve did not start (serve.err in gpu-run.log)"
fi
# Stop it: SIGTERM, then SIGKILL if it is still there after 5 s.
kill "$serve_pid" 2> /dev/null || true
for ((i = 0; i < 50; i++)); do
    kill -0 "$serve_pid" 2> /dev/null || break
    sleep 0.1
done
kill -KILL "$serve_pid" 2> /dev/null || true
wait "$serve_pid" 2> /dev/null || true
trap - EXIT
cat serve.err >> "$log"

# ------------------------------------------------- OpenMP on the GPU (issue 21)
# First ran on an H200 on 2026-11-27 (BENCHMARKS.md); the rehearsal's fake
# driver cannot run nvptx code, so there only the host fallback runs.
omp_gpu=0
llvm_rt=
if [[ -s OMP-SKIP ]]; then
    skip "OpenMP target regions on the GPU: not in the bundle ($(cat OMP-SKIP))"
elif [[ ! -x omp_checks ]]; then
    skip "OpenMP target regions on the GPU: no omp_checks in the bundle"
else
    check "OpenMP checks in host fallback (OMP_TARGET_OFFLOAD=DISABLED)" \
        bash -c 'OMP_TARGET_OFFLOAD=DISABLED ./omp_checks --expect-host > omp-host.txt && cat omp-host.txt'
    if [[ $fake == 1 ]]; then
        skip "OpenMP target regions on the GPU: the fake driver cannot run nvptx images"
    else
        omp_gpu=1
        check "OpenMP checks on the GPU, our libomptarget: output = host fallback's" \
            bash -c 'OMP_TARGET_OFFLOAD=MANDATORY ./omp_checks --expect-device > omp-ours.txt && diff omp-host.txt omp-ours.txt && cat omp-ours.txt'
        if [[ ${checks[-1]} == FAIL* ]]; then
            # Whatever helps find out why, in the log (no check of its own).
            echo "== omp_checks diagnostics: LIBOMPTARGET_INFO=-1 LIBOMPTARGET_DEBUG=1" >> "$log"
            OMP_TARGET_OFFLOAD=MANDATORY LIBOMPTARGET_INFO=-1 LIBOMPTARGET_DEBUG=1 \
                timeout 60 ./omp_checks --expect-device >> "$log" 2>&1 || echo "(exit $?)" >> "$log"
            if [[ -x ${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer ]]; then
                echo "== omp_checks diagnostics: compute-sanitizer" >> "$log"
                OMP_TARGET_OFFLOAD=MANDATORY timeout 120 "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
                    --print-limit 20 ./omp_checks --expect-device >> "$log" 2>&1 || echo "(exit $?)" >> "$log"
            fi
        fi
        # The same checks compiled by ptxas as relocatable code (clang's own
        # way): with the line above, it separates a fault of the
        # whole-program (-ewp) compile from one of the runtimes.
        check "OpenMP checks on the GPU, relocatable ptxas build (omp_checks_reloc): output = host fallback's" \
            bash -c 'OMP_TARGET_OFFLOAD=MANDATORY ./omp_checks_reloc --expect-device > omp-reloc.txt && diff omp-host.txt omp-reloc.txt'
        # LLVM's launch line for every region, with the sizes that launched.
        check "OpenMP LIBOMPTARGET_INFO=16 launch lines (our libomptarget)" \
            bash -c 'set -o pipefail; LIBOMPTARGET_INFO=16 OMP_TARGET_OFFLOAD=MANDATORY ./omp_checks --expect-device 2>&1 >/dev/null | grep "Launching kernel .* with \[[0-9]*,1,1\] blocks and \[[0-9]*,1,1\] threads in [A-Za-z-]* mode"'
    fi
    # LLVM 22's libomptarget on the same binaries (both ways compatible).
    # GPU_LLVM22_DIR: where llvm22/ was put when it travelled apart from
    # the bundle (together they may pass a 64 MiB transfer limit).
    l22=${GPU_LLVM22_DIR:-$here/llvm22}
    if [[ -x $l22/zstd && -f $l22/libomptarget.so.22.1.zst ]]; then
        echo "== unpacking LLVM 22's libomptarget ($l22)" | tee -a "$log"
        mkdir -p "$l22/lib"
        unpacked=1
        for z in "$l22"/*.zst; do
            f=$l22/lib/$(basename "$z" .zst)
            [[ -s $f ]] && continue
            "$l22/zstd" -q -d --long=27 "$z" -o "$f" >> "$log" 2>&1 || unpacked=0
        done
        # LLVM's libomptarget dlopens "libomp.so": it must be the libomp.so.5
        # the program loaded (a link to it, not a copy: OMP Error #15).
        [[ -e lib/libomp.so ]] || ln -s libomp.so.5 lib/libomp.so || unpacked=0
        if [[ $unpacked == 1 ]]; then
            llvm_rt=$(cd "$l22/lib" && pwd)
            pass "LLVM 22's libomptarget unpacked"
        else
            failed "LLVM 22's libomptarget: unpacking failed (gpu-run.log)"
        fi
    else
        skip "LLVM 22's libomptarget: not in the bundle (GPU_BUNDLE_LLVM_RUNTIME=0)"
    fi
    if [[ -n $llvm_rt && $omp_gpu == 1 ]]; then
        check "OpenMP checks on the GPU, LLVM 22's libomptarget: output = host fallback's" \
            env LD_LIBRARY_PATH="$llvm_rt:$here/lib" \
            bash -c 'OMP_TARGET_OFFLOAD=MANDATORY ./omp_checks --expect-device > omp-llvm.txt && diff omp-host.txt omp-llvm.txt && cat omp-llvm.txt'
    elif [[ -n $llvm_rt ]]; then
        # No GPU for it (the fake): it must at least load and fall back.
        check "LLVM 22's libomptarget loads and runs omp_checks in host fallback" \
            env LD_LIBRARY_PATH="$llvm_rt:$here/lib" \
            bash -c 'OMP_TARGET_OFFLOAD=DISABLED ./omp_checks --expect-host > omp-llvm.txt && diff omp-host.txt omp-llvm.txt'
    fi
fi
# The project's OpenMP test programs on the GPU: exit 0 and the same
# output on our libomptarget as on LLVM 22's (host fallback's output is
# logged for reference: some print where they ran). The rehearsal's fake
# driver cannot run them: there both runtimes fall back to the host.
omp_where=MANDATORY
[[ $omp_gpu == 1 ]] || omp_where=DISABLED
if [[ -d omp_progs && ($omp_gpu == 1 || $fake == 1) ]]; then
    for p in omp_progs/*; do
        b=$(basename "$p")
        echo "== $b: host fallback (reference)" >> "$log"
        OMP_TARGET_OFFLOAD=DISABLED timeout 60 "$p" > "omp_progs.$b.host" 2>> "$log" || true
        cat "omp_progs.$b.host" >> "$log"
        if [[ -n $llvm_rt ]]; then
            check "OpenMP program $b (OMP_TARGET_OFFLOAD=$omp_where): exit 0, output = LLVM 22's libomptarget's" \
                bash -c 'set -e; p=$1; b=$2; l=$3; export OMP_TARGET_OFFLOAD=$4
                    "$p" > omp_progs.$b.ours
                    LD_LIBRARY_PATH=$l "$p" > omp_progs.$b.llvm || echo "(LLVM exit $?)"
                    diff omp_progs.$b.llvm omp_progs.$b.ours; cat omp_progs.$b.ours' \
                _ "$p" "$b" "$llvm_rt:$here/lib" "$omp_where"
        else
            check "OpenMP program $b (OMP_TARGET_OFFLOAD=$omp_where): exit 0" \
                env OMP_TARGET_OFFLOAD=$omp_where "$p"
        fi
    done
fi
if [[ $omp_gpu == 1 ]]; then
    # The CUDA C baselines, compiled here for this GPU.
    omp_arch=$(cat OMP-ARCH 2>/dev/null || echo sm_90)
    if [[ -x $cuda/bin/nvcc ]]; then
        check "nvcc -O3 -arch=$omp_arch cuda_bench.cu" "$cuda/bin/nvcc" -O3 -arch="$omp_arch" cuda_bench.cu -o cuda_bench
    else
        skip "OpenMP benchmarks' CUDA C baselines: no $cuda/bin/nvcc"
    fi
fi

# Diagnostics of the OpenMP benchmark on the GPU (never fails the run).
profile_openmp() {
    local nsys ncu what skip
    nsys=$(command -v nsys || echo "$cuda/bin/nsys")
    ncu=$(command -v ncu || echo "$cuda/bin/ncu")
    if [[ -x $nsys ]]; then
        echo "== nsys: omp_bench omp 2000 (OMP_BENCH_ELEMS=2^24), per-kernel GPU time"
        OMP_BENCH_ELEMS=16777216 timeout 120 "$nsys" profile -o omp_prof --force-overwrite true \
            ./omp_bench omp 2000 2>&1 | tail -n 5 || true
        timeout 60 "$nsys" stats --report cuda_gpu_kern_sum --format csv omp_prof.nsys-rep 2>&1 \
            | tail -n 20 || true
        echo "== nsys: raw_saxpy 2000, per-kernel GPU time"
        timeout 120 "$nsys" profile -o raw_prof --force-overwrite true ./raw_saxpy kernels.ptx 2000 2>&1 \
            | tail -n 3 || true
        timeout 60 "$nsys" stats --report cuda_gpu_kern_sum --format csv raw_prof.nsys-rep 2>&1 \
            | tail -n 10 || true
    else
        echo "== nsys: not found ($nsys)"
    fi
    if [[ ! -x $ncu ]]; then
        echo "== ncu: not found ($ncu)"
        return 0
    fi
    # omp_bench's launches in order: 200 + N empty regions, the
    # initialisation, 20 triads, 20 reductions (N = 10 here).
    for what in triad:211 reduction:231; do
        skip=${what#*:}
        echo "== ncu: the first ${what%%:*} launch of omp_bench omp 10 (OMP_BENCH_ELEMS=2^24)"
        OMP_BENCH_ELEMS=16777216 timeout 120 "$ncu" --launch-skip "$skip" --launch-count 1 \
            --section SpeedOfLight --section Occupancy --section LaunchStats \
            --section InstructionStats --section WarpStateStats --section MemoryWorkloadAnalysis ./omp_bench omp 10 2>&1 | tail -n 200 || true
    done
}

# ---------------------------------------------------------------- benchmarks
# Five rounds: with three, one lucky round of either side moved the
# launch ratio by ~0.05 on an H200 (BENCHMARKS.md).
rounds=${GPU_BENCH_ROUNDS:-5}
iters=${GPU_BENCH_ITERS:-20000}
: > bench.txt
for ((r = 1; r <= rounds; r++)); do
    check "benchmark round $r: ol* (ol_saxpy --bench $iters)" ./ol_saxpy kernels.ptx --bench "$iters"
    check "benchmark round $r: raw driver (raw_saxpy $iters)" ./raw_saxpy kernels.ptx "$iters"
done
# OpenMP: ours, LLVM's and the CUDA C baselines, alternating.
if [[ $omp_gpu == 1 ]]; then
    for ((r = 1; r <= rounds; r++)); do
        check "benchmark round $r: OpenMP, our libomptarget (omp_bench)" ./omp_bench omp "$iters"
        if [[ -n $llvm_rt ]]; then
            check "benchmark round $r: OpenMP, LLVM 22's libomptarget (omp_bench)" \
                env LD_LIBRARY_PATH="$llvm_rt:$here/lib" ./omp_bench llvm "$iters"
        fi
        if [[ -x cuda_bench ]]; then
            check "benchmark round $r: CUDA C (cuda_bench)" ./cuda_bench
        fi
    done
    check "benchmark: OpenMP built without device LTO (reference), our libomptarget" \
        ./omp_bench_nolto omp-nolto "$iters"
    check "benchmark: OpenMP built with relocatable ptxas (reference), our libomptarget" \
        ./omp_bench_reloc omp-reloc "$iters"
    check "benchmark: OpenMP, clang's distribute chunks as they are (reference), our libomptarget" \
        ./omp_bench_widen1 omp-widen1 "$iters"
    check "benchmark: OpenMP built without loop interleaving (reference), our libomptarget" \
        ./omp_bench_noil omp-noil "$iters"
    # Diagnostics (references, no goal): the grids each runtime launched
    # omp_bench's kernels with, and both without block reuse (one team per
    # 128 iterations instead of 3200 teams looping over chunks): what the
    # device runtime's per-chunk loop costs against the hardware's block
    # scheduler.
    echo "== omp_bench launch lines, LIBOMPTARGET_INFO=16, 2^20 elements (ours, then LLVM's)" >> "$log"
    OMP_BENCH_ELEMS=1048576 LIBOMPTARGET_INFO=16 timeout 60 ./omp_bench omp 1 2>&1 \
        | grep -v '^bench' | sort | uniq -c >> "$log" || true
    check "benchmark: OpenMP without block reuse (reference), our libomptarget" \
        env LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT=0 ./omp_bench omp-noreuse 2000
    if [[ -n $llvm_rt ]]; then
        OMP_BENCH_ELEMS=1048576 LIBOMPTARGET_INFO=16 LD_LIBRARY_PATH="$llvm_rt:$here/lib" timeout 60 \
            ./omp_bench llvm 1 2>&1 | grep -v '^bench' | sort | uniq -c >> "$log" || true
        check "benchmark: OpenMP without block reuse (reference), LLVM 22's libomptarget" \
            env LIBOMPTARGET_REUSE_BLOCKS_FOR_HIGH_TRIP_COUNT=0 LD_LIBRARY_PATH="$llvm_rt:$here/lib" \
            ./omp_bench llvm-noreuse 2000
    fi
    # Where the time goes (no check; omp-profile.txt, in outputs.tgz):
    # per-kernel GPU time from nsys for our launches and the bare driver's
    # (launch cost or run time?), and ncu's view of the first triad and
    # reduction kernels (occupancy, instructions, bandwidth).
    # GPU_PROFILE=0 leaves it out.
    if [[ ${GPU_PROFILE:-1} == 1 ]]; then
        profile_openmp > omp-profile.txt 2>&1 || true
        echo "== profile: omp-profile.txt ($(wc -l < omp-profile.txt) lines)" >> "$log"
    fi
fi
# Stream-ordered queue memory against plain allocations (a reference).
check "benchmark: queue memory vs plain allocations (offload-bench queue-memory)" \
    ./offload-bench queue-memory -n "${GPU_QUEUE_MEMORY_ITERS:-1000}"
grep '^bench ' "$log" > bench.txt || true

# One row per case: the best round of each side, the ratio and the verdict.
# Goals (issue 13): launch_sync_us ol/raw <= 1.10; copies ol/raw >= 0.95.
verdict=0
table=$(awk '
    $1 == "bench" && NF == 4 {
        k = $2 SUBSEP $3; v = $4 + 0
        if (!(k in best) || ($2 ~ /_us$/ ? v < best[k] : v > best[k])) best[k] = v
    }
    END {
        n = split("launch_sync_us launch_batch_us h2d_pinned_MBps d2h_pinned_MBps", cases, " ")
        print "| case | ol | raw | ol / raw | goal | verdict |"
        print "|---|---|---|---|---|---|"
        missed = 0
        for (i = 1; i <= n; i++) {
            c = cases[i]
            goal = c == "launch_sync_us" ? "<= 1.10" : c ~ /MBps$/ ? ">= 0.95" : "(reference)"
            if (!((c, "ol") in best) || !((c, "raw") in best) || best[c, "raw"] <= 0) {
                printf "| %s | - | - | - | %s | %s |\n", c, goal, \
                    goal == "(reference)" ? "no data" : "NOT met (no data)"
                if (goal != "(reference)") missed = 1
                continue
            }
            ol = best[c, "ol"]; raw = best[c, "raw"]; ratio = ol / raw
            fmt = c ~ /_us$/ ? "%.3f" : "%.0f"
            if (goal == "(reference)") met = "-"
            else if (c ~ /_us$/) met = ratio <= 1.10 ? "met" : "NOT met"
            else met = ratio >= 0.95 ? "met" : "NOT met"
            if (met == "NOT met") missed = 1
            printf "| %s | " fmt " | " fmt " | %.3f | %s | %s |\n", c, ol, raw, ratio, goal, met
        }
        exit missed ? 3 : 0
    }' bench.txt) || verdict=$?

# OpenMP (issue 21 goals): the best round of each side.
omp_table=
if [[ $omp_gpu == 1 ]]; then
    omp_verdict=0
    omp_table=$(awk '
        $1 == "bench" && NF == 4 {
            k = $2 SUBSEP $3; v = $4 + 0
            if (!(k in best) || ($2 ~ /_us$/ ? v < best[k] : v > best[k])) best[k] = v
        }
        # The baseline of case c is side b of the same case, except the
        # bare driver, whose launch + sync is raw_saxpy'"'"'s launch_sync_us.
        function row(label, c, a, b, goal, lower,   bc, x, y, r, met) {
            bc = b == "raw" ? "launch_sync_us" : c
            if (!((c, a) in best) || !((bc, b) in best)) {
                printf "| %s | - | - | - | %s %s | NOT met (no data) |\n", label, lower ? "<=" : ">=", goal; return 1
            }
            x = best[c, a]; y = best[bc, b]
            if (y <= 0) { printf "| %s | %s | %s | - | %s | NOT met |\n", label, x, y, goal; return 1 }
            r = x / y
            met = lower ? (r <= goal + 0 ? "met" : "NOT met") : (r >= goal + 0 ? "met" : "NOT met")
            printf "| %s | %s | %s | %.3f | %s %s | %s |\n", label, x, y, r, lower ? "<=" : ">=", goal, met
            return met != "met"
        }
        END {
            print "| case | ours | baseline | ours / baseline | goal | verdict |"
            print "|---|---|---|---|---|---|"
            m = 0
            m += row("empty target region launch + sync, us: ours vs bare driver (raw_saxpy)", "omp_launch_sync_us", "omp", "raw", "1.10", 1)
            m += row("empty target region launch + sync, us: ours vs LLVM 22 libomptarget", "omp_launch_sync_us", "omp", "llvm", "1.00", 1)
            m += row("STREAM triad 2^27 doubles, GB/s: ours vs CUDA C (nvcc)", "triad_GBps", "omp", "cuda", "0.90", 0)
            m += row("sum reduction 2^27 doubles, GB/s: ours vs two-pass CUDA", "reduce_GBps", "omp", "cuda", "0.80", 0)
            if (("triad_GBps", "llvm") in best) printf "| STREAM triad, GB/s: LLVM 22 libomptarget (reference) | %s | - | - | - | - |\n", best["triad_GBps", "llvm"]
            if (("reduce_GBps", "llvm") in best) printf "| sum reduction, GB/s: LLVM 22 libomptarget (reference) | %s | - | - | - | - |\n", best["reduce_GBps", "llvm"]
            if (("omp_launch_sync_us", "omp-nolto") in best) printf "| empty region launch + sync, us: built without device LTO (reference) | %s | - | - | - | - |\n", best["omp_launch_sync_us", "omp-nolto"]
            if (("triad_GBps", "omp-nolto") in best) printf "| STREAM triad, GB/s: built without device LTO (reference) | %s | - | - | - | - |\n", best["triad_GBps", "omp-nolto"]
            if (("reduce_GBps", "omp-nolto") in best) printf "| sum reduction, GB/s: built without device LTO (reference) | %s | - | - | - | - |\n", best["reduce_GBps", "omp-nolto"]
            if (("triad_GBps", "omp-reloc") in best) printf "| STREAM triad, GB/s: relocatable ptxas compile (reference) | %s | - | - | - | - |\n", best["triad_GBps", "omp-reloc"]
            if (("reduce_GBps", "omp-reloc") in best) printf "| sum reduction, GB/s: relocatable ptxas compile (reference) | %s | - | - | - | - |\n", best["reduce_GBps", "omp-reloc"]
            split("omp-widen1 omp-noil", wd, " ")
            split("clang'"'"'s distribute chunks as they are|no loop interleaving", wdn, "|")
            for (i = 1; i <= 2; i++) {
                if (("triad_GBps", wd[i]) in best) printf "| STREAM triad, GB/s: %s, %s (reference) | %s | - | - | - | - |\n", wd[i], wdn[i], best["triad_GBps", wd[i]]
                if (("reduce_GBps", wd[i]) in best) printf "| sum reduction, GB/s: %s, %s (reference) | %s | - | - | - | - |\n", wd[i], wdn[i], best["reduce_GBps", wd[i]]
            }
            split("omp-noreuse llvm-noreuse", nr, " ")
            for (i = 1; i <= 2; i++) {
                if (("triad_GBps", nr[i]) in best) printf "| STREAM triad, GB/s: %s, one team per 128 iterations (reference) | %s | - | - | - | - |\n", nr[i], best["triad_GBps", nr[i]]
                if (("reduce_GBps", nr[i]) in best) printf "| sum reduction, GB/s: %s, one team per 128 iterations (reference) | %s | - | - | - | - |\n", nr[i], best["reduce_GBps", nr[i]]
            }
            exit m ? 3 : 0
        }' bench.txt) || omp_verdict=$?
    [[ $omp_verdict == 0 ]] || verdict=3
fi

{
    echo "# CUDA plugin on a GPU: scripts/gpu-tests.sh results"
    echo
    if [[ $fake == 1 ]]; then
        echo "**fake driver: timings meaningless** (CI rehearsal against plugins/cuda/tests/fake_cuda: kernels run on the host, copies are memcpy; only the checks mean something)"
        echo
    fi
    echo "| | |"
    echo "|---|---|"
    echo "| date | $(date -u '+%Y-%m-%d %H:%M:%S UTC') |"
    echo "| machine | $(uname -n), Linux $(uname -r) |"
    echo "| bundle | $(sed -n 's/^commit: //p' BUNDLE-INFO 2>/dev/null), $(sed -n 's/^profile: //p' BUNDLE-INFO 2>/dev/null) build |"
    echo "| driver library | ${OFFLOAD_CUDA_DRIVER:-libcuda.so.1 as the loader finds it} |"
    echo "| driver version (offload info) | ${driver_version:-unknown} |"
    echo "| device (offload info) | ${name:-none} (${arch:-?}) |"
    echo
    echo '`nvidia-smi -L`:'
    echo
    echo '```'
    echo "$smi"
    echo '```'
    echo
    echo "## Checks"
    echo
    for c in "${checks[@]}"; do echo "* $c"; done
    echo
    echo "## Benchmarks: ol* API vs raw driver calls, best of $rounds rounds"
    echo
    if [[ $fake == 1 ]]; then echo "(fake driver: timings meaningless)"; echo; fi
    echo "$table"
    echo
    if [[ -n $omp_table ]]; then
        echo "## OpenMP target regions on the GPU (issue 21), best of $rounds rounds"
        echo
        echo "omp_bench (built with \`offload clang-flags --offload-arch=$(cat OMP-ARCH 2>/dev/null)\`) through our"
        echo "libomptarget and LLVM 22's on the same binary; cuda_bench.cu built here with nvcc."
        echo
        echo "$omp_table"
        echo
    fi
    remote_rows=$(awk '$1 == "bench" && $3 == "remote" { printf "| %s | %s |\n", $2, $4 }' bench.txt)
    if [[ -n $remote_rows ]]; then
        echo "Through \`offload serve\` on loopback (remote plugin client; 2000 launches; a reference, no goal):"
        echo
        echo "| case | remote |"
        echo "|---|---|"
        echo "$remote_rows"
        echo
    fi
    queue_rows=$(awk '$1 == "bench" && $2 ~ /^queue_memory_/ {
            v[$2, $3] = $4; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
        END { for (i = 1; i <= n; i++) { c = order[i]; k = c; sub(/^queue_memory_/, "", k); sub(/_us$/, "", k)
            printf "| %s KiB | %s | %s |\n", k, v[c, "queue"], v[c, "device"] } }' bench.txt)
    if [[ -n $queue_rows ]]; then
        echo "Queue memory (\`offload-bench queue-memory\`: allocate, fill 64 KiB, free, sync; us per cycle, best of 3; a reference, no goal):"
        echo
        echo "| buffer | Queue::alloc/free (stream-ordered) | Device::alloc/free |"
        echo "|---|---|---|"
        echo "$queue_rows"
        echo
    fi
    echo "launch_sync_us: one small launch + queue sync per iteration (olLaunchKernel + olSyncQueue"
    echo "vs cuLaunchKernel + cuStreamSynchronize), $iters iterations; launch_batch_us: $iters launches,"
    echo "one sync (per launch, no goal); copies: 16 x 64 MiB each way between pinned host memory"
    echo "(OL_ALLOC_TYPE_HOST vs cuMemAllocHost) and device memory, a queued copy + sync per copy"
    echo "(olMemcpy + olSyncQueue vs cuMemcpy{HtoD,DtoH}Async + cuStreamSynchronize). Goals (issue 13):"
    echo "launch + sync <= 1.10x raw; copies >= 0.95x raw in each direction."
    echo
    if [[ $fail != 0 ]]; then
        echo "Result: a check FAILED (exit 1)."
    elif [[ $verdict != 0 ]]; then
        echo "Result: every check passed; a speed goal was NOT met (exit 3)."
    else
        echo "Result: every check passed and every speed goal was met (exit 0)."
    fi
} > "$results"
echo
cat "$results"
echo "(written to $results; program output in $log)"

if [[ $fail != 0 ]]; then exit 1; fi
if [[ $verdict != 0 ]]; then exit 3; fi
exit 0
