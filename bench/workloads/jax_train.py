"""jax_train: a JAX training loop on XLA's CPU backend.

Stresses: XLA's Eigen pool threads running oneDNN's JIT GEMM kernels (a SIGPROF taken on their
own stack crashed the process before the signal stack of mlprof's own), JIT dispatch from
Python, and the native time of threads without Python.

Known truth (default size steps = 200):
  - `jax.jit` of `value_and_grad` of an MSE-like loss on 512x512 weights, 256x512 inputs;
  - each step is synchronised on its own line (`block_until_ready`), so the `@native` line
    holds the step's work: XLA's compiled code and its pool threads, nearly all native;
  - with steps = 0 the script imports JAX, compiles nothing and exits (the baseline);
  - without JAX it prints "skipped: jax not installed" and exits 0.

Usage: python jax_train.py [steps]
"""

import sys

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("skipped: jax not installed")
    sys.exit(0)


def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    if steps == 0:
        print("jax_train steps=0 (imports only)")
        return
    grad = jax.jit(jax.value_and_grad(loss))
    w = jax.random.normal(jax.random.PRNGKey(0), (512, 512)) * 0.01
    x = jax.random.normal(jax.random.PRNGKey(1), (256, 512))
    value, g = grad(w, x)
    for _ in range(steps):
        value, g = jax.block_until_ready(grad(w, x))  # @native
        w = w - 0.01 * g
    print(f"jax_train steps={steps} loss={float(value):.6f}")


if __name__ == "__main__":
    main()
