"""Whether the CUDA device can be used here: cuda-python installed and a driver with a GPU answering."""
from __future__ import annotations


def available() -> bool:
    """True when cuda-python is installed and a CUDA driver with at least one GPU answers."""
    try:
        from cuda.bindings import driver   # optional dependency (the cuda extra): imported only to ask
    except Exception:
        return False
    try:
        if int(driver.cuInit(0)[0]) != 0:
            return False
        err, count = driver.cuDeviceGetCount()
        return int(err) == 0 and count > 0
    except Exception:
        return False
