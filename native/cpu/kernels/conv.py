"""CPU kernels: conv."""
