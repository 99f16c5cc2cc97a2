"""A stand-in for PyTorch (see ../README.md): tensors are blocks of a fake CUDA device."""
__version__ = "0.0+fake"

from . import cuda  # noqa: E402


def empty(nbytes, device="cuda"):
    """A tensor of `nbytes` on the fake device, allocated by the calling line."""
    return cuda._allocate(int(nbytes))


def _engine_empty(nbytes):
    """A tensor allocated as PyTorch's autograd engine allocates a CUDA backward's gradients: by
    a device thread without Python, so the allocator records no frame for it."""
    return cuda._allocate(int(nbytes), frames=[])
