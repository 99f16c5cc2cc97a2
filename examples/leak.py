"""A request handler that leaks: every request's result is memoised in a dict that is never
pruned, while the request's scratch buffer is freed as it should be.

Run:
    mlprof run -- python examples/leak.py

What the report should show:
  - the `_CACHE[key] = ...` line (in `handle`) marked `leak`, listed under "Likely leaks"
    with likelihood 100% (its growth rate in MiB/s is high because the whole run takes a
    fraction of a second), and at the top of "Held at the heap peak" with about 187 MiB;
  - the `scratch = ...` line allocating about as much in total (`allocated` ~190 MiB) but
    holding nothing at the peak and not flagged: it is freed every request;
  - the `hashlib.sha256` line as mostly native time (OpenSSL's libcrypto);
  - peak heap about 190 MiB: 3,000 cached 64 KiB responses plus the interpreter.
"""
import hashlib

_CACHE = {}  # grows forever: the leak


def handle(request_id):
    scratch = bytearray(64 * 1024)  # temporary work buffer, freed when handle returns
    scratch[:8] = request_id.to_bytes(8, "little")
    digest = hashlib.sha256(scratch).hexdigest()
    key = f"{digest}-{request_id}"
    _CACHE[key] = bytes(64 * 1024)  # cached response, never evicted
    return digest


def main():
    for request_id in range(3_000):
        handle(request_id)
    print(f"served 3000 requests, cache holds {len(_CACHE)} entries")


if __name__ == "__main__":
    main()
