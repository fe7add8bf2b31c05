"""CPU kernels: quantize."""
