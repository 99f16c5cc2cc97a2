"""Prints, as JSON, what a Python program can see of its own start-up: `sys.path`, the modules
imported, the finders and path hooks, `sitecustomize`, the flags, and its environment (but for
`LD_PRELOAD` and `MLPROF_*`, which name the profiler itself). Run with and without mlprof, under
each interpreter flag, the two must print the same."""
import json
import os
import sys


def kind(obj):
    t = obj if isinstance(obj, type) else type(obj)
    return "%s.%s" % (t.__module__, t.__qualname__)


site_customize = sys.modules.get("sitecustomize")
print(json.dumps({
    "path": sys.path,
    "modules": sorted(sys.modules),
    "meta_path": [kind(f) for f in sys.meta_path],
    "path_hooks": [getattr(h, "__qualname__", kind(h)) for h in sys.path_hooks],
    "sitecustomize": getattr(site_customize, "__file__", repr(site_customize)),
    "flags": [getattr(sys.flags, name) for name in dir(sys.flags) if not name.startswith("_")
              and not callable(getattr(sys.flags, name))],
    "environ": sorted((k, v) for k, v in os.environ.items()
                      if k != "LD_PRELOAD" and not k.startswith("MLPROF_")),
}, indent=1))
