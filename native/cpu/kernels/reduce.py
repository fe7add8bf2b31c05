"""CPU kernels: reduce."""
