"""A preprocessing step whose peak comes from intermediate arrays kept alive together.

Run:
    mlprof run -- python examples/peak_memory.py

What the report should show:
  - peak heap about 470 MiB: three full-size float64 arrays of 153 MiB (20,000 x 1,000)
    plus the interpreter and numpy (~10 MiB), reached in `normalise`;
  - "Held at the heap peak" naming the three lines that hold them, about 153 MiB each:
    `return rng.random(...)` in `load` (the raw data), `centred = ...` and `scaled = ...`
    (`raw.std()` builds a full-size temporary on that line before `scaled` exists);
  - `normalise_lean` computes the same result holding at most two arrays (raw + one), so it
    does not set the peak: it runs first, and the peak is only reached later in `normalise`.
"""
import numpy as np

ROWS, COLS = 20_000, 1_000  # 160 MB of float64


def load():
    rng = np.random.default_rng(0)
    return rng.random((ROWS, COLS))


def normalise(raw):
    centred = raw - raw.mean(axis=0)  # a full-size copy
    scaled = centred / raw.std(axis=0)  # std's temporary, then another full-size array
    return scaled


def normalise_lean(raw):
    std = raw.std(axis=0)  # its temporary is freed before the next line
    out = raw - raw.mean(axis=0)
    out /= std  # in place: no new array
    return out


if __name__ == "__main__":
    raw = load()
    lean = normalise_lean(raw)
    del lean
    full = normalise(raw)
    print("done", full.shape)
