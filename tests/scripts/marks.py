"""Named regions (mlprof.mark) with known sizes: the profile's regions must show them exactly."""
import numpy as np

import mlprof

MIB = 2**20


@mlprof.mark("build")
def build():
    return [np.ones(MIB // 8) for _ in range(40)]  # @parts


with mlprof.mark("load") as region:
    data = np.ones(50 * MIB // 8)  # @data
    with mlprof.mark("inner"):
        tmp = np.ones(30 * MIB // 8)  # @tmp
        del tmp
parts = build()
with mlprof.mark("sum"):
    total = sum(float(p.sum()) for p in parts) + float(data.sum())
print(total, mlprof.active(), region.peak, region.net)
