#!/usr/bin/env bash
# Installs mlprof the way users do, `pip install .` (maturin builds the wheel: the `mlprof`
# executable and the `mlprof` Python package), into a venv with numpy (target/quickstart-venv,
# made once from python3), and profiles examples/quickstart.py. Each step says what it does
# on stderr first (`quickstart: ...`), and how long it took: the build is cargo compiling
# mlprof, minutes on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/quickstart-venv
step_start=0
step() {
    echo "quickstart: $*" >&2
    step_start=$SECONDS
}
done_step() {
    echo "quickstart: done in $((SECONDS - step_start)) s" >&2
}
if ! "$venv/bin/python" -c "import numpy" 2>/dev/null; then
    step "making $venv with numpy (once)..."
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check numpy
    done_step
fi
step "building mlprof and installing it into $venv (pip install .: cargo compiles it," \
    "minutes on a fresh machine)..."
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check .
done_step
echo "quickstart: profiling examples/quickstart.py (the report follows the program's output)" >&2
exec "$venv/bin/mlprof" run -- "$venv/bin/python" examples/quickstart.py
