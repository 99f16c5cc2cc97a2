"""DDP training on the CPU with gloo, started by `torchrun --standalone --nproc_per_node=2`
(skips when torch is not installed). Known truth: rank 1 sleeps 20 ms each of 60 steps at the
`@sleep` line (1.2 s in all: the straggler; rank 0 waits for it in the all-reduce of the loss
at the `@collective` line, on a quiet machine), and rank 1 holds 200 MiB more than rank 0 at the
`@extra` line. Each rank prints the wall time it spent in that all-reduce (`collective=S`): on a
machine busier than its cores the ranks' speeds differ by more than the sleep, and that is
how long rank 0 really waited. The all-reduce waits on a condition variable, which is seen by
the collector's 50 Hz looks, not timed: 20 ms a step keeps rank 0's extra wait (1.2 s) clear of
their sampling error (about 0.12 s on the difference) and of the straggler rule's noise floor.
Each step computes enough (about 10 GFLOP) that training outweighs the start-up of torchrun's
agent, whose main thread then only waits for the ranks."""
import sys
import time

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel
except ImportError:
    print("skipped: torch not installed")
    sys.exit(0)

STEPS = 60


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    extra = bytearray((200 << 20) if rank == 1 else 0)  # @extra
    collective = 0.0
    for step in range(STEPS):
        x = torch.randn(768, 512)
        loss = model(x).pow(2).mean()  # @forward
        optimizer.zero_grad()
        loss.backward()  # @backward
        optimizer.step()
        if rank == 1:
            time.sleep(0.02)  # @sleep
        began = time.perf_counter()
        dist.all_reduce(loss.detach())  # @collective
        collective += time.perf_counter() - began
    dist.barrier()
    print(f"rank {rank} done {len(extra) >> 20} collective={collective:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
