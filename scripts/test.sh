#!/usr/bin/env bash
# Runs every test: unit tests of all crates and the end-to-end tests, which profile real
# Python programs on every CPython build found (3.9-3.15 and the free-threaded ones; each given
# a venv with numpy first, scripts/pythons.sh).
# Every test binary runs even when an earlier one failed (--no-fail-fast); the exit status is
# cargo's, so non-zero when anything failed. Ends with one line summing every test binary's
# results (passed, failed, ignored), after one saying how many test binaries failed when any
# did (a binary that crashed has no counts of its own to sum).
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
# Tests that cannot run here (no JAX, no root, no ipykernel) write why to this file
# (tests/e2e/fixture.rs, `skipped`): they are reported as skipped, not only as passed. With
# MLPROF_REQUIRE_ALL=1 in the environment, a skip fails its test instead.
skips=$(mktemp)
trap 'rm -f "$log" "$skips"' EXIT
export MLPROF_TEST_SKIPS="$skips"
status=0
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
if [ "$status" -ne 0 ]; then
    # cargo's own closing line: "error: 2 targets failed:" (their names follow it above). A
    # binary that crashed is one of them, with no "test result" line of its own.
    binaries=$(grep -Eo '^error: [0-9]+ targets? failed' "$log" | tail -n 1 | awk '{print $2}' || true)
    if [ -n "$binaries" ]; then
        echo "tests: $binaries test binaries failed (named above)"
    else
        echo "tests: cargo test exited with status $status before running every test (see above)"
    fi
fi
skipped=$(awk -F': ' '{print $1}' "$skips" | sort -u | grep -c . || true)
if [ "$skipped" -gt 0 ]; then
    echo "tests skipped here, wholly or for some Pythons (not counted as passed):"
    sort -u "$skips" | sed 's/^/  /'
fi
# Every binary's "test result: FAILED. 3 passed; 1 failed; 2 ignored; 0 measured; ..." summed;
# the tests that skipped are taken out of the passed.
awk -v skipped="$skipped" '/^test result: / {
        for (i = 2; i <= NF; i++) {
            if ($i ~ /^passed;?$/) p += $(i - 1)
            if ($i ~ /^failed;?$/) f += $(i - 1)
            if ($i ~ /^ignored;?$/) g += $(i - 1)
        }
    }
    END { printf "tests: %d passed, %d skipped, %d failed, %d ignored\n", p - skipped, skipped, f, g }' "$log"
exit "$status"
