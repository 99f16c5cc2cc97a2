"""As PyTorch's `torch.cuda.random`, imported right after `torch.cuda.memory`; empty here."""
