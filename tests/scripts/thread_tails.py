"""Eight threads, one after another, each burn about 0.4 s of CPU in `spin` and end; each
measures the CPU time it used there (`time.thread_time`, the kernel's clock). Run with a low
sampling rate (`--rate 10`: a sample about every 100 ms of a thread's CPU): the CPU a thread
uses after its last sample (about 50 ms on average) is known only when it ends. Prints the
known truth: the seconds of CPU the threads used in `spin`, in all."""
import threading
import time

used = []


def spin(seconds):
    start = time.thread_time()
    n, end = 0, start + seconds
    while time.thread_time() < end:
        for i in range(20000):
            n += i  # @spin
    used.append(time.thread_time() - start)
    return n


for _ in range(8):
    t = threading.Thread(target=spin, args=(0.4,))
    t.start()
    t.join()
# `join` returns when the thread's Python state is gone, before its native start routine has
# returned (where mlprof sends its tail): a thread still ending when its process exits loses
# its tail (docs/design/robustness.md), so the last one is given time to end, on a machine
# busier than its cores too (beside 6 busy loops: 0.13 s of 0.4 s lost without this wait).
time.sleep(0.3)
print(sum(used))
