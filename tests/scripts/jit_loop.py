"""A hot pure-Python loop that CPython's JIT compiles (PYTHON_JIT=1 on 3.14+). argv[1]:
iterations. Prints whether the JIT was on."""
import sys


def hot(n):
    total = 0
    for i in range(n):
        total += (i * 3) % 11  # LINE: hot
    return total


hot(int(sys.argv[1]))
jit = getattr(sys, "_jit", None)
print("jit" if jit is not None and jit.is_enabled() else "no jit")
