"""Load argv[2] copies of the TLS library argv[1] (one by one, with ctypes), allocating and
freeing 4 KB buffers (libc malloc, not pymalloc) for a while after each load, on the main thread and on a second thread.
Prints "loaded N" at the end. Under a sampling profiler whose signal handler touches
general-dynamic TLS, this deadlocks or crashes (see tests/native/tls_module.c)."""
import ctypes
import os
import shutil
import sys
import tempfile
import threading
import time

source, copies = sys.argv[1], int(sys.argv[2])
stop = False


def churn():
    while not stop:
        [bytearray(4000) for _ in range(200)]  # past pymalloc: libc malloc


helper = threading.Thread(target=churn)
helper.start()
with tempfile.TemporaryDirectory() as scratch:
    loaded = []
    for i in range(copies):
        path = os.path.join(scratch, f"libtls{i}.so")
        shutil.copy(source, path)
        # Loaded, never called: the first TLS access after the load must not be in our code.
        loaded.append(ctypes.CDLL(path))
        end = time.process_time() + 0.03
        while time.process_time() < end:
            [bytearray(4000) for _ in range(100)]  # libc malloc, as above
stop = True
helper.join()
print(f"loaded {len(loaded)}")
