"""INT8: which layers run in INT8, with which scales (implicit quantization), and Q/DQ processing (explicit).

Implicit (no Q/DQ in the network, BuilderFlag.INT8): every tensor's scale comes from calibration (see
backends.engine.calibration) or from `tensor.set_dynamic_range(lo, hi)` (scale max(|lo|, |hi|) / 127, which wins
over calibration). A Convolution or MatrixMultiply with constant weights whose input has a scale runs in INT8
(per-channel weight scales from max|w|, clamp [-127, 127]); its output is INT8 (requantized with its tensor's
scale) when that tensor has one, except for the last such layer before a network output, which keeps an FP32
output (TensorRT's "smoothing", BLD-54). Layers without an INT8 implementation on the device run in FP32 on the
dequantized values. A build that would run no layer in INT8 for lack of scales is an error naming the tensor.

Explicit (the network has QuantizeLinear/DequantizeLinear, e.g. from ONNX Runtime's quantize_static): the scales
are those of the Q/DQ layers and nothing is calibrated. Zero points must be 0 and types int8 (TensorRT's rule;
anything else is an error naming the layer). The pass
  * records, before constant folding, the scale of DequantizeLinear layers on constant int8 weights
    (`record_qdq_weights`), so the INT8 layer quantizes its weights with exactly the model's scales;
  * propagates "this tensor holds INT8 values of scale s" from every Q->DQ pair through layers that commute with
    quantization (max pooling, ReLU, reshape/transpose, concat of equal scales) and drops Q->DQ pairs that
    re-quantize a tensor with the scale it already has (exact identities);
  * fuses [DQ input, DQ weights] -> Convolution / MatrixMultiply (+ its fused epilogue) -> Q->DQ into one INT8
    layer with a requantized output.
"""
from __future__ import annotations

from backends.engine.builder.passes.precision import time_int8_layers
import numpy as np

from backends.engine.builder.passes import int8_io
from backends.engine.builder.passes.dead import eliminate_dead_layers
from backends.engine.runtime.executor import node_op
from native.device import get_device
from native.errors import BuildError
from native.tactics import tactics_for, unsupported_reason

INT8_KINDS = ("Convolution", "MatrixMultiply")
_WEIGHT_KEY = {"Convolution": ("kernel", "kernel_scale", 0), "MatrixMultiply": ("b", "b_scale", None)}
_COMMUTING = ("Shuffle",)


def int8_rounding(device) -> str:
    """The device's rounding of FP32 -> INT8 (its declared `int8_rounding`: the DLA rounds ties away from zero,
    GPUs and the CPU to even)."""
    return get_device(device).int8_rounding


# explicit quantization ---------------------------------------------------------------------------------------

def has_qdq(graph) -> bool:
    return any(n.kind in ("Quantize", "Dequantize") and not n.params.get("dynamic") for n in graph.nodes)


def _const(graph, prod, name):
    p = prod.get(name) if name is not None else None
    return p.weights.get("value") if p is not None and p.kind == "Constant" else None


def check_zero_points(graph):
    """TensorRT's Q/DQ: int8, zero point 0. Anything else is a BuildError naming the layer."""
    prod = graph.producers()
    for n in graph.nodes:
        if n.kind not in ("Quantize", "Dequantize") or n.params.get("dynamic"):
            continue
        zp_name = n.inputs[2] if len(n.inputs) > 2 else None
        zp = _const(graph, prod, zp_name)
        if zp_name is not None and zp is None:
            raise BuildError(f"{n.kind} layer '{n.fused_name}': its zero point is not a constant; INT8 Q/DQ need a "
                             f"constant zero point of 0")
        out_type = np.asarray(zp).dtype.name if zp is not None else n.params.get("output_dtype") or "uint8"
        if n.kind == "Quantize" and out_type != "int8" or n.kind == "Dequantize" and zp is not None \
                and np.asarray(zp).dtype.name not in ("int8", "int32"):
            raise BuildError(f"{n.kind} layer '{n.fused_name}' quantizes to {out_type}; INT8 builds need signed int8 "
                             f"Q/DQ with zero point 0 (as TensorRT). Re-quantize the model symmetrically (ONNX "
                             f"Runtime: activation_type=QInt8, weight_type=QInt8, extra_options "
                             f"ActivationSymmetric/WeightSymmetric=True) or build without --int8")
        if zp is not None and np.any(np.asarray(zp) != 0):
            raise BuildError(f"{n.kind} layer '{n.fused_name}' has zero point {np.asarray(zp).ravel()[:4].tolist()}; "
                             f"INT8 Q/DQ must have zero point 0 (TensorRT supports symmetric quantization only). "
                             f"Re-quantize with symmetric activations and weights")
        if n.params.get("block_size"):
            raise BuildError(f"{n.kind} layer '{n.fused_name}' uses blocked quantization; INT8 builds support "
                             f"per-tensor and per-axis scales only")


def record_qdq_weights(graph) -> int:
    """Before constant folding: remember the per-channel scale of each DQ(int8 constant) feeding a conv kernel or a
    matmul's right operand (folding turns it into float weights; the INT8 layer re-derives the int8 values)."""
    prod = graph.producers()
    n_found = 0
    for n in graph.nodes:
        if n.kind not in INT8_KINDS or len(n.inputs) < 2:
            continue
        dq = prod.get(n.inputs[1])
        if dq is None or dq.kind != "Dequantize":
            continue
        q, scale = _const(graph, prod, dq.inputs[0]), _const(graph, prod, dq.inputs[1])
        if q is None and prod.get(dq.inputs[0]) is not None and prod[dq.inputs[0]].kind == "Quantize":
            # FP32 weights quantized by a Q layer in the graph: DQ(Q(w, s), s) folds to the same q * s
            qn = prod[dq.inputs[0]]
            w, s_q = _const(graph, prod, qn.inputs[0]), _const(graph, prod, qn.inputs[1])
            if w is not None and s_q is not None and np.array_equal(np.asarray(s_q), np.asarray(scale)) \
                    and qn.params.get("axis", 1) == dq.params.get("axis", 1):
                q = np.zeros(np.shape(w), np.int8)
        if q is None or scale is None or np.asarray(q).dtype != np.int8:
            continue
        scale = np.asarray(scale, np.float32).reshape(-1)
        axis = dq.params.get("axis", 1) % np.ndim(q)
        n.meta["qdq_weight"] = {"scale": scale.tolist(), "axis": int(axis) if scale.size > 1 else None}
        n_found += 1
    return n_found


def _per_tensor_scale(graph, prod, node):
    s = _const(graph, prod, node.inputs[1] if len(node.inputs) > 1 else None)
    if s is None or np.size(s) != 1:
        return None
    return float(np.asarray(s, np.float32).reshape(()))


def _qdq_pair_scale(graph, prod, dq):
    """The scale of DQ(Q(x)) when dq is such a pair's DQ (per tensor, equal scales), else None."""
    if dq is None or dq.kind != "Dequantize":
        return None
    q = prod.get(dq.inputs[0])
    if q is None or q.kind != "Quantize":
        return None
    s_q, s_dq = _per_tensor_scale(graph, prod, q), _per_tensor_scale(graph, prod, dq)
    return s_q if s_q is not None and s_q == s_dq else None


def _commutes(node) -> bool:
    if node.kind in _COMMUTING:
        return True
    if node.kind == "Activation":
        return node.params.get("type") == "RELU"
    if node.kind == "Pooling":
        return node.params.get("type", "MAX") == "MAX" and not node.params.get("post_ops")
    return node.kind == "Concatenation"


def _replace_uses(graph, old, new):
    graph.replace_all_uses_with(old, new, outputs=False)


def _propagate(graph, prod, qscale, n):
    if _commutes(n):
        ins = [i for i in n.inputs if i is not None and _const(graph, prod, i) is None]
        scales = {qscale.get(i) for i in ins}
        if ins and len(scales) == 1 and None not in scales:
            for o in n.outputs:
                qscale[o] = scales.pop() if len(n.outputs) == 1 else next(iter(scales))


def process_qdq(graph, config, logger) -> dict:
    """Explicit quantization after the float fusions: returns {tensor: scale} of the tensors that hold INT8 values,
    having fused Q/DQ into INT8 layers and dropped redundant pairs."""
    check_zero_points(graph)
    rounding = int8_rounding(config.device)
    qscale: dict = {}
    fused = dropped = 0
    out_names = set(graph.output_names)
    emulation = config.qdq_emulation
    keep_fp32 = set()
    if emulation == "onnxruntime-x86":
        from backends.engine.builder.passes.qdq_onnxruntime import onnxruntime_x86_fp32_groups
        keep_fp32 = onnxruntime_x86_fp32_groups(graph)
        for n in graph.nodes:
            if id(n) in keep_fp32:
                logger.verbose(f"layer '{n.name}' stays FP32 between its Q/DQ, as ONNX Runtime's x86-64 CPU EP runs it")
                if n.kind == "Convolution":
                    n.params = dict(n.params, emulate="onnxruntime-mlas")
    for n in list(graph.nodes):
        prod = graph.producers()
        if n not in graph.nodes:
            continue
        if n.kind == "Dequantize":
            s = _qdq_pair_scale(graph, prod, n)
            if s is not None:
                x = prod[n.inputs[0]].inputs[0]
                if qscale.get(x) == s and n.outputs[0] not in out_names:   # already INT8 with this scale
                    _replace_uses(graph, n.outputs[0], x)
                    dropped += 1
                else:
                    qscale[n.outputs[0]] = s
            continue
        if n.kind in INT8_KINDS and n.precision != "int8" and id(n) not in keep_fp32:
            s_x = qscale.get(n.inputs[0])
            if s_x is None or _weight_of(n) is None:
                _propagate(graph, prod, qscale, n)
                continue
            pair = prod.get(n.inputs[0])
            if pair is not None and pair.kind == "Dequantize" and _qdq_pair_scale(graph, prod, pair) == s_x:
                # quantize(x) inside the layer: the same INT8 values
                graph.set_inputs(n, [prod[pair.inputs[0]].inputs[0]] + n.inputs[1:])
            s_y = _fuse_output_qdq(graph, n, out_names)
            _make_int8(n, s_x, s_y, rounding, narrow=False, logger=logger)
            if s_y is not None:
                qscale[n.outputs[0]] = s_y
            fused += 1
            continue
        if n.kind == "Pooling" and n.params.get("global") and n.params.get("type") == "AVERAGE" \
                and qscale.get(n.inputs[0]) is not None and n.precision != "int8" and id(n) not in keep_fp32:
            if _int8_pool(graph, prod, n, qscale, rounding, out_names):
                fused += 1
                continue
        if n.kind == "Pooling" and n.params.get("type") == "AVERAGE" and not n.params.get("global") \
                and qscale.get(n.inputs[0]) is not None and n.precision != "int8":
            # an FP32 window average between Q/DQ: its summation order decides which side of a quantization
            # tie an output lands on, so it keeps the taps-in-order tactic ONNX Runtime's own kernel matches
            n.meta["tactics_allowed"] = ["strided-taps"]
            logger.verbose(f"INT8 (explicit Q/DQ): '{n.name}' (average pool between Q/DQ, FP32) keeps the "
                           f"taps-in-order tactic strided-taps")
        _propagate(graph, prod, qscale, n)
    removed = eliminate_dead_layers(graph, config)
    logger.info(f"INT8 (explicit Q/DQ): {fused} layers fused into INT8 kernels, {dropped} redundant Q/DQ pairs "
                f"dropped, {removed} Q/DQ layers removed"
                + (f"; {len(keep_fp32)} kept in FP32 as ONNX Runtime's x86-64 CPU EP runs them" if keep_fp32 else ""))
    return qscale


def _int8_pool(graph, prod, n, qscale, rounding, out_names) -> bool:
    """DQ -> global average pool -> Q/DQ as one INT8 pooling layer (TensorRT's quantizable AveragePool)."""
    s_x = qscale[n.inputs[0]]
    params = dict(n.params, int8={"input_scale": float(s_x), "output_scale": None, "rounding": rounding})
    probe = node_op(n)
    probe.params, probe.precision = params, "int8"
    if not any(unsupported_reason(t, probe, None) is None for t in tactics_for(n.kind)):
        return False
    pair = prod.get(n.inputs[0])
    if pair is not None and pair.kind == "Dequantize" and _qdq_pair_scale(graph, prod, pair) == s_x:
        graph.set_inputs(n, [prod[pair.inputs[0]].inputs[0]] + n.inputs[1:])
    s_y = _fuse_output_qdq(graph, n, out_names)
    params["int8"]["output_scale"] = None if s_y is None else float(s_y)
    n.params, n.precision = params, "int8"
    if s_y is not None:
        qscale[n.outputs[0]] = s_y
    return True


def _fuse_output_qdq(graph, n, out_names):
    """If n's output feeds only Q(s) -> DQ(s) pairs, take s as n's output scale, read the DQs' outputs from n."""
    users = graph.consumers().get(n.outputs[0], [])
    if not users or n.outputs[0] in out_names or any(u.kind != "Quantize" for u in users):
        return None
    prod = graph.producers()
    scales, dqs = set(), []
    for q in users:
        s = _per_tensor_scale(graph, prod, q)
        after = graph.consumers().get(q.outputs[0], [])
        if s is None or not after or any(d.kind != "Dequantize" or _per_tensor_scale(graph, prod, d) != s
                                         for d in after):
            return None
        scales.add(s)
        dqs += after
    if len(scales) != 1 or any(d.outputs[0] in out_names for d in dqs):
        return None
    for d in dqs:
        _replace_uses(graph, d.outputs[0], n.outputs[0])
    return scales.pop()


# implicit quantization ---------------------------------------------------------------------------------------

def _weight_of(n):
    key = _WEIGHT_KEY[n.kind][0]
    return n.weights.get(key)


def _smoothed(graph) -> set:
    """BLD-54: the last Conv/MatMul before each FP32 network output (walking back through single-input layers)."""
    prod = graph.producers()
    out = set()
    for name in graph.output_names:
        p = prod.get(name)
        while p is not None and p.kind not in INT8_KINDS:
            data = [i for i in p.inputs if i is not None and _const(graph, prod, i) is None]
            if len(data) != 1:
                p = None
                break
            p = prod.get(data[0])
        if p is not None:
            out.add(id(p))
    return out


def implicit_scales(graph, calibrated, dynamic_ranges) -> dict:
    scales = dict(calibrated or {})
    for name, (lo, hi) in (dynamic_ranges or {}).items():
        amax = max(abs(float(lo)), abs(float(hi)))
        if amax > 0:
            scales[graph.aliases.get(name, name)] = float(np.float32(amax) / np.float32(127.0))
    return scales


def assign_implicit(graph, config, scales, logger) -> int:
    rounding = int8_rounding(config.device)
    smoothed = _smoothed(graph)
    missing, count = [], 0
    for n in graph.nodes:
        if n.kind not in INT8_KINDS or _weight_of(n) is None:
            continue
        constraint = n.meta.get("precision_constraint")
        if constraint not in (None, "int8"):
            logger.verbose(f"layer '{n.name}' stays {constraint}: precision constraint")
            n.meta["int8_note"] = f"not INT8: precision constraint {constraint}"
            continue
        s_x = scales.get(n.inputs[0])
        if s_x is None:
            missing.append((n, n.inputs[0]))
            n.meta["int8_note"] = f"not INT8: no scale for its input '{n.inputs[0]}'"
            continue
        s_y = None if id(n) in smoothed and n.meta.get("output_types", {}).get(0) != "int8" \
            else scales.get(n.outputs[0])
        if _make_int8(n, s_x, s_y, rounding, narrow=True, logger=logger):
            count += 1
    if missing and not count:
        n, t = missing[0]
        raise BuildError(f"could not find scales for tensor {t} (input of layer '{n.fused_name}'): INT8 needs a "
                         f"calibrator (config.int8_calibrator, --calibration-cache / --data-loader-script) or "
                         f"dynamic ranges (tensor.set_dynamic_range)")
    for n, t in missing:
        logger.warning(f"could not find scales for tensor {t}: layer '{n.fused_name}' runs in FP32")
    return count


def _make_int8(n, s_x, s_y, rounding, narrow, logger) -> bool:
    """Put n in INT8 if an INT8 tactic implements it as fused; returns whether it did."""
    key, scale_key, _ = _WEIGHT_KEY[n.kind]
    before = (n.precision, n.params.get("int8"), dict(n.weights))
    n.precision = "int8"
    # weights the builder quantizes itself (implicit mode) round ties toward +inf, away from zero on the DLA;
    # Q/DQ weights are the model's own int8 values (ties to even where fusion changed them)
    weight_rounding = ("half_away" if rounding == "half_away" else "half_up") if narrow else "half_even"
    n.params = dict(n.params, int8={"input_scale": float(s_x), "output_scale": None if s_y is None else float(s_y),
                                    "rounding": rounding, "narrow_weights": narrow,
                                    "weight_rounding": weight_rounding})
    qw = n.meta.get("qdq_weight")
    if qw is not None:
        scale = np.asarray(qw["scale"], np.float32)
        w = np.asarray(n.weights[key], np.float32)
        if _exactly_quantized(w, scale, qw["axis"], n.kind):
            n.weights = dict(n.weights, **{scale_key: np.broadcast_to(scale, (w.shape[0] if n.kind == "Convolution"
                                                                              else _cols(n, w),)).copy()})
        else:
            logger.verbose(f"layer '{n.name}': weights changed by fusion since Q/DQ; re-quantized per channel")
    op = node_op(n)
    reasons = [unsupported_reason(t, op, None) for t in tactics_for(n.kind)]
    if None not in reasons:
        n.precision, n.weights = before[0], before[2]
        params = dict(n.params)
        params.pop("int8", None)
        n.params = params
        why = "; ".join(f"{t.name}: {r}" for t, r in zip(tactics_for(n.kind), reasons)
                        if "int8" in (t.precisions or ())) or "no INT8 tactic is registered"
        n.meta["int8_note"] = f"not INT8: no INT8 tactic implements it as fused ({why})"
        logger.verbose(f"layer '{n.name}' stays FP32: no INT8 tactic implements it as fused ({why})")
        return False
    n.meta["int8_note"] = "INT8 in, " + ("INT8 out" if s_y is not None else "FP32 out")
    return True


def _cols(n, w):
    return w.shape[0] if n.params.get("transpose_b") else w.shape[1]


def _exactly_quantized(w, scale, axis, kind) -> bool:
    """w == dequantize(round(w / scale)) to float32 rounding: the weights are still the Q/DQ model's."""
    if kind == "MatrixMultiply" and axis is not None:
        axis = axis % w.ndim
    shape = [1] * w.ndim
    if scale.size > 1:
        if axis is None or w.shape[axis] != scale.size:
            return False
        shape[axis] = -1
    s = scale.reshape(shape).astype(np.float64)
    q = np.rint(w / s)
    return bool(np.all(np.abs(q) <= 128) and np.allclose(q * s, w, rtol=2 ** -22, atol=0))


def assign_int8(graph, config, logger, calibrated=None, dynamic_ranges=None, ctx=None) -> int:
    """The INT8 step of the build, after the float fusions; returns how many layers run in INT8. With the pass
    context `ctx`, on a device that chooses by timing, the convolutions that will read and write int8 NHWC tensors
    are marked (passes/int8_io.py), and the other implicit INT8 layers slower than a float precision leave INT8
    (passes/precision.py, time_int8_layers), before the layout pass decides their layout."""
    if has_qdq(graph):
        if config.int8_calibrator is not None:
            logger.info("the network has Q/DQ layers (explicit quantization): the INT8 calibrator is not used")
        process_qdq(graph, config, logger)
        return sum(n.precision == "int8" for n in graph.nodes)
    count = assign_implicit(graph, config, implicit_scales(graph, calibrated, dynamic_ranges), logger)
    logger.info(f"INT8 (implicit): {count} layers run in INT8")
    if ctx is not None:
        _, left = int8_io.mark(graph, config, logger, ctx)   # INT8 on int8 NHWC tensors, or a float precision
        count -= left + time_int8_layers(graph, config, logger, ctx)
    return count
