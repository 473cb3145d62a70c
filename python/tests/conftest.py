"""Shared fixtures: host kernels built with clang-22, the repository's paths."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
INCLUDE = REPO / "include"
CLANG = os.environ.get("OFFLOAD_CLANG", "clang-22")


def need(tool: str, why: str) -> str:
    """The tool's path; a missing tool skips the test, or fails it under CI=true."""
    path = shutil.which(tool)
    if path is None:
        message = f"{tool} not found ({why}; scripts/setup.sh installs it)"
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true: cannot skip: " + message)
        pytest.skip(message)
    return path


def compile_c(source: Path, out: Path, *flags: str) -> Path:
    clang = need(CLANG, "building host kernels")
    subprocess.run([clang, *flags, "-I", str(INCLUDE), "-o", str(out), str(source)], check=True)
    return out


@pytest.fixture(scope="session")
def kernels_so(tmp_path_factory) -> Path:
    """tests/kernels.c as a host-kernel shared object."""
    out = tmp_path_factory.mktemp("kernels") / "kernels.so"
    return compile_c(HERE / "kernels.c", out, "-O1", "-fPIC", "-shared")


@pytest.fixture(scope="session")
def kernels_bc(tmp_path_factory) -> Path:
    """tests/kernels.c as LLVM bitcode (compiled by the runtime when loaded)."""
    out = tmp_path_factory.mktemp("kernels_bc") / "kernels.bc"
    return compile_c(HERE / "kernels.c", out, "-O1", "-fPIC", "-c", "-emit-llvm")


@pytest.fixture(scope="session")
def offload_bin() -> Path:
    """The `offload` command of this checkout (OFFLOAD_BIN, else target/debug)."""
    candidates = [os.environ.get("OFFLOAD_BIN", ""), REPO / "target/debug/offload",
                  REPO / "target/release/offload"]
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    message = "the offload command is not built (cargo build)"
    if os.environ.get("CI") == "true":
        pytest.fail("CI=true: cannot skip: " + message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def host():
    import offload

    return offload.host_device()


@pytest.fixture(scope="session")
def program(host, kernels_so):
    return host.load_program(kernels_so)
