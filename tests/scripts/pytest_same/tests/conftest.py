"""The tests' conftest (an initial one: `pytest tests` names its directory): notes each import
of it (the pid, in the file SAME_IMPORTS names) and moves the tests into `../sub/`, as a
conftest may. `pytest --mlprof` must import it once, and run
the tests from there as without mlprof."""
import os

with open(os.environ["SAME_IMPORTS"], "a") as f:
    f.write("%d\n" % os.getpid())
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "sub"))
