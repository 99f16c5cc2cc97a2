"""Memory ground truth by construction. argv[1] picks the scenario (see each branch).
Lines are found by their `# @marker` comments. Sizes in bytes (MB = 10**6)."""
import sys

import numpy as np

MB = 10**6
scenario = sys.argv[1]

if scenario == "peak":
    # Truth: the heap peaks at baseline + 500 MB (kept 400 MB and a 100 MB temporary).
    kept = np.ones(400 * MB, dtype=np.uint8)  # @peak-holder
    temp = np.ones(100 * MB, dtype=np.uint8)  # @temp
    del temp
elif scenario == "churn":
    # Truth: 10 x 100 MB allocated and freed before a 400 MB array is kept: the churning line
    # allocates ~1 GB and holds nothing at the peak; the kept line holds 400 MB.
    for _ in range(10):
        t = np.ones(100 * MB, dtype=np.uint8)  # @churn
        del t
    kept = np.ones(400 * MB, dtype=np.uint8)  # @kept-after-churn
elif scenario == "python":
    # Truth: the fill line creates N floats of 24 bytes each through Python's allocator
    # (48 MB); the numpy line allocates 80 MB of native memory and ~0 Python bytes.
    n = 2_000_000
    data = [0.0] * n
    for i in range(n):
        data[i] = float(i)  # @floats
    arr = np.ones(10_000_000)  # @numpy
    print(sys.getsizeof(1.5))
elif scenario == "leak":
    # Truth: the leaking line keeps 1 MB arrays forever; the temporary line allocates and frees
    # the same amount each iteration.
    leaked = []
    for i in range(150):
        leaked.append(np.ones(MB, dtype=np.uint8))  # @leak
        tmp = np.ones(MB, dtype=np.uint8)  # @temporary
        tmp.sum()
        del tmp
elif scenario == "copy":
    # Truth: 40 copies of 100 MB = 4 GB copied by the copy line.
    src = np.ones(100 * MB, dtype=np.uint8)
    for _ in range(40):
        dst = np.copy(src)  # @copy
        del dst
elif scenario == "pyobject":
    # Truth: a 300 MB bytearray (Python's allocator, which forwards to malloc) is kept while
    # the work below allocates small objects: it is what the heap holds at its peak.
    kept = bytearray(300 * MB)  # @pyobject
    total = sum(len(str(i)) for i in range(300_000))
