"""os._exit from the main thread while two threads allocate: status 9, output flushed first."""
import os
import sys
import threading
import time


def churn():
    keep = []
    while True:
        keep.append(bytearray(100_000))
        if len(keep) > 50:
            keep.clear()


for _ in range(2):
    threading.Thread(target=churn, daemon=True).start()
time.sleep(0.3)
print("leaving with os._exit(9)")
sys.stdout.flush()
os._exit(9)
