"""Shared code of onnx_arena_on.py and onnx_arena_off.py (not a workload itself).

Builds a small MLP in memory with onnx.helper (no file is read or downloaded):
input [batch, 512] float32 -> MatMul 512x1024 -> Add -> Relu -> MatMul 1024x1024 -> Add ->
Relu -> MatMul 1024x16 -> output [batch, 16]; weights drawn with a fixed seed. It then runs
an onnxruntime InferenceSession on the CPU with `enable_cpu_mem_arena` on or off, feeding
batches of 256 rows in a loop.

Known truth (default size N = 200 batches):
  - the `@native` line (`session.run`) is (nearly) all native time: onnxruntime's MLAS GEMM
    kernels, on its intra-op thread pool (as many threads as cores) and the calling thread;
  - per batch the model computes 256 x (512x1024 + 1024x1024 + 1024x16) multiply-adds
    (about 0.4 GFLOP), and allocates two 256x1024 float32 activations (1 MiB each) plus
    the 16 KiB output inside onnxruntime;
  - with the arena on, onnxruntime keeps freed activation buffers in its BFC arena (grown
    in chunks from malloc and not returned), so the heap stays at its high-water mark after
    the first batch; with the arena off each buffer is malloc'ed and freed per run;
  - the weights (about 6.1 MiB of float32) are held by the model proto and again by the
    session;
  - peak heap is not known exactly by construction; with N = 0 the session is built but
    never run.
"""

import sys


def import_or_skip():
    """Return (np, onnx, helper, TensorProto, ort), or print the skip line and exit 0."""
    for mod in ("numpy", "onnx", "onnxruntime"):
        try:
            __import__(mod)
        except ImportError:
            print(f"skipped: {mod} not installed")
            sys.exit(0)
    import numpy as np
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    return np, onnx, helper, TensorProto, ort


IN_FEATURES = 512
HIDDEN = 1024
OUT_FEATURES = 16
BATCH = 256


def build_model(np, onnx, helper, TensorProto):
    rng = np.random.default_rng(0)
    dims = [IN_FEATURES, HIDDEN, HIDDEN, OUT_FEATURES]
    inits, nodes = [], []
    prev = "x"
    for k in range(3):
        w = (rng.standard_normal((dims[k], dims[k + 1])) / np.sqrt(dims[k])).astype(np.float32)
        b = np.zeros(dims[k + 1], dtype=np.float32)
        inits.append(helper.make_tensor(f"W{k}", TensorProto.FLOAT, w.shape, w.tobytes(),
                                        raw=True))
        inits.append(helper.make_tensor(f"B{k}", TensorProto.FLOAT, b.shape, b.tobytes(),
                                        raw=True))
        nodes.append(helper.make_node("MatMul", [prev, f"W{k}"], [f"mm{k}"]))
        out = "y" if k == 2 else f"h{k}"
        nodes.append(helper.make_node("Add", [f"mm{k}", f"B{k}"], [f"a{k}" if k < 2 else out]))
        if k < 2:
            nodes.append(helper.make_node("Relu", [f"a{k}"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", IN_FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", OUT_FEATURES])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main(arena, name):
    np, onnx, helper, TensorProto, ort = import_or_skip()
    batches = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    model = build_model(np, onnx, helper, TensorProto)
    opts = ort.SessionOptions()
    opts.enable_cpu_mem_arena = arena
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, IN_FEATURES)).astype(np.float32)
    total = 0.0
    for _ in range(batches):
        (y,) = session.run(None, {"x": x})  # @native
        total += float(y[0, 0])
    print(f"{name} arena={'on' if arena else 'off'} batches={batches} total={total:.4f}")
