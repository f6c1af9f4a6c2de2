"""same-device: an executable catalog of the ways PyTorch code ends up with tensors on two devices."""

__version__ = "0.1.0"
