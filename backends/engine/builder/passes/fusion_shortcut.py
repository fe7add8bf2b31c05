"""A residual block's projection shortcut merges into the convolution it is added to:

    y = act(conv_a(x) + conv_1x1_s(x2))   ->   y = act([W_a | W_s] . [patches(x); x2[::s, ::s]] + b_a + b_s)

ResNet's downsample blocks add a strided 1x1 convolution of the block input to the second 3x3 convolution. Both
are GEMMs over the same output pixels, so the shortcut's weights become extra columns of the main convolution's
GEMM and its (strided) input extra rows of the patch matrix: the shortcut layer, its output buffer, its GEMM call
and the residual add pass disappear, and the multiply-adds are the same. The merged layer keeps the shortcut's
input at the residual's input slot and records it in params["side"]; every convolution tactic honours it
(native/cpu/kernels/conv/). Runs after the epilogue fusion, which has turned the Add into the main
convolution's "add" post-op.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.passes.fusion_util import View, same_precision


def _plain_pointwise(node):
    """The [M, C] weights and bias of a 1x1, ungrouped, unpadded convolution with constant weights and no
    post-ops (the shortcut), else None."""
    p = node.params
    if node.kind != "Convolution" or p.get("integer") or p.get("post_ops") or p.get("side") or \
            (p.get("groups", 1) or 1) != 1 or list(p.get("kernel_shape") or []) != [1, 1]:
        return None
    if any(p.get("pre_padding") or []) or any(p.get("post_padding") or []) or \
            (p.get("auto_pad") or "NOTSET") not in ("NOTSET", "VALID") or any(d != 1 for d in p.get("dilations") or []):
        return None
    k = node.weights.get("kernel")
    if k is None or len([i for i in node.inputs if i is not None]) != 1 or np.asarray(k).dtype.kind != "f":
        return None
    strides = list(p.get("strides") or [1, 1])
    if len(strides) != 2 or strides[0] != strides[1]:
        return None
    return np.asarray(k).reshape(k.shape[0], k.shape[1]), node.weights.get("bias"), strides


def merge_shortcut_convs(graph, config, logger) -> int:
    if not config.device.merges_shortcut_convs:
        return 0       # the device fuses the residual add itself (CUDA: cuDNN's epilogue), keeping layouts simple
    if "int8" in config.enabled_precisions():
        # the INT8 pass (later) quantizes each convolution with its own input's scale; a merged GEMM has two
        # inputs of different scales and no INT8 kernel, so both would stay FP32 where TensorRT runs them INT8
        logger.verbose("fusion: shortcut convolutions not merged in an INT8 build (each runs INT8 by itself)")
        return 0
    view, count = View(graph), 0
    for main in list(graph.nodes):
        p = main.params
        if main.kind != "Convolution" or p.get("integer") or p.get("side") or (p.get("groups", 1) or 1) != 1 \
                or len(p.get("kernel_shape") or []) != 2 or "kernel" not in main.weights:
            continue
        post = list(p.get("post_ops") or [])
        at = next((i for i, s in enumerate(post) if s["op"] != "bias"), None)
        if at is None or post[at]["op"] != "add":
            continue                       # the residual add must come first (bias steps commute with it)
        slot = post[at]["input"]
        r = main.inputs[slot]
        short = view.producer(r, "Convolution")
        if short is None or view.sole_consumer(r) is not main or not same_precision([short, main]):
            continue
        got = _plain_pointwise(short)
        if got is None:
            continue
        w_s, b_s, strides = got
        w_a = np.asarray(main.weights["kernel"])
        if w_s.shape[0] != w_a.shape[0] or w_s.dtype != w_a.dtype:
            continue
        b_a = main.weights.get("bias")
        bias = (np.zeros(w_a.shape[0], w_a.dtype) if b_a is None else np.asarray(b_a, w_a.dtype).reshape(-1)) + \
            (0 if b_s is None else np.asarray(b_s, w_a.dtype).reshape(-1))
        graph.set_inputs(main, [short.inputs[0] if i == slot else n for i, n in enumerate(main.inputs)])
        main.weights = dict(main.weights, bias=bias.astype(w_a.dtype), side_kernel=np.ascontiguousarray(w_s))
        main.params = dict(p, post_ops=post[:at] + post[at + 1:], side={"input": slot, "strides": strides})
        main.source_nodes = list(main.source_nodes or [main.name]) + list(short.source_nodes or [short.name])
        logger.verbose(f"fusion: shortcut 1x1 conv '{short.name}' merged into the GEMM of '{main.name}'")
        main.name = f"{main.name} + {short.name}"
        graph.erase(short)
        view.refresh()
        count += 1
    return count
