"""An import 30 modules deep (an installed package importing its parts, as Lightning and
sentence-transformers do: about 180 Python frames), whose innermost module computes for
0.4 s of CPU, keeps 32 MiB and sleeps 0.3 s. Known truth: the program's own line is the
`import`, and it carries that CPU, that memory and that wait; nothing of it is outside the
program's code."""
import os
import sys
import tempfile

root = tempfile.mkdtemp()
pkg = os.path.join(root, "site-packages")
os.makedirs(pkg)
LEVELS = 30
for i in range(LEVELS - 1):
    with open(os.path.join(pkg, f"chain{i}.py"), "w") as f:
        f.write(f"import chain{i + 1}\n")
with open(os.path.join(pkg, f"chain{LEVELS - 1}.py"), "w") as f:
    f.write(
        "import time\n"
        "kept = bytearray(32 << 20)\n"
        "end = time.thread_time() + 0.4\n"
        "while time.thread_time() < end:\n"
        "    pass\n"
        "time.sleep(0.3)\n"
    )
sys.path.insert(0, pkg)
import chain0  # noqa: E402  # @import

print("deep", len(sys.modules["chain29"].kept))
