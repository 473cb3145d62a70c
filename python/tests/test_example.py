"""The example runs and checks itself."""

import subprocess
import sys
from pathlib import Path

from conftest import need, CLANG

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "saxpy_reduce.py"


def test_saxpy_reduce_example():
    need(CLANG, "the example builds its kernels")
    out = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "saxpy_reduce: OK" in out.stdout
