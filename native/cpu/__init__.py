"""The CPU device: numpy kernels (vectorised, no per-element Python loops)."""
