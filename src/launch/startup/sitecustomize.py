"""mlprof's Python start-up hook (docs/design/gpu-tensors.md).

`mlprof run` writes this file into the run's private directory and puts that directory first
on PYTHONPATH, so Python's `site` imports it at start-up in every Python process of the run.
It:
1. takes its directory off `sys.path`, so the program imports what it would without mlprof;
2. waits for `import torch` (a finder that answers nothing and looks only at the name `torch`,
   once) and then asks PyTorch to switch its CUDA allocator's trace on when PyTorch itself
   initialises CUDA (`torch.cuda._lazy_call`): a process that never uses CUDA never
   initialises it because of mlprof, and what the program allocates is unchanged;
3. at exit, reads the trace (`torch.cuda.memory._snapshot()`) and writes it, reduced, to
   `gpu-tensors-PID.json` (0600) in the run's directory, for the collector to replay (2 and 3
   are `mlprof_gpu_trace.py` beside this file, loaded only when `torch` is imported);
4. runs the program's own `sitecustomize`, if there is one further along the path.
Standard library only, and as little as can be at start-up, which every Python process of the
run pays. Nothing here raises into the program.
"""

import os as _os
import sys as _sys


class _TorchFinder:
    """Finds nothing. Asked for `torch` before it has run (its import, or a library's
    `importlib.util.find_spec("torch")` beforehand), it asks the finders after it and wraps the
    loader they give, so that the trace is set up once `torch` has run; then it steps aside."""

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.done = False

    def find_spec(self, name, path=None, target=None):
        if name != "torch" or self.done or "torch" in _sys.modules:
            return None
        spec, after = None, False
        for finder in list(_sys.meta_path):
            if finder is self:
                after = True
                continue
            if not after:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                return None  # a legacy finder: the search is Python's, untraced
            spec = find(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None or isinstance(loader, type):
            return spec
        finder, run_dir = self, self.run_dir

        def exec_then_trace(module):
            if getattr(module, "__name__", None) != "torch":
                return exec_module(module)  # a loader shared with other modules
            try:
                del loader.exec_module
            except AttributeError:
                pass
            exec_module(module)
            finder.done = True
            try:
                _sys.meta_path.remove(finder)
            except ValueError:
                pass
            _trace(module, run_dir)

        try:
            loader.exec_module = exec_then_trace
        except Exception:
            pass
        return spec


def _trace(torch, run_dir):
    """Load the tracing half from beside this file (not from the program's path) and start."""
    path = _os.path.join(_os.path.dirname(_os.path.abspath(__file__)), "mlprof_gpu_trace.py")
    try:
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        namespace = {"__name__": "mlprof_gpu_trace", "__file__": path}
        exec(code, namespace)
        namespace["start"](torch, run_dir)
    except Exception:
        pass


def _install():
    here = _os.path.dirname(_os.path.abspath(__file__))
    _sys.path[:] = [p for p in _sys.path if not (p and _os.path.abspath(p) == here)]
    run_dir = _os.environ.get("MLPROF_DIR")
    if run_dir and _os.environ.get("MLPROF_GPU_TENSORS", "1") != "0":
        _sys.meta_path.insert(0, _TorchFinder(run_dir))


def _chain():
    """Run the program's own sitecustomize as `site` would have, in our place."""
    ours = _sys.modules.pop("sitecustomize", None)
    try:
        __import__("sitecustomize")
    except ImportError as e:
        if getattr(e, "name", None) != "sitecustomize":
            raise
        if ours is not None:
            _sys.modules["sitecustomize"] = ours  # `site`'s import finishes with this one


try:
    _install()
except Exception:
    pass
_chain()
