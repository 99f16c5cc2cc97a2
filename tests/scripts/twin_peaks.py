"""Two heap peaks 0.2% apart, a second apart: 200 MiB held by the `@first` line, freed, then
200.4 MiB by the `@second` line. Known truth: the heap's peak is the second, within 1% of the
first; the report's holders and the instant it names must be the same moment (peak marks
come at 1% rises, so that is the first). Prints, on stderr, when the second allocation began,
in seconds from its own start (later than mlprof's launch)."""
import sys
import time

MiB = 2**20
start = time.monotonic()
a = bytearray(200 * MiB)  # @first
time.sleep(0.5)
del a
time.sleep(0.5)
print("second at %.3f" % (time.monotonic() - start), file=sys.stderr, flush=True)
b = bytearray(int(200 * MiB * 1.002))  # @second
time.sleep(0.5)
del b
print("done", flush=True)
