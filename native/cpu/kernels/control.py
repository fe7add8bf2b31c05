"""CPU kernels: control."""
