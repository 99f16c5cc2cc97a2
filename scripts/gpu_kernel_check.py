"""Compares mlprof's GPU time per line for tests/scripts/gpu_kernels_train.py with PyTorch's
profiler's CUDA time for the same steps (a separate run: one CUPTI client at a time), and the
loop's wall time under mlprof with the bare loop's; prints a Markdown table (scripts/
gpu_check.sh runs all three). Bar: each line within 10% of torch's.

usage: python scripts/gpu_kernel_check.py PROFILE_JSON TRUTH_JSON PLAIN_JSON MLPROF_LOOP_JSON
       TRAIN_SCRIPT
"""
import json
import sys

from gpu_check import markers


def main():
    profile, truth, plain, ours_loop = (json.load(open(p)) for p in sys.argv[1:5])
    marks = markers(sys.argv[5])
    lines = {l["line"]: l for l in profile["lines"] if l["file"].endswith("gpu_kernels_train.py")}
    failed = 0
    print("| line | torch.profiler CUDA time | mlprof GPU time | within 10% | top kernel |")
    print("|---|--:|--:|---|---|")
    for name, expected in sorted(truth["lines"].items()):
        l = lines.get(marks[name], {})
        got = l.get("gpu_kernel_s", 0.0)
        ok = abs(got - expected) <= 0.1 * expected
        failed += 0 if ok else 1
        top = (l.get("gpu_kernel_names") or [{"name": "-"}])[0]["name"][:60]
        print(f"| @{name} | {expected * 1e3:.2f} ms | {got * 1e3:.2f} ms | "
              f"{'yes' if ok else 'NO'} | `{top}` |")
    for p in profile["processes"]:
        k = (p.get("gpu_calls") or {}).get("kernels")
        if k:
            print(f"\npid {p['pid']}: state {k['state']}, {k['kernels']} kernels, "
                  f"{k['gpu_kernel_s']:.3f} s of GPU time, {k['unattributed_s']:.3f} s on no "
                  f"line{'; ' + k['note'] if k.get('note') else ''}")
    print(f"\nLoop wall time: {plain['loop_s']:.3f} s bare, {ours_loop['loop_s']:.3f} s under "
          f"mlprof ({ours_loop['loop_s'] / plain['loop_s']:.2f}x), {plain['steps']} steps.")
    print(f"\n{failed} line(s) outside the bar.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
