#!/usr/bin/env bash
# Runs every test: unit tests of all crates and the end-to-end tests, which profile real
# Python programs on every CPython 3.9-3.13 found (each given a venv with numpy first).
# Ends with one line summing every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/pythons.sh
# speedscope's published file-format JSON Schema, which the export test validates against.
schema=target/test-data/speedscope-file-format-schema.json
if [ ! -s "$schema" ] && command -v npm >/dev/null 2>&1; then
    mkdir -p target/test-data
    tmp=$(mktemp -d)
    if (cd "$tmp" && npm pack speedscope --silent >/dev/null 2>&1 && tar xzf speedscope-*.tgz package/dist/release/file-format-schema.json); then
        cp "$tmp/package/dist/release/file-format-schema.json" "$schema"
    else
        echo "test: could not fetch speedscope's schema; the speedscope test will say so" >&2
    fi
    rm -rf "$tmp"
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
