#!/usr/bin/env bash
# make_venv.sh PYTHON VENV [PIP ARGS...]: a fresh virtual environment of PYTHON with pip, then
# `pip install PIP ARGS` in it. Debian's builds of newer CPythons lack ensurepip's wheel, so
# there pip comes from PyPI's wheel. A free-threaded PYTHON installs numpy from a wheel only
# (numpy's newest releases ship none for every free-threaded build: pip takes the newest that
# has one rather than building it from source for minutes).
set -euo pipefail
exe=${1:?usage: make_venv.sh PYTHON VENV [PIP ARGS...]}
venv=${2:?usage: make_venv.sh PYTHON VENV [PIP ARGS...]}
shift 2
rm -rf "$venv"
if ! "$exe" -m venv "$venv" 2>/dev/null || [ ! -x "$venv/bin/pip" ]; then
    rm -rf "$venv"
    "$exe" -m venv --without-pip "$venv"
    whl=$(mktemp -d)
    trap 'rm -rf "$whl"' EXIT
    python3 -m pip download -q --disable-pip-version-check --no-deps -d "$whl" pip >&2
    pip_wheel=$(ls "$whl"/pip-*.whl)
    "$venv/bin/python" "$pip_wheel/pip" install -q --disable-pip-version-check "$pip_wheel" >&2
fi
[ $# -gt 0 ] || exit 0
extra=()
if [ "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_config_var("Py_GIL_DISABLED") or 0)')" = 1 ]; then
    extra=(--only-binary numpy)
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${extra[@]}" "$@" >&2
