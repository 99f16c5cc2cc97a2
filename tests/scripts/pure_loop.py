"""Pure Python, allocation-bound the way ordinary Python is: big integers (every result above
256 is a new object), small tuples and lists from pymalloc, and one list a step too large for
pymalloc (over 512 bytes: malloc serves it, as it does every buffer) per iteration. argv[1]:
iterations (default 20000)."""
import sys


def work(n):
    total = 0
    seen = {}
    for i in range(n):
        x = i * 7919 + 1000
        pair = (x, x + 1)
        seen[i & 1023] = [pair, x * x]
        row = [x] * 80
        total += pair[1] - pair[0] + (x * x) % 97 + len(row)
    return total + len(seen)


print(work(int(sys.argv[1]) if len(sys.argv) > 1 else 20000))
