"""CPU kernels: tensor."""
