"""Whether the CUDA device can be used here (cuda-python installed and a driver with a GPU answering), and whether
the optional GPU libraries its tactics call are: cuBLAS and cuBLASLt through nvmath-python, cuDNN through its
frontend. A tactic whose library is missing says so from supports() (`missing`), so the builder never picks it."""
from __future__ import annotations

import importlib

# library -> (module that provides it, what to install)
LIBRARIES = {"cublas": ("nvmath.bindings.cublas", "nvmath-python (cuBLAS bindings)"),
             "cublasLt": ("nvmath.bindings.cublasLt", "nvmath-python (cuBLASLt bindings)"),
             "cudnn": ("cudnn", "the cuDNN frontend (nvidia-cudnn-frontend)")}
_FOUND: dict = {}


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


def has_library(name: str) -> bool:
    """Whether the module behind library `name` (LIBRARIES) imports; asked once per process."""
    if name not in _FOUND:
        try:
            importlib.import_module(LIBRARIES[name][0])
            _FOUND[name] = True
        except Exception:          # ImportError, or a binding that fails to load its shared library
            _FOUND[name] = False
    return _FOUND[name]


def missing(*names: str) -> str | None:
    """supports()'s reason when one of these libraries is not installed, else None."""
    for name in names:
        if not has_library(name):
            return f"{LIBRARIES[name][1]} is not installed"
    return None


def forget():
    """Ask again on the next has_library() (after installing a package in a running process, and in tests)."""
    _FOUND.clear()
