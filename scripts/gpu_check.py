"""Compares mlprof's per-line GPU figures for tests/scripts/gpu_train.py with the truth that
program measured itself in the same run, and prints a Markdown table (scripts/gpu_check.sh runs
both). Bars: bytes reserved, copied and held at the peak exact; GPU wait within 5%.

usage: python scripts/gpu_check.py PROFILE_JSON TRUTH_JSON TRAIN_SCRIPT
"""
import json
import sys


def markers(path):
    out = {}
    with open(path) as f:
        for number, text in enumerate(f, 1):
            if "# @" in text:
                out[text.split("# @", 1)[1].strip()] = number
    return out


def mib(n):
    return f"{n / (1 << 20):.2f} MiB" if n >= 1 << 20 else f"{n} B"


def main():
    profile = json.load(open(sys.argv[1]))
    truth = json.load(open(sys.argv[2]))
    script = sys.argv[3]
    marks = markers(script)
    lines = {l["line"]: l for l in profile["lines"] if l["file"].endswith("gpu_train.py")}
    rows, failed = [], 0

    def row(what, expected, got, ok, show):
        nonlocal failed
        failed += 0 if ok else 1
        rows.append(f"| {what} | {show(expected)} | {show(got)} | {'yes' if ok else 'NO'} |")

    for name, t in truth["lines"].items():
        l = lines.get(marks[name], {})
        for key, field in [("reserved", "gpu_reserved_bytes"), ("h2d", "gpu_h2d_bytes"),
                           ("d2h", "gpu_d2h_bytes")]:
            if key in t and (t[key] or l.get(field, 0)):
                row(f"@{name} {field}", t[key], l.get(field, 0), l.get(field, 0) == t[key], mib)
        if "pinned" in t:
            got = l.get("gpu_pinned_bytes", 0)
            row(f"@{name} gpu_pinned_bytes (at least)", t["pinned"], got, got >= t["pinned"], mib)
        if "wait_s" in t:
            got = l.get("gpu_wait_s", 0.0)
            ok = abs(got - t["wait_s"]) <= 0.05 * t["wait_s"]
            row(f"@{name} gpu_wait_s", t["wait_s"], got, ok, lambda s: f"{s:.3f} s")
        if l.get("gpu_launches"):
            rows.append(f"| @{name} gpu_launches (sampled) | - | {l['gpu_launches']} | - |")
    ours = [p for p in profile["processes"] if p.get("gpu_calls")]
    if not ours:
        row("a process with CUDA calls", 1, 0, False, str)
    for p in ours:
        calls = p["gpu_calls"]
        peak = sum(d["peak_bytes"] for d in calls["devices"])
        row("device peak held through cudaMalloc (torch max_memory_reserved)",
            truth["max_reserved"], peak, peak == truth["max_reserved"], mib)
        end = sum(d["end_bytes"] for d in calls["devices"])
        row("held at the end (torch memory_reserved)", truth["reserved_end"], end,
            end == truth["reserved_end"], mib)
        nvml = p.get("peak_gpu_memory_bytes", 0)
        rows.append(f"| NVML peak of the process / of it not through cudaMalloc | - | "
                    f"{mib(nvml)} / {mib(max(nvml - peak, 0))} | - |")
    print(f"Device: {truth.get('device', '?')}; {truth['steps']} steps.\n")
    print("| figure | truth | mlprof | within the bar |")
    print("|---|--:|--:|---|")
    print("\n".join(rows))
    print(f"\n{failed} figure(s) outside the bar.")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
