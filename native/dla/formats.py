"""DLA tensor formats (seed 000 L405–435): the byte layouts a loadable reads and writes, with their padding.

- kDLA_LINEAR: [N][C][H][roundUp(W, 64 / elementSize)]            (W stride padded to 64 bytes)
- kDLA_HWC4:   [N][H][roundUp(W, align / C' / elementSize)][C']   C in {1, 3, 4} -> C' in {1, 4, 4}, pad channel 0;
               align = 32 bytes on Xavier, 64 on Orin
- kCHW16:      [N][ceil(C / 16)][H][W][16]   FP16 (C padded to the next 32-byte boundary)
- kCHW32:      [N][ceil(C / 32)][H][W][32]   INT8 (C padded to the next 32-byte boundary)

Tensors of another rank are viewed as NCHW first (rank 2 [N, C] -> [N, C, 1, 1]; rank 3 [N, C, W] -> [N, C, 1, W];
rank > 4 folds the leading index dims into N, the DLA batch). FP16 values are stored as float16, INT8 as int8
quantized with the tensor's scale, ties rounded away from zero (the DLA's rule).
"""
from __future__ import annotations

import numpy as np

from native.errors import ShapeError
from native.numerics import dequantize, quantize

FORMATS = ("dla_linear", "dla_hwc4", "chw16", "chw32")
TRT_NAMES = {"dla_linear": "kDLA_LINEAR", "dla_hwc4": "kDLA_HWC4", "chw16": "kCHW16", "chw32": "kCHW32"}
# which formats each DLA I/O precision allows (seed 000 L405–413)
INPUT_FORMATS = {"float16": ("dla_linear", "dla_hwc4", "chw16"), "int8": ("dla_linear", "dla_hwc4", "chw32")}
OUTPUT_FORMATS = {"float16": ("dla_linear", "chw16"), "int8": ("dla_linear", "chw32")}


def _round_up(x, m):
    return -(-int(x) // int(m)) * int(m)


def as_nchw(shape) -> tuple:
    shape = [int(d) for d in shape]
    if len(shape) == 4:
        return tuple(shape)
    if len(shape) == 0:
        return (1, 1, 1, 1)
    if len(shape) == 1:
        return (1, 1, 1, shape[0])
    if len(shape) == 2:
        return (shape[0], shape[1], 1, 1)
    if len(shape) == 3:
        return (shape[0], shape[1], 1, shape[2])
    return (int(np.prod(shape[:-3])), *shape[-3:])


def element_size(dtype: str) -> int:
    return 1 if dtype == "int8" else 2


def packed_shape(shape, fmt: str, dtype: str, hwc4_align: int = 64) -> tuple:
    n, c, h, w = as_nchw(shape)
    e = element_size(dtype)
    if fmt == "dla_linear":
        return (n, c, h, _round_up(w, 64 // e))
    if fmt == "dla_hwc4":
        if c not in (1, 3, 4):
            raise ShapeError(f"kDLA_HWC4 needs C in {{1, 3, 4}}, the tensor has C = {c}")
        cp = 1 if c == 1 else 4
        return (n, h, _round_up(w, max(hwc4_align // cp // e, 1)), cp)
    if fmt == "chw16":
        return (n, _round_up(c, 16) // 16, h, w, 16)
    if fmt == "chw32":
        return (n, _round_up(c, 32) // 32, h, w, 32)
    raise ShapeError(f"unknown DLA format '{fmt}'; DLA formats are {', '.join(FORMATS)}")


def packed_bytes(shape, fmt: str, dtype: str, hwc4_align: int = 64) -> int:
    return int(np.prod(packed_shape(shape, fmt, dtype, hwc4_align))) * element_size(dtype)


def pack(x, fmt: str, dtype: str = "float16", scale: float | None = None, hwc4_align: int = 64) -> np.ndarray:
    """Logical tensor -> the DLA layout (padding zero-filled)."""
    x = np.asarray(x, dtype=np.float32)
    n, c, h, w = as_nchw(x.shape)
    x4 = x.reshape(n, c, h, w)
    if dtype == "int8":
        if scale is None:
            raise ShapeError("packing INT8 needs the tensor's scale (dynamic range / 127)")
        v = quantize(x4, scale, rounding="half_away")
    else:
        v = x4.astype(np.float16)
    out = np.zeros(packed_shape(x.shape, fmt, dtype, hwc4_align), dtype=v.dtype)
    if fmt == "dla_linear":
        out[..., :w] = v
    elif fmt == "dla_hwc4":
        out[:, :, :w, :c] = v.transpose(0, 2, 3, 1)
    else:
        k = 16 if fmt == "chw16" else 32
        cp = out.shape[1] * k
        padded = np.zeros((n, cp, h, w), dtype=v.dtype)
        padded[:, :c] = v
        out[...] = padded.reshape(n, cp // k, k, h, w).transpose(0, 1, 3, 4, 2)
    return out


def unpack(a, fmt: str, shape, dtype: str = "float16", scale: float | None = None) -> np.ndarray:
    """The DLA layout -> the logical tensor of `shape`, as float32."""
    a = np.asarray(a)
    n, c, h, w = as_nchw(shape)
    if fmt == "dla_linear":
        v = a[..., :w]
    elif fmt == "dla_hwc4":
        v = a[:, :, :w, :c].transpose(0, 3, 1, 2)
    else:
        k = a.shape[-1]
        v = a.transpose(0, 1, 4, 2, 3).reshape(n, a.shape[1] * k, h, w)[:, :c]
    v = dequantize(v, scale) if dtype == "int8" else v.astype(np.float32)
    return np.ascontiguousarray(v, dtype=np.float32).reshape(shape)
