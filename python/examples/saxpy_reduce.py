"""saxpy and a reduction on the host device, checked against numpy.

Builds the demo's host kernels (crates/offload-runtime/examples/kernels/
demo_kernels.c) with clang-22, loads them, runs y = a*x + y over a grid and
sums y with a reduction that uses per-block group memory, then reads the
result both by copy and, without a copy, through DLPack.

    python examples/saxpy_reduce.py [kernels.so]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import offload

REPO = Path(__file__).resolve().parents[2]


def build_kernels(out_dir: str) -> Path:
    src = REPO / "crates/offload-runtime/examples/kernels/demo_kernels.c"
    so = Path(out_dir) / "demo_kernels.so"
    clang = os.environ.get("OFFLOAD_CLANG", "clang-22")
    subprocess.run([clang, "-O2", "-fPIC", "-shared", "-I", str(REPO / "include"),
                    "-o", str(so), str(src)], check=True)
    return so


def main() -> None:
    n, block = 100_000, 256
    grid = (n + block - 1) // block
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(sys.argv[1]) if len(sys.argv) > 1 else build_kernels(tmp)
        dev = offload.host_device()
        print(f"device {dev.index}: {dev.name} ({dev.type}, plugin {dev.plugin})")
        program = dev.load_program(path)

    rng = np.random.default_rng(0)
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    a = np.float32(2.5)

    dx, dy = dev.to_device(x), dev.to_device(y)
    total = dev.zeros(1, np.float64)
    queue = dev.queue()
    # saxpy(float a, const float *x, float *y, uint32_t n)
    program.kernel("saxpy").launch(queue, grid=(grid,), block=(block,),
                                   args=[a, dx, dy, np.uint32(n)])
    # sum(const float *x, double *sum, uint32_t n): one double of group memory per block
    program.kernel("sum").launch(queue, grid=(grid,), block=(block,),
                                 args=[dy, total, np.uint32(n)], shared_mem=8)
    queue.synchronize()

    expect = a * x + y
    np.testing.assert_allclose(dy.to_numpy(), expect, rtol=1e-6)
    view = np.from_dlpack(dy)  # no copy: host-device memory is CPU memory
    assert view.ctypes.data == dy.ptr
    got = total.to_numpy()[0]
    want = float(expect.astype(np.float64).sum())
    assert abs(got - want) <= 1e-6 * abs(want), (got, want)
    print(f"saxpy: {n} elements OK; sum = {got:.6f} (numpy {want:.6f})")
    print("saxpy_reduce: OK")


if __name__ == "__main__":
    main()
