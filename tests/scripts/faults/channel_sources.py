"""Run functions whose code objects name a FIFO (argv[1], created here and left in place) and
/dev/zero as their file, each under the CPU sampler for about 0.3 s, then exit 0. The report
must not read from either. Prints the same thing with and without mlprof."""
import os
import sys
import time

fifo = sys.argv[1]
if not os.path.exists(fifo):
    os.mkfifo(fifo)

SRC = """
def hot(seconds):
    end = time.process_time() + seconds
    total = 0
    while time.process_time() < end:
        for i in range(1000):
            total = (total + i * i) % 1000003
    return 0
"""
results = []
for name in ["/dev/zero", fifo]:
    scope = {"time": time}
    exec(compile(SRC, name, "exec"), scope)
    results.append(scope["hot"](0.3))
print("results", results, flush=True)
