#!/usr/bin/env bash
# Finds a CPython of every build mlprof reads (the sections of
# pyframes/layouts-derivation/expected.txt: 3.9 ... 3.15, 3.13t ...) and gives each a virtual
# environment with numpy, pytest, pytest-xdist and coverage under target/test-venvs/py3.X (py3.13t for a
# free-threaded build), reused when already there. An interpreter is looked for under pyenv,
# then under target/cpython-3.X (prepared before), then on PATH; one found nowhere is prepared
# under target/ by the helper scripts in $MLPROF_PYTHON_TOOLS (newer-cpython.sh for 3.14+,
# free-threaded-cpython.sh for 3.13t) when that directory has them, else skipped (the tests
# report it as skipped). MLPROF_PYTHON_MINORS="3.11 3.14" asks for those builds only. Prints
# the builds it prepared. Used by scripts/test.sh and scripts/wheel.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
venvs=target/test-venvs
mkdir -p "$venvs"
packages=(numpy pytest pytest-xdist coverage)
tools=${MLPROF_PYTHON_TOOLS:-../shared/tools}

all_builds() {
    sed -n 's/^\[\(3\.[0-9]*t\{0,1\}\)\]$/\1/p' pyframes/layouts-derivation/expected.txt
}

find_python() { # $1 = 3.X or 3.Xt
    local build=$1 candidate found=""
    case "$build" in
    *t) ;;
    *)
        for candidate in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$build".*/bin/python"$build"; do
            case "$candidate" in *[!0-9./a-zA-Z_-]*) continue ;; esac
            [ -x "$candidate" ] && found=$candidate
        done
        ;;
    esac
    [ -n "$found" ] && { echo "$found"; return; }
    for candidate in "target/cpython-$build/usr/bin/python$build" "target/cpython-$build/bin/python$build"; do
        [ -x "$candidate" ] && { echo "$PWD/$candidate"; return; }
    done
    command -v "python$build" && return
    # Not installed: prepared under target/ where the helper scripts are at hand.
    case "$build" in
    3.13t)
        [ -x "$tools/free-threaded-cpython.sh" ] &&
            "$tools/free-threaded-cpython.sh" "target/cpython-$build" 2>/dev/null | tail -n 1
        ;;
    *t) ;; # no other free-threaded build can be had here
    *)
        [ -x "$tools/newer-cpython.sh" ] &&
            "$tools/newer-cpython.sh" "$build" "target/cpython-$build" 2>/dev/null | tail -n 1
        ;;
    esac
    return 0
}

builds=${MLPROF_PYTHON_MINORS:-$(all_builds | tr '\n' ' ')}
prepared=()
for build in $builds; do
    exe=$(find_python "$build")
    [ -n "$exe" ] && [ -x "$exe" ] || { echo "pythons: CPython $build not found, skipped" >&2; continue; }
    venv=$venvs/py$build
    if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
        echo "pythons: creating $venv from $exe" >&2
        scripts/make_venv.sh "$exe" "$venv" "${packages[@]}"
    elif ! "$venv/bin/python" -c "import pytest, xdist, coverage" 2>/dev/null; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
    fi
    # The notebook test runs on the default python3's version: its venv gets Jupyter's kernel
    # and notebook runner too.
    if [ "$build" = "$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" ] &&
        ! "$venv/bin/python" -c "import ipykernel, nbclient, nbformat" 2>/dev/null; then
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
            ipykernel nbclient nbformat >&2
    fi
    prepared+=("$build")
done
[ ${#prepared[@]} -gt 0 ] || { echo "pythons: no CPython found" >&2; exit 1; }
echo "pythons: ready with numpy and pytest: ${prepared[*]}" >&2
