#!/usr/bin/env python3
"""Regenerate the README's quick-start sample and its hints sample from a real run.

    scripts/readme_sample.py                  run scripts/quickstart.sh (installs mlprof) and use its report
    scripts/readme_sample.py --python PY      run `target/debug/mlprof run -- PY examples/quickstart.py`
                                              (PY with numpy; --mlprof PATH for another mlprof)
    scripts/readme_sample.py --report FILE    use a terminal report saved from such a run
    ... --readme PATH                         rewrite PATH instead of README.md (the test does)

The blocks rewritten are those between `<!-- readme_sample.py: NAME -->` and
`<!-- /readme_sample.py -->` in README.md (NAME `quickstart`, `hints`). The quick-start block
is the run's report abridged (`…`): the header, the `By line` heading, the table of
examples/quickstart.py with the heaviest line (by its shares of the time) of each function
the script defines, each with its first two native functions, and the first two rows held
at the peak. The hints block is the report's hints. The test
`readme::the_quickstart_sample_matches_a_real_run` (tests/e2e/readme.rs) compares these blocks
with a fresh run by structure (fields, headings, columns, lines of the script), not numbers.
"""
import argparse
import ast
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = "examples/quickstart.py"
END = "<!-- /readme_sample.py -->"


def report_of_run(args):
    """The terminal report (mlprof's stderr) of a real run of the quick start."""
    if args.python:
        command = [args.mlprof, "run", "--", args.python, SCRIPT]
    else:
        command = [os.path.join(ROOT, "scripts/quickstart.sh")]
    # The README shows a 180-column terminal's report (a narrower one shows fewer columns).
    env = dict(os.environ, NO_COLOR="1", COLUMNS="180")
    done = subprocess.run(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        sys.exit("readme_sample: %s failed (%d):\n%s" % (command[0], done.returncode, done.stderr))
    # The quick start's own progress lines are not the report.
    return "".join(line for line in done.stderr.splitlines(keepends=True)
                   if not line.startswith("quickstart:"))


def sections(report):
    """The report's sections: lists of lines separated by blank lines, from `mlprof: ` on."""
    lines = report.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("mlprof: "))
    out, current = [], []
    for line in lines[start:]:
        if line.strip():
            current.append(line)
        elif current:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def section(all_sections, heading):
    found = [s for s in all_sections if s[0].startswith(heading)]
    if not found:
        sys.exit("readme_sample: the report has no section %r" % heading)
    return found[0]


def row_share(row):
    """A line row's share of the time: its Python, native and system percentages."""
    return sum(float(t.rstrip("%")) for t in row.split()[1:4])


def functions():
    """The line ranges of the functions the quick-start script defines."""
    with open(os.path.join(ROOT, SCRIPT), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return [(n.lineno, n.end_lineno) for n in tree.body if isinstance(n, ast.FunctionDef)]


def script_table(by_line):
    """The path line, column header and rows (each with its native rows) of the quick start's
    file in the `By line` section."""
    i = next(i for i, l in enumerate(by_line) if l.strip().endswith(SCRIPT))
    header = by_line[i + 1]
    rows = []
    for line in by_line[i + 2:]:
        first = line.split()[0]
        if not line.startswith("      ") or not (first.isdigit() or first.endswith("%")):
            break
        if first.isdigit():
            rows.append([line])
        elif rows:
            rows[-1].append(line)
    return by_line[i], header, rows


def quickstart_block(report):
    all_sections = sections(report)
    header = all_sections[0]
    by_line = section(all_sections, "By line (")
    path, columns, rows = script_table(by_line)
    # The heading, wrapped over its lines (up to the first file's path).
    heading = [by_line[0]]
    for line in by_line[1:]:
        if line.startswith("  /") or not line.startswith("  "):
            break
        heading.append(line)
    out = header + [""] + heading + ["  /…/" + SCRIPT, columns]
    for first, last in functions():
        inside = [r for r in rows if first <= int(r[0].split()[0]) <= last]
        if inside:
            out += max(inside, key=lambda r: row_share(r[0]))[:3]
    out += ["  …", ""]
    held = section(all_sections, "Held at the peak")
    out += held[:3]
    return out


def hints_block(report):
    return section(sections(report), "Hints")


def replace_block(readme, name, lines):
    begin = "<!-- readme_sample.py: %s -->" % name
    pattern = re.compile(re.escape(begin) + r"\n```\n.*?\n```\n" + re.escape(END), re.S)
    if not pattern.search(readme):
        sys.exit("readme_sample: README.md has no block %r ... %r" % (begin, END))
    body = "%s\n```\n%s\n```\n%s" % (begin, "\n".join(l.rstrip() for l in lines), END)
    return pattern.sub(lambda _: body, readme, count=1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", help="a saved terminal report of the quick start")
    parser.add_argument("--python", help="run the quick start with this Python (with numpy)")
    parser.add_argument("--mlprof", default=os.path.join(ROOT, "target/debug/mlprof"))
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    args = parser.parse_args()
    if args.report:
        with open(args.report, encoding="utf-8") as f:
            report = f.read()
    else:
        report = report_of_run(args)
    path = args.readme
    with open(path, encoding="utf-8") as f:
        readme = f.read()
    readme = replace_block(readme, "quickstart", quickstart_block(report))
    readme = replace_block(readme, "hints", hints_block(report))
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write(readme)
    os.replace(path + ".tmp", path)
    print("readme_sample: %s: the quick-start and hints samples rewritten" % path, file=sys.stderr)


if __name__ == "__main__":
    main()
