"""Prints whether mlprof put its library or channels under TMPDIR (which the test made
writable by everyone, without the sticky bit)."""
import os

tmp = os.path.realpath(os.environ["TMPDIR"])
preload = os.environ.get("LD_PRELOAD", "")
channels = os.environ.get("MLPROF_DIR", "")
print("library under TMPDIR:", any(os.path.realpath(p).startswith(tmp + "/") for p in preload.split(":") if p))
print("channels under TMPDIR:", bool(channels) and os.path.realpath(channels).startswith(tmp + "/"))
