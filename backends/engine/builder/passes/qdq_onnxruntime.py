"""Which Q/DQ groups ONNX Runtime's x86-64 CPU EP runs in FP32 (config.qdq_emulation = "onnxruntime-x86").

TensorRT, and our default, fuse every [DQ -> Conv/Gemm/MatMul -> Q] group of an explicitly quantized model into an
INT8 kernel. ONNX Runtime's CPU EP on x86-64 does not, and the difference decides whether our engine can
reproduce its outputs bit for bit (on a classifier whose logits are themselves quantized, a single rounding step
moves the argmax). The facts, from ONNX Runtime's graph transformers (checked on 1.30.0 and 1.32.0 against the
optimized graph it writes with `SessionOptions.optimized_model_filepath`):

1. On x86-64 signed-int8 activations are converted to uint8 (zero point + 128) before any fusion, but only for a
   QuantizeLinear whose output feeds exactly one DequantizeLinear that has exactly one consumer (its S8->U8
   transformer matches Q -> DQ pairs with one output edge; a DQ feeding two nodes was first duplicated, one per
   consumer, so its Q then has two output edges). Every other Q/DQ stays int8.
2. A group becomes an integer kernel (QLinearConv, QGemm, QLinearMatMul, QLinearGlobalAveragePool, ...) only when
   its DQ input and its Q output have the same type, and int8 activations of Conv / MatMul are not fused on x86-64
   (its `session.qdqisint8allowed` is off there; on ARM64 it is on and every group fuses, as in our default).
   We apply the Conv rule to every MatrixMultiply (ONNX Runtime's Gemm rule also fuses int8 on both sides, and
   a Gemm/MatMul without a Q after it becomes QGemm / MatMulIntegerToFloat: not modelled).
3. A group that does not fuse runs as written: DQ, the float operator (MLAS FP32), Q.

So a convolution fuses on x86-64 only if its input pair and its output pair were both converted, i.e. both its
input's Q -> DQ and its output's Q -> DQ are single-consumer chains. In timm's MobileNetV3, every tensor that feeds
two layers (a HardSwish's x * hardsigmoid(x), a residual) is quantized once and read twice, so 24 of its 53
convolutions stay FP32 in ONNX Runtime. This module names those layers; the INT8 pass (int8.py) leaves them in FP32
and has their convolutions summed in MLAS's order (native/cpu/kernels/mlas_conv.py).
"""
from __future__ import annotations

EMULATIONS = (None, "onnxruntime-x86")
# layer kinds that ONNX Runtime turns into integer kernels when the types of their Q/DQ match
GROUP_KINDS = ("Convolution", "MatrixMultiply", "Pooling")


def _pair_converted(graph, cons, outs, q) -> bool:
    """Rule 1: ONNX Runtime converts this Q and its DQ to uint8."""
    users = cons.get(q.outputs[0], [])
    if len(users) != 1 or users[0].kind != "Dequantize" or q.outputs[0] in outs:
        return False
    dq = users[0]
    return len(cons.get(dq.outputs[0], [])) + (dq.outputs[0] in outs) == 1


def onnxruntime_x86_fp32_groups(graph) -> set:
    """ids of the Conv / Gemm / MatMul / global-average-pool layers between Q/DQ that ONNX Runtime's x86-64 CPU EP
    leaves in FP32 (rules 1-2 of the module docstring)."""
    prod, cons = graph.producers(), graph.consumers()
    outs = set(graph.output_names)
    fp32 = set()
    for n in graph.nodes:
        if n.kind not in GROUP_KINDS or not n.inputs:
            continue
        if n.kind == "Pooling" and not (n.params.get("global") and n.params.get("type") == "AVERAGE"):
            continue
        dq = prod.get(n.inputs[0])
        q = prod.get(dq.inputs[0]) if dq is not None and dq.kind == "Dequantize" else None
        if q is None or q.kind != "Quantize":
            continue
        users = cons.get(n.outputs[0], [])
        out_q = [u for u in users if u.kind == "Quantize"]
        converted_in = _pair_converted(graph, cons, outs, q)
        converted_out = bool(out_q) and len(out_q) == len(users) and \
            all(_pair_converted(graph, cons, outs, u) for u in out_q)
        if n.kind == "Pooling":   # QLinearGlobalAveragePool takes int8 too: the types must only match
            fused = bool(out_q) and len(out_q) == len(users) and converted_in == converted_out
        else:                     # QLinearConv / QGemm / QLinearMatMul: uint8 on both sides
            fused = converted_in and converted_out
        if not fused:
            fp32.add(id(n))
    return fp32
