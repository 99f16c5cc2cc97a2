"""``python -m mlprof ...``: the same command line as ``mlprof ...``."""

import os
import sys

from ._binary import require


def main():
    binary = require()
    args = [binary] + sys.argv[1:]
    try:
        os.execv(binary, args)
    except OSError as e:
        sys.stderr.write("mlprof: cannot run %s: %s\n" % (binary, e.strerror))
        raise SystemExit(2)


if __name__ == "__main__":
    main()
