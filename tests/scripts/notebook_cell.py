"""Runs a notebook in the kernel named argv[1] with nbclient: `%load_ext mlprof`, then a
`%%mlprof` cell that allocates a 50M-element float64 array (381.5 MiB) and runs a Python loop.
Prints the cell's HTML output, then its execution count on the last line."""
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
nb.cells = [nbformat.v4.new_code_cell("%load_ext mlprof"), nbformat.v4.new_code_cell(CELL)]
nbclient.NotebookClient(nb, kernel_name=sys.argv[1], timeout=180).execute()
cell = nb.cells[1]
for output in cell.outputs:
    if output.get("output_type") == "error":
        sys.exit("the cell failed: %s" % "\n".join(output.get("traceback", [])))
html = [o["data"]["text/html"] for o in cell.outputs if "text/html" in o.get("data", {})]
if not html:
    sys.exit("no HTML output: %r" % (cell.outputs,))
print(html[0])
print(cell.execution_count)
