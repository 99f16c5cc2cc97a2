"""mp_pool_spawn: mp_pool.py with the spawn start method.

Stresses: the same as mp_pool.py, but each worker is a fresh interpreter (spawn) that
re-imports numpy and this module instead of a fork of the parent: no inherited heap, and a
profiler must follow newly executed Pythons rather than fork children.

Known truth: as in mp_pool.py (the `@peak` line and EXPECTED_PEAK_BYTES are there), plus the
start-up cost of four interpreters importing numpy.

Usage: python mp_pool_spawn.py [N]
"""

import sys

try:
    import numpy  # noqa: F401  (only to self-skip like mp_pool.py)
except ImportError:
    print("skipped: numpy not installed")
    sys.exit(0)

from mp_pool import main

if __name__ == "__main__":
    main(sys.argv[1:], start="spawn")
