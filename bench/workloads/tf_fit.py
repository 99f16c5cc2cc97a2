"""tf_fit: a TensorFlow-CPU Keras fit of an MLP.

Stresses: TensorFlow's own thread pools (Eigen, oneDNN JIT kernels: a SIGPROF on their stack
crashed the process before the signal stack of mlprof's own) under Keras's Python loop.

Known truth (default size epochs = 2):
  - an MLP 256-1024-1024-1 trained with Adam on 8,192 rows in batches of 1024: the
    `@native` fit line is mostly native time (the batches are large enough that the kernels
    outweigh Keras's per-step Python);
  - with epochs = 0 the script imports TensorFlow and builds nothing (the baseline);
  - without TensorFlow it prints "skipped: tensorflow not installed" and exits 0.

Usage: python tf_fit.py [epochs]
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
try:
    import numpy as np
    import tensorflow as tf
except ImportError:
    print("skipped: tensorflow not installed")
    sys.exit(0)


def main():
    epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    if epochs == 0:
        print("tf_fit epochs=0 (imports only)")
        return
    tf.random.set_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8_192, 256)).astype("float32")
    y = x[:, :1] * 2.0
    model = tf.keras.Sequential([tf.keras.Input((256,)),
                                 tf.keras.layers.Dense(1024, activation="relu"),
                                 tf.keras.layers.Dense(1024, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
    model.fit(x, y, epochs=epochs, batch_size=1024, verbose=0)  # @native
    print(f"tf_fit epochs={epochs}")


if __name__ == "__main__":
    main()
