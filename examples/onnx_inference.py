"""Batch inference with onnxruntime on a small MLP built in memory (nothing is downloaded).

Run:
    mlprof run -- python examples/onnx_inference.py

What the report should show:
  - the `session.run(...)` line with most of the run's CPU time, nearly all of it native,
    including the work of onnxruntime's intra-op threads, which are joined to this line. The
    native functions under it are shown as addresses in
    onnxruntime_pybind11_state....so: the wheel's library is stripped of its symbol table;
  - the model-building lines (`make_tensor`, `check_model`, `SerializeToString`,
    `InferenceSession`) allocating a few times the ~6 MiB of weights; the heap peak (~63 MiB)
    is reached while building, not during inference;
  - with the CPU memory arena on (the default), the run line allocates only ~8 MiB over all
    200 batches: the arena keeps and reuses the activation buffers. Set ARENA = False and the
    same line allocates about 2 MiB per batch (~400 MiB in all), freed batch by batch.
"""
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

ARENA = True
SIZES = [512, 1024, 1024, 16]  # input, two hidden layers, output


def build_mlp(sizes):
    rng = np.random.default_rng(0)
    nodes, weights, prev = [], [], "x"
    for k in range(len(sizes) - 1):
        w = (rng.standard_normal((sizes[k], sizes[k + 1])) / np.sqrt(sizes[k])).astype(np.float32)
        weights.append(
            helper.make_tensor(f"W{k}", TensorProto.FLOAT, w.shape, w.tobytes(), raw=True))
        out = "y" if k == len(sizes) - 2 else f"h{k}"
        nodes.append(helper.make_node("MatMul", [prev, f"W{k}"], [f"mm{k}" if out != "y" else out]))
        if out != "y":
            nodes.append(helper.make_node("Relu", [f"mm{k}"], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", sizes[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", sizes[-1]])],
        weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


if __name__ == "__main__":
    options = ort.SessionOptions()
    options.enable_cpu_mem_arena = ARENA
    session = ort.InferenceSession(build_mlp(SIZES), options, providers=["CPUExecutionProvider"])
    batch = np.random.default_rng(1).standard_normal((256, SIZES[0])).astype(np.float32)
    total = 0.0
    for _ in range(200):
        (y,) = session.run(None, {"x": batch})
        total += float(y[0, 0])
    print(f"200 batches of 256, checksum {total:.4f}")
