"""Dump CPython line tables plus CPython's own per-offset line numbers.

Used by the differential test `matches_cpython_on_stdlib` in
src/symbolize/linetable.rs. Runs unchanged on CPython 3.9 to 3.15 (and later,
as long as `co_lines()` exists).

It compiles every ``.py`` file of the standard library from source (files that
fail to compile are skipped; ``site-packages`` is skipped), walks every code
object recursively through ``co_consts`` and prints, per code object, one line:

    C <firstlineno> <code_units> <line_at_lasti_minus_1> <table_hex> <lines>

* ``code_units``: ``len(co_code) // 2``.
* ``line_at_lasti_minus_1``: what CPython's ``PyCode_Addr2Line`` returns for
  a frame whose lasti is -1 (byte address -1 on 3.9, ``-1 * 2`` on 3.10+),
  called through ctypes; ``-`` when CPython reports no line, ``?`` when ctypes
  is unavailable.
* ``table_hex``: ``co_lnotab`` (3.9) or ``co_linetable`` (3.10+) in hex
  (``.`` when empty).
* ``lines``: the expected line at every code unit offset ``0..code_units``,
  run-length encoded as comma separated ``LINE`` or ``LINE*COUNT`` tokens,
  where LINE is ``-`` for "no line" (``.`` when there are no code units).
  On 3.10+ this comes from ``co_lines()`` (byte ranges -> line or None).
  On 3.9 it comes from ``dis.findlinestarts()``: the line at offset ``o`` is
  the line of the last start ``<= o``. That is what 3.9's
  ``PyCode_Addr2Line`` (and so ``frame.f_lineno`` when not tracing) computes
  from ``co_lnotab``: every line increment whose cumulative address is
  ``<= o`` is applied.

The first line is ``V <major> <minor>``; the last is
``E <code_objects> <code_units> <xchecked_units> <xcheck_mismatches>``, where
the ``xcheck`` numbers come from a self-check of the expected lines against
``PyCode_Addr2Line`` (via ctypes) at every offset of every Nth code object
(N = 1 with ``--xcheck-all``; ``--addr2line`` makes ``PyCode_Addr2Line`` the
source of the expected lines instead).

Options: ``--stride N`` takes every Nth source file (default 1: all files).
"""

import dis
import os
import sys
import sysconfig
import warnings

XCHECK_EVERY = 25


def addr2line_fn():
    try:
        import ctypes

        fn = ctypes.pythonapi.PyCode_Addr2Line
        fn.argtypes = [ctypes.py_object, ctypes.c_int]
        fn.restype = ctypes.c_int
        return fn
    except Exception:  # no ctypes in this build
        return None


def runs_from_co_lines(code, units):
    """[(line, count)] over units 0..units; unit u sits at byte 2u and is
    covered by the range with start <= 2u < end; uncovered units have no
    line (PyCode_Addr2Line returns -1 past the last range)."""
    runs = []
    cursor = 0
    for start, end, line in code.co_lines():
        lo = min(max((start + 1) // 2, cursor), units)
        hi = min((end + 1) // 2, units)
        if lo > cursor:
            runs.append((None, lo - cursor))
        if hi > lo:
            runs.append((line, hi - lo))
        cursor = max(cursor, hi)
    if cursor < units:
        runs.append((None, units - cursor))
    return runs


def runs_from_lnotab(code, units):
    """3.9: the line at unit u is the line of the last findlinestarts() start
    at byte <= 2u (the first start is always at byte 0)."""
    runs = []
    cursor = 0
    line = code.co_firstlineno
    for addr, start_line in dis.findlinestarts(code):
        lo = min((addr + 1) // 2, units)
        if lo > cursor:
            runs.append((line, lo - cursor))
            cursor = lo
        line = start_line
    if cursor < units:
        runs.append((line, units - cursor))
    return runs


def lines_from_addr2line(fn, code, units):
    out = []
    for u in range(units):
        line = fn(code, 2 * u)
        out.append(None if line < 0 else line)
    return out


def expand(runs):
    out = []
    for line, count in runs:
        out.extend([line] * count)
    return out


def rle(runs):
    if not runs:
        return "."
    toks = []
    prev, total = runs[0]
    for line, count in runs[1:]:
        if line == prev:
            total += count
            continue
        toks.append(token(prev, total))
        prev, total = line, count
    toks.append(token(prev, total))
    return ",".join(toks)


def token(line, count):
    s = "-" if line is None else str(line)
    return s if count == 1 else "%s*%d" % (s, count)


class Dumper:
    def __init__(self, out, use_addr2line, xcheck_every):
        self.out = out
        self.fn = addr2line_fn()
        if use_addr2line and self.fn is None:
            sys.exit("--addr2line needs ctypes")
        self.use_addr2line = use_addr2line
        self.xcheck_every = xcheck_every
        self.v310 = sys.version_info >= (3, 10)
        self.ncode = self.nunits = self.xchecked = self.xbad = 0

    def expected(self, code, units):
        if self.use_addr2line:
            return [(line, 1) for line in
                    lines_from_addr2line(self.fn, code, units)]
        if self.v310:
            runs = runs_from_co_lines(code, units)
        else:
            runs = runs_from_lnotab(code, units)
        if self.fn is not None and self.ncode % self.xcheck_every == 0:
            ref = lines_from_addr2line(self.fn, code, units)
            lines = expand(runs)
            self.xchecked += units
            self.xbad += len(lines) != units
            self.xbad += sum(1 for a, b in zip(lines, ref) if a != b)
        return runs

    def minus_one(self, code):
        if self.fn is None:
            return "?"
        # f_lineno for lasti == -1: 3.9 passes the byte lasti (-1), 3.10+
        # pass lasti * sizeof(_Py_CODEUNIT) (-2).
        line = self.fn(code, -2 if self.v310 else -1)
        return "-" if line < 0 else str(line)

    def walk(self, code):
        units = len(code.co_code) // 2
        table = code.co_linetable if self.v310 else code.co_lnotab
        runs = self.expected(code, units)
        self.out.write("C %d %d %s %s %s\n" % (
            code.co_firstlineno, units, self.minus_one(code),
            table.hex() or ".", rle(runs)))
        self.ncode += 1
        self.nunits += units
        for const in code.co_consts:
            if isinstance(const, type(code)):
                self.walk(const)


def source_files(root, stride):
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "site-packages")
        files.extend(os.path.join(dirpath, f)
                     for f in sorted(filenames) if f.endswith(".py"))
    return files[::stride]


def main(argv):
    stride = 1
    if "--stride" in argv:
        stride = max(1, int(argv[argv.index("--stride") + 1]))
    xcheck_every = 1 if "--xcheck-all" in argv else XCHECK_EVERY
    warnings.simplefilter("ignore")
    out = sys.stdout
    dumper = Dumper(out, "--addr2line" in argv, xcheck_every)
    out.write("V %d %d\n" % sys.version_info[:2])
    for path in source_files(sysconfig.get_paths()["stdlib"], stride):
        try:
            with open(path, "rb") as fh:
                code = compile(fh.read(), path, "exec", dont_inherit=True)
        except Exception:  # SyntaxError, ValueError (null bytes), ...
            continue
        dumper.walk(code)
    out.write("E %d %d %d %d\n" % (dumper.ncode, dumper.nunits,
                                   dumper.xchecked, dumper.xbad))


if __name__ == "__main__":
    main(sys.argv[1:])
