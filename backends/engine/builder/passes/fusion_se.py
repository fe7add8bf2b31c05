"""Squeeze-and-excitation blocks as one layer (MobileNetV3, EfficientNet, PP-LCNet: ISSUE 26's small models).

    s = mean over H, W of x          (Reduce AVG over axes 2, 3 with keep_dims, or a global average Pooling)
    h = act1(W1 @ s + b1)            (a 1x1 Convolution, its activations fused as post-ops)
    g = act2(W2 @ h + b2)            (a 1x1 Convolution: the gate, usually a (hard) sigmoid)
    y = x * g                        (ElementWise PROD, broadcast over H, W)

becomes one `SqueezeExcite` layer reading x, with the two kernels and biases as its weights and the two activation
lists as params. The four layers cost ~80 us alone and 150-200 us inside a run on the 2-core CPU, almost all of it
per-layer work (four dispatches, three tiny arena tensors, four epilogues), for a few hundred thousand flops; the
fused layer does the same numpy operations in the same order (native/cpu/kernels/squeeze_excite.py).

Only where the device implements it (`Device.fuses_squeeze_excite`: the CPU) and only in FP32 builds without TF32
math, INT8, Q/DQ emulation or precision constraints on the four layers: the layer has an FP32 implementation only,
so it must not take a reduced precision (or a TF32 GEMM) away from layers that would have had one.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.fusion_util import View, fused_node, other_input

SE_ACTIVATIONS = ("RELU", "HARD_SIGMOID", "SIGMOID", "HARD_SWISH", "CLIP", "LEAKY_RELU", "TANH")


def _pooled_input(view, node):
    """x when `node` averages x over its two spatial axes into [N, C, 1, 1], else None."""
    if node is None or len(node.outputs) != 1 or node.params.get("post_ops"):
        return None
    if node.kind == "Reduce":
        p = node.params
        if p.get("op") != "AVG" or not p.get("keep_dims", True) or len([i for i in node.inputs if i]) != 1:
            return None
        if sorted(int(a) % 4 for a in (p.get("axes") or [])) != [2, 3]:
            return None
    elif node.kind == "Pooling":
        if node.params.get("type") != "AVERAGE" or not node.params.get("global") or len(node.inputs) != 1:
            return None
    else:
        return None
    x = node.inputs[0]
    shape = view.shape(x)
    if shape is None or len(shape) != 4 or view.dtype(x) != "float32" or shape[1] is None or shape[1] < 1:
        return None   # N, H, W may be dynamic; C sizes the kernels
    return x


def _fc(view, node, c_in):
    """(kernel [M, C], bias [M] or None, activation steps) of a plain 1x1 convolution on [N, c_in, 1, 1], or None."""
    p = node.params if node is not None else {}
    if node is None or node.kind != "Convolution" or len(node.outputs) != 1 or p.get("integer") or p.get("side") \
            or p.get("emulate") or (p.get("groups") or 1) != 1 or list(p.get("kernel_shape") or []) != [1, 1]:
        return None
    if any(p.get(k) and any(p[k]) for k in ("pre_padding", "post_padding")) or \
            any(s != 1 for s in (p.get("strides") or [1, 1])) or (p.get("auto_pad") or "NOTSET") != "NOTSET":
        return None
    if [i for i in node.inputs[1:] if i is not None] or set(node.weights) - {"kernel", "bias"}:
        return None
    k = np.asarray(node.weights.get("kernel")) if "kernel" in node.weights else None
    if k is None or k.dtype != np.float32 or k.ndim != 4 or k.shape[1] != c_in or k.shape[2:] != (1, 1):
        return None
    b = node.weights.get("bias")
    if b is not None and (np.asarray(b).dtype != np.float32 or np.asarray(b).size != k.shape[0]):
        return None
    steps = []
    for s in p.get("post_ops") or ():
        if s.get("op") != "activation" or s.get("type") not in SE_ACTIVATIONS:
            return None
        steps.append({"type": s["type"], "alpha": s.get("alpha", 0.0), "beta": s.get("beta", 0.0)})
    return k.reshape(k.shape[0], c_in), b, steps


def _fusable_build(config) -> bool:
    dev = getattr(config, "device", None)
    return bool(getattr(dev, "fuses_squeeze_excite", False)) and not config.enabled_precisions() \
        and not config.get_flag(BuilderFlag.TF32) and getattr(config, "qdq_emulation", None) is None


def fuse_squeeze_excite(graph, config, logger) -> int:
    """pool → 1x1 conv (+ act) → 1x1 conv (+ act) → x * gate ⇒ one SqueezeExcite layer (see the module doc)."""
    if not _fusable_build(config):
        return 0
    view, count = View(graph), 0
    for pool in list(graph.nodes):
        if pool not in graph.nodes:
            continue
        x = _pooled_input(view, pool)
        if x is None:
            continue
        c = view.shape(x)[1]
        fc1 = view.sole_consumer(pool.outputs[0])
        sq = _fc(view, fc1, c)
        if sq is None:
            continue
        fc2 = view.sole_consumer(fc1.outputs[0])
        ex = _fc(view, fc2, sq[0].shape[0])
        if ex is None or ex[0].shape[0] != c:
            continue
        mul = view.sole_consumer(fc2.outputs[0])
        if mul is None or mul.kind != "ElementWise" or mul.params.get("op") != "PROD" or len(mul.inputs) != 2 \
                or other_input(mul, fc2.outputs[0]) != x or view.rank(mul.outputs[0]) != 4:
            continue
        nodes = [pool, fc1, fc2, mul]
        if any(n.meta.get("precision_constraint") is not None or n.meta.get("output_types") or n.subgraphs
               for n in nodes):
            continue
        weights = {"squeeze_kernel": np.ascontiguousarray(sq[0]), "excite_kernel": np.ascontiguousarray(ex[0])}
        if sq[1] is not None:
            weights["squeeze_bias"] = np.asarray(sq[1], np.float32).reshape(-1)
        if ex[1] is not None:
            weights["excite_bias"] = np.asarray(ex[1], np.float32).reshape(-1)
        new = fused_node(nodes, "SqueezeExcite", [x], mul.outputs,
                         params={"squeeze_ops": sq[2], "excite_ops": ex[2],
                                 "mean_dtype": "float64" if pool.kind == "Pooling" else "float32"},
                         weights=weights)
        view.replace(nodes, new)
        logger.verbose(f"fusion: squeeze-excite → '{new.name}'")
        count += 1
    return count
