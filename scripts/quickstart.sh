#!/usr/bin/env bash
# Builds mlprof, gives it a Python with numpy (target/quickstart-venv, made once from
# python3), and profiles examples/quickstart.py.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
venv=target/quickstart-venv
if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy
fi
exec target/release/mlprof run -- "$venv/bin/python" examples/quickstart.py
