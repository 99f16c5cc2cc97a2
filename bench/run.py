#!/usr/bin/env python3
"""Benchmark runner: each workload unprofiled and under each installed profiler.

    python3 bench/run.py [--mlprof PATH] [--python PATH] [--runs N] [--warmup N]
                         [--workloads a,b] [--profilers a,b] [--markdown FILE]

Runs are interleaved (none, mlprof, [others], none, mlprof, ... ) so that drift on a shared
machine hits every variant alike. Each command is started by a small launcher process (see
LAUNCHER) that times fork..os.wait4 with time.perf_counter() and reports the rusage os.wait4
returns for that one child (CPU time, peak RSS). Only the Python 3 standard library is used.
See bench/README.md.
"""

import argparse
import datetime
import functools
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
WORKLOAD_DIR = BENCH_DIR / "workloads"
DEFAULT_WORKLOADS = ["alloc_churn", "pure_python", "numpy_matmul", "numpy_alloc"]

# Filled in by main(): the mlprof binary and a scratch directory for profilers' output files
# (emptied after every run so memray/scalene captures do not fill the disk).
CONFIG = {"mlprof": None, "scratch": None}


# --------------------------------------------------------------------------------------------
# Profilers
#
# PROFILERS maps a name to a function(workload_cmd) -> command list, or None when that
# profiler is not installed for the workload's Python. workload_cmd is
# [python, /path/to/workload.py, *args]. "none" is the unprofiled baseline and must stay
# first. To add a profiler: write a function, add it here, and (if the profiler runs as a
# separate process that launches the workload, like mlprof or py-spy) add its name to
# SEPARATE_PROCESS so its own peak RSS is sampled.
# --------------------------------------------------------------------------------------------


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


def prof_none(cmd):
    return list(cmd)


def prof_mlprof(cmd):
    """mlprof with its defaults: CPU, memory and copy profiling."""
    if not CONFIG["mlprof"]:
        return None
    return [CONFIG["mlprof"], "run", "-q", "--", *cmd]


def prof_mlprof_cpu(cmd):
    """mlprof with CPU profiling only (no allocation or copy sampling)."""
    if not CONFIG["mlprof"]:
        return None
    off = ["--memory-sample-bytes", "0", "--copy-sample-bytes", "0"]
    return [CONFIG["mlprof"], "run", "-q", *off, "--", *cmd]


def prof_mlprof_min(cmd):
    """mlprof's minimal interposer: exact heap counters only, no sampling at all."""
    if not CONFIG["mlprof"]:
        return None
    off = ["--rate", "0", "--memory-sample-bytes", "0", "--copy-sample-bytes", "0"]
    return [CONFIG["mlprof"], "run", "-q", *off, "--", *cmd]


def prof_pyspy(cmd):
    # py-spy 0.4: `record -o FILE [-f flamegraph|speedscope|raw] [-r RATE] -- cmd...`
    # (default rate 100 Hz, like mlprof's collector).
    exe = _find_exe("py-spy", cmd[0])
    if exe is None:
        return None
    return [exe, "record", "-o", os.devnull, "--", *cmd]


def prof_memray(cmd):
    # memray 1.x: `python -m memray run [-q] [-f] [-o FILE] [--native] script args...`
    # Default mode (every allocation recorded, Python stacks only). -f overwrites.
    python, script, *args = cmd
    if not _importable(python, "memray"):
        return None
    return [python, "-m", "memray", "run", "-q", "-f", "-o", _scratch("memray.bin"),
            script, *args]


def prof_scalene(cmd):
    # Scalene 2.x: `scalene run [-o FILE] prog.py --- args` (JSON to scalene-profile.json by
    # default; no browser). Scalene 1.x took flags directly: `scalene --cli --json --outfile
    # FILE prog.py --- args`. (`--off` would start with profiling *off*, so it is not used.)
    python, script, *args = cmd
    if not _importable(python, "scalene"):
        return None
    tail = [script] + (["---", *args] if args else [])
    m = re.search(r"(\d+)\.\d+", _module_version(python, "scalene"))
    major = int(m.group(1)) if m else 2
    if major >= 2:
        return [python, "-m", "scalene", "run", "-o", _scratch("scalene.json"), *tail]
    return [python, "-m", "scalene", "--cli", "--json", "--outfile", _scratch("scalene.json"),
            *tail]


def prof_fil(cmd):
    # Hook only: Fil (`fil-profile [-o DIR] run [--no-browser] script args`, as read from
    # filprofiler 2024.11) is detected but not wired yet - its CLI has moved between
    # releases; check `fil-profile --help` on an install before enabling. Fil forces
    # OPENBLAS_NUM_THREADS=1 etc., which changes the numpy workloads themselves: note that
    # when reporting its numbers.
    return None


PROFILERS = {
    "none": prof_none,
    "mlprof": prof_mlprof,
    "mlprof-cpu": prof_mlprof_cpu,
    "mlprof-min": prof_mlprof_min,
    "py-spy": prof_pyspy,
    "memray": prof_memray,
    "scalene": prof_scalene,
    "fil": prof_fil,
}

# Profilers whose top process is the profiler itself (it spawns the workload): its own peak
# RSS (VmHWM) is sampled from /proc. memray/scalene/Fil live inside the Python process.
SEPARATE_PROCESS = {"mlprof", "mlprof-cpu", "mlprof-min", "py-spy"}


def profiler_unavailable_note(name, python):
    if name.startswith("mlprof"):
        return "mlprof: binary not found (pass --mlprof PATH)"
    if name == "fil":
        return "fil: installed but not wired in bench/run.py yet (see prof_fil)"
    return f"{name}: not installed for {python}, skipped"


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------


class Run:
    __slots__ = ("wall", "cpu", "maxrss_kib", "own_hwm_kib", "rc")

    def __init__(self, wall, cpu, maxrss_kib, own_hwm_kib, rc):
        self.wall = wall
        self.cpu = cpu
        self.maxrss_kib = maxrss_kib
        self.own_hwm_kib = own_hwm_kib
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


def _sample_hwm(pid, stop, box, interval=0.02):
    """Keep the last VmHWM of `pid`.

    VmHWM only grows within one address space, so the last reading is the best lower bound of
    the exec'ed program's peak. (The last, not the max: a reading taken between fork and exec
    would show the launcher's copy.)
    """
    while not stop.is_set():
        v = _read_vmhwm_kib(pid)
        if v is not None:
            box[0] = v
        stop.wait(interval)


# The launcher that runs each measured command. Why not Popen + os.wait4 directly: on Linux a
# child's ru_maxrss includes the address space it had *before* exec, which for a child of this
# runner is a copy of the runner (~15 MiB, more after many runs), so a small workload would
# report the runner's RSS. This launcher is a fresh `python -I -S` (a few MiB of anonymous
# memory); it forks, the child execs the command, and it times fork..wait4 with
# time.perf_counter and reports the child's rusage over a pipe. The floor it leaves in
# ru_maxrss is measured once (see rss_floor_kib) and printed with the results.
LAUNCHER = r"""
import os, sys, time
fd = int(sys.argv[1])
argv = sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.close(fd)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("exec %s: %s\n" % (argv[0], e)).encode())
    os._exit(127)
os.write(fd, b"pid %d\n" % pid)
_, status, ru = os.wait4(pid, 0)
t1 = time.perf_counter()
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
            [sys.executable, "-I", "-S", "-c", LAUNCHER, str(wfd), *cmd],
            stdin=subprocess.DEVNULL,
            stdout=out_file if capture else subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(wfd,),
        )
        os.close(wfd)
        stop = threading.Event()
        box = [None]
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
            run = Run(float(last[1]), float(last[3]), int(last[4]), box[0], int(last[2]))
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


def bench_workload(name, python, profilers, runs, warmup, log):
    """Returns dict: {'skipped': reason} or {'runs': {profiler: [Run]}, 'errors': {...}}."""
    script = WORKLOAD_DIR / f"{name}.py"
    wcmd = [python, str(script)]
    cmds = {}
    for prof in profilers:
        c = PROFILERS[prof](wcmd)
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
    total = warmup + runs
    for i in range(total):
        measured = i >= warmup
        this_round = []
        for prof in order:
            r, _ = measure(cmds[prof], sample_own=prof in SEPARATE_PROCESS)
            clean_scratch()
            if r.rc != 0:
                errors.setdefault(prof, []).append(r.rc)
            if measured:
                results[prof].append(r)
            this_round.append(f"{prof}={r.wall:.2f}s" + (f"(exit {r.rc})" if r.rc else ""))
        tag = f"run {i + 1 - warmup}/{runs}" if measured else f"warm-up {i + 1}/{warmup}"
        log(f"  {name}: {tag} " + " ".join(this_round))
    return {"runs": results, "errors": errors, "cmds": cmds}


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------


def _mib(kib, digits=0):
    return "-" if kib is None else f"{kib / 1024:.{digits}f}"


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
            pairs = [p.wall / b.wall for p, b in zip(pruns, base_runs)]
            p_wall = statistics.median(r.wall for r in pruns)
            p_cpu = statistics.median(r.cpu for r in pruns)
            own = [r.own_hwm_kib for r in pruns if r.own_hwm_kib is not None]
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
                "n": len(pairs),
                "errors": res["errors"].get(prof, []) + res["errors"].get(base, []),
            })
    return rows


HEADER = ("| workload | profiler | unprofiled s | profiled s | ratio of medians | "
          "median pair ratio | pair ratios min-max | CPU ratio | peak RSS unprofiled MiB | "
          "peak RSS profiled MiB (tree max) | profiler own peak RSS MiB |")
ALIGN = "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|"


def markdown_table(rows):
    lines = [HEADER, ALIGN]
    for r in rows:
        if "skipped" in r:
            lines.append(f"| {r['workload']} | - | skipped: {r['skipped']} | | | | | | | | |")
            continue
        err = f" (exit codes {sorted(set(r['errors']))}!)" if r["errors"] else ""
        own = _mib(r["own_rss"], 1) if r["profiler"] in SEPARATE_PROCESS else "in-process"
        lines.append(
            f"| {r['workload']} | {r['profiler']}{err} | {r['base_wall']:.3f} | "
            f"{r['prof_wall']:.3f} | {r['ratio_of_medians']:.2f}x | "
            f"{r['median_pair_ratio']:.2f}x | {r['min_ratio']:.2f}-{r['max_ratio']:.2f} | "
            f"{r['cpu_ratio']:.2f}x | {_mib(r['base_rss'])} | {_mib(r['prof_rss'])} | {own} |")
    return "\n".join(lines)


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


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mlprof", default=None,
                    help="mlprof binary (default: target/release/mlprof, else target/debug, "
                         "else PATH)")
    ap.add_argument("--python", default=sys.executable,
                    help="Python that runs the workloads (default: this one)")
    ap.add_argument("--runs", type=int, default=7, help="measured runs per variant (default 7)")
    ap.add_argument("--warmup", type=int, default=1,
                    help="unmeasured rounds before measuring (default 1)")
    ap.add_argument("--workloads", default=",".join(DEFAULT_WORKLOADS),
                    help="comma-separated names from bench/workloads/ (default: all)")
    ap.add_argument("--profilers", default=",".join(p for p in PROFILERS if p != "none"),
                    help="comma-separated profilers to compare with the unprofiled run "
                         "(default: all installed)")
    ap.add_argument("--markdown", metavar="FILE", help="also write the table, with a header "
                    "describing machine and date, to FILE")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.warmup < 0:
        ap.error("--runs must be >= 1 and --warmup >= 0")

    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    for w in workloads:
        if not (WORKLOAD_DIR / f"{w}.py").is_file():
            ap.error(f"unknown workload {w!r} (have: "
                     f"{', '.join(sorted(p.stem for p in WORKLOAD_DIR.glob('*.py')))})")
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

    with tempfile.TemporaryDirectory(prefix="mlprof-bench-") as scratch:
        CONFIG["scratch"] = scratch
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
        if PROFILERS[p](probe_cmd) is not None:
            profilers.append(p)
        elif p == "mlprof" or (p == "fil" and _find_exe("fil-profile", py_exe)):
            notes.append(profiler_unavailable_note(p, py_exe))
        else:
            missing.append(p)
    if missing:
        notes.append(f"not installed for {py_exe}, skipped: {', '.join(missing)}")

    log(f"python {py_exe} ({py_ver}, numpy {numpy_ver}); mlprof {mlprof}; "
        f"profilers: {', '.join(profilers)}; {args.runs} runs + {args.warmup} warm-up, interleaved")
    for n in notes:
        log(f"note: {n}")

    results = {}
    for w in workloads:
        results[w] = bench_workload(w, py_exe, profilers, args.runs, args.warmup, log)

    floor = rss_floor_kib()
    rows = summarize(results)
    table = markdown_table(rows)
    footnotes = [
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
    ] + [f"Not run - {n}" for n in notes]

    print()
    print(table)
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
            f"Date: {now:%Y-%m-%d %H:%M} UTC. "
            f"Command: `python3 bench/run.py {' '.join(sys.argv[1:] if argv is None else argv)}`",
            "",
        ]
        md = "\n".join(header + [table, ""] + [f"- {f}" for f in footnotes]) + "\n"
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(md)
        log(f"wrote {args.markdown}")

    failed = any(r.get("errors") for r in rows if "skipped" not in r)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
