"""IPython magics: ``%load_ext mlprof``, then ``%%mlprof`` on a cell or ``%mlprof STATEMENT``.

In the kernel ``mlprof jupyter install`` registers ("Python 3 (mlprof)"), the kernel runs under
``mlprof run``: the cell is a region (exact heap high), and the collector answers with the
cell's lines and its own report page, shown in the output. In any other kernel, the cell runs
under ``mlprof attach`` on the kernel itself: CPU per line only, and one line says so.
"""

import ctypes
import html
import linecache
import os
import signal
import subprocess
import tempfile
import time
import json

from . import _binary
from ._format import clean as _clean, seconds as _secs, size as _size
from ._regions import Region, active

try:
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
    from IPython.display import display
except ImportError:  # pragma: no cover - only imported by IPython
    raise ImportError("the mlprof magics need IPython (pip install ipykernel)")

_PR_SET_PTRACER = 0x59616D61
_NO_HOOKS = (
    "mlprof: this kernel does not run under mlprof: CPU per line comes from attaching to it, "
    "memory from Python's tracemalloc (Python objects and numpy arrays still held at the "
    "cell's end; native allocations are not seen, and the cell runs slower); for every "
    'allocation, run `mlprof jupyter install` and choose the kernel "Python 3 (mlprof)".'
)


@magics_class
class MlprofMagics(Magics):
    @line_magic("mlprof")
    def mlprof_line(self, line):
        """Profile one statement: ``%mlprof total = train(x)``."""
        self._profile(line)

    @cell_magic("mlprof")
    def mlprof_cell(self, line, cell):
        """Profile this cell: CPU split and memory per line, its peak, its report page."""
        self._profile(cell)

    def _profile(self, source):
        shell = self.shell
        # The cell's own number: its input is already in the history (the shell's count may
        # already be the next cell's).
        number = len(shell.history_manager.input_hist_raw) - 1
        name = "In [%d]" % number
        python = shell.transform_cell(source)
        linecache.cache[name] = (len(python), None, python.splitlines(True), name)
        code = compile(python, name, "exec")
        if active():
            answer = self._under_mlprof(code, name)
            notice = None
        else:
            answer, notice = self._attached(code, name)
        # Both forms: the page for notebooks, the text for consoles, nbconvert to markdown and
        # CI logs (which show text/plain).
        display(
            {
                "text/html": render(name, python, answer, notice),
                "text/plain": render_text(name, python, answer, notice),
            },
            raw=True,
        )

    def _run(self, code):
        try:
            exec(code, self.shell.user_ns)
        except Exception:
            self.shell.showtraceback()

    def _under_mlprof(self, code, name):
        region = Region(name).begin()
        try:
            self._run(code)
        finally:
            region.end(report=2)
        answer = region.report(timeout=60) or {}
        answer.setdefault("peak_bytes", region.peak)
        answer.setdefault("end_bytes", region.net)
        page = answer.get("page")
        if page:
            try:
                with open(page, encoding="utf-8") as f:
                    answer["page_html"] = f.read()
                os.unlink(page)
            except OSError:
                pass
        return answer

    def _attached(self, code, name):
        """A plain kernel: CPU by attaching to it, Python-level memory by tracemalloc."""
        binary = _binary.find()
        child = out = None
        if binary is not None:
            out = tempfile.NamedTemporaryFile(prefix="mlprof-cell-", suffix=".json", delete=False)
            out.close()
            child = subprocess.Popen(
                [binary, "attach", str(os.getpid()), "--json", "-o", out.name],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            _allow_ptrace(child.pid)
            time.sleep(0.3)  # let it start sampling
        traced = _Traced()
        try:
            self._run(code)
        finally:
            memory = traced.stop(name)
            err = b""
            if child is not None:
                child.send_signal(signal.SIGINT)
                _, err = child.communicate(timeout=60)
                _allow_ptrace(0)
        answer = {"peak_bytes": memory["peak"], "end_bytes": memory["net"]}
        notice = _NO_HOOKS
        profile = None
        if out is not None:
            try:
                with open(out.name, encoding="utf-8") as f:
                    profile = json.load(f)
            except (OSError, ValueError):
                lines = err.decode("utf-8", "replace").strip().splitlines()
                notice += " Attaching for CPU failed: " + (lines[-1] if lines else "?")
            finally:
                try:
                    os.unlink(out.name)
                except OSError:
                    pass
        else:
            notice += " (The mlprof executable was not found, so CPU was not measured.)"
        lines = list((profile or {}).get("lines", []))
        for line in lines:
            line["alloc_bytes"] = None
            line["peak_bytes"] = memory["held"].pop(line["line"], 0) if line["file"] == name else None
        for number, held in memory["held"].items():
            lines.append({"file": name, "line": number, "cpu_python_s": 0.0, "cpu_native_s": 0.0,
                          "waiting_s": 0.0, "alloc_bytes": None, "peak_bytes": held})
        answer["lines"] = lines
        if profile is not None:
            answer["duration_s"] = profile.get("wall_s", 0.0)
            for kind in ("cpu_python_s", "cpu_native_s", "waiting_s"):
                answer[kind] = sum(l[kind] for l in lines)
        return answer, notice


class _Traced:
    """Python's tracemalloc over a cell: what it sees of the heap (Python objects, and arrays of
    libraries that report to it, as numpy does), its high above the start, and what each of the
    cell's lines still holds at its end."""

    def __init__(self):
        import tracemalloc

        self.tm = tracemalloc
        self.started = not tracemalloc.is_tracing()
        if self.started:
            # The 8 newest frames: enough to reach the cell from inside a library's Python code
            # (numpy.ones allocates in numpy/_core/numeric.py).
            tracemalloc.start(8)
        if hasattr(tracemalloc, "reset_peak"):
            tracemalloc.reset_peak()
        self.base = tracemalloc.get_traced_memory()[0]

    def stop(self, name):
        current, peak = self.tm.get_traced_memory()
        held = {}
        # Matched by equality (a tracemalloc.Filter pattern would read "[2]" as a set).
        for trace in self.tm.take_snapshot().traces:
            # Frames run from the oldest to the most recent: the cell's innermost line wins.
            line = next((f.lineno for f in reversed(trace.traceback) if f.filename == name), None)
            if line is not None:
                held[line] = held.get(line, 0) + trace.size
        if self.started:
            self.tm.stop()
        return {"peak": max(0, peak - self.base), "net": current - self.base, "held": held}


def _allow_ptrace(pid):
    """Under Yama's ptrace_scope 1 only a parent may read a process: let our child do it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _summary(answer, notice):
    """The cell's figures after its name: duration, peak, net, CPU split."""
    summary = []
    if "duration_s" in answer:
        summary.append(_secs(answer["duration_s"]))
    if answer.get("peak_bytes") is not None:
        how = "tracemalloc" if notice else "exact"
        summary.append("peak %s above the cell's start (%s)" % (_size(answer["peak_bytes"]), how))
        summary.append("net %s" % _size(answer.get("end_bytes") or 0))
    if "cpu_python_s" in answer:
        summary.append(
            "CPU: Python %s, native %s, waiting %s"
            % (_secs(answer["cpu_python_s"]), _secs(answer["cpu_native_s"]), _secs(answer["waiting_s"]))
        )
    return summary


def _table(name, source, answer, notice):
    """The cell's lines (then other files' lines it ran): a header and rows of plain strings."""
    cell_lines = source.splitlines()
    lines = answer.get("lines") or []
    own = sorted((l for l in lines if l.get("file") == name), key=lambda l: l["line"])
    other = [l for l in lines if l.get("file") != name and not l.get("file", "").startswith("<")]
    head = ("line", "time", "Python", "native", "waiting", "allocated",
            "held at end" if notice else "held at peak", "source")
    rows = []
    for l in own + other:
        t = l["cpu_python_s"] + l["cpu_native_s"] + l["waiting_s"]
        pct = lambda x: "%.0f%%" % (100 * x / t) if t > 0 else "-"
        if l.get("file") == name:
            where = str(l["line"])
            text = cell_lines[l["line"] - 1] if 0 < l["line"] <= len(cell_lines) else ""
        else:
            where = "%s:%d" % (os.path.basename(l["file"]), l["line"])
            text = l.get("source", "")
        rows.append((
            where,
            _secs(t),
            pct(l["cpu_python_s"]),
            pct(l["cpu_native_s"]),
            pct(l["waiting_s"]),
            "–" if l.get("alloc_bytes") is None else _size(l["alloc_bytes"]),
            "–" if l.get("peak_bytes") is None else _size(l["peak_bytes"]),
            text.strip(),
        ))
    return head, rows


def render_text(name, source, answer, notice):
    """The cell's report as plain text, as the terminal report writes it (every string from the
    program cleaned of control characters): for consoles, nbconvert and CI logs."""
    out = []
    if notice:
        out.append(_clean(notice))
    out.append(" · ".join(["mlprof · %s" % _clean(name)] + _summary(answer, notice)))
    head, rows = _table(name, source, answer, notice)
    if rows:
        cells = [head] + [tuple(_clean(c) for c in r) for r in rows]
        widths = [max(len(r[i]) for r in cells) for i in range(len(head) - 1)]
        for r in cells:
            figures = "  ".join(c.rjust(w) for c, w in zip(r[:-1], widths))
            out.append(("%s  %s" % (figures, r[-1])).rstrip())
    return "\n".join(out)


def render(name, source, answer, notice):
    """The cell's report as HTML (every string escaped)."""
    e = html.escape
    parts = ['<div class="mlprof-cell" style="font:13px sans-serif">']
    if notice:
        parts.append('<p style="color:#a15c00">%s</p>' % e(notice))
    summary = ["<b>mlprof · %s</b>" % e(name)] + _summary(answer, notice)
    parts.append("<p>%s</p>" % " · ".join(summary))
    head, table = _table(name, source, answer, notice)
    cell = "padding:2px 10px;white-space:nowrap"
    head = "<tr>%s</tr>" % "".join(
        "<th style='%s;%s'>%s</th>" % (cell, "text-align:left" if h == "source" else "", h)
        for h in head
    )
    rows = [
        ("<tr>" + "<td style='%s'>%%s</td>" % cell * 7 + "<td style='%s;text-align:left;"
         "font-family:monospace;white-space:pre'>%%s</td></tr>" % cell)
        % tuple(e(c) for c in r)
        for r in table
    ]
    if rows:
        parts.append('<table style="border-collapse:collapse;text-align:right">%s%s</table>' % (head, "".join(rows)))
    page = answer.get("page_html")
    if page:
        parts.append(
            '<details><summary>full report (flame graphs, timeline)</summary>'
            # Sandboxed: the page's scripts run (flame graphs, timeline) in an origin of their
            # own, with no access to the notebook, its kernel or its cookies.
            '<iframe sandbox="allow-scripts" style="width:100%%;height:720px;border:1px solid #ddd"'
            ' srcdoc="%s"></iframe>'
            "</details>" % e(page, quote=True)
        )
    parts.append("</div>")
    return "".join(parts)


def load(ipython):
    ipython.register_magics(MlprofMagics)
