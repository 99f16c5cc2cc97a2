"""argv: DIR: names that are terminal escape sequences and HTML.

Writes two source files into DIR, one named "\x1b]0;pwned\x07\x1b[2J.py" (retitles the terminal
and clears the screen if printed raw) whose busy line holds escapes too, one named
"<script>alert(1)<script>.py"; compiles each with its path as co_filename, renames the
function after more escapes (co_name, and co_qualname from 3.11), and runs each for about 0.8 s
of CPU time (on a machine busier than its cores a late CPU timer can carry up to half a second
of one file's loop into the next: each must still have its own samples). The escapes are on the
`while` line, short enough to be seen in an 80-column report: it calls `process_time`, a system
call, and holds about 95% of the loop's samples; the body's `n += 1` gets 1-3 of them, too few
to be sure to be in the report.
"""
import os
import sys

SOURCE = (
    "import time\n"
    "def spin(seconds):\n"
    "    end = time.process_time() + seconds\n"
    "    n = 0\n"
    "    now = time.process_time\n"
    "    while now() < end:  # \x1b[2J\x1b]0;pwned-too\x07 \x9b2J\n"
    "        n += 1  # \x1b[2J\n"
    "    return n\n"
)

for name in ("\x1b]0;pwned\x07\x1b[2J.py", "<script>alert(1)<script>.py"):
    path = os.path.join(sys.argv[1], name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(SOURCE)
    namespace = {}
    exec(compile(SOURCE, path, "exec"), namespace)
    spin = namespace["spin"]
    evil = "spin\x1b[2J\x1b]0;qualname\x07\n;next"
    names = {"co_name": evil}
    if sys.version_info >= (3, 11):
        names["co_qualname"] = evil
    spin.__code__ = spin.__code__.replace(**names)
    spin(0.8)
print("ran")
