#!/usr/bin/env bash
# Runs every test: unit tests of all crates and the end-to-end tests, which profile real
# Python programs on every CPython 3.9-3.13 found (each given a venv with numpy first).
# Ends with one line summing every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/pythons.sh
# speedscope's published file-format JSON Schema, which the export test validates against:
# from the speedscope package on the npm registry (pinned version, checked by its SHA-1 as the
# registry publishes it). Without it the test fails when MLPROF_REQUIRE_TEST_DATA=1 (CI).
schema=target/test-data/speedscope-file-format-schema.json
if [ ! -s "$schema" ]; then
    mkdir -p target/test-data
    python3 - "$schema" <<'PY' || echo "test: could not fetch speedscope's schema; the speedscope test will say so" >&2
import hashlib, io, sys, tarfile, urllib.request
url = "https://registry.npmjs.org/speedscope/-/speedscope-1.25.0.tgz"
data = urllib.request.urlopen(url, timeout=60).read()
if hashlib.sha1(data).hexdigest() != "bb5895ab7948baa588705157faf3918be9fbda7e":
    sys.exit("speedscope package: checksum mismatch")
member = tarfile.open(fileobj=io.BytesIO(data)).extractfile("package/dist/release/file-format-schema.json")
with open(sys.argv[1] + ".tmp", "wb") as out:
    out.write(member.read())
import os
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
PY
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace "$@" 2>&1 | tee "$log" || status=$?
passed=$(grep -Eo '^test result: [a-zA-Z]+\. [0-9]+ passed' "$log" | awk '{s += $4} END {print s + 0}')
failed=$(grep -Eo '[0-9]+ failed;' "$log" | awk '{s += $1} END {print s + 0}')
echo "tests: $passed passed, $failed failed"
exit "$status"
