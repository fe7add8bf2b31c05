"""INT8 calibration statistics of float32 tensors on the GPU (CudaDevice.abs_max / abs_histogram): the calibration
run keeps every activation on the device, and each tensor's |x| maximum and |x| histogram are reduced there by
int8.cu's kernels, so only a float (and 2048 counts) per tensor and batch come back. Other dtypes are downloaded
and counted by the host's numpy (native/device.py)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.nvrtc import grid_for, kernel, launch

SRC = "int8.cu"


def abs_max(x: GpuArray):
    """The largest finite |x| (None: no finite value)."""
    out = GpuArray.from_host(np.zeros(1, np.uint32))
    launch(kernel(SRC, "abs_max_f32"), grid_for(x.size), (256, 1, 1),
           [np.uint64(x.ptr), np.int64(x.size), np.uint64(out.ptr)])
    return float(out.get().view(np.float32)[0])


def abs_histogram(x: GpuArray, amax: float, bins: int) -> np.ndarray:
    """int64 counts of the finite non-zero |x| in `bins` bins over [0, amax] (float32(bins / amax) * |x|, truncated;
    the last bin takes everything above): TensorStats.observe_histogram's numbers."""
    if bins > 4096:
        raise ValueError("abs_histogram counts at most 4096 bins")
    hist = GpuArray.from_host(np.zeros(bins, np.uint64))
    launch(kernel(SRC, "abs_hist_f32"), grid_for(x.size), (256, 1, 1),
           [np.uint64(x.ptr), np.int64(x.size), np.float32(bins / amax), np.int32(bins), np.uint64(hist.ptr)])
    return hist.get().astype(np.int64)
