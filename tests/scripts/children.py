"""Runs a shell through subprocess and forks a child that allocates 20 MB. With mlprof's
default both children are profiled; with --no-follow neither is, and the program behaves the
same (same output)."""
import os
import subprocess

out = subprocess.run(["sh", "-c", "echo child-says-hi"], capture_output=True, text=True).stdout
print(out.strip())
pid = os.fork()
if pid == 0:
    kept = bytearray(20 * 10**6)
    os._exit(0)
os.waitpid(pid, 0)
print("parent done")
