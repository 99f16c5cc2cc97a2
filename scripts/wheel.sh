#!/usr/bin/env bash
# Builds the mlprof wheel (maturin, linked against glibc 2.17 through zig: manylinux2014) and
# checks it as a user would get it: installed into a fresh venv of every CPython build found
# (scripts/pythons.sh: 3.9 ... 3.15 and the free-threaded ones),
# `mlprof --version`, `python -m mlprof run` on a numpy script, and the pytest plugin's markers,
# leaks, a forking test and an xdist run (scripts/wheel_check.py).
# Usage: scripts/wheel.sh [OUT_DIR]   (default target/wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-target/wheels}
tools=target/wheel-venv
if ! "$tools/bin/python" -c "import maturin, ziglang, auditwheel" 2>/dev/null; then
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/python" -m pip install --quiet --disable-pip-version-check \
        "maturin>=1.5,<2" ziglang auditwheel >&2
fi
export PATH="$PWD/$tools/bin:$PATH"
rm -f "$out"/mlprof-*.whl
maturin build --release --zig --compatibility manylinux2014 --out "$out" >&2
wheel=$(ls "$out"/mlprof-*.whl)
echo "wheel: built $wheel" >&2
# The tag must be what auditwheel's rules allow for what the binary links.
shown=$(auditwheel show "$wheel")
echo "$shown" >&2
if ! grep -q 'consistent with the following platform tag' <<<"$shown" ||
    ! grep -q '"manylinux_2_17_x86_64"' <<<"$shown"; then
    echo "wheel: auditwheel does not allow manylinux_2_17_x86_64 for $wheel" >&2
    exit 1
fi
scripts/pythons.sh >/dev/null
checked=()
for venv in target/test-venvs/py3.*; do
    base=$(readlink -f "$venv/bin/python")
    minor=${venv##*/py}
    fresh=target/wheel-check/py$minor
    # A fresh venv from the same interpreter; the test venv's packages are reused from pip's
    # cache (numpy, pytest, pytest-xdist).
    scripts/make_venv.sh "$base" "$fresh" "$wheel" numpy pytest pytest-xdist
    (cd target/wheel-check && "../../$fresh/bin/python" ../../scripts/wheel_check.py --full)
    checked+=("$minor")
done
echo "wheel: installed and checked on CPython ${checked[*]}" >&2
