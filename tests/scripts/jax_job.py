"""A JAX training step as users write it, when JAX is importable (else it says it skipped):
`jax.jit` of `value_and_grad` on 512x512 weights, run a fixed number of steps on XLA's CPU
backend, whose Eigen pool threads run oneDNN's JIT GEMM kernels (the code that a SIGPROF taken
on its own stack used to crash). Known truth: the loop's lines (`@step`, `@update`, `@ready`: JAX
dispatches asynchronously, so the pool's work lands where the main thread waits for it) cause
the loop's CPU, which the script prints on stderr from the kernel's accounting; stdout is a
deterministic loss, so that a run under mlprof can be compared with one without."""
import sys
import time

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("skipped: jax not installed")
    sys.exit(0)

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300


def loss(w, x):
    return jnp.mean(jnp.tanh(x @ w) ** 2)


step = jax.jit(jax.value_and_grad(loss))
key = jax.random.PRNGKey(0)
w = jax.random.normal(key, (512, 512)) * 0.01
x = jax.random.normal(jax.random.PRNGKey(1), (256, 512))
value, grad = step(w, x)  # @compile
cpu_start = time.process_time()
for _ in range(steps):  # @loop
    value, grad = step(w, x)  # @step
    w = w - 0.01 * grad  # @update
value.block_until_ready()  # @ready
# The loop's CPU, all threads, by the kernel's accounting: the truth its lines must add up to.
print("loop cpu %.3f" % (time.process_time() - cpu_start), file=sys.stderr, flush=True)
print("loss %.6f" % float(value), flush=True)
