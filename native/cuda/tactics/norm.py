"""Normalization on the GPU (tensor.cu's layernorm): FP32, FP16 and BF16 storage, float32 statistics.
Scale and LRN, the CPU's other norm.py kinds, are in channel.py."""
from __future__ import annotations

import numpy as np

from native.cuda.nvrtc import kernel, launch
from native.cuda.tactics.common import (FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array, ptr,
    same_float, suffix)
from native.tactics import Tactic, register_tactic

SRC = "tensor.cu"


@register_tactic
class GpuLayerNorm(Tactic):
    """LAYER mode over the trailing axes: one block per row, mean then centred variance in float32."""

    kind, name, device = "Normalization", "row-kernel", "cuda"
    writes_outputs = True   # outputs through out_array: the engine's arena views
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)

    def supports(self, op, input_shapes):
        if op.params.get("mode", "LAYER") != "LAYER":
            return f"{op.params.get('mode')} normalization runs on the host"
        if input_shapes and input_shapes[0] is not None:
            rank = len(input_shapes[0])
            axes = sorted(a % rank for a in op.params.get("axes", [-1]))
            if axes != list(range(axes[0], rank)):
                return "normalized axes are not the trailing ones"
            cols = int(np.prod(input_shapes[0][axes[0]:], dtype=np.int64))
            for s in input_shapes[1:3]:
                if s is not None and int(np.prod(s, dtype=np.int64)) != cols:
                    return "scale/bias broadcast along the normalized axes runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        g = on_device(inputs[1]) if len(inputs) > 1 and inputs[1] is not None else None
        b = on_device(inputs[2]) if len(inputs) > 2 and inputs[2] is not None else None
        dtype = same_float([x, g, b])
        axes = sorted(a % x.ndim for a in op.params.get("axes", [-1]))
        cols = int(np.prod(x.shape[axes[0]:], dtype=np.int64))
        rows = x.size // max(cols, 1)
        y = out_array(outputs, 0, x.shape, dtype)
        stat_shape = x.shape[:axes[0]] + (1,) * len(axes)
        mean, inv = out_array(outputs, 1, stat_shape, np.float32), out_array(outputs, 2, stat_shape, np.float32)
        if rows and cols:
            launch(kernel(SRC, "layernorm" + suffix(dtype)), (rows, 1, 1), (256, 1, 1),
                   [np.uint64(y.ptr), np.uint64(x.ptr), ptr(g), ptr(b), np.uint64(mean.ptr), np.uint64(inv.ptr),
                    np.int64(rows), np.int64(cols), np.float32(op.params.get("epsilon", 1e-5))])
        return [y, mean, inv]
