"""The address of numpy's own OpenBLAS cblas_sgemm, for compiled convolution bands that run their GEMMs outside
the GIL (jit_phase_gemm.phase_gemm_band, jit_winograd.wino_band): the library numpy calls, so the same floats as
numpy's matmul given the same arguments, and no second BLAS."""
from __future__ import annotations

import ctypes

from native.cpu import threads

_STATE: dict = {}


def sgemm_address() -> int:
    """The 64-bit-integer cblas_sgemm of numpy's OpenBLAS (scipy-openblas64 wheels), or 0 where it is not found.
    Asked once per process."""
    if "addr" not in _STATE:
        fn = threads._blas_fn(("scipy_cblas_sgemm64_", "cblas_sgemm64_"))   # (as jit_gemm_share.sgemm_address)
        _STATE["addr"] = (ctypes.cast(fn, ctypes.c_void_p).value or 0) if fn is not None else 0
    return _STATE["addr"]
