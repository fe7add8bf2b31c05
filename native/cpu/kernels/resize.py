"""CPU kernels: resize."""
