#!/usr/bin/env bash
# Runs every test: unit tests of all crates and the end-to-end tests, which profile real
# Python programs on every CPython 3.9-3.13 found (each given a venv with numpy first).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/pythons.sh
cargo test --workspace "$@"
