"""The CUDA device's tactics: host layers (every CPU tactic, run on the host between copies), our NVRTC kernels
(pointwise, softmax) and cuBLAS GEMMs."""
