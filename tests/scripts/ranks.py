"""A launcher starting four ranks as torchrun does (RANK, LOCAL_RANK and WORLD_SIZE in each
one's environment) and waiting for them. Known truth: every rank computes 1 s of CPU at the
`@work` line; rank 2 computes 0.8 s more at the `@extra` line (the straggler); rank 3 holds
200 MiB more than the others at the `@held` line (the memory imbalance); the launcher's
main thread only waits for its children (`@wait`). With an argument it runs one rank, its
number from RANK or SLURM_PROCID (as `srun mlprof run -- python ranks.py rank` does)."""
import os
import subprocess
import sys
import time

MiB = 2**20


def rank_main(rank):
    held = bytearray((50 + (200 if rank == 3 else 0)) * MiB)  # @held
    total, end = 0, time.thread_time() + 1.0
    while time.thread_time() < end: total += sum(range(500))  # noqa: E701  # @work
    if rank == 2:
        end = time.thread_time() + 0.8
        while time.thread_time() < end: total += sum(range(500))  # noqa: E701  # @extra
    print(f"rank {rank} done {len(held) // MiB}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        rank_main(int(os.environ.get("RANK") or os.environ["SLURM_PROCID"]))
        sys.exit(0)
    children = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="4")
        children.append(subprocess.Popen([sys.executable, __file__, "rank"], env=env))
    codes = [child.wait() for child in children]  # @wait
    print("launcher done", codes, flush=True)
