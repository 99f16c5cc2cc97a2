"""A failed subprocess (CPython's vfork child calls _exit(255) when exec fails) and a successful
one, then the parent holds 150 MB for 0.6 s: the parent must stay alive in the report."""
import subprocess
import sys
import time

try:
    subprocess.run(["/nonexistent/mlprof-test-command"])
except FileNotFoundError as e:
    print("failed as expected:", type(e).__name__)
print("sh exited", subprocess.run(["sh", "-c", "exit 3"]).returncode)
held = bytearray(150 * 1000 * 1000)  # the line that holds the memory
end = time.perf_counter() + 0.6
while time.perf_counter() < end:
    pass
print("held", len(held))
sys.exit(4)
