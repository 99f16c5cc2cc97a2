"""A TensorFlow-CPU Keras `fit` of a small MLP, when TensorFlow is importable (else it says it
skipped): TensorFlow's Eigen and oneDNN threads run JIT GEMM kernels (the code that a SIGPROF
taken on its own stack used to crash). Known truth: the `@fit` line causes the fit's CPU, which the
script prints on stderr from the kernel's accounting; stdout is the number of epochs
trained."""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
try:
    import numpy as np
    import tensorflow as tf
except ImportError:
    print("skipped: tensorflow not installed")
    sys.exit(0)

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
tf.random.set_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((8192, 256)).astype("float32")
y = (x[:, :1] * 2.0).astype("float32")
model = tf.keras.Sequential(
    [
        tf.keras.Input((256,)),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(512, activation="relu"),
        tf.keras.layers.Dense(1),
    ]
)
model.compile(optimizer="adam", loss="mse")
cpu_start = time.process_time()
history = model.fit(x, y, epochs=epochs, batch_size=256, verbose=0)  # @fit
# The fit's CPU, all threads, by the kernel's accounting: the truth its line must hold.
print("fit cpu %.3f" % (time.process_time() - cpu_start), file=sys.stderr, flush=True)
print("epochs", len(history.history["loss"]), flush=True)
