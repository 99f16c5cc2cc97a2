"""Quantities as the reports print them: ``381.5 MiB``, ``45 ms``."""


def size(n):
    """Bytes with a binary unit: ``96 B``, ``1.5 KiB``, ``381.5 MiB``, ``-4.0 MiB``."""
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return "%s%d B" % (sign, n) if unit == "B" else "%s%.1f %s" % (sign, n, unit)
        n /= 1024


def seconds(s):
    """``45 ms`` below a second, ``1.23 s`` above."""
    return "%.0f ms" % (s * 1000) if s < 1 else "%.2f s" % s


def clean(text):
    """``text`` safe to print, as mlprof's reports write names from the profiled program:
    control characters (C0, DEL, C1), the line and paragraph separators and the bidirectional
    controls written visibly (``\\x1b``, ``\\u{202e}``), a tab as a space. A name holding
    ``\\x1b]0;...\\x07`` must not retitle or clear a terminal, nor a newline split a line."""
    text = str(text)
    if not any(_escaped(c) for c in text):
        return text
    out = []
    for c in text:
        if c == "\t":
            out.append(" ")
        elif _escaped(c):
            out.append("\\x%02x" % ord(c) if ord(c) < 0x80 else "\\u{%x}" % ord(c))
        else:
            out.append(c)
    return "".join(out)


_BIDI = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _escaped(c):
    o = ord(c)
    return o < 0x20 or 0x7F <= o < 0xA0 or c in "\u2028\u2029" or c in _BIDI
