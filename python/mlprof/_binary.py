"""Where the ``mlprof`` executable is: beside this interpreter's scripts (where the wheel puts
it), else on ``PATH``. ``MLPROF_BIN`` names another one (a development build)."""

import os
import shutil
import sys
import sysconfig


def find():
    explicit = os.environ.get("MLPROF_BIN")
    if explicit:
        return explicit
    candidates = []
    for scheme_path in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        if scheme_path:
            candidates.append(os.path.join(scheme_path, "mlprof"))
    try:
        user = sysconfig.get_path("scripts", "posix_user")
        candidates.append(os.path.join(user, "mlprof"))
    except KeyError:
        pass
    for path in candidates:
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return shutil.which("mlprof")


def require():
    path = find()
    if path is None:
        sys.stderr.write(
            "mlprof: the mlprof executable was not found (install the mlprof wheel, or set "
            "MLPROF_BIN to a built one)\n"
        )
        raise SystemExit(2)
    return path
