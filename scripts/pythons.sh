#!/usr/bin/env bash
# Finds the CPythons 3.9-3.13 on this machine (pyenv, then PATH) and gives each a virtual
# environment with numpy, pytest and pytest-xdist under target/test-venvs/py3.X, reused when already there.
# Prints the interpreters it prepared. Used by scripts/test.sh and scripts/quickstart.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venvs=target/test-venvs
mkdir -p "$venvs"
packages=(numpy pytest pytest-xdist)

find_python() { # $1 = 3.X
    local minor=$1 candidate
    for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$minor".*/bin/python"$minor"; do
        case "$candidate" in *[!0-9./a-zA-Z_-]*) continue ;; esac
        [ -x "$candidate" ] && found=$candidate
    done
    [ -n "${found:-}" ] && { echo "$found"; return; }
    command -v "python$minor" || true
}

minors=${MLPROF_PYTHON_MINORS:-"3.9 3.10 3.11 3.12 3.13"}
prepared=()
for minor in $minors; do
    found=""
    exe=$(find_python "$minor")
    [ -n "$exe" ] || { echo "pythons: CPython $minor not found, skipped" >&2; continue; }
    venv=$venvs/py$minor
    if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
        echo "pythons: creating $venv from $exe" >&2
        rm -rf "$venv"
        "$exe" -m venv "$venv"
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
    elif ! "$venv/bin/python" -c "import pytest, xdist" 2>/dev/null; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
    fi
    # The notebook test runs on the default python3's version: its venv gets Jupyter's kernel
    # and notebook runner too.
    if [ "$minor" = "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ] &&
        ! "$venv/bin/python" -c "import ipykernel, nbclient, nbformat" 2>/dev/null; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            ipykernel nbclient nbformat >&2
    fi
    prepared+=("$minor")
done
[ ${#prepared[@]} -gt 0 ] || { echo "pythons: no CPython 3.9-3.13 found" >&2; exit 1; }
echo "pythons: ready with numpy and pytest: ${prepared[*]}" >&2
