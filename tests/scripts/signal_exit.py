"""Wait for SIGTERM and exit 42 from the handler; or kill itself with argv[1]'s signal."""
import os
import signal
import sys
import time

if len(sys.argv) > 1:
    os.kill(os.getpid(), int(sys.argv[1]))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(42))
print("ready", flush=True)
time.sleep(30)
sys.exit(1)
