"""The CUDA device (cuda-python): a GPU context and stream, a stream-ordered memory pool, NVRTC-compiled kernels,
cuBLAS GEMMs, and host layers for everything else. Importing the package registers the "cuda" device; nothing
touches the GPU until an engine uses it. `available()` tells whether a GPU can be used here."""
from native.cuda.availability import available  # noqa: F401  (the package's public question)
from native.cuda.device import CudaDevice
from native.device import register_device

register_device("cuda", CudaDevice)
