"""Checks an installed mlprof wheel as a user meets it (run by scripts/wheel.sh with the Python
of a fresh venv, in a scratch directory). Fails with a message on the first check that does not
hold. `--full` adds the pytest plugin checks (markers, leaks, xdist, a forking test)."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

MIB = 1024 * 1024
ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MLPROF_BIN")}


def run(args, **kw):
    return subprocess.run(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kw)


def check(cond, what, detail=""):
    if not cond:
        sys.exit("wheel check failed: %s\n%s" % (what, detail))
    print("ok: %s" % what)


def versions():
    exe = os.path.join(os.path.dirname(sys.executable), "mlprof")
    check(os.access(exe, os.X_OK), "mlprof is installed beside the interpreter", exe)
    direct = run([exe, "--version"])
    module = run([sys.executable, "-m", "mlprof", "--version"])
    import mlprof

    check(direct.returncode == 0 and direct.stdout.strip() == "mlprof %s" % mlprof.__version__,
          "mlprof --version prints the package version", direct.stdout + direct.stderr)
    check(module.stdout == direct.stdout, "python -m mlprof is the same CLI", module.stdout + module.stderr)


def array_profile():
    code = "import numpy as np\na = np.ones(20_000_000)\nprint(float(a.sum()))\n"
    r = run([sys.executable, "-m", "mlprof", "run", "--json", "-o", "big.json", "--", sys.executable, "-c", code])
    check(r.returncode == 0 and r.stdout.strip() == "20000000.0", "python -m mlprof run runs the program", r.stdout + r.stderr)
    with open("big.json") as f:
        profile = json.load(f)
    line = [l for l in profile["lines"] if l["file"] == "<string>" and l["line"] == 2]
    held = line[0]["peak_bytes"] if line else 0
    check(abs(held - 160e6) < 0.1 * 160e6, "the profile shows the 160 MB array at its line (%d bytes)" % held,
          json.dumps(profile["lines"])[:2000])


# The test module (its lines are known by construction: the expected failures name them).
TESTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "scripts", "pytest_limits.py")

EXPECTED = {
    "test_big": ("failed", "test_wheel.py:11"),
    "test_small": ("passed", None),
    "test_unmarked": ("passed", None),
    "test_leaks": ("failed", "test_wheel.py:25"),
    "test_no_leak": ("passed", None),
    "test_fork_big": ("failed", "test_wheel.py:33"),
}


def plugin(extra):
    with open(TESTS) as f:
        source = f.read()
    with open("test_wheel.py", "w") as f:
        f.write(source)
    r = run([sys.executable, "-m", "pytest", "--mlprof", "test_wheel.py", "-p", "no:cacheprovider",
             "--junitxml", "junit.xml"] + extra)
    what = "pytest --mlprof %s" % " ".join(extra)
    check(r.returncode == 1, what + " exits 1 (tests over their limits fail)", r.stdout[-4000:] + r.stderr[-2000:])
    cases = {c.get("name"): c for c in ET.parse("junit.xml").getroot().iter("testcase")}
    for name, (outcome, line) in EXPECTED.items():
        case = cases.get(name)
        check(case is not None, "%s: %s ran" % (what, name))
        failure = case.find("failure")
        got = "failed" if failure is not None else "passed"
        check(got == outcome, "%s: %s %s" % (what, name, outcome), r.stdout[-4000:])
        if line:
            text = (failure.get("message") or "") + (failure.text or "")
            check(line in text, "%s: %s names its line %s" % (what, name, line), text)
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        check("mlprof_peak_bytes" in props, "%s: %s has its peak in the JUnit properties" % (what, name))
    check("top tests by peak heap" in r.stdout, what + " prints the summary", r.stdout[-3000:])


def main():
    versions()
    array_profile()
    if "--full" in sys.argv:
        plugin([])
        plugin(["-n", "2"])


if __name__ == "__main__":
    main()
