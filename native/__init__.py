"""Kernels and devices: the bottom room. Knows nothing of ONNX or the CLI."""
