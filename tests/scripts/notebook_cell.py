"""Runs a notebook in the kernel named argv[1] with nbclient: `%load_ext mlprof`, then a
`%%mlprof` cell that allocates a 50M-element float64 array (381.5 MiB) and runs a Python loop,
then `%mlprof` on one statement allocating 10M float64 (76.3 MiB). Prints, as JSON, the HTML
and plain-text outputs of both and the cell's execution count."""
import json
import sys

import nbclient
import nbformat

CELL = """%%mlprof
import numpy as np
a = np.ones(50_000_000)
total = 0
for i in range(3_000_000):
    total += i
"""

nb = nbformat.v4.new_notebook()
nb.cells = [
    nbformat.v4.new_code_cell("%load_ext mlprof"),
    nbformat.v4.new_code_cell(CELL),
    nbformat.v4.new_code_cell("%mlprof b = np.ones(10_000_000)"),
]
nbclient.NotebookClient(nb, kernel_name=sys.argv[1], timeout=180).execute()


def html_of(cell):
    for output in cell.outputs:
        if output.get("output_type") == "error":
            sys.exit("the cell failed: %s" % "\n".join(output.get("traceback", [])))
    html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
    if not html:
        sys.exit("no HTML output: %r" % (cell.outputs,))
    return html[0]


def text_of(cell):
    text = [o["data"]["text/plain"] for o in cell.outputs if "text/plain" in o.get("data", {})]
    return text[0] if text else ""


print(json.dumps({
    "cell": html_of(nb.cells[1]),
    "cell_text": text_of(nb.cells[1]),
    "count": nb.cells[1].execution_count,
    "statement": html_of(nb.cells[2]),
}))
