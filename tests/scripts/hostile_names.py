"""Names a program controls that hold terminal control characters: a source file name, a
function name, a thread name and a region name (and the test gives it such an argument), each
with ESC (a colour sequence), BEL, a right-to-left override, a carriage return and a newline
between `zzhead` and `zztail`. mlprof must never print them raw. `work` allocates N MiB
(argv[1]) on one line, held to its end, and spins a little so that it has CPU time too.

With `mlprof` importable (PYTHONPATH=python), the work runs in a region of that name, and
another region is named `plain`.
"""

import contextlib
import sys
import threading
import types

EVIL = "\x1b[31m\x07\u202e\r\n"
SOURCE = """
def work(n):
    held = [bytearray(1 << 20) for _ in range(n)]
    total = 0
    for i in range(300_000):
        total += i
    return len(held), total
"""

try:
    import mlprof

    mark = mlprof.mark
except ImportError:
    mark = lambda name: contextlib.nullcontext()  # noqa: E731

n = int(sys.argv[1])
code = compile(SOURCE, "zzhead" + EVIL + "zztail.py", "exec")
namespace = {}
exec(code, namespace)
inner = namespace["work"].__code__
name = "zzhead" + EVIL + "zztail"
inner = inner.replace(co_name=name)
if hasattr(inner, "co_qualname"):
    inner = inner.replace(co_qualname=name)
work = types.FunctionType(inner, namespace, name)

results = []
thread = threading.Thread(target=lambda: results.append(work(n)), name=name)
with mark(name):
    thread.start()
    thread.join()
    results.append(work(n))
with mark("plain"):
    results.append(work(1))
assert len(results) == 3
