"""argv: CODE [MARKER]: create the file MARKER (if given), print "ran", exit with CODE.

A program whose having run is visible (MARKER) and whose exit status mlprof must keep.
"""
import sys

if len(sys.argv) > 2:
    open(sys.argv[2], "w").close()
print("ran", flush=True)
sys.exit(int(sys.argv[1]))
