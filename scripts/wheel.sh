#!/usr/bin/env bash
# Builds the mlprof wheel (maturin, linked against glibc 2.17 through zig: manylinux2014) and
# checks it as a user would get it: installed into a fresh venv of the oldest and the two newest
# default CPython builds found and of every free-threaded one (scripts/pythons.sh; the wheel's
# executable is the same for all, its Python package is pure Python: the oldest and newest
# syntax, and the builds read differently, are what can break it),
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
default=$(ls -d target/test-venvs/py3.* | grep -v 't$' | sort -t. -k2 -n)
chosen=$( (echo "$default" | head -n 1; echo "$default" | tail -n 2; ls -d target/test-venvs/py3.*t 2>/dev/null) | sort -u)
for venv in $chosen; do
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
