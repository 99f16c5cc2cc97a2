"""faulthandler registers a signal stack of the program's own: mlprof's handler then moves to
its own stack for the walk, holding signals back meanwhile. Known truth: the program blocks no
SIGPROF, so the report must say none was blocked."""
import faulthandler
import time

faulthandler.enable()
end = time.process_time() + 0.5
n = 0
while time.process_time() < end:
    n += 1  # @spin
print("spun", n > 0)
