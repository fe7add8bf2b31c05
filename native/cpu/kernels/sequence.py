"""CPU kernels: sequence."""
