"""Times `mlprof merge` of many rank profiles, as a job of N ranks would leave them.

Profiles one rank of tests/scripts/ranks.py (and one with its extra work) with `mlprof run`,
writes N copies labelled rank 0..N-1 (rank N//4 the slow one), then times `mlprof merge` of
them to JSON and to HTML, and reports the seconds (best of --runs), the files' sizes and
whether the slow rank was named. Standard library only.

Usage: python3 bench/merge_ranks.py [--ranks 64] [--runs 3] [--python PY] [--mlprof PATH]
       [--profile SAVED.json]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--mlprof", default=os.path.join(ROOT, "target", "release", "mlprof"))
    ap.add_argument("--profile", help="a saved profile to stand for every rank but the slow "
                    "one (a real job's: larger than the script's own)")
    args = ap.parse_args()
    script = os.path.join(ROOT, "tests", "scripts", "ranks.py")
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for rank in ("0", "2"):
            out = os.path.join(tmp, f"run{rank}.json")
            subprocess.run([args.mlprof, "run", "-q", "-o", out, "--", args.python, script,
                            "rank"], env=dict(os.environ, RANK=rank), check=True,
                           stdout=subprocess.DEVNULL)
            with open(out) as f:
                runs.append(json.load(f))
        if args.profile:
            with open(args.profile) as f:
                runs[0] = json.load(f)
        slow = args.ranks // 4
        paths = []
        for rank in range(args.ranks):
            profile = runs[1] if rank == slow else runs[0]
            profile["labels"]["rank"] = str(rank)
            path = os.path.join(tmp, f"rank{rank}.json")
            with open(path, "w") as f:
                json.dump(profile, f)
            paths.append(path)
        input_bytes = sum(os.path.getsize(p) for p in paths)
        for fmt in ("json", "html"):
            out = os.path.join(tmp, f"all.{fmt}")
            best = min(timed([args.mlprof, "merge", *paths, "-o", out]) for _ in range(args.runs))
            print(f"merge of {args.ranks} ranks to {fmt}: {best:.2f} s (best of {args.runs}), "
                  f"{os.path.getsize(out) / 2**20:.2f} MiB written, "
                  f"{input_bytes / 2**20:.1f} MiB read")
        with open(os.path.join(tmp, "all.json")) as f:
            merged = json.load(f)
        top = merged.get("stragglers", [{}])[0]
        print(f"ranks: {len(merged['ranks'])}; first straggler: rank {top.get('rank')} "
              f"line {top.get('line')} +{top.get('excess_s', 0):.2f} s (slow rank {slow})")


def timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


if __name__ == "__main__":
    main()
