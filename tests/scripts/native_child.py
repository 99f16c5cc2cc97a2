"""Runs a program without Python (argv[1], tests/native/hold_memory.c) that holds 200 MiB
for 1.5 s, from the `@child` line; the Python process itself holds a few MiB of its own.
Known truth: at the tree's peak the child's 200 MiB is held, and it is the `@child` line's
(the line that ran the program), as the g++ processes torch.compile runs are its line's."""
import subprocess
import sys

small = [bytes(1024) for _ in range(2000)]  # @own
subprocess.run([sys.argv[1], "200", "1500"], check=True)  # @child
print(len(small))
