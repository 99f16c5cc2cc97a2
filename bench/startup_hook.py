"""The PyTorch hook's own cost (preload/src/python/tensors.rs, docs/design/gpu-tensors.md),
without a GPU: each command run under `mlprof run` with the hook (`MLPROF_GPU_TENSORS=1`, the
default where an NVIDIA driver is present) and with `--no-gpu-tensors` (no hook, as without a
driver), interleaved, median of R runs each. The hook is a C audit hook:
until `import torch` it compares one event name per audit event (and CPython, having a hook,
builds each event's argument tuple); with PyTorch on the CPU it also compiles the tracing half
once and queues the trace's switch for a CUDA initialisation that never comes.

Two kinds of figure: the wall time of a whole command (start-up, many imports, `import torch`),
and the CPU time a program measures of its own loop of audited calls (`sys._getframe` and
`id()` raise an audit event each call, `copy.deepcopy` one per object: the worst cases).

usage: python bench/startup_hook.py [--python PY] [--runs R] [--torch-python PY] [--mlprof BIN]
"""
import argparse
import os
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Loops of audited calls; each prints the CPU seconds it took, by the process's own clock.
AUDITED = {
    "2M `sys._getframe()` calls": "f = sys._getframe\nfor _ in range(2_000_000):\n    f()\n",
    "2M `id()` calls": "for i in range(2_000_000):\n    id(i)\n",
    "`copy.deepcopy` of 20k small dicts":
        "import copy\ncopy.deepcopy([{'a': i, 'b': [i, i]} for i in range(20_000)])\n",
}


def timed_loop(body):
    return "import sys, time\nt = time.process_time()\n%sprint(time.process_time() - t)\n" % body


def run(mlprof, hooked, argv, out_dir):
    cmd = [mlprof, "run", "-q", "-o", os.path.join(out_dir, "p.json")]
    if not hooked:
        cmd.append("--no-gpu-tensors")
    # As on a machine with an NVIDIA driver, where `mlprof run` sets the hook up by default.
    env = dict(os.environ, MLPROF_GPU_TENSORS="1")
    start = time.perf_counter()
    done = subprocess.run(cmd + ["--"] + argv, check=True, stdout=subprocess.PIPE, text=True,
                          env=env)
    return time.perf_counter() - start, done.stdout


def compare(mlprof, name, argv, runs, out_dir, own_clock=False):
    """Median of the wall time (or, with `own_clock`, of what the program printed)."""
    figures = {True: [], False: []}
    for _ in range(runs + 1):  # the first pair warms the caches and is dropped
        for hooked in (False, True):
            wall, out = run(mlprof, hooked, argv, out_dir)
            figures[hooked].append(float(out.split()[-1]) if own_clock else wall)
    p, h = (statistics.median(figures[k][1:]) for k in (False, True))
    print(f"| {name} | {p * 1e3:.1f} ms | {h * 1e3:.1f} ms | {(h - p) * 1e3:+.1f} ms "
          f"| {h / p:.3f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="python3")
    ap.add_argument("--torch-python", default=os.path.join(ROOT, "target/torch-venv/bin/python"))
    ap.add_argument("--mlprof", default=os.path.join(ROOT, "target/release/mlprof"))
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as out_dir:
        print("| what (under `mlprof run`) | `--no-gpu-tensors` | with the hook | added | ratio |")
        print("|---|--:|--:|--:|--:|")
        compare(args.mlprof, "python -c pass", [args.python, "-c", "pass"], args.runs, out_dir)
        compare(args.mlprof, "import json, email, http.client (many imports)",
                [args.python, "-c", "import json, email.message, http.client"],
                args.runs, out_dir)
        for name, body in AUDITED.items():
            compare(args.mlprof, name + " (CPU, the program's own clock)",
                    [args.python, "-c", timed_loop(body)], max(5, args.runs // 2), out_dir,
                    own_clock=True)
        if os.path.exists(args.torch_python):
            code = "import torch; torch.ones(64, 64).sum()"
            compare(args.mlprof, "import torch (CPU)", [args.torch_python, "-c", code],
                    max(5, args.runs // 4), out_dir)


if __name__ == "__main__":
    main()
