"""mlprof: a sampling CPU, memory and GPU profiler for Python machine-learning processes.

The profiler itself is the ``mlprof`` command (``mlprof run -- python train.py``); this package
carries it, the pytest plugin (``pytest --mlprof``) and a small API for code that runs under it:

    import mlprof

    with mlprof.mark("load data"):      # a named region in the profile
        data = load()

    @mlprof.mark("epoch")               # or around every call of a function
    def epoch(): ...

Outside mlprof every call here is a cheap no-op, so the marks can stay in the code.

In Jupyter: ``mlprof jupyter install`` registers a kernel that runs under mlprof; there,
``%load_ext mlprof`` and ``%%mlprof`` on a cell show that cell's report in its output.
"""

from ._regions import Region, active, mark

try:
    from importlib.metadata import PackageNotFoundError, version as _version

    try:
        __version__ = _version("mlprof")
    except PackageNotFoundError:  # run from a source tree
        __version__ = "0.1.0"
except ImportError:  # pragma: no cover - Python < 3.8 is not supported anyway
    __version__ = "0.1.0"

__all__ = ["Region", "active", "mark", "__version__"]


def load_ipython_extension(ipython):
    """``%load_ext mlprof``: the ``%%mlprof`` cell magic and ``%mlprof`` line magic."""
    from ._magic import load

    load(ipython)
