"""onnxruntime with its CPU memory arena on or off (argv[1]: "on" / "off"): one large batch
(8192 rows: two 32 MiB activations), then 100 small ones (64 rows). A small MLP built in
memory with onnx.helper (512 -> 1024 -> 1024 -> 16, float32).

Known truth: with the arena on, onnxruntime keeps the memory it grew to for the large batch
(its BFC arena does not give chunks back), so the `@run` line still holds tens of MiB after
its last run; with the arena off, each run's buffers are freed when it returns."""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

arena = sys.argv[1] == "on"
rng = np.random.default_rng(0)
dims = [512, 1024, 1024, 16]
inits, nodes, prev = [], [], "x"
for k in range(3):
    w = (rng.standard_normal((dims[k], dims[k + 1])) / 32).astype(np.float32)
    inits.append(helper.make_tensor(f"W{k}", TensorProto.FLOAT, w.shape, w.tobytes(), raw=True))
    out = "y" if k == 2 else f"h{k}"
    nodes.append(helper.make_node("MatMul", [prev, f"W{k}"], [f"m{k}" if k < 2 else out]))
    if k < 2:
        nodes.append(helper.make_node("Relu", [f"m{k}"], [out]))
    prev = out
graph = helper.make_graph(
    nodes, "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 512])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
    inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
opts = ort.SessionOptions()
opts.enable_cpu_mem_arena = arena
session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
total = 0.0
for rows in [8192] + [64] * 100:
    x = rng.standard_normal((rows, 512)).astype(np.float32)
    (y,) = session.run(None, {"x": x})  # @run
    total += float(y[0, 0])
print(f"arena={'on' if arena else 'off'} total={total:.3f}")
