#!/usr/bin/env python3
"""Benchmark runner: each workload unprofiled and under each installed profiler.

    python3 bench/run.py [--mlprof PATH] [--python PATH | --install] [--runs N] [--warmup N]
                         [--workloads a,b] [--profilers a,b] [--no-accuracy]
                         [--profiles-dir DIR] [--markdown FILE]

Runs are interleaved (none, mlprof, [others], none, mlprof, ... ) so that drift on a shared
machine hits every variant alike. Each command is started by a small launcher process (see
LAUNCHER) that times fork..os.wait4 with time.perf_counter() and reports the rusage os.wait4
returns for that one child (CPU time, peak RSS). After the timed rounds of a workload, each
profiler gets one unmeasured "accuracy run" (and one at size 0, for the baseline of its peak
figure) whose output file is parsed and compared with the truth marked in the workload's
source (see ACCURACY below). Only the Python 3 standard library is used. See bench/README.md.
"""

import argparse
import ast
import datetime
import functools
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
WORKLOAD_DIR = BENCH_DIR / "workloads"
INSTALL_VENV = REPO_DIR / "target" / "bench-venv"
INSTALL_PACKAGES = ["numpy", "scikit-learn", "onnxruntime", "onnx", "scalene", "memray",
                    "py-spy", "filprofiler",
                    # The framework suite (tests/e2e/frameworks.rs, docs/benchmarks.md).
                    "jax", "tensorflow-cpu", "polars", "numba"]
# Table order; any other script in bench/workloads/ (not starting with "_") comes after these.
WORKLOAD_ORDER = ["alloc_churn", "pure_python", "numpy_matmul", "numpy_alloc", "mixed_lines",
                  "large_arrays", "leak", "copies", "threads", "mp_pool", "mp_pool_spawn",
                  "sklearn_fit", "onnx_arena_on", "onnx_arena_off", "torch_train",
                  "torch_dataloader", "torch_compile", "jax_train", "tf_fit", "polars_join", "numba_loop"]
# mlprof's own configurations: shown in a second table (mlprof itself is in both).
MLPROF_VARIANTS = ["mlprof", "mlprof-cpu", "mlprof-min"]

# Filled in by main(): the mlprof binary, a scratch directory for the timed runs' output
# files (emptied after every run so memray/scalene captures do not fill the disk), and the
# directory that keeps the accuracy runs' profiles.
CONFIG = {"mlprof": None, "scratch": None, "profiles": None, "timeout": 0}


def all_workloads():
    """Workload names: scripts in bench/workloads/ not starting with '_', in table order."""
    found = {p.stem for p in WORKLOAD_DIR.glob("*.py") if not p.name.startswith("_")}
    return [w for w in WORKLOAD_ORDER if w in found] + sorted(found - set(WORKLOAD_ORDER))


# --------------------------------------------------------------------------------------------
# Profilers
#
# Each Profiler has a command builder `build(workload_cmd, out)` -> command list, or None when
# it is not installed for the workload's Python. workload_cmd is [python, script, *args].
# `out` is None for a timed run (write nothing, or only under _scratch()) and a path for the
# accuracy run: the profile must then be written to exactly that path (a file, or a directory
# for Fil), which `parse(out, ctx)` reads back (see ACCURACY). "none" is the unprofiled
# baseline and must stay first.
# --------------------------------------------------------------------------------------------


class Profiler:
    """A profiler under comparison.

    name: column label. build(cmd, out): see above. parse: function(out, ctx) -> report dict
    (see parse_* below), or None if nothing can be checked. ext: suffix of the accuracy
    profile's path ("" for a directory). separate_process: the profiler is its own process
    that launches the workload, so its own peak RSS is sampled. reports_peak: it reports a
    whole-run peak figure, so the accuracy run is repeated at size 0 for its baseline.
    note: one line for the notes under the table, or None.
    """

    def __init__(self, name, build, parse=None, ext="", separate_process=False,
                 reports_peak=False, note=None):
        self.name = name
        self.build = build
        self.parse = parse
        self.ext = ext
        self.separate_process = separate_process
        self.reports_peak = reports_peak
        self.note = note


@functools.lru_cache(maxsize=None)
def _importable(python, module):
    """True if `python -c 'import module'` works (cached)."""
    r = subprocess.run(
        [python, "-c", f"import {module}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return r.returncode == 0


@functools.lru_cache(maxsize=None)
def _find_exe(name, python):
    """An executable next to `python` (a venv's bin/) first, else on PATH, else None."""
    sibling = Path(python).parent / name
    if sibling.is_file() and os.access(sibling, os.X_OK):
        return str(sibling)
    return shutil.which(name)


@functools.lru_cache(maxsize=None)
def _module_version(python, module):
    """`python -m module --version` output (stdout + stderr), or '' on failure."""
    try:
        r = subprocess.run(
            [python, "-m", module, "--version"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout


def _scratch(name):
    return str(Path(CONFIG["scratch"]) / name)


def build_none(cmd, out=None):
    return list(cmd)


def _mlprof(cmd, out, options):
    if not CONFIG["mlprof"]:
        return None
    report = ["-q"] if out is None else ["-o", out]
    return [CONFIG["mlprof"], "run", *report, *options, "--", *cmd]


def build_mlprof(cmd, out=None):
    """mlprof with its defaults: CPU, memory and copy profiling. JSON profile with -o."""
    return _mlprof(cmd, out, [])


def build_mlprof_cpu(cmd, out=None):
    """mlprof with CPU profiling only (no allocation or copy sampling)."""
    return _mlprof(cmd, out, ["--memory-sample-bytes", "0", "--copy-sample-bytes", "0"])


def build_mlprof_min(cmd, out=None):
    """mlprof's minimal interposer: exact heap counters only, no sampling at all."""
    return _mlprof(cmd, out, ["--rate", "0", "--memory-sample-bytes", "0",
                              "--copy-sample-bytes", "0"])


def build_pyspy(cmd, out=None, native=False):
    # py-spy 0.4: `record -o FILE [-f flamegraph|speedscope|raw] [-r RATE] [--native] -- cmd`
    # (default rate 100 Hz, like mlprof's collector; idle threads are not sampled).
    exe = _find_exe("py-spy", cmd[0])
    if exe is None:
        return None
    extra = ["--native"] if native else []
    if out is None:
        return [exe, "record", *extra, "-o", os.devnull, "--", *cmd]
    return [exe, "record", *extra, "-f", "raw", "-o", out, "--", *cmd]


def build_pyspy_native(cmd, out=None):
    return build_pyspy(cmd, out, native=True)


def build_cpython_sampler(cmd, out=None):
    # CPython 3.15's own sampling profiler: `python -m profiling.sampling run [--collapsed -o
    # FILE] script args...`, with its defaults (1 kHz, wall-clock mode, read from a process of
    # its own). Absent before 3.15.
    python, script, *args = cmd
    if not _importable(python, "profiling.sampling"):
        return None
    path = out or _scratch("cpython-sampler.txt")
    return [python, "-m", "profiling.sampling", "run", "--collapsed", "-o", path, script, *args]


def build_memray(cmd, out=None):
    # memray 1.x: `python -m memray run [-q] [-f] [-o FILE] [--native] script args...`
    # Default mode (every allocation recorded, Python stacks only, the parent process only:
    # fork children need --follow-fork). -f overwrites.
    python, script, *args = cmd
    if not _importable(python, "memray"):
        return None
    path = out or _scratch("memray.bin")
    return [python, "-m", "memray", "run", "-q", "-f", "-o", path, script, *args]


def build_scalene(cmd, out=None):
    # Scalene 2.x: `scalene run [-o FILE] prog.py --- args` (JSON profile; no browser).
    # Scalene 1.x took flags directly: `scalene --cli --json --outfile FILE prog.py --- args`.
    # (`--off` would start with profiling *off*, so it is not used.)
    python, script, *args = cmd
    if not _importable(python, "scalene"):
        return None
    path = out or _scratch("scalene.json")
    tail = [script] + (["---", *args] if args else [])
    m = re.search(r"(\d+)\.\d+", _module_version(python, "scalene"))
    major = int(m.group(1)) if m else 2
    if major >= 2:
        return [python, "-m", "scalene", "run", "-o", path, *tail]
    return [python, "-m", "scalene", "--cli", "--json", "--outfile", path, *tail]


def build_fil(cmd, out=None):
    # filprofiler 2024.x: `fil-profile [-o DIR] [--no-browser] run script args` (the options
    # go before `run`). It writes DIR/<timestamp>/peak-memory.prof (folded stacks of the
    # allocations live at the peak, in bytes), two SVG flame graphs and index.html at exit.
    # Fil sets OPENBLAS_NUM_THREADS, OMP_NUM_THREADS and similar to 1 in the profiled
    # process, which changes the BLAS workloads themselves (one BLAS thread).
    python, script, *args = cmd
    exe = _find_exe("fil-profile", python)
    if exe is None or not _importable(python, "filprofiler"):
        return None
    path = out or _scratch("fil")
    return [exe, "-o", path, "--no-browser", "run", script, *args]


# --------------------------------------------------------------------------------------------
# Parsers of the accuracy runs' profiles
#
# Each returns a report dict; a value of None means "this profiler does not report that"
# (shown as "–"):
#   peak_bytes  the whole-run peak memory figure the profiler reports (bytes);
#   peak_lines  {loc: bytes}: how much each workload line held at the peak, per the profiler;
#   leak_lines  {loc: score}: workload lines the profiler flags as leaking (higher = worse);
#   copy_lines  {loc: volume}: copy volume per workload line;
#   cpu_lines   {loc: (python, native, system)}: CPU split per workload line, any unit; an
#               element is None when the profiler cannot tell that category.
# loc is "file.py:LINE" for a file of the workload (the script and the sibling modules it
# imports, ctx["names"]); lines elsewhere (libraries, start-up) are left out.
# --------------------------------------------------------------------------------------------


def _loc(path, line, ctx):
    """'file.py:LINE' if `path` is one of the workload's files, else None."""
    if not path or line is None:
        return None
    base = os.path.basename(path)
    if base not in ctx["names"]:
        return None
    if os.path.isabs(path) and Path(path).resolve().parent != WORKLOAD_DIR:
        return None
    return f"{base}:{int(line)}"


def _add(d, key, value):
    if key is not None:
        d[key] = d.get(key, 0) + value


def parse_mlprof(out, ctx, memory=True, copy=True, cpu=True):
    """mlprof's JSON profile (docs/profile-schema.md): peak = memory.peak_heap_bytes (exact
    heap of the tree); per line: peak_bytes, leak (not null = flagged; ranked by
    bytes_per_s), copy_bytes, cpu_python_s / cpu_native_s / waiting_s."""
    with open(out) as f:
        prof = json.load(f)
    peak, leak, copies, split = {}, {}, {}, {}
    for ln in prof["lines"]:
        loc = _loc(ln["file"], ln["line"], ctx)
        if loc is None:
            continue
        _add(peak, loc, ln["peak_bytes"])
        _add(copies, loc, ln["copy_bytes"])
        if ln.get("leak"):
            leak[loc] = max(leak.get(loc, 0), ln["leak"]["bytes_per_s"], 1e-9)
        split[loc] = (ln["cpu_python_s"], ln["cpu_native_s"], ln["waiting_s"])
    return {"peak_bytes": prof["memory"]["peak_heap_bytes"],
            "peak_lines": peak if memory else None,
            "leak_lines": leak if memory else None,
            "copy_lines": copies if copy else None,
            "cpu_lines": split if cpu else None}


def parse_mlprof_cpu(out, ctx):
    return parse_mlprof(out, ctx, memory=False, copy=False)


def parse_mlprof_min(out, ctx):
    return parse_mlprof(out, ctx, memory=False, copy=False, cpu=False)


# Run with the workload's Python (memray is installed there, not necessarily for run.py):
# argv: capture file, JSON list of the workload's file names, workload directory.
MEMRAY_READER = r"""
import json, os, sys
from memray import FileReader
path, names, wdir = sys.argv[1], set(json.loads(sys.argv[2])), os.path.realpath(sys.argv[3])
reader = FileReader(path)
def loc(rec):
    for _func, file, line in rec.stack_trace():  # innermost frame first
        base = os.path.basename(file)
        if base in names and (not os.path.isabs(file)
                              or os.path.dirname(os.path.realpath(file)) == wdir):
            return "%s:%d" % (base, line)
    return None
def by_line(records):
    out = {}
    for rec in records:
        k = loc(rec)
        if k is not None:
            out[k] = out.get(k, 0) + rec.size
    return out
print(json.dumps({
    "peak_bytes": reader.metadata.peak_memory,
    "peak_lines": by_line(reader.get_high_watermark_allocation_records(merge_threads=True)),
    "leak_lines": by_line(reader.get_leaked_allocation_records(merge_threads=True)),
}))
"""


def parse_memray(out, ctx):
    """memray's capture file, read with memray's own reader API (memray.FileReader) in the
    workload's Python: peak = metadata.peak_memory; peak lines = the allocations live at the
    high-water mark; leaks = the allocations still live when tracking stopped (what `memray
    flamegraph --leaks` shows), both by the innermost frame in the workload's files."""
    r = subprocess.run([ctx["python"], "-c", MEMRAY_READER, out, json.dumps(sorted(ctx["names"])),
                        str(WORKLOAD_DIR)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError("memray reader: " + (r.stderr.strip().splitlines() or ["failed"])[-1])
    rep = json.loads(r.stdout)
    rep.update(copy_lines=None, cpu_lines=None)
    return rep


def parse_scalene(out, ctx):
    """Scalene's JSON: peak = max_footprint_mb (MiB); peak line = max_footprint_fname/lineno
    (the line running when the footprint peaked: Scalene has no per-line "held at the peak"
    figure); leaks = files[f].leaks (ranked by velocity_mb_s); copy = n_copy_mb_s; CPU split =
    n_cpu_percent_python / n_cpu_percent_c / n_sys_percent."""
    with open(out) as f:
        prof = json.load(f)
    peak_bytes = int(float(prof.get("max_footprint_mb", 0)) * 2**20)
    peak, leak, copies, split = {}, {}, {}, {}
    loc = _loc(prof.get("max_footprint_fname"), prof.get("max_footprint_lineno"), ctx)
    if loc:
        peak[loc] = peak_bytes
    for fname, fdata in prof.get("files", {}).items():
        for ln in fdata.get("lines", []):
            loc = _loc(fname, ln.get("lineno"), ctx)
            if loc is None:
                continue
            _add(copies, loc, ln.get("n_copy_mb_s", 0))
            split[loc] = (ln.get("n_cpu_percent_python", 0), ln.get("n_cpu_percent_c", 0),
                          ln.get("n_sys_percent", 0))
        for lineno, info in (fdata.get("leaks") or {}).items():
            loc = _loc(fname, int(lineno), ctx)
            if loc is not None:
                score = info.get("velocity_mb_s", 0) if isinstance(info, dict) else info
                leak[loc] = max(float(score or 0), 1e-9)
    return {"peak_bytes": peak_bytes, "peak_lines": peak, "leak_lines": leak,
            "copy_lines": copies, "cpu_lines": split}


def _split_frame(frame):
    """('file', line) of a folded-stack frame 'func (file:line)' / 'file:line (func)', else
    None (a native frame 'func (lib.so)' or '0x... (?)')."""
    m = re.fullmatch(r"(?:.* \()?(.+?):(\d+)(?:\)| \(.*\))", frame)
    return (m.group(1), int(m.group(2))) if m else None


def parse_fil(out, ctx):
    """Fil's peak-memory.prof: folded stacks (outermost frame first, 'file:line (func)') of
    the allocations live at the peak, each with its bytes. peak = their sum; peak lines = by
    the innermost frame in the workload's files."""
    profs = sorted(Path(out).glob("**/peak-memory.prof"), key=lambda p: p.stat().st_mtime)
    if not profs:
        raise RuntimeError("no peak-memory.prof written")
    total, peak = 0, {}
    with open(profs[-1]) as f:
        for row in f:
            stack, _, count = row.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            total += int(count)
            for frame in reversed(stack.split(";")):
                fl = _split_frame(frame)
                loc = fl and _loc(fl[0], fl[1], ctx)
                if loc:
                    _add(peak, loc, int(count))
                    break
    return {"peak_bytes": total, "peak_lines": peak, "leak_lines": None, "copy_lines": None,
            "cpu_lines": None}


def parse_pyspy(out, ctx, native=False):
    """py-spy's raw folded stacks (outermost first, 'func (file:line)', then a count of
    samples). CPU per line by the innermost frame in the workload's files. Without --native
    there is no Python/native split (cpu_lines None); with it, a sample whose innermost frame
    is native counts as native. Idle threads are not sampled (no system/waiting figure)."""
    split = {}
    with open(out) as f:
        for row in f:
            stack, _, count = row.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            frames = stack.split(";")
            leaf_native = _split_frame(frames[-1]) is None
            for frame in reversed(frames):
                fl = _split_frame(frame)
                loc = fl and _loc(fl[0], fl[1], ctx)
                if loc:
                    py, nat, _ = split.get(loc, (0, 0, None))
                    n = int(count)
                    split[loc] = (py, nat + n, None) if leaf_native else (py + n, nat, None)
                    break
    return {"peak_bytes": None, "peak_lines": None, "leak_lines": None, "copy_lines": None,
            "cpu_lines": split if native else None}


def parse_pyspy_native(out, ctx):
    return parse_pyspy(out, ctx, native=True)



PROFILERS = {
    "none": Profiler("none", build_none),
    "mlprof": Profiler("mlprof", build_mlprof, parse_mlprof, ".json", True, True),
    "mlprof-cpu": Profiler("mlprof-cpu", build_mlprof_cpu, parse_mlprof_cpu, ".json", True,
                           True),
    "mlprof-min": Profiler("mlprof-min", build_mlprof_min, parse_mlprof_min, ".json", True,
                           True),
    "py-spy": Profiler("py-spy", build_pyspy, parse_pyspy, ".txt", True),
    "py-spy-native": Profiler("py-spy-native", build_pyspy_native, parse_pyspy_native, ".txt",
                              True),
    "memray": Profiler("memray", build_memray, parse_memray, ".bin", reports_peak=True,
                       note="memray: default mode, parent process only (no --follow-fork)"),
    "scalene": Profiler("scalene", build_scalene, parse_scalene, ".json", reports_peak=True),
    "cpython-sampler": Profiler("cpython-sampler", build_cpython_sampler, None, ".txt",
                                note="cpython-sampler: CPython 3.15's own "
                                "`python -m profiling.sampling run`, its defaults (1 kHz, "
                                "wall clock, from a process of its own)"),
    "fil": Profiler("fil", build_fil, parse_fil, "", reports_peak=True,
                    note="fil: Fil sets OPENBLAS_NUM_THREADS/OMP_NUM_THREADS=1 (and similar) "
                         "in the profiled process, so the BLAS workloads run single-threaded "
                         "under it"),
}
# Compared by default (py-spy-native only when asked for with --profilers).
DEFAULT_PROFILERS = ["mlprof", "mlprof-cpu", "mlprof-min", "py-spy", "memray", "scalene", "fil",
                     "cpython-sampler"]


def profiler_unavailable_note(name, python):
    if name.startswith("mlprof"):
        return "mlprof: binary not found (pass --mlprof PATH)"
    return f"{name}: not installed for {python}, skipped"


# --------------------------------------------------------------------------------------------
# Accuracy
#
# The truth is marked in each workload's source, by comments alone at the end of a line:
#   # @peak    the line holding the most memory at the peak
#   # @leak    a line that leaks
#   # @copy    the line copying the most bytes
#   # @python  a line that is (nearly) all Python time
#   # @native  a line that is (nearly) all native time
#   # @system  a line that is (nearly) all waiting (sleep, I/O, locks)
# (several on one line: `# @leak @peak`), and by a module-level constant
# EXPECTED_PEAK_BYTES: the bytes the workload's own data holds at its peak beyond what the
# same script holds when run with size 0. The script and the sibling modules it imports
# from bench/workloads/ are scanned.
# --------------------------------------------------------------------------------------------

MARKERS = ("peak", "leak", "copy", "python", "native", "system")
MARKER_RE = re.compile(r"#\s*((?:@\w+\s*)+)$")


def workload_sources(name):
    """The workload's script and the modules of bench/workloads/ it imports (one level)."""
    script = WORKLOAD_DIR / f"{name}.py"
    files = [script]
    for m in re.finditer(r"^\s*(?:from\s+(\w+)\s+import|import\s+(\w+))", script.read_text(),
                         re.M):
        dep = WORKLOAD_DIR / f"{m.group(1) or m.group(2)}.py"
        if dep.is_file() and dep not in files:
            files.append(dep)
    return files


def _const_eval(node, env):
    """Value of an int expression made of literals, known names and + - * // ** (else
    ValueError)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in env:
        return env[node.id]
    if isinstance(node, ast.BinOp):
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
               ast.Mult: lambda a, b: a * b, ast.FloorDiv: lambda a, b: a // b,
               ast.Pow: lambda a, b: a ** b}
        op = ops.get(type(node.op))
        if op:
            return op(_const_eval(node.left, env), _const_eval(node.right, env))
    raise ValueError("not a constant expression")


def workload_truth(name):
    """{'names': file names, 'markers': {marker: set of locs}, 'expected_peak': int|None}."""
    markers = {m: set() for m in MARKERS}
    expected = None
    files = workload_sources(name)
    for path in files:
        text = path.read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            m = MARKER_RE.search(line)
            if m:
                for tag in m.group(1).split():
                    if tag[1:] in markers:
                        markers[tag[1:]].add(f"{path.name}:{lineno}")
        env = {}
        for stmt in ast.parse(text).body:
            if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name)):
                try:
                    env[stmt.targets[0].id] = _const_eval(stmt.value, env)
                except ValueError:
                    pass
        if expected is None and "EXPECTED_PEAK_BYTES" in env:
            expected = env["EXPECTED_PEAK_BYTES"]
    return {"names": {p.name for p in files}, "markers": markers, "expected_peak": expected}


def _short(loc, script):
    return loc[len(script):] if loc.startswith(script + ":") else loc


def check_top(values, truth, script):
    """'✓' if the line with the largest value is a marked one, '✗ (line named)', or '–'."""
    if values is None:
        return "–"
    ranked = [(v, k) for k, v in values.items() if v and v > 0]
    if not ranked:
        return "✗ (none)"
    top = max(ranked)[1]
    return "✓" if top in truth else f"✗ ({_short(top, script)})"


def check_split(split, markers, script):
    """'✓' if every @python line has more than half of its CPU time (Python + native) in
    Python, every @native line more than half in native code, and every @system line more
    than half of all its time (CPU and waiting) waiting; else '✗ (the first line that does
    not, with its share)'; '–' if the profiler has no such split. Waiting is left out of
    the first two on purpose: a Python thread waiting for the GIL is not running native code."""
    if split is None:
        return "–"
    checked = 0
    for k, cat in enumerate(("python", "native", "system")):
        for loc in sorted(markers[cat]):
            vals = split.get(loc)
            if vals is not None and vals[k] is None:
                continue  # this profiler cannot tell that category
            checked += 1
            vals = [v or 0 for v in (vals or (0, 0, 0))]
            total = sum(vals) if cat == "system" else vals[0] + vals[1]
            share = vals[k] / total if total > 0 else 0.0
            if share <= 0.5:
                return f"✗ ({_short(loc, script)} {share:.0%} {cat})"
    return "✓" if checked else "–"


def lines_named(report, truth, script):
    """The accuracy column: e.g. 'peak ✓ leak – py/nat ✓' (items the workload marks)."""
    mk = truth["markers"]
    if report is None:
        return "–"
    parts = []
    for label, key, values in (("peak", "peak", report["peak_lines"]),
                               ("leak", "leak", report["leak_lines"]),
                               ("copy", "copy", report["copy_lines"])):
        if mk[key]:
            parts.append(f"{label} {check_top(values, mk[key], script)}")
    if mk["python"] or mk["native"] or mk["system"]:
        parts.append(f"py/nat {check_split(report['cpu_lines'], mk, script)}")
    return " ".join(parts) if parts else "(no marks)"


def _path_size(path):
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return None


def _remove(path):
    p = Path(path)
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    elif p.exists() or p.is_symlink():
        p.unlink()


def accuracy_run(prof, wcmd, out, ctx):
    """One unmeasured run of `wcmd` under `prof`, its profile written to `out` and parsed.
    Returns {'rc', 'size', 'report' (or None), 'error' (or None)}."""
    _remove(out)
    cmd = prof.build(wcmd, out)
    # In its own session (process group): on timeout the whole tree is killed, and so is
    # anything the command left running behind it (orphaned workers).
    with tempfile.TemporaryFile() as errf:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=errf, cwd=CONFIG["scratch"], start_new_session=True)
        try:
            rc = proc.wait(timeout=CONFIG["timeout"] or None)
        except subprocess.TimeoutExpired:
            rc = None
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        errf.seek(0)
        err = errf.read().decode(errors="replace")
        if rc is None:
            proc.wait()
            rc = -9
            err += f"\nkilled after the {CONFIG['timeout']:g} s time limit (--timeout)"
    res = {"rc": rc, "size": _path_size(out), "report": None, "error": None}
    if prof.parse is None:
        return res
    if res["size"] is None:
        res["error"] = f"no profile written (exit {rc})"
        if err.strip():
            res["error"] += ": " + err.strip().splitlines()[-1][:200]
        return res
    try:
        res["report"] = prof.parse(out, ctx)
    except Exception as e:  # a profile the parser does not understand: report, not crash
        res["error"] = f"parse failed: {type(e).__name__}: {e}"[:300]
    return res


def accuracy(name, wcmd, profilers, python, log):
    """Accuracy runs of one workload: per profiler a full-size run and, for profilers that
    report a peak, a size-0 run. Returns {profiler: dict} (see summarize)."""
    truth = workload_truth(name)
    ctx = {"names": truth["names"], "python": python}
    out = {}
    for pname in profilers:
        if pname == "none":
            continue
        prof = PROFILERS[pname]
        base = str(Path(CONFIG["profiles"]) / f"{name}.{pname}")
        full = accuracy_run(prof, wcmd, base + prof.ext, ctx)
        zero = None
        if prof.reports_peak:
            zero = accuracy_run(prof, wcmd + ["0"], base + ".size0" + prof.ext, ctx)
        out[pname] = {"full": full, "zero": zero, "truth": truth}
        rep = full["report"]
        peak = rep and rep.get("peak_bytes")
        log(f"  {name}: accuracy {pname}: exit {full['rc']}, profile "
            f"{_size(full['size'])}, peak {_mib_b(peak)} MiB, "
            f"{lines_named(rep, truth, name + '.py')}"
            + (f" [{full['error']}]" if full["error"] else ""))
    return out

# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


class Run:
    __slots__ = ("wall", "cpu", "maxrss_kib", "own_hwm_kib", "own_cpu", "rc")

    def __init__(self, wall, cpu, maxrss_kib, own_hwm_kib, rc, own_cpu=None):
        self.wall = wall
        self.cpu = cpu
        self.maxrss_kib = maxrss_kib
        self.own_hwm_kib = own_hwm_kib
        self.own_cpu = own_cpu
        self.rc = rc


def _read_vmhwm_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _read_own_cpu_s(pid):
    """utime + stime of `pid` itself (not its children), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _sample_hwm(pid, stop, box, interval=0.02):
    """Keep the last VmHWM of `pid` (box[0]) and its own CPU seconds (box[1]).

    VmHWM only grows within one address space, so the last reading is the best lower bound of
    the exec'ed program's peak. (The last, not the max: a reading taken between fork and exec
    would show the launcher's copy.) Its own CPU likewise: the last reading, up to 20 ms before
    it exited, is a lower bound of what the profiler's process used.
    """
    while not stop.is_set():
        v = _read_vmhwm_kib(pid)
        if v is not None:
            box[0] = v
        c = _read_own_cpu_s(pid)
        if c is not None:
            box[1] = c
        stop.wait(interval)


# The launcher that runs each measured command. Why not Popen + os.wait4 directly: on Linux a
# child's ru_maxrss includes the address space it had *before* exec, which for a child of this
# runner is a copy of the runner (~15 MiB, more after many runs), so a small workload would
# report the runner's RSS. This launcher is a fresh `python -I -S` (a few MiB of anonymous
# memory); it forks, the child execs the command, and it times fork..wait4 with
# time.perf_counter and reports the child's rusage over a pipe. The floor it leaves in
# ru_maxrss is measured once (see rss_floor_kib) and printed with the results.
#
# The command runs in its own process group. If it is still running after the time limit
# (--timeout, argv[2]; 0 = none), a SIGALRM handler kills the whole group (the profiler, the
# workload and any workers) with SIGKILL, and the run reports exit code -9. Processes of the
# group still alive when the command itself has exited (orphaned workers) are killed too, so
# they cannot slow down the next run.
LAUNCHER = r"""
import os, signal, sys, time
fd = int(sys.argv[1])
limit = float(sys.argv[2])
argv = sys.argv[3:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(fd)
    os.setpgid(0, 0)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("exec %s: %s\n" % (argv[0], e)).encode())
    os._exit(127)
try:
    os.setpgid(pid, pid)
except OSError:
    pass
def expire(signum, frame):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
signal.signal(signal.SIGALRM, expire)
if limit > 0:
    signal.setitimer(signal.ITIMER_REAL, limit)
os.write(fd, b"pid %d\n" % pid)
_, status, ru = os.wait4(pid, 0)
t1 = time.perf_counter()
signal.setitimer(signal.ITIMER_REAL, 0)
try:
    os.killpg(pid, signal.SIGKILL)  # whatever the command left running behind it
except OSError:
    pass
os.write(fd, ("done %r %d %r %d\n" % (t1 - t0, os.waitstatus_to_exitcode(status),
                                      ru.ru_utime + ru.ru_stime, ru.ru_maxrss)).encode())
"""


def measure(cmd, sample_own=False, capture=False):
    """Run cmd once through LAUNCHER. Returns (Run, stdout text or None).

    Wall time: time.perf_counter() from fork to wait4 in the launcher. CPU time and
    ru_maxrss: the rusage of the command's process, which covers every descendant it reaped;
    ru_maxrss is then the largest peak in that tree (the maximum, not the sum), in KiB.
    """
    rfd, wfd = os.pipe()
    out_file = tempfile.TemporaryFile() if capture else None
    try:
        launcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(wfd), str(CONFIG["timeout"]),
             *cmd],
            stdin=subprocess.DEVNULL,
            stdout=out_file if capture else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(wfd,),
            cwd=CONFIG["scratch"],  # profilers' stray files (e.g. Scalene's workers') go there
        )
        os.close(wfd)
        stop = threading.Event()
        box = [None, None]
        sampler = None
        with os.fdopen(rfd) as report:
            first = report.readline().split()
            if sample_own and len(first) == 2 and first[0] == "pid":
                sampler = threading.Thread(target=_sample_hwm, args=(int(first[1]), stop, box),
                                           daemon=True)
                sampler.start()
            last = report.readline().split()
        launcher.wait()
        if sampler is not None:
            stop.set()
            sampler.join()
        if len(last) == 5 and last[0] == "done":
            run = Run(float(last[1]), float(last[3]), int(last[4]), box[0], int(last[2]),
                      box[1])
        else:  # the launcher itself failed
            run = Run(float("nan"), float("nan"), 0, None, launcher.returncode or -1)
        out = None
        if capture:
            out_file.seek(0)
            out = out_file.read().decode(errors="replace")
        return run, out
    finally:
        if out_file is not None:
            out_file.close()


def rss_floor_kib():
    """ru_maxrss that LAUNCHER reports for a trivial program: the measurement's floor."""
    true = shutil.which("true") or "/bin/true"
    run, _ = measure([true])
    return run.maxrss_kib if run.rc == 0 else None


def clean_scratch():
    d = Path(CONFIG["scratch"])
    for child in d.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            try:
                child.unlink()
            except OSError:
                pass


# --------------------------------------------------------------------------------------------
# Benchmark loop
# --------------------------------------------------------------------------------------------


def bench_workload(name, python, profilers, runs, warmup, log, with_accuracy=True):
    """Returns dict: {'skipped': reason} or {'runs': {profiler: [Run]}, 'errors': {...},
    'accuracy': {profiler: ...}}."""
    script = WORKLOAD_DIR / f"{name}.py"
    wcmd = [python, str(script)]
    cmds = {}
    for prof in profilers:
        c = PROFILERS[prof].build(wcmd)
        if c is not None:
            cmds[prof] = c

    # Probe: one unprofiled run with stdout captured, to see whether the workload skips
    # itself (e.g. numpy missing). It also counts as warm-up for the baseline.
    probe, out = measure(cmds["none"], capture=True)
    clean_scratch()
    first = (out or "").strip().splitlines()[:1]
    if first and first[0].startswith("skipped:"):
        log(f"  {name}: {first[0]}")
        return {"skipped": first[0][len("skipped:"):].strip()}
    if probe.rc != 0:
        log(f"  {name}: unprofiled run failed with exit code {probe.rc}")
        return {"skipped": f"workload failed (exit {probe.rc})"}

    order = list(cmds)
    results = {p: [] for p in order}
    errors = {}
    timed_out = set()  # profilers that hit --timeout: not run again on this workload
    total = warmup + runs
    for i in range(total):
        measured = i >= warmup
        this_round = []
        for prof in order:
            if prof in timed_out:
                continue
            r, _ = measure(cmds[prof], sample_own=PROFILERS[prof].separate_process)
            clean_scratch()
            if r.rc != 0:
                errors.setdefault(prof, []).append(r.rc)
            if prof != "none" and r.rc == -9 and CONFIG["timeout"] and (
                    r.wall >= 0.99 * CONFIG["timeout"]):
                timed_out.add(prof)
            elif measured:
                results[prof].append(r)
            this_round.append(f"{prof}={r.wall:.2f}s" + (f"(exit {r.rc})" if r.rc else ""))
        tag = f"run {i + 1 - warmup}/{runs}" if measured else f"warm-up {i + 1}/{warmup}"
        log(f"  {name}: {tag} " + " ".join(this_round))
    for prof in sorted(timed_out):
        log(f"  {name}: {prof} ran past --timeout {CONFIG['timeout']:g} s; its other runs "
            "of this workload are skipped")
    acc = {}
    if with_accuracy:
        acc = accuracy(name, wcmd, [p for p in order if p not in timed_out], python, log)
    return {"runs": results, "errors": errors, "cmds": cmds, "accuracy": acc,
            "timed_out": timed_out}


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _mib(kib, digits=0):
    return "-" if kib is None else f"{kib / 1024:.{digits}f}"


def _mib_b(n, digits=1):
    return "–" if n is None else f"{n / 2**20:.{digits}f}"


def _size(n):
    """A profile's size: bytes below 10 KiB, KiB below 10 MiB, else MiB."""
    if n is None:
        return "–"
    if n < 10 * 1024:
        return f"{n:,} B"
    return f"{n / 1024:,.0f} KiB" if n < 10 * 2**20 else f"{n / 2**20:,.1f} MiB"


def accuracy_cells(name, acc):
    """(reported peak, peak extra reported / exact, lines named, profile size) cells."""
    if acc is None:
        return ["", "", "", ""]
    full, zero, truth = acc["full"], acc["zero"], acc["truth"]
    rep = full["report"]
    if rep is None:
        why = full["error"] or "–"
        return ["–", "–", why.replace("|", "/"), _size(full["size"])]
    peak = rep.get("peak_bytes")
    extra = "–"
    zrep = zero and zero["report"]
    if peak is not None and zrep and zrep.get("peak_bytes") is not None:
        diff = peak - zrep["peak_bytes"]
        exact = truth["expected_peak"]
        if exact:
            extra = f"{diff / 2**20:.1f} / {exact / 2**20:.1f} ({(diff - exact) / exact:+.1%})"
        else:
            extra = f"{diff / 2**20:.1f} / ?"
    elif peak is not None:
        extra = "size-0 run failed"
    named = lines_named(rep, truth, f"{name}.py")
    if full["rc"] != 0:
        named += f" (exit {full['rc']})"
    return [_mib_b(peak), extra, named, _size(full["size"])]


def summarize(results, base="none"):
    """Rows of dicts, one per (workload, profiler other than the baseline)."""
    rows = []
    for wname, res in results.items():
        if "skipped" in res:
            rows.append({"workload": wname, "skipped": res["skipped"]})
            continue
        base_runs = res["runs"][base]
        b_wall = statistics.median(r.wall for r in base_runs)
        b_cpu = statistics.median(r.cpu for r in base_runs)
        b_rss = statistics.median(r.maxrss_kib for r in base_runs)
        for prof, pruns in res["runs"].items():
            if prof == base:
                continue
            if prof in res.get("timed_out", ()):
                rows.append({"workload": wname, "profiler": prof,
                             "skipped": f"ran past the {CONFIG['timeout']:g} s time limit "
                                        f"(--timeout); {len(pruns)} run(s) completed before"})
                continue
            pairs = [p.wall / b.wall for p, b in zip(pruns, base_runs)]
            p_wall = statistics.median(r.wall for r in pruns)
            p_cpu = statistics.median(r.cpu for r in pruns)
            own = [r.own_hwm_kib for r in pruns if r.own_hwm_kib is not None]
            own_cpu = [r.own_cpu for r in pruns if r.own_cpu is not None]
            rows.append({
                "workload": wname,
                "profiler": prof,
                "base_wall": b_wall,
                "prof_wall": p_wall,
                "ratio_of_medians": p_wall / b_wall,
                "median_pair_ratio": statistics.median(pairs),
                "min_ratio": min(pairs),
                "max_ratio": max(pairs),
                "cpu_ratio": p_cpu / b_cpu if b_cpu > 0 else float("nan"),
                "base_rss": b_rss,
                "prof_rss": max(r.maxrss_kib for r in pruns),
                "own_rss": max(own) if own else None,
                # The profiler's own process's CPU as a share of the program's (the tree's
                # CPU less the profiler's own), median over runs.
                "own_cpu_share": (statistics.median(c / max(p.cpu - c, 1e-9) for c, p in
                                                    zip(own_cpu, pruns))
                                  if len(own_cpu) == len(pruns) and own_cpu else None),
                "n": len(pairs),
                "errors": res["errors"].get(prof, []) + res["errors"].get(base, []),
                "accuracy": accuracy_cells(wname, res.get("accuracy", {}).get(prof)),
            })
    return rows


HEADER = ("| workload | profiler | unprofiled s | profiled s | ratio of medians | "
          "median pair ratio | pair ratios min-max | CPU ratio | peak RSS unprofiled MiB | "
          "peak RSS profiled MiB (tree max) | profiler own peak RSS MiB | "
          "profiler own CPU / program's | "
          "reported peak MiB | peak extra MiB reported / exact | lines named | profile size |")
ALIGN = "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|--:|"

LEGEND = ("Lines named: `peak` the line the profiler says holds the most at the peak is the "
          "`@peak` line; `leak` the `@leak` line is the top line it flags as a leak; `copy` "
          "the `@copy` line has its largest copy volume; `py/nat` each `@python` / `@native` "
          "line has more than half of its CPU time in Python / native code, each `@system` "
          "line more than half of its time waiting. ✓ right, "
          "✗ wrong (the line it named instead, or the line and share that failed), – not "
          "reported by that profiler (or that configuration); items appear only for truths "
          "the workload marks.")


def markdown_table(rows):
    lines = [HEADER, ALIGN]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['workload']} | {r.get('profiler', '-')} | skipped: "
                         f"{r['skipped']} |" + " |" * (HEADER.count("|") - 4))
            continue
        err = f" (exit codes {sorted(set(r['errors']))}!)" if r["errors"] else ""
        own = (_mib(r["own_rss"], 1) if PROFILERS[r["profiler"]].separate_process
               else "in-process")
        own_cpu = ("in-process" if not PROFILERS[r["profiler"]].separate_process
                   else "?" if r["own_cpu_share"] is None
                   else f"{100 * r['own_cpu_share']:.1f}%")
        acc = " | ".join(r["accuracy"])
        lines.append(
            f"| {r['workload']} | {r['profiler']}{err} | {r['base_wall']:.3f} | "
            f"{r['prof_wall']:.3f} | {r['ratio_of_medians']:.2f}x | "
            f"{r['median_pair_ratio']:.2f}x | {r['min_ratio']:.2f}-{r['max_ratio']:.2f} | "
            f"{r['cpu_ratio']:.2f}x | {_mib(r['base_rss'])} | {_mib(r['prof_rss'])} | {own} | "
            f"{own_cpu} | {acc} |")
    return "\n".join(lines)


def split_tables(rows):
    """(comparison rows: mlprof and the other profilers; mlprof configuration rows: mlprof,
    mlprof-cpu, mlprof-min - empty unless a variant other than mlprof was run)."""
    main_rows = [r for r in rows if "skipped" in r or r["profiler"] not in MLPROF_VARIANTS[1:]]
    variant_rows = [r for r in rows if "skipped" in r or r["profiler"] in MLPROF_VARIANTS]
    if not any(r.get("profiler") in MLPROF_VARIANTS[1:] for r in rows):
        variant_rows = []
    return main_rows, variant_rows


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def target_python_info(python):
    code = ("import platform, sys\n"
            "try:\n import numpy; n = numpy.__version__\n"
            "except ImportError:\n n = 'not installed'\n"
            "print(sys.executable); print(platform.python_version()); print(n)")
    r = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, text=True, check=True)
    exe, ver, numpy = r.stdout.strip().splitlines()[:3]
    return exe, ver, numpy


def tool_versions(python):
    """'memray 1.20.0, scalene 2.4.0, ...' for the profilers installed for `python`."""
    code = ("import importlib.metadata as m\n"
            "for d in ('py-spy', 'memray', 'scalene', 'filprofiler', 'scikit-learn',"
            " 'onnxruntime'):\n"
            "    try: print(d, m.version(d))\n"
            "    except Exception: pass\n")
    r = subprocess.run([python, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True)
    return ", ".join(r.stdout.strip().splitlines()) or "none"


def mlprof_version(path):
    try:
        r = subprocess.run([path, "--version"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=30)
        return r.stdout.strip() or "unknown version"
    except OSError:
        return "unknown version"


def default_mlprof():
    for build in ("release", "debug"):
        p = REPO_DIR / "target" / build / "mlprof"
        if p.is_file():
            return str(p)
    return shutil.which("mlprof")


def install_venv(log):
    """Create target/bench-venv (if missing) and pip-install INSTALL_PACKAGES into it.
    Only run on request (--install): it downloads packages."""
    py = INSTALL_VENV / "bin" / "python"
    if not py.is_file():
        log(f"creating {INSTALL_VENV}")
        subprocess.run([sys.executable, "-m", "venv", str(INSTALL_VENV)], check=True)
    log(f"installing into {INSTALL_VENV}: {' '.join(INSTALL_PACKAGES)}")
    subprocess.run([str(py), "-m", "pip", "install", "--upgrade", "pip"], check=True)
    subprocess.run([str(py), "-m", "pip", "install", *INSTALL_PACKAGES], check=True)
    log("torch is not installed by --install (torch_train skips itself here); see "
        "bench/README.md for target/torch-venv")
    return str(py)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mlprof", default=None,
                    help="mlprof binary (default: target/release/mlprof, else target/debug, "
                         "else PATH)")
    ap.add_argument("--python", default=None,
                    help="Python that runs the workloads (default: target/bench-venv with "
                         "--install, else this one)")
    ap.add_argument("--install", action="store_true",
                    help="create target/bench-venv and pip-install numpy, scikit-learn, "
                         "onnxruntime, onnx, jax, tensorflow-cpu, polars, numba and the profilers into it (downloads; on demand "
                         "only), then use it unless --python is given; not torch: see "
                         "bench/README.md for target/torch-venv")
    ap.add_argument("--runs", type=int, default=7, help="measured runs per variant (default 7)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="unmeasured rounds before measuring (default 1)")
    ap.add_argument("--workloads", default=",".join(all_workloads()),
                    help="comma-separated names from bench/workloads/ (default: all)")
    ap.add_argument("--profilers", default=",".join(DEFAULT_PROFILERS),
                    help="comma-separated profilers to compare with the unprofiled run "
                         f"(default: all installed of {', '.join(DEFAULT_PROFILERS)}; also "
                         "py-spy-native)")
    ap.add_argument("--timeout", type=float, default=120, metavar="S",
                    help="kill a run (its whole process group) after S seconds; it counts as "
                         "exit code -9 and that profiler is not run again on that workload "
                         "(default 120, 0 = no limit)")
    ap.add_argument("--no-accuracy", action="store_true",
                    help="skip the accuracy runs (timing columns only)")
    ap.add_argument("--profiles-dir", metavar="DIR",
                    help="keep the accuracy runs' profiles in DIR (default: a temporary "
                         "directory, removed at the end)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the tables, with a header "
                    "describing machine and date, to FILE")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        ap.error("--runs must be >= 1 and --warmup >= 0")

    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if w.startswith("_") or not (WORKLOAD_DIR / f"{w}.py").is_file():
            ap.error(f"unknown workload {w!r} (have: {', '.join(all_workloads())})")
    wanted = [p.strip() for p in args.profilers.split(",") if p.strip()]
    for p in wanted:
        if p not in PROFILERS or p == "none":
            ap.error(f"unknown profiler {p!r} (have: "
                     f"{', '.join(p for p in PROFILERS if p != 'none')})")

    mlprof = args.mlprof or default_mlprof()
    if mlprof:
        mlprof = str(Path(mlprof).resolve())
        if not os.access(mlprof, os.X_OK):
            ap.error(f"--mlprof {mlprof}: not an executable")
    CONFIG["mlprof"] = mlprof
    CONFIG["timeout"] = args.timeout

    if args.install:
        installed = install_venv(lambda m: print(m, file=sys.stderr, flush=True))
        args.python = args.python or installed
    args.python = args.python or sys.executable

    with tempfile.TemporaryDirectory(prefix="mlprof-bench-") as tmp:
        CONFIG["scratch"] = str(Path(tmp) / "scratch")
        os.mkdir(CONFIG["scratch"])
        profiles = Path(args.profiles_dir).resolve() if args.profiles_dir else Path(tmp) / "p"
        profiles.mkdir(parents=True, exist_ok=True)
        CONFIG["profiles"] = str(profiles)
        return run_all(args, argv, workloads, wanted, mlprof)


def run_all(args, argv, workloads, wanted, mlprof):
    # Resolve shims (pyenv) to the real interpreter so no wrapper shell is timed.
    py_exe, py_ver, numpy_ver = target_python_info(args.python)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    notes = []
    missing = []
    profilers = ["none"]
    probe_cmd = [py_exe, str(WORKLOAD_DIR / "pure_python.py")]
    for p in wanted:
        if PROFILERS[p].build(probe_cmd) is not None:
            profilers.append(p)
            if PROFILERS[p].note:
                notes.append(PROFILERS[p].note)
        elif p.startswith("mlprof"):
            notes.append(profiler_unavailable_note(p, py_exe))
        else:
            missing.append(p)
    if missing:
        notes.append(f"not installed for {py_exe}, skipped: {', '.join(missing)}")

    log(f"python {py_exe} ({py_ver}, numpy {numpy_ver}); mlprof {mlprof}; "
        f"profilers: {', '.join(profilers)}; {args.runs} runs + {args.warmup} warm-up, interleaved"
        + ("" if args.no_accuracy else f"; accuracy profiles in {CONFIG['profiles']}"))
    for n in notes:
        log(f"note: {n}")

    results = {}
    for w in workloads:
        results[w] = bench_workload(w, py_exe, profilers, args.runs, args.warmup, log,
                                    with_accuracy=not args.no_accuracy)

    floor = rss_floor_kib()
    rows = summarize(results)
    main_rows, variant_rows = split_tables(rows)
    tables = [markdown_table(main_rows)]
    if variant_rows:
        tables.append("mlprof configurations (`mlprof`: defaults; `mlprof-cpu`: "
                      "`--memory-sample-bytes 0 --copy-sample-bytes 0`; `mlprof-min`: also "
                      "`--rate 0`, exact heap counters only):\n\n" + markdown_table(variant_rows))
    legend = [] if args.no_accuracy else [LEGEND]
    accuracy_notes = [] if args.no_accuracy else [
        "Accuracy columns come from one separate, unmeasured run per workload and profiler, "
        "whose profile is kept and parsed (`profile size`: its size on disk; for Fil the "
        "whole output directory). Reported peak: mlprof `memory.peak_heap_bytes` (exact heap "
        "of the process tree), memray `peak_memory`, Scalene `max_footprint_mb`, Fil the sum "
        "of peak-memory.prof. Peak extra: that figure minus the same profiler's figure for "
        "the same workload run with size 0, against the workload's EXPECTED_PEAK_BYTES "
        "(`?`: not known by construction); the subtraction cancels each tool's own baseline "
        "(interpreter, imports, what it counts).",
    ]
    footnotes = legend + [
        f"Medians of {args.runs} interleaved runs per variant after {args.warmup} warm-up "
        "round(s); whole-process wall time (start-up included) on a possibly shared machine.",
        "Pair ratio: profiled / unprofiled wall time of the same round. CPU ratio: median "
        "user+system CPU seconds of the process tree, profiled / unprofiled.",
        "Peak RSS (tree max) is os.wait4's ru_maxrss: the largest peak of the launched "
        "process and every descendant it reaped - the maximum over the tree, not the sum. "
        "For mlprof it is usually the profiled Python (preload library included).",
        f"Measurement floor of peak RSS: {_mib(floor, 1)} MiB (ru_maxrss of `true` started "
        "the same way: the launcher's memory copied by fork); values near it mean 'at most this'.",
        "Profiler own peak RSS: VmHWM of the profiler process itself (mlprof's collector, "
        "py-spy), sampled from /proc every 20 ms until it exits - a lower bound; "
        "'in-process' profilers run inside the Python process and are in the tree max.",
        f"A run still going after {args.timeout:g} s (--timeout) is killed with its whole "
        "process group and counts as exit code -9; that profiler is then not run again on "
        "that workload.",
    ] + accuracy_notes + [f"Note - {n}" if n.split(":")[0] in profilers else f"Not run - {n}"
                          for n in notes]

    print()
    print("\n\n".join(tables))
    print()
    for f in footnotes:
        print(f"- {f}")

    if args.markdown:
        now = datetime.datetime.now(datetime.timezone.utc)
        header = [
            "# mlprof benchmarks",
            "",
            f"Machine: {platform.platform()}, {cpu_model()}, {os.cpu_count()} CPUs. "
            f"Python {py_ver} ({py_exe}), numpy {numpy_ver}. "
            f"mlprof: {mlprof_version(mlprof) if mlprof else 'not found'} ({mlprof}). "
            f"Other tools: {tool_versions(py_exe)}. "
            f"Date: {now:%Y-%m-%d %H:%M} UTC. "
            f"Command: `python3 bench/run.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
            "",
        ]
        md = "\n".join(header + ["\n\n".join(tables), ""]
                       + [f"- {f}" for f in footnotes]) + "\n"
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(md)
        log(f"wrote {args.markdown}")

    failed = any(res.get("errors") for res in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
