"""Arrays that already live on a GPU, recognised by the CUDA Array Interface (torch and cupy tensors, our GpuArray)
without importing any GPU library, so host-side code can check and route them without copying them to the host."""
from __future__ import annotations

import numpy as np


def is_device_array(x) -> bool:
    """True for an object in device memory that exposes `__cuda_array_interface__`."""
    return hasattr(type(x), "__cuda_array_interface__") or hasattr(x, "__cuda_array_interface__")


def shape_and_dtype(x) -> tuple[tuple, np.dtype]:
    """(shape, dtype) of a host or device array; a device array is read from its interface, never copied."""
    if is_device_array(x):
        cai = x.__cuda_array_interface__
        return tuple(int(d) for d in cai["shape"]), np.dtype(cai["typestr"])
    a = np.asarray(x)
    return a.shape, a.dtype
