"""Sampler stress: generators, exceptions, deep recursion, asyncio and thread churn, for
argv[1] seconds. Must finish with the same output as without a profiler."""
import asyncio
import sys
import threading
import time


def gen(n):
    for i in range(n):
        yield i * 2


def nested_gens():
    return sum(x for x in gen(2000) if x % 3)


def raises(depth):
    if depth == 0:
        raise ValueError("bottom")
    try:
        raises(depth - 1)
    except ValueError:
        raise KeyError("up") from None


def recurse(n):
    return 0 if n == 0 else 1 + recurse(n - 1)


async def ticker(k):
    total = 0
    for i in range(50):
        total += i * k
        await asyncio.sleep(0)
    return total


async def many():
    return sum(await asyncio.gather(*(ticker(k) for k in range(20))))


def churn():
    threads = [threading.Thread(target=nested_gens) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


deadline = time.monotonic() + float(sys.argv[1])
rounds = 0
sys.setrecursionlimit(2000)
while time.monotonic() < deadline:
    nested_gens()
    try:
        raises(30)
    except KeyError:
        pass
    assert recurse(900) == 900
    asyncio.run(many())
    churn()
    rounds += 1
print("done", rounds > 0)
