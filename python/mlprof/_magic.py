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
from ._format import seconds as _secs, size as _size
from ._regions import Region, active

try:
    from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
    from IPython.display import HTML, display
except ImportError:  # pragma: no cover - only imported by IPython
    raise ImportError("the mlprof magics need IPython (pip install ipykernel)")

_PR_SET_PTRACER = 0x59616D61
_NO_HOOKS = (
    "mlprof: this kernel does not run under mlprof, so only CPU time per line is measured "
    "(by attaching to it); for memory per line run `mlprof jupyter install` and choose the "
    'kernel "Python 3 (mlprof)".'
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
            answer, notice = self._attached(code)
        display(HTML(render(name, python, answer, notice)))

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

    def _attached(self, code):
        binary = _binary.find()
        if binary is None:
            self._run(code)
            return {}, _NO_HOOKS + " (and the mlprof executable was not found)"
        out = tempfile.NamedTemporaryFile(prefix="mlprof-cell-", suffix=".json", delete=False)
        out.close()
        child = subprocess.Popen(
            [binary, "attach", str(os.getpid()), "--json", "-o", out.name],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _allow_ptrace(child.pid)
        time.sleep(0.3)  # let it start sampling
        try:
            self._run(code)
        finally:
            child.send_signal(signal.SIGINT)
            _, err = child.communicate(timeout=60)
            _allow_ptrace(0)
        try:
            with open(out.name, encoding="utf-8") as f:
                profile = json.load(f)
        except (OSError, ValueError):
            lines = err.decode("utf-8", "replace").strip().splitlines()
            return {}, _NO_HOOKS + " Attaching failed too: " + (lines[-1] if lines else "?")
        finally:
            try:
                os.unlink(out.name)
            except OSError:
                pass
        cpu = [l for l in profile.get("lines", [])]
        answer = {
            "lines": cpu,
            "duration_s": profile.get("wall_s", 0.0),
            "cpu_python_s": sum(l["cpu_python_s"] for l in cpu),
            "cpu_native_s": sum(l["cpu_native_s"] for l in cpu),
            "cpu_system_s": sum(l["cpu_system_s"] for l in cpu),
        }
        return answer, _NO_HOOKS


def _allow_ptrace(pid):
    """Under Yama's ptrace_scope 1 only a parent may read a process: let our child do it."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def render(name, source, answer, notice):
    """The cell's report as HTML (every string escaped)."""
    e = html.escape
    cell_lines = source.splitlines()
    parts = ['<div class="mlprof-cell" style="font:13px sans-serif">']
    if notice:
        parts.append('<p style="color:#a15c00">%s</p>' % e(notice))
    summary = ["<b>mlprof · %s</b>" % e(name)]
    if "duration_s" in answer:
        summary.append(_secs(answer["duration_s"]))
    if answer.get("peak_bytes") is not None and not notice:
        summary.append("peak %s above the cell's start (exact)" % _size(answer["peak_bytes"]))
        summary.append("net %s" % _size(answer.get("end_bytes") or 0))
    if "cpu_python_s" in answer:
        summary.append(
            "CPU: Python %s, native %s, waiting %s"
            % (_secs(answer["cpu_python_s"]), _secs(answer["cpu_native_s"]), _secs(answer["cpu_system_s"]))
        )
    parts.append("<p>%s</p>" % " · ".join(summary))
    lines = answer.get("lines") or []
    own = [l for l in lines if l.get("file") == name]
    other = [l for l in lines if l.get("file") != name and not l.get("file", "").startswith("<")]
    cell = "padding:2px 10px;white-space:nowrap"
    head = "<tr>%s</tr>" % "".join(
        "<th style='%s;%s'>%s</th>" % (cell, "text-align:left" if h == "source" else "", h)
        for h in ("line", "time", "Python", "native", "waiting", "allocated", "held at peak", "source")
    )
    rows = []
    for l in own + other:
        t = l["cpu_python_s"] + l["cpu_native_s"] + l["cpu_system_s"]
        pct = lambda x: "%.0f%%" % (100 * x / t) if t > 0 else "-"
        if l.get("file") == name:
            where = str(l["line"])
            text = cell_lines[l["line"] - 1] if 0 < l["line"] <= len(cell_lines) else ""
        else:
            where = "%s:%d" % (os.path.basename(l["file"]), l["line"])
            text = l.get("source", "")
        memory = not notice
        rows.append(
            ("<tr>" + "<td style='%s'>%%s</td>" % cell * 7 + "<td style='%s;text-align:left;"
             "font-family:monospace;white-space:pre'>%%s</td></tr>" % cell)
            % (
                e(where),
                _secs(t),
                pct(l["cpu_python_s"]),
                pct(l["cpu_native_s"]),
                pct(l["cpu_system_s"]),
                _size(l["alloc_bytes"]) if memory else "–",
                _size(l["peak_bytes"]) if memory else "–",
                e(text.strip()),
            )
        )
    if rows:
        parts.append('<table style="border-collapse:collapse;text-align:right">%s%s</table>' % (head, "".join(rows)))
    page = answer.get("page_html")
    if page:
        parts.append(
            '<details><summary>full report (flame graphs, timeline)</summary>'
            '<iframe style="width:100%%;height:720px;border:1px solid #ddd" srcdoc="%s"></iframe>'
            "</details>" % e(page, quote=True)
        )
    parts.append("</div>")
    return "".join(parts)


def load(ipython):
    ipython.register_magics(MlprofMagics)
