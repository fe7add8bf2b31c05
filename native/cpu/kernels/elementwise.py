"""CPU kernels: elementwise."""
