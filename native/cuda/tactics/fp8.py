"""FP8 E4M3 storage on the GPU: activations converted (saturating, round to nearest even) for the FP8 GEMM."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch
from native.tactics import TacticRefusal

_NAMES = {"float16": "cast_f16_e4m3", "float32": "cast_f32_e4m3"}


def to_fp8(x: GpuArray) -> GpuArray:
    """x (float16 or float32) stored as float8_e4m3fn, saturated to +-448 as the CPU's FP8 emulation does."""
    import ml_dtypes
    name = _NAMES.get(x.dtype.name)
    if name is None:
        raise TacticRefusal(f"FP8 conversion takes float16 or float32, got {x.dtype}")
    out = GpuArray(x.shape, ml_dtypes.float8_e4m3fn)
    if x.size:
        launch(kernel("fp8.cu", name), grid_for(x.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size)])
    return out
