"""Launch overhead from Python vs Rust: N empty-kernel launches + one sync.

    python bench/launch_overhead.py [-n N] [--reps R] [--rust PATH/TO/offload-bench]

Builds python/tests/kernels.c with clang-22, then on the host device times,
best of R repetitions, N launches of the empty kernel `empty` (grid 1 x
block 1) followed by one queue.synchronize(), with no arguments and with two
(a device array and a numpy.uint32). Then runs `offload-bench launch` (the
same launches from Rust; default target/release/offload-bench) and prints
the difference per launch. Build both in release for numbers worth quoting
(a plain `pip install ./python` builds release; `cargo build --release -p
offload-bench`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

import offload

REPO = Path(__file__).resolve().parents[2]


def best_ns(reps: int, n: int, run) -> float:
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter_ns()
        run()
        best = min(best, (time.perf_counter_ns() - t) / n)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=100_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--rust", default=str(REPO / "target/release/offload-bench"))
    opts = ap.parse_args()
    n, reps = opts.n, opts.reps

    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "kernels.so"
        clang = os.environ.get("OFFLOAD_CLANG", "clang-22")
        subprocess.run([clang, "-O2", "-fPIC", "-shared", "-I", str(REPO / "include"), "-o",
                        str(so), str(REPO / "python/tests/kernels.c")], check=True)
        dev = offload.host_device()
        kernel = dev.load_program(so).kernel("empty")
        q = dev.queue()
        buf = dev.zeros(16, np.float32)
        results = {}
        for label, args in (("no args", []), ("2 args", [buf, np.uint32(16)])):
            def run(args=args):
                launch = kernel.launch
                for _ in range(n):
                    launch(q, grid=(1,), block=(1,), args=args)
                q.synchronize()

            results[label] = best_ns(reps, n, run)
            print(f"python    {label:8} {results[label]:8.0f} ns/launch  (N={n}, best of {reps})")

        rust = {}
        if Path(opts.rust).is_file():
            out = subprocess.run([opts.rust, "launch", str(so), "-n", str(n), "--reps", str(reps)],
                                 check=True, capture_output=True, text=True).stdout
            print(out, end="")
            for line in out.splitlines():
                parts = line.split()
                rust[(parts[0], " ".join(parts[1:3]))] = float(parts[3])
        else:
            print(f"({opts.rust} not built: no Rust baseline)")
        for label, ns in results.items():
            for face in ("rust-api", "rust-core"):
                if (face, label) in rust:
                    print(f"python - {face:9} {label:8} {ns - rust[(face, label)]:+8.0f} ns/launch")


if __name__ == "__main__":
    main()
