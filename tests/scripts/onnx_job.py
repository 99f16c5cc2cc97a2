"""onnxruntime inference on its own intra-op thread pool, when onnx and onnxruntime are
importable (else it says it skipped). The model is the benchmark's MLP
(bench/workloads/_onnx_common.py, built in memory). Known truth: the `@run` line causes all
the CPU of onnxruntime's pool (its MLAS GEMM kernels), calling thread and pool threads alike:
2 s of the process's CPU, more than it spends importing and building the model."""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench", "workloads"))
import _onnx_common as common  # noqa: E402

np, onnx, helper, TensorProto, ort = common.import_or_skip()
model = common.build_model(np, onnx, helper, TensorProto)
opts = ort.SessionOptions()
opts.intra_op_num_threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
session = ort.InferenceSession(model.SerializeToString(), opts,
                               providers=["CPUExecutionProvider"])
x = np.random.default_rng(1).standard_normal((common.BATCH, common.IN_FEATURES)).astype(np.float32)
# 2 s of the process's CPU (its pool threads' included), not of wall time: on a machine busier
# than its cores the run line keeps its share of the process's CPU.
start = time.process_time()
while time.process_time() - start < 2.0:
    (out,) = session.run(None, {"x": x})  # @run
print("ran", out.shape, flush=True)
