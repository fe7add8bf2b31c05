"""The float32 row kernels of native/cpu/polyexp.py (bias + GELU, softmax, LayerNorm), compiled where the numba extra
is installed (native/cpu/jit.py), else as numpy passes: the same floats either way (tests/native/test_polyexp_kernels.py).
"""
from __future__ import annotations

import numpy as np

from native.cpu import jit, polyexp


def _rows(a) -> bool:
    """A 2-D float32 array whose rows are unit-stride and evenly spaced (what the compiled loops take)."""
    return a.ndim == 2 and a.dtype == np.float32 and a.strides[1] == 4 and (a.shape[0] <= 1 or a.flags.c_contiguous)


def gelu_rows(y, bias, kind, c0=0, c1=None):
    """y [M, N] float32: y[:, c0:c1] = GELU(y[:, c0:c1] + bias[c0:c1]) in place (bias [N] or None; kind GELU_ERF |
    GELU_TANH); returns y."""
    c1 = y.shape[-1] if c1 is None else c1
    fn = jit.kernel("gelu_rows")
    if fn is not None and _rows(y):
        fn(y, bias if bias is not None else np.zeros(y.shape[-1], np.float32), bias is not None,
           kind == "GELU_TANH", c0, c1)
        return y
    return polyexp.gelu_rows(y, bias, kind, c0, c1)


def softmax_rows(s):
    """s [M, N] float32, C-contiguous: softmax over each row, in place; returns s."""
    fn = jit.kernel("softmax_rows")
    if fn is not None and _rows(s):
        fn(s)
        return s
    return polyexp.softmax_rows(s)


def softmax_rows_nan(s) -> bool:
    """softmax_rows(s); whether a row became NaN (True without the compiled kernel: not counted)."""
    fn = jit.kernel("softmax_rows")
    if fn is not None and _rows(s):
        return fn(s) > 0
    polyexp.softmax_rows(s)
    return True


def layernorm_rows(x, gamma, beta, eps, y):
    """x [M, N] float32 -> y (may be x): LayerNorm of each row with gamma / beta [N] (None: 1 / 0); returns
    (y, mean [M], inv [M])."""
    m, n = x.shape
    g = gamma if gamma is not None else np.ones(n, np.float32)
    b = beta if beta is not None else np.zeros(n, np.float32)
    fn = jit.kernel("layernorm_rows")
    if fn is not None and _rows(x) and _rows(y):
        mean, inv = np.empty(m, np.float32), np.empty(m, np.float32)
        fn(x, g, b, np.float32(eps), np.float32(n), y, mean, inv)
        return y, mean, inv
    return polyexp.layernorm_rows(x, g, b, eps, y)
