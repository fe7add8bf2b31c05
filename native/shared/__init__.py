"""Math every device computes the same way (index tables, geometry, quantization parameters): one module per
concept, imported by native/cpu/kernels and native/cuda/tactics alike, so two devices cannot drift apart."""
