"""Keep activation buffers' pages mapped between runs (glibc malloc tuning).

numpy takes every array over 128 KiB from malloc, and glibc serves those with a fresh mmap (or trims the heap top
back to the OS on free), so each run of an engine page-faults all of its activations, patch matrices and padded
inputs in again: ~470 faults (~2 ms) per 56x56x64 convolution on a 2-core VM, as much as its GEMM. TensorRT and
ONNX Runtime avoid this with a preallocated arena; we get the same effect by raising glibc's mmap and trim
thresholds once, so freed buffers stay in the heap and the next run reuses them already mapped.

Process-wide, like the BLAS thread setting in threads.py: peak memory is unchanged, but memory freed after a run
stays with the process (up to M_TRIM_THRESHOLD) instead of going back to the OS. Applied only as part of explicit
process tuning (threads.tune), undone by `untune()`; DEBUGKIT_MALLOC_TUNE=0 opts out; a no-op where malloc is
not glibc's.
"""
from __future__ import annotations

import ctypes
import threading

from native import config

M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 64 << 20    # buffers above this still get their own mapping (rare, and amortised over their size)
TRIM_THRESHOLD = 512 << 20   # free memory kept at the heap top before giving it back
DEFAULT_THRESHOLD = 128 << 10  # glibc's defaults for both

_DONE = {"tuned": None}
_LOCK = threading.Lock()


def tune() -> bool:
    """Apply the thresholds once per process; True when glibc took them."""
    with _LOCK:
        if _DONE["tuned"] is None:
            _DONE["tuned"] = _apply()
        return _DONE["tuned"]


def untune() -> bool:
    """Back to glibc's default thresholds (128 KiB each); True when they were tuned before."""
    with _LOCK:
        if not _DONE["tuned"]:
            _DONE["tuned"] = None
            return False
        _DONE["tuned"] = None
        mallopt = _mallopt()
        if mallopt is not None:
            mallopt(M_MMAP_THRESHOLD, DEFAULT_THRESHOLD)
            mallopt(M_TRIM_THRESHOLD, DEFAULT_THRESHOLD)
        return True


def _mallopt():
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return mallopt


def _apply() -> bool:
    if not config.malloc_tune():
        return False
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
