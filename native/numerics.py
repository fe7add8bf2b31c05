"""Reduced-precision numerics: the one place that rounds, stores, quantizes and requantizes.

Every CPU tactic that runs in a reduced precision and every test reference of one goes through these functions, so
"what an FP16 tensor holds" or "how INT8 rounds" has one answer in the code base. Pure numpy (plus `ml_dtypes` for
bfloat16 and FP8); no engine imports.

Conventions (those of GPU kernels and of TensorRT):
- Floating-point rounding is round-to-nearest-even (RNE). `round_*` return float32 arrays holding values exactly
  representable in the narrower format; `to_storage` returns the narrow dtype itself.
- FP16 and BF16 overflow to +-inf (as a GPU's conversion instructions do); FP8 E4M3 saturates to +-448 (as
  TensorRT's FP8 quantization does); NaN stays NaN everywhere.
- TF32 keeps float32's 8-bit exponent and 10 explicit mantissa bits (RNE), as tensor cores read float32 operands.
- INT8 is symmetric (zero point 0): q = clamp(round(x / scale)), [-128, 127], or [-127, 127] with `narrow=True`
  (TensorRT's implicit-mode weights). `rounding="half_even"` is the GPU's (and ONNX's) rounding; `"half_away"`
  (ties away from zero) is the DLA's. NaN quantizes to 0; +-inf saturates.
"""
from __future__ import annotations

import numpy as np

from native.errors import UsageError

FP16_MAX = 65504.0
BF16_MAX = float(np.float32(3.3895313892515355e38))
FP8_E4M3_MAX = 448.0
INT8_MIN, INT8_MAX = -128, 127

STORAGE_DTYPES = ("float32", "float16", "bfloat16", "fp8")
ROUNDINGS = ("half_even", "half_away", "half_up")   # half_up: ties toward +inf


def _ml_dtypes():
    import ml_dtypes
    return ml_dtypes


def _as_float32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def round_fp16(x) -> np.ndarray:
    """x rounded (RNE) to the nearest FP16 value, returned as float32; beyond 65504 (+ half an ulp) it is +-inf."""
    x = np.asarray(x)
    if x.dtype != np.float64:  # float64 converts to half directly (one rounding, no double rounding via float32)
        x = x.astype(np.float32, copy=False)
    with np.errstate(over="ignore"):
        return x.astype(np.float16).astype(np.float32)


def round_bf16(x) -> np.ndarray:
    """x (as float32) rounded (RNE) to the nearest bfloat16 value, returned as float32."""
    return _as_float32(x).astype(_ml_dtypes().bfloat16).astype(np.float32)


def round_tf32(x) -> np.ndarray:
    """x (as float32) with its mantissa rounded (RNE) to TF32's 10 bits, returned as float32.

    Bit arithmetic on the float32 pattern: add half an ulp of the 13 dropped bits (minus one when the kept part is
    even, which makes ties go to even) and clear them; a carry into the exponent rounds up to the next binade or to
    inf exactly as RNE should. NaN and inf pass through unchanged.
    """
    x = _as_float32(x)
    bits = x.view(np.uint32)
    keep_lsb = (bits >> np.uint32(13)) & np.uint32(1)
    rounded = (bits + np.uint32(0xFFF) + keep_lsb) & np.uint32(0xFFFFE000)
    rounded = np.where(np.isfinite(x), rounded, bits)
    return rounded.astype(np.uint32).view(np.float32).reshape(x.shape)


def round_fp8_e4m3(x) -> np.ndarray:
    """x (as float32) saturated to +-448 and rounded (RNE) to the nearest FP8 E4M3 value, returned as float32."""
    return _to_fp8(x).astype(np.float32)


def _to_fp8(x) -> np.ndarray:
    x = _as_float32(x)
    return np.clip(x, -FP8_E4M3_MAX, FP8_E4M3_MAX).astype(_ml_dtypes().float8_e4m3fn)


def numpy_dtype(name) -> np.dtype:
    """numpy dtype for a name, including the ml_dtypes low-precision types (int4, float8_e4m3fn, ...)."""
    try:
        return np.dtype(name)
    except TypeError:
        return np.dtype(getattr(_ml_dtypes(), name))


def storage_numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype that stores a tensor of this precision name."""
    if dtype == "float32":
        return np.dtype(np.float32)
    if dtype == "float16":
        return np.dtype(np.float16)
    if dtype == "bfloat16":
        return np.dtype(_ml_dtypes().bfloat16)
    if dtype == "fp8":
        return np.dtype(_ml_dtypes().float8_e4m3fn)
    raise UsageError(f"unknown storage precision {dtype!r}; expected one of {', '.join(STORAGE_DTYPES)}")


def to_storage(x, dtype: str) -> np.ndarray:
    """x stored in `dtype` ("float32" | "float16" | "bfloat16" | "fp8"), with that format's rounding (see above)."""
    if dtype == "fp8":
        return _to_fp8(x)
    target = storage_numpy_dtype(dtype)
    x = np.asarray(x)
    with np.errstate(over="ignore"):
        if dtype == "float16" and x.dtype == np.float64:
            return x.astype(np.float16)
        return _as_float32(x).astype(target, copy=False)


def from_storage(x) -> np.ndarray:
    """A stored float tensor (float32/float16/bfloat16/fp8) widened to float32, exactly."""
    return np.asarray(x).astype(np.float32, copy=False)


def _check_rounding(rounding: str):
    if rounding not in ROUNDINGS:
        raise UsageError(f"unknown INT8 rounding {rounding!r}; expected one of {', '.join(ROUNDINGS)}")


def _broadcast_scale(scale, ndim: int, axis) -> np.ndarray:
    """The scale as float32, shaped to broadcast along `axis` (per channel) or as a scalar (per tensor)."""
    scale = _as_float32(scale)
    if axis is None:
        if scale.size != 1:
            raise UsageError(f"a per-tensor scale must be a single value, got shape {scale.shape}; "
                             f"pass axis= for per-channel scales")
        scale = scale.reshape(())
    else:
        if scale.ndim != 1:
            raise UsageError(f"a per-channel scale must be 1-D, got shape {scale.shape}")
        axis = axis + ndim if axis < 0 else axis
        if not 0 <= axis < ndim:
            raise UsageError(f"quantization axis {axis} is out of range for a {ndim}-D tensor")
        shape = [1] * ndim
        shape[axis] = scale.size
        scale = scale.reshape(shape)
    if not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise UsageError(f"quantization scales must be finite and positive, got {scale.ravel()[:8].tolist()}")
    return scale


def _round(v: np.ndarray, rounding: str) -> np.ndarray:
    if rounding == "half_even":
        return np.rint(v)
    if rounding == "half_up":   # TensorRT's quantization of weights it derives scales for (spec Q-40)
        low = np.floor(v)
        return low + (v - low >= 0.5).astype(v.dtype)   # v - floor(v) is exact
    whole = np.trunc(v)  # exact; the fraction below is exact too, so ties are detected without a float addition
    frac = v - whole
    return whole + np.where(np.abs(frac) >= 0.5, np.sign(v), 0).astype(v.dtype)


def _saturate_int8(v: np.ndarray, narrow: bool) -> np.ndarray:
    low = INT8_MIN + 1 if narrow else INT8_MIN
    v = np.where(np.isnan(v), 0, v)
    return np.clip(v, low, INT8_MAX).astype(np.int8)


def quantize(x, scale, *, axis=None, rounding="half_even", narrow=False) -> np.ndarray:
    """Symmetric INT8 quantization: clamp(round(x / scale)) in float32; per tensor, or per channel along `axis`."""
    _check_rounding(rounding)
    x = _as_float32(x)
    s = _broadcast_scale(scale, x.ndim, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        return _saturate_int8(_round(x / s, rounding), narrow)


def dequantize(q, scale, *, axis=None) -> np.ndarray:
    """INT8 (or int32) values times their scale, in float32."""
    q = np.asarray(q)
    s = _broadcast_scale(scale, q.ndim, axis)
    return q.astype(np.float32) * s


def requantize(acc_int32, scale, *, axis=None, rounding="half_even", narrow=False) -> np.ndarray:
    """An int32 accumulator scaled by a float32 scale (in_scale * w_scale / out_scale) and rounded back to INT8.

    As INT8 GPU kernels do: the accumulator converts to float32, the multiply is a float32 multiply, then the
    rounding and saturation of `quantize`.
    """
    _check_rounding(rounding)
    acc = np.asarray(acc_int32)
    if acc.dtype.kind not in "iu":
        raise UsageError(f"requantize takes an integer accumulator, got {acc.dtype}")
    s = _broadcast_scale(scale, acc.ndim, axis)
    with np.errstate(over="ignore", invalid="ignore"):
        return _saturate_int8(_round(acc.astype(np.float32) * s, rounding), narrow)
