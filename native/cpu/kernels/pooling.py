"""CPU kernels: pooling."""
