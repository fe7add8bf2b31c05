"""A layer's fused post-ops (bias, residual add, activation) on the GPU, in place on its output, in the output's
storage type: what the convolution, GEMM and deconvolution tactics run after their kernel when the kernel's own
epilogue cannot (cuDNN's and cuBLASLt's fuse what they can first)."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.driver import CudaError
from native.cuda.tactics.common import cast, on_device, storage, weight
from native.cuda.tactics.pointwise import activate, binary


def epilogue(y: GpuArray, op, inputs, steps=None):
    """Apply `steps` (default: params['post_ops']) in order, in place on y, in y's type. Bias weights hold the
    values the layer's precision stores (rounded to FP16 / BF16 for a reduced layer, as the CPU rounds them);
    a residual in another storage type is converted to y's."""
    for step in op.params.get("post_ops") or () if steps is None else steps:
        if step["op"] == "bias":
            b = _stored_weight(op.weights[step["weight"]], op, y.dtype)
            shape = [1] * y.ndim
            shape[step.get("axis", 1)] = -1
            binary("ew_sum", y, b.reshape(tuple(b.size if d == -1 else d for d in shape)), y)
        elif step["op"] == "add":
            binary("ew_sum", y, cast(on_device(inputs[step["input"]]), y.dtype), y)
        elif step["op"] == "activation":
            activate(y, step["type"], step.get("alpha", 0.0), step.get("beta", 0.0))
        else:
            raise CudaError(f"post-op {step['op']!r} has no GPU implementation")
    return y


_STORED: dict = {}


def _stored_weight(host, op, dtype) -> GpuArray:
    """A float weight on the device in `dtype`, holding the values the layer's storage type holds (converted once
    per process, kept beside its host array as common.weight does)."""
    w = weight(host, storage(op))
    if w.dtype == np.dtype(dtype):
        return w
    key = (id(host), w.dtype.name, np.dtype(dtype).name)
    hit = _STORED.get(key)
    if hit is None or hit[0] is not host:
        hit = _STORED[key] = (host, cast(w, dtype))
    return hit[1]
