"""CPU kernels: matmul."""
