"""Per-channel math on the GPU: Scale ((x * scale + shift) ** power, CHANNEL / ELEMENTWISE / UNIFORM, as the
pointwise kernels' broadcasting binary ops, one rounding per step like the CPU) and LRN (geometry.cu:
the channel-window sum of squares and the power in float64, the CPU kernel's arithmetic). FP32, FP16 and BF16
storage."""
from __future__ import annotations

import numpy as np

from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import (FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array,
    same_float, suffix, weight)
from native.cuda.tactics.geometry import SRC
from native.cuda.tactics.pointwise import binary
from native.tactics import Tactic, TacticRefusal, register_tactic


@register_tactic
class GpuScale(Tactic):
    kind, name, device = "Scale", "nvrtc-pointwise", "cuda"
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        dtype = same_float([x])
        if x.ndim == 0 or x.ndim > 8:
            raise TacticRefusal(f"Scale at rank {x.ndim} runs on the host")
        axis = op.params.get("channel_axis", 1) % x.ndim
        mode = op.params.get("mode", "CHANNEL")

        def shaped(name):
            host = op.weights[name]
            v = weight(host, dtype)
            if mode == "CHANNEL" and np.ndim(host) == 1 and np.size(host) > 1:
                shape = [1] * x.ndim
                shape[axis] = v.size
                return v.reshape(shape)
            return v

        out = out_array(outputs, 0, x.shape, dtype)
        src = x
        for name, fn in (("scale", "ew_prod"), ("shift", "ew_sum"), ("power", "ew_pow")):
            if name in op.weights:
                b = shaped(name)
                if np.broadcast_shapes(x.shape, b.shape) != tuple(x.shape):
                    raise TacticRefusal(f"Scale weights {b.shape} widen {x.shape}; the host tactic reports it")
                binary(fn, src, b, out)
                src = out
        if src is x:   # no weights: a copy
            from native.cuda.driver import context
            context().copy(out.ptr, x.ptr, x.nbytes)
        return [out]


@register_tactic
class GpuLRN(Tactic):
    kind, name, device = "LRN", "channel-window", "cuda"
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    writes_outputs = True

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        dtype = same_float([x])
        if x.ndim < 2:
            raise TacticRefusal("LRN needs a channel axis; the host tactic reports it")
        p = op.params
        size = int(p.get("window", 5))
        n, c = x.shape[:2]
        inner = x.size // max(n * c, 1)
        out = out_array(outputs, 0, x.shape, dtype)
        if out.size:
            launch(kernel(SRC, "lrn" + suffix(dtype)), grid_for(out.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(n), np.int64(c), np.int64(inner),
                    np.int64((size - 1) // 2), np.int64(size), np.float64(p.get("k", 1.0)),
                    np.float64(p.get("alpha", 1e-4) / size), np.float64(p.get("beta", 0.75))])
        return [out]
