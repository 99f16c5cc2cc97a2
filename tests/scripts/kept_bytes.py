"""Keep N bytes objects of SIZE bytes to the end (`kept_bytes.py N SIZE [measure]`); with
`measure`, print the bytes tracemalloc saw requested for them (the truth the test holds the
heap to), nothing else."""
import sys

N, SIZE = int(sys.argv[1]), int(sys.argv[2])
MEASURE = len(sys.argv) > 3
if MEASURE:
    import tracemalloc

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
keep = [bytes(SIZE) for _ in range(N)]  # LINE: keep
if MEASURE:
    print(tracemalloc.get_traced_memory()[0] - before)
else:
    print(len(keep))
