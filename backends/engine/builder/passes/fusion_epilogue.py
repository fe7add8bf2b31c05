"""Convolution / MatrixMultiply epilogue fusions (TensorRT FUS-02/04/06/11/12):

- Convolution + BatchNorm (Normalization BATCH) / Scale / per-channel Mul and Add: folded into kernel and bias.
- Convolution / Deconvolution / MatrixMultiply + bias add + activation + residual add: appended to
  params["post_ops"] (the contract in native/cpu/kernels/fused.py), so the GEMM's result is finished in place.
"""
from __future__ import annotations

import numpy as np

from backends.engine.builder.config import BuilderFlag
from backends.engine.builder.passes.fusion_util import View, other_input, same_precision

EPILOGUE_ACTIVATIONS = {"RELU", "CLIP", "GELU_ERF", "GELU_TANH", "SILU", "HARD_SWISH", "SIGMOID", "LEAKY_RELU",
                        "HARD_SIGMOID", "TANH", "ELU"}
NORMAL_ARITY = {"Convolution": 3, "Deconvolution": 3, "MatrixMultiply": 2}


def _conv_kernel(view, node):
    """(kernel array, bias array or None, where) for a float Convolution with constant weights."""
    if node.params.get("integer") or node.params.get("post_ops"):
        return None
    if "kernel" in node.weights:
        return np.asarray(node.weights["kernel"]), node.weights.get("bias"), "weights"
    if len(node.inputs) > 1:
        k = view.const(node.inputs[1])
        b = view.const(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] is not None else None
        if k is not None and (len(node.inputs) < 3 or node.inputs[2] is None or b is not None) and len(node.inputs) <= 3:
            return k, b, "inputs"
    return None


def _channel_vector(c, m, out_rank, axis=1):
    """c as a length-m vector if it broadcasts only along `axis` of an output of rank out_rank, else None."""
    if c is None or c.dtype.kind != "f":
        return None
    if c.size == 1:
        return np.full(m, c.reshape(-1)[0], c.dtype)
    if out_rank is None or c.ndim > out_rank:
        return None
    full = (1,) * (out_rank - c.ndim) + c.shape
    if c.size != m or full[axis] != m:
        return None
    return c.reshape(-1)


def _bn_scale_shift(view, bn):
    """(s, t) with bn(y) = y * s + t per channel, for Normalization BATCH / Scale CHANNEL/UNIFORM, else None."""
    if bn.kind == "Normalization" and bn.params.get("mode") == "BATCH":
        w = bn.weights

        def get(keys, idx):
            for k in keys:
                if k in w:
                    return np.asarray(w[k])
            return view.const(bn.inputs[idx]) if len(bn.inputs) > idx and bn.inputs[idx] is not None else None
        scale, bias = get(("scale", "gamma"), 1), get(("bias", "beta", "shift"), 2)
        mean, var = get(("mean", "running_mean"), 3), get(("var", "variance", "running_var"), 4)
        if any(v is None for v in (scale, bias, mean, var)):
            return None
        s = scale / np.sqrt(var + bn.params.get("epsilon", 1e-5))
        return s, bias - mean * s
    if bn.kind == "Scale" and bn.params.get("mode", "CHANNEL") in ("CHANNEL", "UNIFORM"):
        p = bn.weights.get("power")
        if p is not None and not np.all(np.asarray(p) == 1):
            return None
        if bn.params.get("mode", "CHANNEL") == "CHANNEL" and bn.params.get("channel_axis", 1) != 1:
            return None
        s = np.asarray(bn.weights.get("scale", 1.0), np.float64)
        t = np.asarray(bn.weights.get("shift", 0.0), np.float64)
        return s, t
    return None


def _scale_kernel(conv, k, s):
    """k scaled per output channel by s: Convolution kernels are [M, C/g, ...]; Deconvolution (ConvTranspose)
    kernels are [C, M/g, ...] with output channel gi*M/g + j read from rows of group gi, column j."""
    kd = k.astype(np.float64)
    if conv.kind == "Convolution":
        return (kd * s.reshape((-1,) + (1,) * (k.ndim - 1))).astype(k.dtype)
    g = conv.params.get("groups", 1) or 1
    c, mg = k.shape[:2]
    kd = kd.reshape((g, c // g, mg) + k.shape[2:]) * s.reshape((g, 1, mg) + (1,) * (k.ndim - 2))
    return kd.reshape(k.shape).astype(k.dtype)


def fold_conv_scale(graph, config, logger) -> int:
    """Convolution / Deconvolution followed by BatchNorm / Scale / per-channel Mul or Add: fold into the
    kernel and bias."""
    view, count = View(graph), 0
    for conv in list(graph.nodes):
        if conv not in graph.nodes or conv.kind not in ("Convolution", "Deconvolution") or \
                conv.kind == "Deconvolution" and conv.params.get("col2im"):
            continue
        while True:
            kb = _conv_kernel(view, conv)
            nxt = view.sole_consumer(conv.outputs[0])
            if kb is None or nxt is None or not same_precision([conv, nxt]) or not view.is_float(conv.outputs[0]):
                break
            k, b, where = kb
            m = k.shape[0] if conv.kind == "Convolution" else k.shape[1] * (conv.params.get("groups", 1) or 1)
            rank = k.ndim
            st = None
            if nxt.kind in ("Normalization", "Scale") and nxt.inputs[0] == conv.outputs[0]:
                st = _bn_scale_shift(view, nxt)
                if st is not None:
                    s, t = (np.broadcast_to(np.asarray(v, np.float64).reshape(-1), (m,)) if np.size(v) in (1, m)
                            else None for v in st)
                    st = None if s is None or t is None else (s, t)
            elif nxt.kind == "ElementWise" and nxt.params.get("op") in ("PROD", "SUM"):
                c = _channel_vector(view.const(other_input(nxt, conv.outputs[0])), m, rank)
                if c is not None:
                    st = (c.astype(np.float64), np.zeros(m)) if nxt.params["op"] == "PROD" else \
                        (np.ones(m), c.astype(np.float64))
            if st is None:
                break
            s, t = st
            dt = k.dtype
            k2 = _scale_kernel(conv, k, s)
            b2 = ((np.zeros(m) if b is None else np.asarray(b, np.float64)) * s + t).astype(dt)
            if where == "weights":
                conv.weights = dict(conv.weights, kernel=k2, bias=b2)
                conv.weights.pop("kernel_gemm", None)
                conv.weights.pop("kernel_gemm_biased", None)
            else:
                kn = view.new_constant(f"{conv.name}/folded_kernel", k2, conv, conv.source_nodes)
                bn_ = view.new_constant(f"{conv.name}/folded_bias", b2, conv, conv.source_nodes)
                graph.set_inputs(conv, [conv.inputs[0], kn, bn_])
            graph.set_outputs(conv, nxt.outputs)
            conv.source_nodes = list(conv.source_nodes or [conv.name]) + list(nxt.source_nodes or [nxt.name])
            old_name = conv.name
            conv.name = f"{conv.name} + {nxt.name}"
            graph.erase(nxt)
            view.refresh()
            logger.verbose(f"fusion: folded {nxt.kind} '{nxt.name}' into convolution '{old_name}'")
            count += 1
    return count


def _bias_vector(view, node, name):
    """Per-output-channel bias for an add after `node` (conv: axis 1; matmul: last axis), else None."""
    c = view.const(name)
    if c is None or c.dtype.kind != "f" or c.size <= 1 and node.kind == "MatrixMultiply":
        return None, None
    out_rank = view.rank(node.outputs[0])
    if node.kind in ("Convolution", "Deconvolution"):
        k = node.weights.get("kernel")
        if k is None and len(node.inputs) > 1:
            k = view.const(node.inputs[1])
        if k is None:
            return None, None
        m = k.shape[0] if node.kind == "Convolution" else k.shape[1] * node.params.get("groups", 1)
        if out_rank is None:
            out_rank = k.ndim
        v = _channel_vector(c, m, out_rank, 1)
        return v, 1
    # MatrixMultiply: c broadcasts along the last axis only
    if out_rank is None or c.ndim > out_rank or any(d != 1 for d in c.shape[:-1]):
        return None, None
    out_shape = view.shape(node.outputs[0])
    n = out_shape[-1] if out_shape is not None and out_shape and out_shape[-1] >= 0 else None
    b = node.weights.get("b")
    if b is None and len(node.inputs) > 1:
        b = view.const(node.inputs[1])
    if n is None and b is not None and np.ndim(b) >= 2:
        n = np.shape(b)[-2] if node.params.get("transpose_b") else np.shape(b)[-1]
    if n is None or c.shape[-1] != n:
        return None, None
    return c.reshape(-1), -1


def _same_shape(view, a, b) -> bool:
    sa, sb = view.shape(a), view.shape(b)
    return sa is not None and sa == sb and view.dtype(a) == view.dtype(b)


def _takes_residual(node, config) -> bool:
    """Whether a residual add fuses into `node`: convolutions everywhere; GEMMs where the device adds it in the
    GEMM itself (`Device.fuses_gemm_residual`: cuBLASLt's C with beta = 1), so the add is no layer of its own."""
    return node.kind == "Convolution" or (
        node.kind == "MatrixMultiply" and getattr(getattr(config, "device", None), "fuses_gemm_residual", False))


def fuse_epilogues(graph, config, logger) -> int:
    """Conv/Deconv/MatMul followed by bias add, activation, residual add: appended to params['post_ops']."""
    view, count = View(graph), 0
    for node in list(graph.nodes):
        if node not in graph.nodes or node.kind not in NORMAL_ARITY or node.params.get("integer"):
            continue
        if not view.is_float(node.outputs[0]) or len(node.outputs) != 1:
            continue
        while True:
            t = node.outputs[0]
            nxt = view.sole_consumer(t)
            if nxt is None or not same_precision([node, nxt]):
                break
            post = list(node.params.get("post_ops") or [])
            step, extra = None, None
            if nxt.kind == "Activation" and nxt.params.get("type") in EPILOGUE_ACTIVATIONS and len(nxt.inputs) == 1:
                step = {"op": "activation", "type": nxt.params["type"], "alpha": nxt.params.get("alpha", 0.0),
                        "beta": nxt.params.get("beta", 0.0)}
            elif nxt.kind == "ElementWise" and nxt.params.get("op") in ("MAX", "MIN") and \
                    _device_can(config, "fuses_bound_clip"):
                step = _bound_as_clip(view, nxt, t)
            elif nxt.kind == "ElementWise" and nxt.params.get("op") == "SUM" and other_input(nxt, t) is not None:
                o = other_input(nxt, t)
                vec, axis = _bias_vector(view, node, o)
                if vec is not None:
                    key = f"post_bias_{len(post)}"
                    node.weights = dict(node.weights, **{key: vec.astype(np.dtype(view.dtype(t)))})
                    step = {"op": "bias", "weight": key, "axis": axis}
                elif view.const(o) is None and _takes_residual(node, config) and _same_shape(view, o, t) and \
                        nxt.outputs[0] not in view.ins:
                    ar = NORMAL_ARITY[node.kind]
                    inputs = list(node.inputs) + [None] * (ar - len(node.inputs)) if len(node.inputs) < ar \
                        else list(node.inputs)
                    extra = inputs + [o]
                    step = {"op": "add", "input": len(extra) - 1}
            if step is None:
                break
            if extra is not None:
                graph.set_inputs(node, extra)
            node.params = dict(node.params, post_ops=post + [step])
            graph.set_outputs(node, nxt.outputs)
            node.source_nodes = list(node.source_nodes or [node.name]) + list(nxt.source_nodes or [nxt.name])
            logger.verbose(f"fusion: {node.kind} '{node.name}' + {step['op']} from '{nxt.name}'")
            node.name = f"{node.name} + {nxt.name}"
            graph.erase(nxt)
            # the node now also reads `o` (residual): move it down to where the add stood
            if extra is not None:
                _move_after_inputs(graph, node)
            view.refresh()
            count += 1
    return count


def fuse_norm_activation(graph, config, logger) -> int:
    """A LAYER Normalization (its statistics outputs unread) followed by an activation (a keyword-spotting MLP's LayerNorm + Relu):
    the activation as a post-op of the normalization, one layer fewer (on the CPU, whose Normalization tactics
    apply it in place to their result, the Activation layer's own floats; RELU and CLIP only: a reduced-precision
    layer rounds once, after the activation, and those two commute with rounding, so the pair's result is kept)."""
    if not _device_can(config, "norm_post_ops"):
        return 0
    view, count = View(graph), 0
    for node in list(graph.nodes):
        if node not in graph.nodes or node.kind != "Normalization" or \
                node.params.get("mode", "LAYER") != "LAYER" or node.params.get("post_ops"):
            continue
        stats = list(node.outputs[1:])    # ONNX LayerNormalization's mean / inverse std: only when nothing reads them
        if any(s and (graph.users(s) or s in graph.output_names) for s in stats):
            continue
        t = node.outputs[0]
        nxt = view.sole_consumer(t)
        if nxt is None or not same_precision([node, nxt]) or not view.is_float(t) or nxt.kind != "Activation" or \
                nxt.params.get("type") not in NORM_ACTIVATIONS or list(nxt.inputs) != [t]:
            continue
        step = {"op": "activation", "type": nxt.params["type"], "alpha": nxt.params.get("alpha", 0.0),
                "beta": nxt.params.get("beta", 0.0)}
        node.params = dict(node.params, post_ops=[step])
        graph.set_outputs(node, list(nxt.outputs) + stats)
        node.source_nodes = list(node.source_nodes or [node.name]) + list(nxt.source_nodes or [nxt.name])
        logger.verbose(f"fusion: Normalization '{node.name}' + activation from '{nxt.name}'")
        node.name = f"{node.name} + {nxt.name}"
        graph.erase(nxt)
        view.refresh()
        count += 1
    return count


NORM_ACTIVATIONS = {"RELU", "CLIP"}   # piecewise x or a constant: rounding to a reduced precision commutes with them


def _device_can(config, capability: str) -> bool:
    """What the build's device declares (native/device.py capabilities); a config without a device is the CPU's."""
    from native.device import get_device
    dev = getattr(config, "device", None)
    if dev is None or isinstance(dev, str):
        dev = get_device(dev or "cpu")
    return bool(getattr(dev, capability, False))


def _bound_as_clip(view, nxt, t):
    """max(t, c) / min(t, c) with a one-element float constant c as a CLIP post-op (alpha c, beta inf / alpha -inf,
    beta c), or None. The same floats as numpy's maximum / minimum (CPU clip keeps a NaN as maximum does and
    returns the bound on ties, as maximum(t, c) returns c); with the constant first a tie returns t, which differs
    from the bound only in the sign of zero, so a constant first is taken only when it is not zero. Keras models
    write their clamps so (oww_embedding: a conv + LeakyRelu, then tf.math.maximum with a scalar, 13 times)."""
    if len(nxt.inputs) != 2 or t not in nxt.inputs:
        return None
    o = other_input(nxt, t)
    c = view.const(o)
    dtype = view.dtype(t)
    if c is None or c.size != 1 or c.dtype.kind != "f" or dtype is None or np.dtype(dtype) != c.dtype:
        return None
    rank = view.rank(t)
    if rank is None or c.ndim > rank:
        return None
    v = float(c.reshape(-1)[0])
    if v != v or (nxt.inputs[0] != t and v == 0.0) or not (abs(v) < 3e38 or v in (-np.inf, np.inf)):
        return None
    lo, hi = (v, np.inf) if nxt.params["op"] == "MAX" else (-np.inf, v)
    return {"op": "activation", "type": "CLIP", "alpha": lo, "beta": hi}


def _move_after_inputs(graph, node):
    """Place `node` right after the last producer of its inputs (keeps topological order after adding an input)."""
    needed = set(i for i in node.inputs if i is not None)
    rest = [n for n in graph.nodes if n is not node]
    last = None
    for n in rest:
        if needed & set(n.outputs):
            last = n
    if last is not None:
        graph.move_after(node, last)
    elif rest:
        graph.move_before(node, rest[0])


def _is_const(weights, ref, value) -> bool:
    """`ref` ("w:<key>") names a one-element float32 constant equal to `value`."""
    if not ref.startswith("w:"):
        return False
    c = weights.get(ref[2:])
    return isinstance(c, np.ndarray) and c.dtype == np.float32 and c.size == 1 and c.ndim <= 4 and \
        float(c.reshape(-1)[0]) == value


def is_relu6_swish(node) -> bool:
    """A Pointwise layer computing x + 3, clipped to [0, 6], times x, / 6 of its one input (a hand-written
    hard-swish: PaddleOCR's models hold 18-28 of them), in float32 constants."""
    prog, w = node.params.get("program") or [], node.weights
    if node.kind != "Pointwise" or len(prog) != 4 or len(node.inputs) != 1 or len(node.outputs) != 1:
        return False
    s0, s1, s2, s3 = prog
    return (s0["op"] == "ElementWise" and s0["params"].get("op") == "SUM" and len(s0["args"]) == 2
            and "in:0" in s0["args"] and _is_const(w, other_arg(s0["args"], "in:0"), 3.0)
            and s1["op"] == "Activation" and s1["args"] == ["s:0"] and s1["params"].get("type") == "CLIP"
            and s1["params"].get("alpha") == 0.0 and s1["params"].get("beta") == 6.0
            and s2["op"] == "ElementWise" and s2["params"].get("op") == "PROD" and sorted(s2["args"]) == ["in:0", "s:1"]
            and s3["op"] == "ElementWise" and s3["params"].get("op") == "DIV" and s3["args"][0] == "s:2"
            and _is_const(w, s3["args"][1], 6.0))


def other_arg(args, ref):
    return args[1] if args[0] == ref else args[0]


def _fp32_build(config) -> bool:
    return not config.enabled_precisions() and not config.get_flag(BuilderFlag.TF32) and \
        getattr(config, "qdq_emulation", None) is None


def fold_relu6_swish(graph, config, logger) -> int:
    """Convolution → Pointwise `x + 3, clip to [0, 6], times x, / 6` (a hand-written hard-swish, after the pointwise
    chains are formed): the chain becomes the convolution's HARD_SWISH_RELU6 post-op, applied in place by the
    convolution's epilogue (in the compiled depthwise loops' own epilogue), one layer and one pass over memory
    fewer. Its floats are the chain's (native/cpu/kernels/activations.py). Only where the device declares
    `fuses_relu6_swish` (the CPU) and in FP32 builds: the post-op has an FP32 implementation only."""
    if not _device_can(config, "fuses_relu6_swish") or not _fp32_build(config):
        return 0
    view, count = View(graph), 0
    for pw in list(graph.nodes):
        if pw not in graph.nodes or not is_relu6_swish(pw):
            continue
        t = pw.inputs[0]
        conv = view.prod.get(t)
        if conv is None or conv.kind != "Convolution" or conv.params.get("integer") or len(conv.outputs) != 1 or \
                view.sole_consumer(t) is not pw or view.dtype(t) != "float32" or not same_precision([conv, pw]) or \
                any(n.meta.get("precision_constraint") is not None or n.meta.get("output_types") for n in (conv, pw)):
            continue
        step = {"op": "activation", "type": "HARD_SWISH_RELU6", "alpha": 0.0, "beta": 0.0}
        conv.params = dict(conv.params, post_ops=list(conv.params.get("post_ops") or []) + [step])
        graph.set_outputs(conv, pw.outputs)
        conv.source_nodes = list(conv.source_nodes or [conv.name]) + list(pw.source_nodes or [pw.name])
        logger.verbose(f"fusion: convolution '{conv.name}' + hard-swish chain '{pw.name}' (HARD_SWISH_RELU6)")
        conv.name = f"{conv.name} + {pw.name}"
        graph.erase(pw)
        view.refresh()
        count += 1
    return count
