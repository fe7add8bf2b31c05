"""The CUDA device (cuda-python): a GPU context and stream, a stream-ordered memory pool, NVRTC-compiled kernels,
cuBLAS GEMMs, and host layers for everything else. Importing the package registers the "cuda" device; nothing
touches the GPU until an engine uses it. `available()` tells whether a GPU can be used here."""
from native.device import register_device


def available() -> bool:
    """True when cuda-python is installed and a CUDA driver with at least one GPU answers."""
    try:
        from cuda.bindings import driver
    except Exception:
        return False
    try:
        if int(driver.cuInit(0)[0]) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:
        return False


from native.cuda.device import CudaDevice  # noqa: E402

register_device("cuda", CudaDevice)
