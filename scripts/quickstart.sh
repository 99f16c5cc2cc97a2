#!/usr/bin/env bash
# Installs mlprof the way users do, `pip install .` (maturin builds the wheel: the `mlprof`
# executable and the `mlprof` Python package), into a venv with numpy (target/quickstart-venv,
# made once from python3), and profiles examples/quickstart.py.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/quickstart-venv
if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check .
exec "$venv/bin/mlprof" run -- "$venv/bin/python" examples/quickstart.py
