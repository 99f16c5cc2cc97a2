"""pytest plugin: every test measured by mlprof, memory limits as markers.

    pytest --mlprof                      # each test's exact peak, CPU, and the session profile
    pytest --mlprof --mlprof-budget 200MiB
    pytest --mlprof --mlprof-html pages/ # one HTML report per test

    @pytest.mark.limit_memory("50 MiB")  # fails if the test's heap rose more than that
    @pytest.mark.limit_leaks("1 MiB")    # fails if the test left that much more allocated

The markers have pytest-memray's names and meaning. ``--mlprof`` re-runs pytest under
``mlprof run`` when it was not started that way: before any conftest is imported, this pytest
becomes mlprof by exec of the very command line that started it (interpreter flags, ``-m
pytest`` or the script, a runner such as ``coverage run``), so the tests run as without mlprof
and signals sent to it reach them as they would; each test's call is a region
(``mlprof_region_begin``/``end`` of the preload library), whose exact heap high comes back at
once. A test over its limit waits (at most ``--mlprof-wait`` seconds) for the collector's
summary of the region, which names the lines that held the memory.
"""

import gc
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from . import _binary
from ._format import clean, size as format_size
from ._regions import Region, active

_INNER = "MLPROF_PYTEST_INNER"
_UNITS = {
    "": 1,
    "b": 1,
    "k": 1024,
    "kb": 1024,
    "kib": 1024,
    "m": 1024**2,
    "mb": 1024**2,
    "mib": 1024**2,
    "g": 1024**3,
    "gb": 1024**3,
    "gib": 1024**3,
    "t": 1024**4,
    "tb": 1024**4,
    "tib": 1024**4,
}


def parse_size(text):
    """Bytes in ``"50 MiB"``, ``"1.5GB"``, ``"100KB"``, ``4096`` (as pytest-memray: KB, MB and
    GB are powers of 1024)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ValueError("a size cannot be negative: %r" % (text,))
        return int(text)
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            "not a size: %r (write a number and a unit: B, KB, MB, GB, KiB, MiB, GiB)" % (text,)
        )
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def pytest_addoption(parser):
    group = parser.getgroup("mlprof", "memory and CPU of each test (mlprof)")
    group.addoption(
        "--mlprof",
        action="store_true",
        default=False,
        help="measure every test with mlprof (re-runs pytest under `mlprof run` if needed)",
    )
    group.addoption(
        "--mlprof-budget",
        metavar="SIZE",
        default=None,
        help="limit_memory for every test without its own marker (e.g. 200MiB)",
    )
    group.addoption(
        "--mlprof-html",
        metavar="DIR",
        default=None,
        help="write one HTML report per test into DIR",
    )
    group.addoption(
        "--mlprof-output",
        metavar="FILE",
        default=None,
        help="write the whole session's profile to FILE (JSON; .html for a page)",
    )
    group.addoption(
        "--mlprof-wait",
        metavar="SECONDS",
        type=float,
        default=10.0,
        help="how long a test over its limit waits for the lines that held the memory",
    )
    group.addoption(
        "--mlprof-top",
        metavar="N",
        type=int,
        default=5,
        help="tests listed in the summary by peak memory and by CPU (0: none)",
    )


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "limit_memory(size): fail the test if its heap rises more than SIZE above its start "
        "(under --mlprof)",
    )
    config.addinivalue_line(
        "markers",
        "limit_leaks(size): fail the test if it leaves more than SIZE allocated at its end "
        "(under --mlprof)",
    )
    if config.getoption("mlprof_budget"):
        try:
            parse_size(config.getoption("mlprof_budget"))
        except ValueError as e:
            raise pytest.UsageError("--mlprof-budget: %s" % e)
    if config.getoption("mlprof") and active():
        config.pluginmanager.register(_Measure(config), "mlprof-measure")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """``--mlprof`` in a pytest that is the whole process, outside mlprof: become ``mlprof run``
    of the very command that started this one (the same interpreter, flags, script or module,
    arguments), before any conftest file is imported, so that the tests run as they would
    without mlprof and every conftest is imported once, by the inner pytest."""
    namespace = early_config.known_args_namespace
    if not getattr(namespace, "mlprof", False) or active() or os.environ.get(_INNER):
        return
    if not _whole_process(early_config):
        return  # pytest.main() in a program: pytest_cmdline_main runs mlprof as a child
    command = _mlprof_command(
        getattr(namespace, "mlprof_output", None),
        getattr(namespace, "mlprof_html", None),
        _original_command(),
    )
    _release_standard_streams(early_config)
    _exec(command, _inner_env())


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``--mlprof`` in ``pytest.main()`` called by a program, outside mlprof: run the same tests
    under ``mlprof run`` as a child (``python FLAGS -m pytest ARGS``) and end with its status.
    (A pytest that is the whole process became mlprof before its conftest files were read.)"""
    if not config.getoption("mlprof") or active():
        return None
    if os.environ.get(_INNER):
        # Started by us, yet the preload library is not there (a static Python, LD_PRELOAD
        # cleared by a wrapper): test without measuring rather than looping.
        sys.stderr.write(
            "mlprof: the profiler's library is not loaded in this pytest (LD_PRELOAD was "
            "cleared?); tests run unmeasured\n"
        )
        return None
    python = [sys.executable] + _interpreter_flags() + ["-m", "pytest"] + _pytest_args(config)
    command = _mlprof_command(
        config.getoption("mlprof_output"), config.getoption("mlprof_html"), python
    )
    _release_standard_streams(config)
    if _whole_process(config):
        _exec(command, _inner_env())
    return _call(command, _inner_env())


def _mlprof_command(output, pages, python):
    command = [_binary.require(), "run"]
    command += ["-o", output] if output else ["--quiet"]
    if pages:
        command += ["--regions-html", pages]
    return command + ["--"] + python


def _inner_env():
    env = dict(os.environ)
    env[_INNER] = "1"
    return env


def _original_command():
    """The command line that started this interpreter, to run again as it was: its flags
    (``-O``, ``-W``, ``-X``, ``-I``, ``-P`` ...), then ``-m pytest``, the ``pytest`` script or
    another runner (``coverage run -m pytest``), then the arguments: ``sys.orig_argv`` (3.10+),
    else what the kernel kept of the process's arguments (``/proc/self/cmdline``), else the
    flags rebuilt from ``sys.flags``, ``sys.warnoptions`` and ``sys._xoptions`` before
    ``-m pytest`` or ``sys.argv[0]``."""
    orig = getattr(sys, "orig_argv", None)
    if not orig:
        try:
            with open("/proc/self/cmdline", "rb") as f:
                orig = [os.fsdecode(a) for a in f.read().split(b"\0")[:-1]]
        except OSError:
            orig = None
    if orig:
        return [sys.executable] + list(orig[1:])
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in ("pytest", "pytest.__main__"):
        how = ["-m", "pytest"]
    else:
        how = [sys.argv[0]]
    return [sys.executable] + _interpreter_flags() + how + sys.argv[1:]


def _interpreter_flags():
    """This interpreter's flags as command-line options (what ``multiprocessing`` gives its
    children)."""
    flags = getattr(subprocess, "_args_from_interpreter_flags", None)
    try:
        return list(flags()) if flags else []
    except Exception:
        return []


def _whole_process(config):
    """Whether this pytest is the whole process (``pytest ...``, ``python -m pytest ...``), not
    ``pytest.main()`` called by a program that goes on after it."""
    if list(config.invocation_params.args) != sys.argv[1:]:
        return False
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and spec.name in ("pytest", "pytest.__main__"):
        return True
    name = os.path.basename(getattr(main, "__file__", None) or "")
    return spec is None and name in ("pytest", "py.test")


def _release_standard_streams(config):
    """Give the standard descriptors back as they were before pytest's capturing, which holds
    stdin on /dev/null even while suspended: the inner pytest (and pdb in it) reads the
    terminal, or whatever stdin was. What conftest files printed while captured is dropped:
    the inner pytest loads them again and shows their output as pytest does (not at all,
    once collection succeeds)."""
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is None:
        return
    try:
        capman.read_global_capture()
    except Exception:
        pass
    capman.stop_global_capturing()


def _exec(command, env):
    """Become mlprof: the pid the shell or job runner knows is then the collector's, which
    passes a signal sent to it on to the inner pytest (once: a Ctrl-C to the whole process
    group reaches that pytest directly and is not sent again), writes the profile, and exits
    with the inner pytest's status. No outer process is left to die on a Ctrl-C at a pdb
    prompt, or to be killed while mlprof and the tests run on."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    # Python ignores SIGPIPE (and SIGXFSZ); an ignored signal stays ignored across exec.
    # Give mlprof and the tests the defaults, as subprocess does for a child.
    previous = {}
    for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):
        if hasattr(signal, name):
            sig = getattr(signal, name)
            previous[sig] = signal.signal(sig, signal.SIG_DFL)
    try:
        os.execve(command[0], command, env)
    except OSError as e:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)
        _cannot_run(command[0], e)


def _cannot_run(binary, error):
    # pytest prints it as one line and ends with its usage status (pytest.main() returns it).
    raise pytest.UsageError("mlprof: cannot run %s: %s" % (binary, error.strerror or error))


# Signals an outer pytest passes on to mlprof while it waits (pytest.main() in a program).
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")


def _call(command, env):
    """Run mlprof as a child (pytest.main() in a program that goes on after it) and return its
    status. A signal that reaches this process meanwhile is passed on to mlprof, which passes
    it on to the inner pytest unless that already had it (a Ctrl-C reaches the whole process
    group): neither mlprof nor the tests are left running. Once mlprof has written its report
    and ended, the program gets the signal itself, as it would have without mlprof; except a
    SIGINT it would have taken as KeyboardInterrupt, which pytest turns into its status 2 (the
    inner pytest's, returned here)."""
    previous = {}
    received = []
    children = []

    def forward(signum, frame):
        if signum not in received:
            received.append(signum)
        for proc in children:
            try:
                proc.send_signal(signum)
            except OSError:
                pass

    if threading.current_thread() is threading.main_thread():
        for name in _FORWARDED:
            sig = getattr(signal, name, None)
            if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
                previous[sig] = signal.signal(sig, forward)
    try:
        try:
            proc = subprocess.Popen(command, env=env)
        except OSError as e:
            _cannot_run(command[0], e)
        children.append(proc)
        for sig in received:
            # Arrived while mlprof was being started.
            proc.send_signal(sig)
        return proc.wait()
    finally:
        for sig, handler in previous.items():
            # None: a handler not set from Python, which cannot be put back from here.
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in received:
            if sig == signal.SIGINT and previous.get(sig) is signal.default_int_handler:
                continue
            if sig in previous:
                os.kill(os.getpid(), sig)


def _pytest_args(config):
    args = list(config.invocation_params.args)
    return [str(a) for a in args]


class _Measure:
    """The measuring side, registered in a pytest that runs under mlprof (the session, or each
    xdist worker)."""

    def __init__(self, config):
        self.config = config
        budget = config.getoption("mlprof_budget")
        self.budget = parse_size(budget) if budget else None
        self.wait = config.getoption("mlprof_wait")
        if config.getoption("mlprof_html") and not os.environ.get(_INNER):
            sys.stderr.write(
                "mlprof: --mlprof-html needs pytest to start mlprof itself; under `mlprof run` "
                "use its --regions-html DIR\n"
            )

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        memory_limit, leak_limit = _limits(item, self.budget)
        cpu_start = time.process_time()
        region = Region(item.nodeid).begin()
        try:
            yield
        finally:
            if leak_limit is not None:
                gc.collect()
            ask = memory_limit is not None or leak_limit is not None
            region.end(report=ask)
            cpu_s = time.process_time() - cpu_start
            summary = None
            if region.peak is not None:
                over_memory = memory_limit is not None and region.peak > memory_limit
                over_leaks = leak_limit is not None and region.net > leak_limit
                if ask:
                    # Always collected when asked (the answer file must not pile up); waited
                    # for fully only when a limit was crossed or children may count.
                    summary = region.report(
                        timeout=self.wait if (over_memory or over_leaks) else min(self.wait, 2.0)
                    )
                item._mlprof = {
                    "peak": region.peak,
                    "net": region.net,
                    "children": (summary or {}).get("children_peak_bytes", 0),
                    "cpu_s": cpu_s,
                    "memory_limit": memory_limit,
                    "leak_limit": leak_limit,
                    "summary": summary,
                }
                children = item._mlprof["children"]
                item.user_properties.append(("mlprof_peak_bytes", region.peak + children))
                item.user_properties.append(("mlprof_net_bytes", region.net))
                item.user_properties.append(("mlprof_cpu_s", round(cpu_s, 6)))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        data = getattr(item, "_mlprof", None)
        if call.when != "call" or data is None or report.outcome != "passed":
            return
        problems = _violations(data)
        if problems:
            report.outcome = "failed"
            report.longrepr = "\n\n".join(problems)


def _limits(item, budget):
    memory = item.get_closest_marker("limit_memory")
    leaks = item.get_closest_marker("limit_leaks")
    memory_limit = _marker_size(memory) if memory else budget
    leak_limit = _marker_size(leaks) if leaks else None
    return memory_limit, leak_limit


def _marker_size(marker):
    value = marker.args[0] if marker.args else marker.kwargs.get("size", marker.kwargs.get("limit"))
    try:
        return parse_size(value)
    except (TypeError, ValueError) as e:
        raise pytest.UsageError("@pytest.mark.%s: %s" % (marker.name, e))


def _violations(data):
    problems = []
    summary = data.get("summary") or {}
    total = data["peak"] + data.get("children", 0)
    limit = data["memory_limit"]
    if limit is not None and total > limit:
        children = data.get("children", 0)
        text = "Test was limited to %s but allocated %s at its peak above its start (exact)" % (
            format_size(limit),
            format_size(total),
        )
        if children:
            text += ": %s in its own process, %s in processes it started" % (
                format_size(data["peak"]),
                format_size(children),
            )
        problems.append(text + _lines("lines holding memory at the peak", summary.get("held_at_peak")))
    limit = data["leak_limit"]
    if limit is not None and data["net"] > limit:
        text = "Test was limited to %s of leaked memory but left %s more allocated at its end (exact)" % (
            format_size(limit),
            format_size(data["net"]),
        )
        problems.append(text + _lines("lines still holding memory at the end", summary.get("held_at_end")))
    return problems


def _lines(title, lines):
    if not lines:
        return "\n(no line named: the collector's summary did not come in time, or sampled no allocation)"
    # File and function names come from the program: written so that none breaks a line or
    # reaches the terminal (or a JUnit report) as a control character.
    rows = [
        "%s:%d  %s  %s" % (clean(_short(l["file"])), l["line"], format_size(l["bytes"]), clean(l["function"]))
        for l in lines
    ]
    return "\n%s (sampled):\n  %s" % (title, "\n  ".join(rows))


def _short(path):
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


# Summary in the terminal of the process that reports (the session, or xdist's controller).


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    props = dict(report.user_properties)
    if "mlprof_peak_bytes" in props:
        _seen.append((report.nodeid, props["mlprof_peak_bytes"], props.get("mlprof_cpu_s", 0.0)))


_seen = []


def pytest_terminal_summary(terminalreporter, config):
    top = config.getoption("mlprof_top")
    if not config.getoption("mlprof") or not _seen or top <= 0:
        return
    tr = terminalreporter
    tr.section("mlprof")
    tr.write_line("top tests by peak heap above their start (exact):")
    for nodeid, peak, _ in sorted(_seen, key=lambda s: -s[1])[:top]:
        tr.write_line("  %10s  %s" % (format_size(peak), clean(nodeid)))
    tr.write_line("top tests by CPU time (process, all threads):")
    for nodeid, _, cpu in sorted(_seen, key=lambda s: -s[2])[:top]:
        tr.write_line("  %9.3f s  %s" % (cpu, clean(nodeid)))
