#!/usr/bin/env bash
# Runs every test: unit tests of all crates and the end-to-end tests, which profile real
# Python programs on every CPython 3.9-3.13 found (each given a venv with numpy first).
# Ends with one line summing every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/pythons.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
