#!/usr/bin/env python3
"""The long-run benchmark: does the collector stay bounded on a job that runs for minutes, and
is the report still right?

Runs `tests/scripts/long_churn.py SECONDS` (allocation churn with a leak, copies and Python
work, its truth printed on stdout) under `mlprof run -q -o PROFILE`, reads the mlprof
process's resident set (VmRSS in /proc) once a second, and prints, as Markdown: the
collector's RSS after the first minute, its highest, its growth over the rest of the run, the
profile's size, the event window, and the report's figures against the truth (the heap peak
against a run of the same script with no churn, the top holder at the peak, the churn line's
allocated bytes, the copy line's copied bytes, the leak flagged). Standard library only.

    python3 bench/long_run.py --python target/bench-venv/bin/python --seconds 600
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "tests", "scripts", "long_churn.py")
MIB = 1 << 20
MB = 10**6


def default_mlprof():
    for build in ("release", "debug"):
        path = os.path.join(ROOT, "target", build, "mlprof")
        if os.path.exists(path):
            return path
    return shutil.which("mlprof") or "mlprof"


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def markers():
    out = {}
    with open(SCRIPT) as f:
        for i, line in enumerate(f, 1):
            m = re.search(r"# @(\S+)", line)
            if m:
                out[m.group(1)] = i
    return out


def profile_run(mlprof, python, seconds, out_dir, name, watch):
    path = os.path.join(out_dir, name + ".json")
    # Leaking 150 kB/s keeps the last phase's heap below the early peak for 600 s.
    cmd = [mlprof, "run", "-q", "-o", path, "--", python, SCRIPT, str(seconds), "150000"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    start = time.monotonic()
    readings = []
    while proc.poll() is None:
        if watch:
            rss = rss_bytes(proc.pid)
            if rss is not None:
                readings.append((time.monotonic() - start, rss))
        time.sleep(1.0 if watch else 0.1)
    stdout, stderr = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} exited {proc.returncode}: {stderr.decode()[-2000:]}")
    with open(path) as f:
        profile = json.load(f)
    return profile, json.loads(stdout), os.path.getsize(path), readings


def line(profile, number):
    for entry in profile["lines"]:
        if entry["file"] == SCRIPT and entry["line"] == number:
            return entry
    return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mlprof", default=default_mlprof())
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--seconds", type=float, default=600)
    args = ap.parse_args()
    python = os.path.abspath(shutil.which(args.python) or args.python)
    m = markers()
    with tempfile.TemporaryDirectory() as out_dir:
        base, _, _, _ = profile_run(args.mlprof, python, 0, out_dir, "base", False)
        p, truth, size, readings = profile_run(
            args.mlprof, python, args.seconds, out_dir, "long", True)
    after_minute = [r for t, r in readings if t >= 60] or [r for _, r in readings]
    first = after_minute[0]
    highest = max(r for _, r in readings)
    growth = max(after_minute) - first
    # The no-churn run peaks at baseline + 501 MB (the early array and the 1 MB source).
    baseline = base["memory"]["peak_heap_bytes"] - 501 * MB
    expected_peak = baseline + 502 * MB + truth["leaked_at_peak"]
    peak = p["memory"]["peak_heap_bytes"]
    top = max(p["lines"], key=lambda entry: entry["peak_bytes"])
    churn = line(p, m["churn"]).get("alloc_bytes", 0)
    copied = line(p, m["copy"]).get("copy_bytes", 0)
    leak = line(p, m["leak"]).get("leak") is not None
    others = [e["line"] for e in p["lines"] if e.get("leak") and e["line"] != m["leak"]]

    def pct(got, want):
        return f"{100 * (got - want) / want:+.1f}%"

    rows = [
        ("run", f"{args.seconds:.0f} s churn, {truth['iterations']} iterations, "
                f"Python {python}"),
        ("collector RSS at 1 min", f"{first / MIB:.1f} MiB"),
        ("collector RSS, highest", f"{highest / MIB:.1f} MiB"),
        ("collector RSS growth after 1 min", f"{growth / MIB:.1f} MiB"),
        ("profile size", f"{size / MIB:.2f} MiB"),
        ("event window", f"{p.get('event_window_s', 0) * 1000:.0f} ms"),
        ("heap peak vs truth", pct(peak, expected_peak)),
        ("top holder at the peak", f"line {top['line']} "
                                   f"({'right' if top['line'] == m['early'] else 'WRONG'})"),
        ("churn line allocated vs truth", pct(churn, truth["churn_bytes"])),
        ("copy line copied vs truth", pct(copied, truth["copy_bytes"])),
        ("leak flagged", "yes" if leak else "NO"),
        ("other lines flagged", ", ".join(map(str, others)) or "none"),
    ]
    print("| measure | value |\n|---|---|")
    for name, value in rows:
        print(f"| {name} | {value} |")
    print()
    print("RSS readings (s, MiB): " + " ".join(
        f"{t:.0f}:{r / MIB:.0f}" for t, r in readings[:: max(1, len(readings) // 30)]))


if __name__ == "__main__":
    main()
