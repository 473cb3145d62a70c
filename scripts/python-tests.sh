#!/usr/bin/env bash
# The Python package as a user gets it: a fresh virtual environment
# (target/python-venv, recreated each run), `pip install ./python`, then the
# example (python/examples/saxpy_reduce.py) and the pytest suite.
#
# To stay fast in CI the package is built with the dev profile into the
# workspace's target/ (what `cargo build --workspace` already compiled is
# reused); a plain `pip install ./python` builds release. pip's download
# cache is kept (~/.cache/pip). Under CI=true a missing tool fails.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
start=$(date +%s)

fail_or_skip() {
  if [ "${CI:-}" = true ]; then
    echo "python-tests: CI=true: cannot skip: $*" >&2
    exit 1
  fi
  echo "python-tests: skipped: $*" >&2
  exit 0
}

PYTHON=${PYTHON:-python3}
command -v "$PYTHON" >/dev/null || fail_or_skip "$PYTHON not found"
command -v clang-22 >/dev/null || fail_or_skip "clang-22 not found (scripts/setup.sh installs it)"
"$PYTHON" -c 'import sys; assert sys.version_info >= (3, 9), sys.version' ||
  fail_or_skip "Python >= 3.9 needed"

VENV=$ROOT/target/python-venv
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV" || fail_or_skip "python3 -m venv failed (Debian: apt-get install python3-venv)"
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --disable-pip-version-check "maturin>=1.5,<2" "numpy>=1.22" "pytest>=7"

export CARGO_TARGET_DIR=$ROOT/target
export MATURIN_PEP517_ARGS="--profile dev"
python -m pip install -q --disable-pip-version-check --no-build-isolation ./python
built=$(date +%s)

# Outside the source tree: `import offload` must find the installed package.
cd "$ROOT/target"
export OFFLOAD_BIN=$ROOT/target/debug/offload
python "$ROOT/python/examples/saxpy_reduce.py"
python -m pytest -q -p no:cacheprovider "$ROOT/python/tests" -rs
# The type stubs agree with the extension module (mypy's stubtest).
python -m pip install -q --disable-pip-version-check "mypy>=1.10" || fail_or_skip "cannot install mypy"
python -m mypy.stubtest offload
echo "python-tests: OK (build $((built - start)) s, total $(( $(date +%s) - start )) s)" >&2
