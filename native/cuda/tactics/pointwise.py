"""Our NVRTC kernels (kernels/pointwise.cu): broadcasting binary ops, activations, unary math, softmax."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray, to_device
from native.cuda.nvrtc import grid_for, kernel, launch
from native.tactics import Tactic, register_tactic

SRC = "pointwise.cu"
_BINARY = {"SUM": "ew_sum", "SUB": "ew_sub", "PROD": "ew_prod", "DIV": "ew_div", "MAX": "ew_max", "MIN": "ew_min",
           "POW": "ew_pow"}
_ACT = {"RELU": "act_relu", "SIGMOID": "act_sigmoid", "TANH": "act_tanh", "LEAKY_RELU": "act_leaky_relu",
        "ELU": "act_elu", "CLIP": "act_clip", "HARD_SIGMOID": "act_hard_sigmoid", "GELU_ERF": "act_gelu_erf",
        "GELU_TANH": "act_gelu_tanh", "SILU": "act_silu"}
_UNARY = {"EXP": "un_exp", "LOG": "un_log", "SQRT": "un_sqrt", "RECIP": "un_recip", "ABS": "un_abs",
          "NEG": "un_neg", "ERF": "un_erf", "SIN": "un_sin", "COS": "un_cos", "FLOOR": "un_floor",
          "CEIL": "un_ceil", "RECIPROCAL_SQRT": "un_rsqrt"}


def _f32(shapes, n):
    return None


def _is_f32(x):
    return getattr(x, "dtype", None) is not None and np.dtype(x.dtype) == np.float32


def broadcast_params(out_shape, a_shape, b_shape) -> np.ndarray:
    """The Bcast struct of pointwise.cu: rank, n, dims[8], element strides of a and b (0 where broadcast)."""
    rank = len(out_shape)
    s = np.zeros(26, dtype=np.int64)
    s[0], s[1] = rank, int(np.prod(out_shape, dtype=np.int64))
    for which, shape in ((10, a_shape), (18, b_shape)):
        shape = (1,) * (rank - len(shape)) + tuple(shape)
        stride = 1
        for d in range(rank - 1, -1, -1):
            s[which + d] = 0 if shape[d] == 1 else stride
            stride *= shape[d]
    s[2:2 + rank] = out_shape
    return s


@register_tactic
class GpuElementWise(Tactic):
    kind, name, device = "ElementWise", "nvrtc-pointwise", "cuda"

    def supports(self, op, input_shapes):
        if op.params.get("op") not in _BINARY:
            return f"op {op.params.get('op')} has no GPU kernel"
        if input_shapes and any(s is not None and len(s) > 8 for s in input_shapes):
            return "rank above 8"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        a, b = (to_device(np.asarray(x)) if not isinstance(x, GpuArray) else x for x in inputs[:2])
        if not (_is_f32(a) and _is_f32(b)):
            raise TypeError(f"GPU elementwise kernels take float32, got {a.dtype}/{b.dtype}")
        shape = np.broadcast_shapes(a.shape, b.shape)
        out = GpuArray(shape, np.float32)
        s = broadcast_params(shape, a.shape, b.shape)
        if s[1]:
            launch(kernel(SRC, _BINARY[op.params["op"]]), grid_for(s[1]), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(a.ptr), np.uint64(b.ptr), s])
        return [out]


class _UnaryKernel(Tactic):
    device = "cuda"
    table: dict = {}
    param = "op"

    def supports(self, op, input_shapes):
        if op.params.get(self.param) not in self.table:
            return f"{self.param} {op.params.get(self.param)} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if len(inputs) > 1 and any(x is not None for x in inputs[1:]):
            raise TypeError("bounds/slopes given as tensors are run by the host tactic")
        x = inputs[0] if isinstance(inputs[0], GpuArray) else to_device(np.asarray(inputs[0]))
        if not _is_f32(x):
            raise TypeError(f"GPU pointwise kernels take float32, got {x.dtype}")
        out = GpuArray(x.shape, np.float32)
        alpha, beta = op.params.get("alpha", 0.0), op.params.get("beta", 0.0)
        if op.params.get(self.param) == "CLIP":
            alpha = -np.inf if alpha is None else alpha
            beta = np.inf if beta is None else beta
        if x.size:
            launch(kernel(SRC, self.table[op.params[self.param]]), grid_for(x.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size), np.float32(alpha or 0.0),
                    np.float32(beta or 0.0)])
        return [out]


@register_tactic
class GpuActivation(_UnaryKernel):
    kind, name, table, param = "Activation", "nvrtc-pointwise", _ACT, "type"


@register_tactic
class GpuUnary(_UnaryKernel):
    kind, name, table, param = "Unary", "nvrtc-pointwise", _UNARY, "op"


@register_tactic
class GpuSoftmax(Tactic):
    kind, name, device = "Softmax", "nvrtc-rows", "cuda"

    def supports(self, op, input_shapes):
        if op.params.get("hard"):
            return "hardmax runs on the host"
        if input_shapes and input_shapes[0] is not None:
            rank = len(input_shapes[0])
            axis = int(op.params.get("axis", -1)) % max(rank, 1)
            if axis != rank - 1 and not op.params.get("flatten"):
                return "softmax over a non-last axis runs on the host"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = inputs[0] if isinstance(inputs[0], GpuArray) else to_device(np.asarray(inputs[0]))
        if not _is_f32(x):
            raise TypeError(f"GPU softmax takes float32, got {x.dtype}")
        axis = int(op.params.get("axis", -1)) % max(x.ndim, 1)
        if axis != x.ndim - 1 and not op.params.get("flatten"):
            raise TypeError("softmax over a non-last axis runs on the host")
        cols = int(np.prod(x.shape[axis:], dtype=np.int64)) if x.ndim else 1
        rows = x.size // max(cols, 1)
        out = GpuArray(x.shape, np.float32)
        if rows:
            launch(kernel(SRC, "softmax_rows"), (rows, 1, 1), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(rows), np.int64(cols),
                    np.int32(1 if op.params.get("log") else 0)])
        return [out]
