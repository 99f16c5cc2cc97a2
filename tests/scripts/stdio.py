"""Echo stdin to stdout with binary-unsafe bytes, write to stderr, exit with argv[1]."""
import sys

data = sys.stdin.buffer.read()
sys.stdout.buffer.write(b"in:" + data + b"\x00\xff\n")
sys.stdout.write("line \u00e9\n")
sys.stdout.flush()
sys.stderr.write("to stderr\n")
sys.exit(int(sys.argv[1]))
