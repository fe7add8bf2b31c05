"""What the INT8 convolutions on int8 NHWC tensors share on every device (passes/int8_io.py hands them the
layer's I/O in params['int8']): the fused epilogue they take, its per-channel scales, and the quantized KRSC kernel.
The epilogue in float32, in this order: v = (acc + bias_q) * scale[c] (+ r * rs), then ReLU / saturation and the
int8 (round to nearest even) or float32 output, where scale = s_x * s_w / s_y and rs = s_r / s_y (int8 residual) or
1 / s_y (float residual) for an int8 output, and s_x * s_w, s_r (or 1) for a float32 one."""
from __future__ import annotations

import numpy as np

from native.shared.int8 import int8_params, quantize_bias, quantize_weights
from native.tactics import TacticRefusal


def io_of(op) -> dict:
    """The INT8 I/O the builder gave the layer (params['int8']['io']), {} when it gave none."""
    return int8_params(op).get("io") or {}


def max_pool_refusal(op, input_shapes) -> str | None:
    """Why the INT8 max pool between int8 NHWC tensors cannot run the layer (None: it can): a 2-D max window,
    [ReLU] fused, same scale in and out. Every device's INT8 max pool asks this, and passes/int8_io.py before it
    moves a pool into INT8."""
    p = op.params
    if p.get("type") != "MAX" or p.get("global") or len(p.get("window") or []) != 2:
        return "the INT8 pool is a 2-D max window"
    if p.get("num_outputs", 1) > 1 or p.get("ceil_mode") or (p.get("auto_pad") or "NOTSET") not in ("NOTSET", "VALID"):
        return "indices, ceil mode and SAME padding run in a float precision"
    steps = [s["op"] if s["op"] != "activation" else s.get("type") for s in p.get("post_ops") or ()]
    if steps not in ([], ["RELU"]):
        return "the INT8 max pool fuses a ReLU and nothing else"
    if input_shapes and input_shapes[0] is not None and len(input_shapes[0]) != 4:
        return "the INT8 max pool reads NHWC"
    return None


def epilogue_plan(op) -> tuple:
    """(residual input index or None, relu) of the layer's post-ops, TacticRefusal for any other epilogue: the
    fused graph takes [], [RELU], [add] and [add, RELU] (the conv's own bias is its `bias` weight)."""
    post = list(op.params.get("post_ops") or ())
    res, relu = None, False
    if post and post[0]["op"] == "add":
        res = post.pop(0)["input"]
    if post and post[0]["op"] == "activation" and post[0]["type"] == "RELU":
        relu = True
        post.pop(0)
    if post:
        raise TacticRefusal(f"post-ops {[s['op'] if s['op'] != 'activation' else s['type'] for s in post]} "
                            f"have no place in the INT8 cuDNN graph")
    return res, relu


OUT_TYPES = ("int8", "float32")     # what an INT8 NHWC convolution writes: requantized int8, or float32 values


def prepared_reason(op) -> str | None:
    """Why an INT8 NHWC convolution tactic cannot take `op` as the INT8 I/O pass left it (None: it can): its input
    scale, a constant kernel, int8 input and an int8 / float32 output, one group, a fusable epilogue."""
    if "input_scale" not in int8_params(op):
        return "no INT8 input scale (params['int8'])"
    if op.weights.get("kernel_hwio") is None and op.weights.get("int8_krsc") is None:
        return "kernel is not a constant weight"
    io = io_of(op)
    if io.get("input") != "int8" or io.get("output") not in OUT_TYPES:
        return "the layer's tensors are not stored int8 (the INT8 I/O pass did not prepare it)"
    if (op.params.get("groups", 1) or 1) != 1:
        return "grouped INT8 convolutions run on another tactic"
    try:
        epilogue_plan(op)
    except TacticRefusal as e:
        return str(e)
    return None


def residual_storage(op, res_idx, dtypes=None) -> str | None:
    """The storage type of the layer's residual input (None: no residual): as given (`dtypes`), else what the INT8
    I/O pass planned (int8 where it gave the input a residual scale, float32 otherwise)."""
    if res_idx is None:
        return None
    if dtypes and res_idx < len(dtypes) and dtypes[res_idx]:
        return dtypes[res_idx]
    return "int8" if str(res_idx) in (int8_params(op).get("residual_scales") or {}) else "float32"


def nhwc_geometry(op, x_shape) -> tuple:
    """(strides, pre pads, post pads, dilations, (oh, ow)) of an NHWC convolution; TacticRefusal for a shape or padding
    the INT8 NHWC kernels do not take."""
    if len(x_shape) != 4:
        raise TacticRefusal("only 4-D NHWC inputs")
    _, h, w, _ = x_shape
    kh, kw = (int(k) for k in op.params["kernel_spatial"])
    st = [int(v) for v in op.params.get("strides") or [1, 1]]
    dil = [int(v) for v in op.params.get("dilations") or [1, 1]]
    pre = [int(v) for v in op.params.get("pre_padding") or [0, 0]]
    post = [int(v) for v in op.params.get("post_padding") or [0, 0]]
    if any(v < 0 for v in pre + post):
        raise TacticRefusal("negative pads run on another tactic")
    oh = (h + pre[0] + post[0] - (kh - 1) * dil[0] - 1) // st[0] + 1
    ow = (w + pre[1] + post[1] - (kw - 1) * dil[1] - 1) // st[1] + 1
    return st, pre, post, dil, (oh, ow)


def channel_scales(op, s_w) -> tuple:
    """(scale of the accumulator per output channel, scale of the residual) in float32: s_x * s_w / s_y and
    s_r / s_y (1 / s_y for a float residual) for an int8 output; s_x * s_w and s_r (1) for a float32 one."""
    p = int8_params(op)
    s_y = p.get("output_scale") if io_of(op).get("output") == "int8" else None
    acc = np.float32(p["input_scale"]) * np.asarray(s_w, np.float32)
    res_idx, _ = epilogue_plan(op)
    s_r = (p.get("residual_scales") or {}).get(str(res_idx)) if res_idx is not None else None
    r = np.float32(1.0) if s_r is None else np.float32(s_r)
    if s_y is not None:
        return (acc / np.float32(s_y)).astype(np.float32), np.float32(r / np.float32(s_y))
    return acc.astype(np.float32), r


def prepared_weights(op) -> dict:
    """The kernel quantized per output channel as [M, KH, KW, C] int8 (cuDNN's KRSC), the int32 bias as float32
    (what the graph adds to the accumulator), and the epilogue's per-channel scales."""
    w = dict(op.weights)
    if "int8_krsc" in w:
        return w
    p = int8_params(op)
    kh, kw = op.params["kernel_spatial"]
    hwio = np.asarray(w["kernel_hwio"], np.float32)
    m = hwio.shape[-1]
    krsc = hwio.reshape(kh, kw, -1, m).transpose(3, 0, 1, 2)
    q, s_w = quantize_weights(krsc, w.get("kernel_scale"), 0, narrow=p.get("narrow_weights", True),
                              rounding=p.get("weight_rounding", "half_even"))
    w["int8_krsc"] = np.ascontiguousarray(q.astype(np.int8))
    w["kernel_scale"] = s_w
    b = quantize_bias(w.get("bias"), p["input_scale"], s_w)
    w["int8_bias"] = (np.zeros(m, np.float32) if b is None else b.astype(np.float32)).reshape(1, m, 1, 1)
    acc, r = channel_scales(op, s_w)
    w["int8_scale"] = acc.reshape(1, m, 1, 1)
    w["int8_bias_scaled"] = (w["int8_bias"] * w["int8_scale"]).astype(np.float32)   # for acc * scale + this
    w["int8_res_scale"] = np.full((1, m, 1, 1), r, np.float32)
    return w
