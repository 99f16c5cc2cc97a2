"""argv: DIR CODE: remove the directory DIR (where mlprof is to write its report), print
"ran", exit with CODE.

A program that takes away the report's directory while it runs, after mlprof checked it.
"""
import shutil
import sys

shutil.rmtree(sys.argv[1])
print("ran", flush=True)
sys.exit(int(sys.argv[2]))
