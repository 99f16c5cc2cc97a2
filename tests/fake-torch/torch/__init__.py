"""A stand-in for PyTorch (see ../README.md): tensors are blocks of a fake CUDA device."""
__version__ = "0.0+fake"

from . import cuda  # noqa: E402


def empty(nbytes, device="cuda"):
    """A tensor of `nbytes` on the fake device, allocated by the calling line."""
    return cuda._allocate(int(nbytes))


def _engine_empty(nbytes, seconds=0.3):
    """A tensor allocated as PyTorch's autograd engine allocates a CUDA backward's gradients: by
    a device thread (here one that works `seconds`, half before the allocation, half after)
    while the calling line waits for it; the allocator records no frame for it, as for a thread
    without Python. The thread sleeps rather than computes, so that, as the engine's, it has
    no Python sample of its own to be taken for the line."""
    import threading
    import time

    made = []

    def engine():
        time.sleep(seconds / 2)
        made.append(cuda._allocate(int(nbytes), frames=[]))
        time.sleep(seconds / 2)

    t = threading.Thread(target=engine)
    t.start()
    t.join()
    return made[0]
