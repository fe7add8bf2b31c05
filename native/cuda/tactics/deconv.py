"""Transposed convolution (Deconvolution) on the GPU: columns = W^T @ x by cuBLAS (gemm.matmul, FP32 accumulation,
columns kept in float32), then an NVRTC col2im gather (geometry.cu) that sums each output's kernel taps
in the CPU's tap order and adds the bias, then the fused epilogue (conv.epilogue). 1-D to 3-D, groups, strides,
dilations, pads, output_padding / output_shape / auto_pad (the CPU's deconv_geometry); the kernel as packed
weights (uploaded once) or as a tensor (transposed on the device each run); FP32 (TF32 when the layer's math says
so), FP16 and BF16 storage."""
from __future__ import annotations

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import (FLOAT_PRECISIONS, FLOAT_STORAGE, on_device, out_array,
    same_float, suffix, weight)
from native.cuda.tactics.epilogue import epilogue
from native.cuda.tactics.geometry import SRC
from native.shared.conv_geometry import deconv_geometry
from native.tactics import Tactic, TacticRefusal, register_tactic

_PACKED: dict = {}   # (id(kernel), groups, dtype) -> (kernel, device [g, Mg*taps, Cg] matrix)


def packed_kernel(w, groups: int, dtype) -> GpuArray:
    """The kernel [C, M/g, k...] as the GEMM's left operand [g, M/g * taps, C/g] in `dtype`, uploaded once."""
    key = (id(w), groups, np.dtype(dtype).name)
    hit = _PACKED.get(key)
    if hit is None or hit[0] is not w:
        a = np.asarray(w)
        c, mg = a.shape[:2]
        taps = int(np.prod(a.shape[2:], dtype=np.int64))
        wt = a.reshape(groups, c // groups, mg * taps).transpose(0, 2, 1).astype(dtype)
        hit = _PACKED[key] = (w, GpuArray.from_host(np.ascontiguousarray(wt)))
    return hit[1]


@register_tactic
class CublasDeconv(Tactic):
    """cuBLAS GEMM to float32 columns, col2im gather with bias, pointwise epilogue."""

    kind, name, device = "Deconvolution", "cublas-col2im", "cuda"
    honours = {"post_ops"}
    precisions = FLOAT_PRECISIONS
    input_dtypes, dtype_inputs = FLOAT_STORAGE, (0,)   # the data input: float kernels (refused at build)
    writes_outputs = True

    def supports(self, op, input_shapes):
        if missing("cublas"):
            return missing("cublas")
        from native.cuda.tactics.pointwise import _ACT
        if op.params.get("col2im"):
            return "ONNX Col2Im runs on the host"
        w = op.weights.get("kernel")
        rank = np.ndim(w) if isinstance(w, np.ndarray) else \
            len(input_shapes[1]) if input_shapes and len(input_shapes) > 1 and input_shapes[1] is not None else None
        if w is None and not (input_shapes and len(input_shapes) > 1):
            return "a transposed convolution needs its kernel (weights or input 1)"
        if rank is not None and not 3 <= rank <= 5:
            return f"{rank - 2}-D transposed convolutions run on the host"
        for step in op.params.get("post_ops") or ():
            if step["op"] not in ("bias", "add", "activation"):
                return f"post-op {step['op']} has no GPU kernel"
            if step["op"] == "activation" and step["type"] not in _ACT:
                return f"fused activation {step['type']} has no GPU kernel"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm import matmul
        if op.params.get("col2im"):
            raise TacticRefusal("ONNX Col2Im runs on the host")
        wh = op.weights.get("kernel")
        wd = None
        if not isinstance(wh, np.ndarray):   # the kernel as a tensor: transposed on the device every run
            wd = on_device(inputs[1]) if len(inputs) > 1 else None
            if not isinstance(wd, GpuArray):
                raise TacticRefusal("a transposed convolution without a kernel runs on the host")
        x = on_device(inputs[0])
        dtype = same_float([x] if wd is None else [x, wd])
        suffix(dtype)
        # a reduced-precision layer with a fused epilogue keeps its sums in float32 through the epilogue and rounds
        # once (the CPU's FP16 emulation does the same): logits stay FP32 up to a fused Sigmoid
        wide = dtype != np.float32 and bool(op.params.get("post_ops"))
        acc = np.dtype(np.float32) if wide else dtype
        fn = kernel(SRC, "col2im" + suffix(acc))
        g = int(op.params.get("groups", 1) or 1)
        nd = x.ndim - 2
        wshape = tuple(wh.shape) if wd is None else wd.shape
        if not 1 <= nd <= 3 or len(wshape) != x.ndim:
            raise TacticRefusal(f"{nd}-D transposed convolution runs on the host")
        n, c = x.shape[:2]
        mg = int(wshape[1])
        ks = [int(k) for k in (op.params.get("kernel_shape") or wshape[2:])]
        in_sizes = [int(d) for d in x.shape[2:]]
        strides, dil, pre, out_sizes = deconv_geometry(op.params, in_sizes, ks)
        m = g * mg
        shape = (n, m, *out_sizes)
        y = GpuArray(shape, acc) if wide else out_array(outputs, 0, shape, dtype)
        if y.size == 0:
            return [out_array(outputs, 0, shape, dtype)]
        bias = op.weights.get("bias")
        if bias is not None:
            bias = weight(bias, dtype)     # the values the layer's storage type holds
        elif len(inputs) > 2 and inputs[2] is not None:
            bias = on_device(inputs[2])
            same_float([bias, x])
        if bias is not None and wide:
            from native.cuda.tactics.tensor import cast
            bias = cast(bias, acc)
        P, taps = int(np.prod(in_sizes, dtype=np.int64)), int(np.prod(ks, dtype=np.int64))
        if wd is None:
            wt = packed_kernel(wh, g, dtype)
        else:
            from native.cuda.tactics.tensor import transpose
            wt = transpose(wd.reshape((g, c // g, mg * taps)), [0, 2, 1])
        tf32 = op.math == "tf32"
        pad3 = [1] * (3 - nd)
        s = np.zeros(20, np.int64)
        s[2:5], s[5:8] = pad3 + in_sizes, pad3 + list(out_sizes)
        s[8:11], s[11:14] = pad3 + ks, pad3 + list(strides)
        s[14:17], s[17:20] = pad3 + list(dil), [0] * (3 - nd) + list(pre)
        bptr = np.uint64(bias.ptr if bias is not None else 0)
        if g == 1 or n == 1:   # one (batched) GEMM for every item: columns [n, M * taps, P]
            xb = x.reshape((n, c, P)) if g == 1 else x.reshape((g, c // g, P))
            cols = matmul(wt.reshape((mg * taps, c)) if g == 1 else wt, xb, tf32=tf32, out_dtype=np.float32)
            s[0], s[1] = n, m
            launch(fn, grid_for(y.size), (256, 1, 1), [np.uint64(y.ptr), np.uint64(cols.ptr), bptr, s])
        else:                  # groups and a batch: one grouped GEMM per item
            item_x, item_y = c * P * x.dtype.itemsize, y.size // n * y.dtype.itemsize
            s[0], s[1] = 1, m
            for i in range(n):
                xi = GpuArray((g, c // g, P), x.dtype, x.ptr + i * item_x, base=x)
                cols = matmul(wt, xi, tf32=tf32, out_dtype=np.float32)
                launch(fn, grid_for(y.size // n), (256, 1, 1),
                       [np.uint64(y.ptr + i * item_y), np.uint64(cols.ptr), bptr, s])
        y = epilogue(y, op, inputs)
        if wide:
            from native.cuda.tactics.tensor import cast
            y = cast(y, dtype, outputs)
        return [y]
