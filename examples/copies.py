"""Growing an array with np.concatenate in a loop copies everything gathered so far on every
step (quadratic copying); collecting the chunks in a list and concatenating once copies each
byte once.

Run:
    mlprof run -- python examples/copies.py

What the report should show:
  - the `grown = np.concatenate(...)` line in `grow_by_concatenate` with by far the largest
    copy rate (`copy/s`, GiB/s) and copy volume: step i copies the i chunks gathered so far
    plus the new one, 300 x 301 / 2 x 64 KiB = 2.8 GiB in total (`mlprof run -o out.json`
    gives it per line as `copy_bytes`); it also allocates about as much (`allocated`);
  - that line's time counted as Python, not native: the copying is done by memcpy, in libc,
    which mlprof counts as interpreter time;
  - the single `np.concatenate(chunks)` in `grow_once` copying only the final 18.8 MiB;
  - both functions end with the same 18.8 MiB array.
"""
import numpy as np

CHUNK = 8_192  # float64 values per chunk: 64 KiB
STEPS = 300


def grow_by_concatenate():
    grown = np.empty(0)
    for i in range(STEPS):
        grown = np.concatenate([grown, np.full(CHUNK, float(i))])  # copies all of `grown`
    return grown


def grow_once():
    chunks = [np.full(CHUNK, float(i)) for i in range(STEPS)]
    return np.concatenate(chunks)  # one copy of every byte


if __name__ == "__main__":
    a = grow_by_concatenate()
    b = grow_once()
    print("same result:", bool((a == b).all()), f"{a.nbytes / 2**20:.1f} MiB")
