"""CPU kernels: norm."""
