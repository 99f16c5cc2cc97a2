"""Code compiled from strings, charged to the user line that ran it: @points builds dataclass
instances (dataclasses generates `__init__` with `exec`, file `<string>`) for 1 s of this
thread's CPU; @exec_call calls a function compiled from a string (file `<string>`) for 1 s of
CPU. Prints the thread CPU each phase took, as JSON (the kernel's count)."""
import dataclasses
import json
import time


@dataclasses.dataclass
class Point:
    x: int
    y: int
    z: int = 0


SRC = "def spin(n):\n    t = 0\n    for i in range(n):\n        t += i * i\n    return t\n"
ns = {}
exec(compile(SRC, "<string>", "exec"), ns)


def points(seconds):
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        for i in range(2000):
            Point(i, i)  # @points
    return time.thread_time() - start


def exec_call(seconds):
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        ns["spin"](20000)  # @exec_call
    return time.thread_time() - start


print(json.dumps({"points": points(1.0), "exec_call": exec_call(1.0)}))
