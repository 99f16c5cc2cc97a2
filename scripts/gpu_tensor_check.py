"""Compares mlprof's tensors at the GPU peak per line for tests/scripts/gpu_tensors_train.py
with PyTorch's own snapshot taken at that peak (the script writes it, by line), the device
peak with PyTorch's max_memory_allocated, and the training loop's wall time under mlprof with
a bare run's; prints a Markdown table (scripts/gpu_check.sh runs both). Bar: each line within
1% of PyTorch's, where mlprof may add to a line the blocks a thread without Python allocated
while the line ran (the snapshot has no frame for them; mlprof joins them to the line the Python
thread was on), and all lines together within 1% of everything the snapshot holds.

usage: python scripts/gpu_tensor_check.py PROFILE_JSON TRUTH_JSON PLAIN_JSON TRAIN_SCRIPT
"""
import json
import sys

from gpu_check import markers, mib


def main():
    profile, truth, plain = (json.load(open(p)) for p in sys.argv[1:4])
    marks = {number: name for name, number in markers(sys.argv[4]).items()}
    ours = {l["line"]: l.get("gpu_tensor_peak_bytes", 0) for l in profile["lines"]
            if l["file"].endswith("gpu_tensors_train.py")}
    expected_lines = {int(k): v for k, v in truth["lines"].items()}
    no_python = truth.get("no_python", 0)
    failed = 0
    print("| line | PyTorch's snapshot at the peak | mlprof | of it joined from threads "
          "without Python | within 1% |")
    print("|---|--:|--:|--:|---|")
    joined_all = 0
    for number in sorted(set(expected_lines) | {n for n, b in ours.items() if b > 0}):
        expected, got = expected_lines.get(number, 0), ours.get(number, 0)
        joined = max(0, got - expected)
        joined_all += joined
        ok = got >= 0.99 * expected and got <= 1.01 * expected + no_python
        failed += 0 if ok else 1
        name = "@" + marks[number] if number in marks else f"line {number}"
        print(f"| {name} | {mib(expected)} | {mib(got)} | {mib(joined)} | "
              f"{'yes' if ok else 'NO'} |")
    ours_all = sum(l.get("gpu_tensor_peak_bytes", 0) for l in profile["lines"])
    truth_all = sum(expected_lines.values()) + no_python + truth.get("outside", 0)
    same = abs(ours_all - truth_all) <= 0.01 * truth_all and joined_all <= 1.01 * no_python
    failed += 0 if same else 1
    print(f"\nAll lines: {mib(ours_all)} by mlprof, {mib(truth_all)} in the snapshot, of which "
          f"{mib(no_python)} had no Python frame (mlprof joined {mib(joined_all)} of it to this "
          f"file's lines) and {mib(truth.get('outside', 0))} frames outside this file: "
          f"{'within 1%' if same else 'NOT within 1%'}.")
    for p in profile["processes"]:
        t = p.get("gpu_tensors")
        if not t:
            continue
        print(f"\npid {p['pid']}: state {t['state']}{'; ' + t['note'] if t.get('note') else ''}")
        for d in t["devices"]:
            same = d["peak_allocated_bytes"] == truth["max_requested"]
            failed += 0 if same else 1
            print(f"device {d['device']}: peak {mib(d['peak_allocated_bytes'])} (PyTorch's "
                  f"peak of requested bytes {mib(truth['max_requested'])}: "
                  f"{'equal' if same else 'DIFFERENT'}; max_memory_allocated "
                  f"{mib(truth['max_allocated'])}), reserved {mib(d['reserved_at_peak_bytes'])}, "
                  f"cache slack {mib(d['cache_slack_bytes'])}, {d['events']} events")
    if not truth["peak_here"]:
        print("\nThe snapshot was not taken at the peak (memory_allocated < max): no truth.")
        failed += 1
    print(f"\nTraining loop: {plain['loop_s']:.3f} s bare, {truth['loop_s']:.3f} s under mlprof "
          f"({truth['loop_s'] / plain['loop_s']:.2f}x), {plain['steps']} steps.")
    print(f"\n{failed} figure(s) outside the bar.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
