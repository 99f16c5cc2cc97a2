"""Prints to stdout and stderr, burns a little CPU, exits 3."""
import sys
import time

end = time.perf_counter() + 0.2
while time.perf_counter() < end:
    pass
print("to stdout")
print("to stderr", file=sys.stderr)
sys.exit(3)
