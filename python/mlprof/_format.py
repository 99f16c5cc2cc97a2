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
