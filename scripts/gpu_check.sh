#!/usr/bin/env bash
# The GPU check for a machine with an NVIDIA GPU and PyTorch (nothing is fetched): runs the
# released mlprof on a small CUDA training loop (tests/scripts/gpu_train.py) that measures its
# own truth (torch's allocator reserve around each line, bytes copied, perf_counter around the
# waits), and prints a table of mlprof's figures against it and NVML's view; then GPU time per
# line (CUPTI) against torch.profiler's CUDA time for the same steps, with the loop's overhead
# (tests/scripts/gpu_kernels_train.py, scripts/gpu_kernel_check.py); tensors at the GPU peak per
# line against PyTorch's own snapshot at that peak (tests/scripts/gpu_tensors_train.py,
# scripts/gpu_tensor_check.py); with the device, driver and
# date, for docs/gpu-verification.md. Needs target/release (cargo build --release).
# Each run is held to 150 s (`timeout`), so that one hung run cannot take a device session's
# whole budget; a failed run or check says so in the table, and the script still exits 0 (the
# table is the result).
# usage: scripts/gpu_check.sh [OUT_DIR]   (PYTHON: the Python with torch; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-$(mktemp -d)}
mkdir -p "$out"
py=${PYTHON:-python3}
mlprof=target/release/mlprof
run() { timeout 150 "$@"; }
[ -x "$mlprof" ] || { echo "gpu_check: $mlprof not built (cargo build --release)" >&2; exit 2; }
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check: no CUDA device usable from $py with torch" >&2
    exit 2
fi
{
    echo "# GPU check, $(date -u +%Y-%m-%d)"
    echo
    echo '```'
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>/dev/null || echo "nvidia-smi: not found"
    "$py" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
    echo '```'
    echo
    run "$mlprof" run -q -o "$out/gpu-check.json" -- "$py" tests/scripts/gpu_train.py "$out/truth.json" 5 \
        > "$out/run.log" 2>&1 || echo "mlprof run failed: see $out/run.log"
    "$py" scripts/gpu_check.py "$out/gpu-check.json" "$out/truth.json" tests/scripts/gpu_train.py 2>&1 || true
    echo
    # The same loop with PyTorch's expandable segments: its reserve grows by the driver's
    # cuMemCreate, reached through cudaGetDriverEntryPointByVersion (the driver-API path).
    echo "With PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (the driver API):"
    echo
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True run "$mlprof" run -q -o "$out/gpu-check-expandable.json" -- \
        "$py" tests/scripts/gpu_train.py "$out/truth-expandable.json" 5 \
        > "$out/run-expandable.log" 2>&1 || echo "mlprof run failed: see $out/run-expandable.log"
    "$py" scripts/gpu_check.py "$out/gpu-check-expandable.json" "$out/truth-expandable.json" \
        tests/scripts/gpu_train.py 2>&1 || true
    echo
    # GPU time per line (CUPTI) against PyTorch's profiler, and the loop's overhead.
    echo "GPU time per line against torch.profiler (tests/scripts/gpu_kernels_train.py):"
    echo
    run "$py" tests/scripts/gpu_kernels_train.py profiler "$out/kernels-truth.json" 20 \
        > "$out/kernels-truth.log" 2>&1 || echo "the torch.profiler run failed: see $out/kernels-truth.log"
    run "$py" tests/scripts/gpu_kernels_train.py plain "$out/kernels-plain.json" 20 \
        > "$out/kernels-plain.log" 2>&1 || echo "the bare run failed: see $out/kernels-plain.log"
    # Every launch sampled: each kernel's time goes to the lines that launched it exactly.
    MLPROF_GPU_LAUNCH_SAMPLE=1 run "$mlprof" run -q -o "$out/gpu-kernels.json" -- \
        "$py" tests/scripts/gpu_kernels_train.py plain \
        "$out/kernels-mlprof.json" 20 > "$out/kernels-mlprof.log" 2>&1 \
        || echo "mlprof run failed: see $out/kernels-mlprof.log"
    "$py" scripts/gpu_kernel_check.py "$out/gpu-kernels.json" "$out/kernels-truth.json" \
        "$out/kernels-plain.json" "$out/kernels-mlprof.json" tests/scripts/gpu_kernels_train.py 2>&1 || true
    echo
    # Tensors at the GPU peak per line (the allocator's trace) against PyTorch's own snapshot
    # at that peak, and the training loop's overhead with the trace on.
    echo "Tensors at the GPU peak against PyTorch's snapshot (tests/scripts/gpu_tensors_train.py):"
    echo
    run "$py" tests/scripts/gpu_tensors_train.py "$out/tensors-plain.json" 50 bare \
        > "$out/tensors-plain.log" 2>&1 || echo "the bare run failed: see $out/tensors-plain.log"
    run "$mlprof" run -q -o "$out/gpu-tensors.json" -- "$py" tests/scripts/gpu_tensors_train.py \
        "$out/tensors-truth.json" 50 > "$out/tensors-mlprof.log" 2>&1 \
        || echo "mlprof run failed: see $out/tensors-mlprof.log"
    "$py" scripts/gpu_tensor_check.py "$out/gpu-tensors.json" "$out/tensors-truth.json" \
        "$out/tensors-plain.json" tests/scripts/gpu_tensors_train.py 2>&1 || true
    echo
    echo "The text report's GPU part:"
    echo '```'
    "$mlprof" report "$out/gpu-check.json" 2>/dev/null | grep -E "GPU|CUDA|gpu_train" | head -40 || true
    echo '```'
} | tee "$out/gpu-check.md"
