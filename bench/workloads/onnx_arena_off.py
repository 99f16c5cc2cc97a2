"""onnx_arena_off: onnxruntime inference of a small in-memory MLP, CPU memory arena off.

Stresses: native inference on onnxruntime's thread pool and its allocation pattern with
`SessionOptions.enable_cpu_mem_arena = False`. The model, the loop and the known truth are
described in _onnx_common.py (where the `@native` line is); compare with
onnx_arena_on.py.

Usage: python onnx_arena_off.py [N]   (N batches of 256 rows, default 200; 0 builds the
session and runs nothing)
"""

from _onnx_common import main

if __name__ == "__main__":
    main(arena=False, name="onnx_arena_off")
