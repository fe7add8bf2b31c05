"""Inverted-residual blocks as one layer (MobileNetV2/V3, PP-LCNet, PaddleOCR's classifier: ISSUE 26's small models).

    e = act_e(We @ x + be)                  (a 1x1 Convolution, its activation fused as a post-op; optional: e = x)
    d = act_d(depthwise_k(e) + bd)          (a depthwise Convolution, groups == channels, any stride and padding)
    d = SqueezeExcite(d)                    (optional: the squeeze-excite layer of passes/fusion_se.py)
    y = Wp @ d + bp [+ x]                   (a 1x1 Convolution, the block input added where it has a shortcut)

becomes one `InvertedResidual` layer reading x (and writing y). Three or four layers cost their dispatch and each
its own NCHW tensor; the expanded tensor (4-6x the block's channels) is the largest of them, and a channels-last
depthwise tactic transposes it both ways. The fused layer's kernels keep it channels-last from the expand GEMM's
output to the project GEMM's input (native/cpu/kernels/inverted_residual.py), where a GEMM reads either layout for
free (a transposed operand), and fold the squeeze-excite gate into the project kernel.

Only where the device implements it (`fuses_inverted_residual`: the CPU), in FP32 builds without TF32 math, INT8,
Q/DQ emulation or precision constraints on the layers (the layer has FP32 kernels only), and for small maps
(MAX_EXPANDED, MAX_LAYER_MACS), where the per-layer costs are a block's time and no layer would use the second core.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_se import _fusable_build as _fp32_build
from backends.engine.builder.passes.fusion_util import View, fused_node

ACTIVATIONS = ("RELU", "HARD_SWISH", "HARD_SWISH_RELU6")    # the expand / depthwise activations the kernels apply
# the largest expanded tensor (elements, all of N, E, H, W known) fused: past it the per-layer costs the layer saves
# are noise against the work, the unfused layers split over the pool from their own bars, and the layer's per-thread
# scratch (native/cpu/kernels/inverted_residual.py) would hold several such tensors
MAX_EXPANDED = 1 << 20
# nor a block one of whose layers reaches the CPU convolutions' split bar (native/cpu/kernels/conv/tuning.py
# PARALLEL_MIN_MACS): those layers use the second core on their own, which the fused layer does not (a hand-off
# costs more than half of a small block; native/cpu/kernels/inverted_residual.py SPLIT_MIN_MACS)
MAX_LAYER_MACS = 1 << 22
SE_ACTIVATIONS = ("RELU", "HARD_SIGMOID", "HARD_SWISH", "CLIP")


def _plain_conv(node):
    """The node's (kernel, bias or None) when it is a float32 2-D Convolution with constant weights and nothing
    fused but post_ops (checked by the callers), else None."""
    p = node.params if node is not None else {}
    if node is None or node.kind != "Convolution" or len(node.outputs) != 1 or p.get("integer") or p.get("side") \
            or p.get("emulate") or p.get("int8") or (p.get("auto_pad") or "NOTSET") != "NOTSET":
        return None
    if [i for i in node.inputs[1:3] if i is not None] or set(node.weights) - {"kernel", "bias"}:
        return None
    k = node.weights.get("kernel")
    if k is None or np.asarray(k).dtype != np.float32 or np.asarray(k).ndim != 4:
        return None
    if any(d != 1 for d in (p.get("dilations") or [1, 1])):
        return None
    b = node.weights.get("bias")
    if b is not None and (np.asarray(b).dtype != np.float32 or np.asarray(b).size != np.asarray(k).shape[0]):
        return None
    return np.asarray(k), (None if b is None else np.asarray(b).reshape(-1))


def _activation(steps, allowed=ACTIVATIONS):
    """[{"type", "alpha", "beta"}] for post_ops that are at most one activation of `allowed`, else None."""
    steps = list(steps or ())
    if len(steps) > 1 or any(s.get("op") != "activation" or s.get("type") not in allowed for s in steps):
        return None
    return [{"type": s["type"], "alpha": s.get("alpha", 0.0), "beta": s.get("beta", 0.0)} for s in steps]


def _pointwise(node, c_in):
    """(kernel [M, c_in], bias) of a 1x1, stride-1, unpadded, ungrouped convolution on c_in channels, else None."""
    got = _plain_conv(node)
    p = node.params if node is not None else {}
    if got is None or (p.get("groups") or 1) != 1 or list(got[0].shape[1:]) != [c_in, 1, 1]:
        return None
    if any(s != 1 for s in (p.get("strides") or [1, 1])) or \
            any(v for k in ("pre_padding", "post_padding") for v in (p.get(k) or ())):
        return None
    return got[0].reshape(got[0].shape[0], c_in), got[1]


def _depthwise(node, c):
    """(kernel [c, kh, kw], bias, params) of a depthwise convolution on c channels, else None."""
    got = _plain_conv(node)
    p = node.params if node is not None else {}
    if got is None or (p.get("groups") or 1) != c or got[0].shape[:2] != (c, 1):
        return None
    ks = list(got[0].shape[2:])
    pre, post = list(p.get("pre_padding") or [0, 0]), list(p.get("post_padding") or [0, 0])
    strides = list(p.get("strides") or [1, 1])
    if len(pre) != 2 or len(post) != 2 or len(strides) != 2 or min(pre + post) < 0 or min(strides) < 1:
        return None
    return got[0].reshape(c, *ks), got[1], {"kernel_shape": ks, "strides": strides, "pre_padding": pre,
                                            "post_padding": post}


def _se(node):
    """The squeeze-excite layer's (weights, params) when its activations are ones the kernels apply, else None."""
    if node is None or node.kind != "SqueezeExcite":
        return None
    p = node.params
    for key in ("squeeze_ops", "excite_ops"):
        if any(s.get("type") not in SE_ACTIVATIONS for s in p.get(key) or ()):
            return None
    keys = ("squeeze_kernel", "squeeze_bias", "excite_kernel", "excite_bias")
    return {k: node.weights[k] for k in keys if k in node.weights}, \
        {"squeeze_ops": list(p.get("squeeze_ops") or []), "excite_ops": list(p.get("excite_ops") or [])}


def _project(view, node, c_mid, x):
    """(kernel, bias, residual) of the block's last 1x1 convolution: no post-ops, or only x added (residual)."""
    pw = _pointwise(node, c_mid)
    if pw is None:
        return None
    steps = list(node.params.get("post_ops") or ())
    if not steps:
        return pw[0], pw[1], False
    if len(steps) != 1 or steps[0].get("op") != "add":
        return None
    i = steps[0].get("input")
    if not isinstance(i, int) or i >= len(node.inputs) or node.inputs[i] != x or \
            [j for j, t in enumerate(node.inputs) if t is not None and j not in (0, i)]:
        return None
    if view.shape(x) != view.shape(node.outputs[0]):
        return None
    return pw[0], pw[1], True


def _known(v) -> bool:
    """A dimension known at build time (dynamic ones are None or -1)."""
    return isinstance(v, int) and v > 0


def _batch(shape) -> int:
    return shape[0] if _known(shape[0]) else 1


def _splits_alone(view, x, dw, e, m, expand) -> bool:
    """Whether one of the block's convolutions reaches MAX_LAYER_MACS multiply-adds (an unknown batch counted as 1;
    unknown maps as reaching it)."""
    xs, ys = view.shape(x), view.shape(dw.outputs[0])
    if xs is None or ys is None or not all(_known(v) for v in list(xs[1:]) + list(ys[2:])):
        return True
    kh, kw = dw.params.get("kernel_shape") or [1, 1]
    n, (c, h, w) = _batch(xs), xs[1:]
    out = n * ys[2] * ys[3]
    return max(n * c * e * h * w if expand else 0, out * e * kh * kw, out * e * m) >= MAX_LAYER_MACS


def _expand(view, dw, c):
    """(node, (kernel, bias), activation) of the expand convolution feeding the depthwise layer `dw` on c channels,
    or (None, None, []) for a block without one (MobileNetV3's first: the depthwise layer reads the stem)."""
    ex = view.producer(dw.inputs[0], "Convolution")
    if ex is None or view.sole_consumer(dw.inputs[0]) is not dw:
        return None, None, []
    xs = view.shape(ex.inputs[0])
    e = _pointwise(ex, xs[1]) if xs is not None and len(xs) == 4 and xs[1] is not None else None
    e_act = _activation(ex.params.get("post_ops")) if e is not None else None
    if e_act is None or e[0].shape[0] != c or view.dtype(ex.inputs[0]) != "float32":
        return None, None, []
    return ex, e, e_act


def fuse_inverted_residual(graph, config, logger) -> int:
    """1x1 conv (+ act) → depthwise conv (+ act) → [squeeze-excite] → 1x1 conv (+ x) ⇒ one InvertedResidual layer
    (see the module doc)."""
    dev = getattr(config, "device", None)
    if not getattr(dev, "fuses_inverted_residual", False) or not _fp32_build(config):
        return 0
    view, count = View(graph), 0
    for dw in list(graph.nodes):
        if dw not in graph.nodes or dw.kind != "Convolution":
            continue
        shape = view.shape(dw.inputs[0])
        if shape is None or len(shape) != 4 or view.dtype(dw.inputs[0]) != "float32":
            continue
        c = shape[1]
        if not all(_known(v) for v in shape[1:]) or _batch(shape) * c * shape[2] * shape[3] > MAX_EXPANDED:
            continue    # maps of unknown size (a detector's dynamic H, W) are left to the layers, as large ones
        d = _depthwise(dw, c)
        d_act = _activation(dw.params.get("post_ops")) if d is not None else None
        if d_act is None:
            continue
        ex, e, e_act = _expand(view, dw, c)
        x = ex.inputs[0] if ex is not None else dw.inputs[0]
        nxt = view.sole_consumer(dw.outputs[0])
        se = _se(nxt)
        nodes = ([ex] if ex is not None else []) + [dw] + ([nxt] if se is not None else [])
        last = view.sole_consumer(nxt.outputs[0]) if se is not None else nxt
        pr = _project(view, last, c, x)
        if pr is None:
            continue
        nodes.append(last)
        if any(n.meta.get("precision_constraint") is not None or n.meta.get("output_types") or n.subgraphs
               for n in nodes) or _splits_alone(view, x, dw, c, pr[0].shape[0], ex is not None):
            continue
        weights = {"dw_kernel": np.ascontiguousarray(d[0]), "project_kernel": np.ascontiguousarray(pr[0])}
        if ex is not None:
            weights["expand_kernel"] = np.ascontiguousarray(e[0])
        for key, b in (("expand_bias", e[1] if ex is not None else None), ("dw_bias", d[1]), ("project_bias", pr[1])):
            if b is not None:
                weights[key] = np.ascontiguousarray(b, np.float32)
        params = dict(d[2], expand_ops=e_act, dw_ops=d_act, residual=pr[2], squeeze_ops=[], excite_ops=[])
        if se is not None:
            weights.update(se[0])
            params.update(se[1])
        new = fused_node(nodes, "InvertedResidual", [x], last.outputs, params=params, weights=weights)
        view.replace(nodes, new)
        logger.verbose(f"fusion: inverted residual → '{new.name}'")
        count += 1
    return count
