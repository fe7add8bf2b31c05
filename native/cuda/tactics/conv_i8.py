"""INT8 convolutions on int8 NHWC tensors through implicit-GEMM kernels of our own on the integer tensor cores:
conv_i8.cu (mma.sync m16n8k32, sm_80 on) here and, on Hopper, conv_i8t.py (wgmma fed by the TMA). Both fuse the
INT8 I/O epilogue and evaluate it in float32 in native/shared/int8_io.py's order, so their outputs equal that
contract bit for bit.

Why kernels of our own: on Hopper, cuDNN runs INT8 convolution + bias + rescale + residual graphs on its
runtime-fusion engines, which lose to FP16 on ResNet-50's residual 1x1 convolutions (0.20 ms against FP16's 0.12 at
[128, 56, 56, 64] -> 256 on an H200), and cuBLASLt's IMMA GEMMs take a per-channel scale only on slow kernels (one
or two algorithms, 0.20 ms there). The builder times them against cuDNN's INT8 plans (docs/PERFORMANCE.md,
2026-11-29). One tactic per tile shape;
channels in multiples of the kernel's input step (input) and of the tile width (output), groups 1."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from native.cuda.nvrtc import kernel, launch
from native.cuda.tactics.common import Int8NhwcConv, on_device, out_array, weight
from native.shared.int8_io import epilogue_plan, io_of, nhwc_geometry, prepared_reason, residual_storage
from native.tactics import TacticRefusal, register_tactic

BM, BK = 128, 32                   # the kernel's pixel tile and K slice (conv_i8.cu)
_RES = {None: 0, "int8": 1, "float32": 2, "float16": 3}
_OUT = {"int8": 0, "float32": 1}


class _MmaInt8Conv(Int8NhwcConv):
    bn = 128
    c_align = BK        # input channels in multiples of this (a K slice, or a 16-byte chunk, within one tap)

    def hardware(self) -> str | None:
        """Why this GPU cannot run the kernel (None: it can)."""
        return None

    def kernel(self, res_kind: int, out_kind: int):
        """(function, dynamic shared memory bytes) of the kernel for this residual and output storage."""
        return kernel("conv_i8.cu", f"conv_i8_nhwc_bn{self.bn}_r{res_kind}_o{out_kind}"), 0

    def supports(self, op, input_shapes):
        why = self.hardware()
        if why:
            return why
        why = prepared_reason(op)
        if why:
            return why
        m = int(op.params["num_output_maps"])
        if m % self.bn:
            return f"{m} output channels are not a multiple of this tile's {self.bn}"
        try:
            res_idx, _ = epilogue_plan(op)
            if input_shapes and input_shapes[0] is not None:
                x_shape = tuple(input_shapes[0])
                if len(x_shape) == 4 and x_shape[3] % self.c_align:
                    return f"{x_shape[3]} input channels are not a multiple of {self.c_align}"
                _, _, _, _, (oh, ow) = nhwc_geometry(op, x_shape)
                res_dtype = residual_storage(op, res_idx, getattr(input_shapes, "dtypes", None))
                if res_dtype not in _RES:
                    return f"residual stored {res_dtype}"
                if res_idx is not None and res_idx < len(input_shapes) and input_shapes[res_idx] is not None and \
                        tuple(input_shapes[res_idx]) != (x_shape[0], oh, ow, m):
                    return f"residual {tuple(input_shapes[res_idx])} does not match the output {(x_shape[0], oh, ow, m)}"
        except TacticRefusal as e:
            return str(e)
        return None

    def call(self, op, inputs, outputs) -> "Int8Call":
        """The operands of a call, checked against what the kernel takes (TacticRefusal says what it does not)."""
        x = on_device(inputs[0])
        if x.dtype != np.int8:
            raise TacticRefusal(f"{self.name} reads int8 NHWC input, got {x.dtype}")
        n, h, w, c = x.shape
        m = int(op.params["num_output_maps"])
        if c % self.c_align or m % self.bn:
            raise TacticRefusal(f"channels {c} -> {m} do not fit this kernel ({self.c_align}-channel input steps, "
                                f"{self.bn}-wide tiles)")
        st, pre, _, dil, (oh, ow) = nhwc_geometry(op, x.shape)
        out = io_of(op)["output"]
        y = out_array(outputs, 0, (n, oh, ow, m), np.dtype(out))
        res_idx, relu = epilogue_plan(op)
        r = on_device(inputs[res_idx]) if res_idx is not None and y.size else None
        res_kind = _RES.get(np.dtype(r.dtype).name if r is not None else None)
        if res_kind is None:
            raise TacticRefusal(f"residual stored {r.dtype}")
        for a in (x, y, r):
            if a is not None and a.size and a.ptr % 16:
                raise TacticRefusal("the kernel reads and writes 16-byte aligned tensors")
        if n * oh * ow >= 2 ** 31 or n * h * w >= 2 ** 31:
            raise TacticRefusal("more than 2^31 pixels: the kernel indexes pixels with 32-bit integers")
        kh, kw = (int(k) for k in op.params["kernel_spatial"])
        return Int8Call(x, y, r, res_kind, _OUT[out], m, kh, kw, tuple(st), tuple(pre), tuple(dil), (oh, ow), relu)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        wts = self.prepared(op)
        c = self.call(op, inputs, outputs)
        if c.y.size == 0:
            return [c.y]
        n, h, w, ch = c.x.shape
        (oh, ow), i32 = c.out_hw, np.int32
        # the per-channel float32 vectors as prepared_weights keeps them ([1, M, 1, 1], contiguous: M floats)
        ptrs = [np.uint64(weight(wts[k]).ptr) for k in ("int8_krsc", "int8_bias", "int8_scale")]
        fn, shared = self.kernel(c.res_kind, c.out_kind)
        launch(fn, ((n * oh * ow + BM - 1) // BM, c.m // self.bn, 1), (256, 1, 1),
               [np.uint64(c.x.ptr)] + ptrs +
               [np.uint64(c.r.ptr if c.r is not None else 0), np.uint64(weight(wts["int8_res_scale"]).ptr),
                np.uint64(c.y.ptr), i32(n), i32(h), i32(w), i32(ch), i32(c.m), i32(c.kh), i32(c.kw), i32(oh), i32(ow),
                i32(c.strides[0]), i32(c.strides[1]), i32(c.pre[0]), i32(c.pre[1]), i32(c.dil[0]), i32(c.dil[1]),
                i32(c.relu)], shared=shared)
        return [c.y]


class Int8Call(NamedTuple):
    """A call's checked operands (Int8NhwcConv kernels of this family): input, output, residual (or None) and its
    storage code, the output's storage code, output channels, window, strides, pre-padding, dilation, output size,
    ReLU."""
    x: object
    y: object
    r: object
    res_kind: int
    out_kind: int
    m: int
    kh: int
    kw: int
    strides: tuple
    pre: tuple
    dil: tuple
    out_hw: tuple
    relu: int


@register_tactic
class MmaInt8Conv128(_MmaInt8Conv):
    """Implicit-GEMM INT8 convolution, 128-pixel x 128-channel tiles."""
    name = "mma-int8-128x128"
    bn = 128


@register_tactic
class MmaInt8Conv64(_MmaInt8Conv):
    """Implicit-GEMM INT8 convolution, 128-pixel x 64-channel tiles."""
    name = "mma-int8-128x64"
    bn = 64
