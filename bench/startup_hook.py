"""The Python start-up hook's own cost (docs/design/gpu-tensors.md), without a GPU: the wall
time of starting Python and of importing a module, with the hook first on PYTHONPATH (as
`mlprof run` puts it, MLPROF_DIR set) and without, interleaved, median of R runs each. The hook
adds one module at start-up and a finder asked about every import (one comparison each); with
PyTorch on the CPU it also wraps torch's loader and queues the trace's switch for a CUDA
initialisation that never comes.

usage: python bench/startup_hook.py [--python PY] [--runs R] [--torch-python PY]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOK = os.path.join(ROOT, "src", "launch", "startup")


def timed(argv, env):
    start = time.perf_counter()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def compare(name, argv, runs, run_dir, hook_dir, cached):
    plain_env = dict(os.environ)
    plain_env.pop("PYTHONPATH", None)
    # Whether Python may cache the hook's bytecode (the first Python process of a run compiles
    # it; later ones read it back unless PYTHONDONTWRITEBYTECODE is set).
    if cached:
        plain_env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        plain_env["PYTHONDONTWRITEBYTECODE"] = "1"
    hook_env = dict(plain_env, PYTHONPATH=hook_dir, MLPROF_DIR=run_dir)
    timed(argv, plain_env)
    timed(argv, hook_env)
    plain, hooked = [], []
    for _ in range(runs):
        plain.append(timed(argv, plain_env))
        hooked.append(timed(argv, hook_env))
    p, h = statistics.median(plain), statistics.median(hooked)
    print(f"| {name} | {p * 1e3:.1f} ms | {h * 1e3:.1f} ms | {(h - p) * 1e3:+.1f} ms |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", default="python3")
    ap.add_argument("--torch-python", default=os.path.join(ROOT, "target/torch-venv/bin/python"))
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        hook_dir = os.path.join(run_dir, "mlprof-startup")
        os.mkdir(hook_dir)
        for name in ("sitecustomize.py", "mlprof_gpu_trace.py"):
            shutil.copy(os.path.join(HOOK, name), hook_dir)
        print("| what | without the hook | with it | added |")
        print("|---|--:|--:|--:|")
        for cached, how in ((False, "compiled"), (True, "bytecode cached")):
            compare(f"python -c pass (hook {how})", [args.python, "-c", "pass"], args.runs,
                    run_dir, hook_dir, cached)
        compare("import json, email, http.client (many imports)",
                [args.python, "-c", "import json, email.message, http.client"],
                args.runs, run_dir, hook_dir, True)
        if os.path.exists(args.torch_python):
            code = "import torch; torch.ones(64, 64).sum()"
            compare("import torch (CPU)", [args.torch_python, "-c", code], max(5, args.runs // 4),
                    run_dir, hook_dir, True)


if __name__ == "__main__":
    main()
