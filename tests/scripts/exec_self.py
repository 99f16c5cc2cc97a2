"""Allocate 30 MB on a known line, then replace this process with another program (exec).
The profile must keep what the Python image did and name the process after the new program."""
import os

import numpy as np

kept = np.ones(30 * 10**6, dtype=np.uint8)  # @before-exec
os.execv("/bin/sh", ["sh", "-c", "echo after-exec; exit 4"])
