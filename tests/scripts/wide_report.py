"""A report wider than any terminal: source lines longer than a screen (their comments in
wide characters too: 配列 takes four cells), native functions with long names under them, two
hints (a copying line, a float64 array held at the peak), a helper thread and a child process
with a long command. Lines are found by the `# @marker` comments that end them.

    python wide_report.py SCALE     (1, 2, ...: the copies and the matrix work grow with it)
"""
import subprocess
import sys
import threading

import numpy as np

MB = 1 << 20
scale = int(sys.argv[1])


def helper():
    a = np.random.default_rng(0).standard_normal((600, 600))
    for _ in range(4 * scale):
        a = a @ a / 600.0  # 行列の積を何度も繰り返して、ネイティブ関数の長い名前が行の下に並ぶようにする (matrix products, so that BLAS's long names show under the line)  # @helper


thread = threading.Thread(target=helper)
thread.start()
x = np.ones(8 * MB // 8)
for _ in range(20 * scale):
    y = np.array(x)  # 配列を毎回まるごと複製する: this comment makes the line longer than any terminal, and wider in cells than in characters  # @copies
big = np.ones((2048, 8192))  # a float64 array of 128 MiB held to the end, which a float32 one would halve  # @big
thread.join()
subprocess.run(
    [sys.executable, "-c", "pass", "an-argument-long-enough-that-the-command-of-this-child-" * 3],
    check=True,
)
print(len(y), big.shape)
