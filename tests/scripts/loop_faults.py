"""A pure-Python loop of 0.5 s of CPU that allocates and frees small objects (ints beyond the
small-int cache) and touches no new memory: without a profiler it takes no page faults. The
script prints the page faults its thread took during the loop, by the kernel's own count
(`getrusage(RUSAGE_THREAD)`), and the kernel time the kernel charged the thread over it (its
`time.thread_time` calls are system calls; on a loaded machine the kernel's user/system split,
drawn from scheduler ticks, puts up to a tenth of the loop there). Known truth: the `@loop`
line is Python time and that kernel time; a profiler that writes its records into memory it
has not touched yet adds faults here, and a sample's page-fault share would then count more
kernel time as the loop's system time."""
import resource
import time

held = bytearray(64 << 20)  # memory touched before the loop, as a job's data would be
before = resource.getrusage(resource.RUSAGE_THREAD)
total, end = 0, time.thread_time() + 0.5
while time.thread_time() < end: total += sum(range(500))  # noqa: E701  # @loop
after = resource.getrusage(resource.RUSAGE_THREAD)
print(after.ru_minflt - before.ru_minflt, after.ru_stime - before.ru_stime, flush=True)
