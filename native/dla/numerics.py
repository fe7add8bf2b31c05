"""DLA numerics on top of the CPU kernels: what a layer's result looks like when the DLA computes it.

The model (documented in docs/DLA.md):
- FP16: every tensor inside a loadable is FP16; a layer reads FP16 values, computes (the CPU kernel, FP32) and its
  result is rounded to FP16 once. Layers the DLA runs as several hardware ops (HardSigmoid = Scale + Clipped
  ReLU(1), HardSwish = that times x, each step of a fused Pointwise chain, a mean over H/W as staged average pools)
  round after every op.
- INT8: tensors carry INT8 values times their scale (dynamic range / 127); quantization rounds ties away from zero
  (seed 001 L829: the DLA's compute-kernel rule, and its weight rule); weights per output channel. TanH, Sigmoid
  and LRN in INT8 run upgraded to FP16 (seed 000 L181, L285).
- Weights: convolution / deconvolution / fully connected weights in FP16 (or INT8); on Orin every other layer's
  weights (scales, shifts, element-wise constants, biases) are stored as FP19 (1+8+10 bits, seed 000 L383), i.e.
  rounded to a 10-bit mantissa with FP32's exponent range; on Xavier they are FP16.
- Softmax in optimized mode (seed 000 L370): exponentials rounded to FP16 and the denominator accumulated along the
  axis as a running FP16 sum, so the error grows with the axis length (relative error up to about n * 2^-11 at
  n = 1024); accurate mode accumulates in FP32 and rounds the result once.
All rounding goes through native.numerics.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from native.dla.rules import pool_stages
from native.numerics import dequantize, quantize, requantize, round_fp16, round_tf32

CONV_KINDS = ("Convolution", "Deconvolution", "MatrixMultiply")
CONV_WEIGHTS = ("kernel", "b")
DECOMPOSED = ("HARD_SIGMOID", "HARD_SWISH", "SILU")
FP16_UPGRADED = ("TANH", "SIGMOID")


def fake_quant(x, scale):
    """x rounded onto the INT8 grid of `scale`, ties away from zero (the DLA's rounding)."""
    return dequantize(quantize(x, scale, rounding="half_away"), scale)


def weight_scales(w, axis):
    """Per-output-channel INT8 weight scales: max |w| / 127 along every other axis (1 where a channel is all 0)."""
    a = np.abs(np.asarray(w, np.float32))
    red = tuple(i for i in range(a.ndim) if i != axis)
    m = a.max(axis=red) if red else a
    return np.where(m > 0, m / np.float32(127.0), np.float32(1.0)).astype(np.float32)


def weight_axis(kind, key, w, params) -> int:
    """The output-channel axis of a conv / deconv / fully connected weight."""
    if kind == "MatrixMultiply":
        return 0 if params.get("transpose_b") else np.ndim(w) - 1
    return 1 if kind == "Deconvolution" else 0


def dla_weights(kind: str, weights: dict, precision: str, profile: str, params=None) -> dict:
    """Weights as the loadable stores them. FP16 / FP19 values as float32 arrays; INT8 conv / FC weights as their
    integer values (float32 holding int8, quantized per output channel, ties away from zero) with the scales in
    params['dla']['w_scale']."""
    out = {}
    params = params or {}
    for key, w in weights.items():
        w = np.asarray(w)
        if w.dtype.kind != "f":
            out[key] = w
            continue
        if kind in CONV_KINDS and key in CONV_WEIGHTS:
            if precision == "int8":
                axis = weight_axis(kind, key, w, params)
                sc = np.asarray((params.get("dla") or {}).get("w_scale") or weight_scales(w, axis), np.float32)
                out[key] = quantize(w, sc, axis=axis, rounding="half_away").astype(np.float32)
            else:
                out[key] = round_fp16(w)
        elif kind in CONV_KINDS:   # the convolution's own bias: FP16 (INT8 engines keep it wide, as INT32 in HW)
            out[key] = w if precision == "int8" else round_fp16(w)
        else:
            out[key] = round_tf32(w) if profile == "orin" else round_fp16(w)
    return out


def _int8_conv(inner_run, op, x, dla):
    """INT8 convolution / fully connected as the DLA computes it: INT8 input (ties away from zero), INT8 weights,
    an exact integer accumulator, then one requantization to the output scale (ties away from zero). Bias and
    post-ops, where present, apply to the dequantized accumulator before that requantization."""
    s_in, s_out = dla["in_scales"][0], dla["out_scales"][0]
    w_scale = np.asarray(dla["w_scale"], np.float32)
    axis = 1 if op.kind != "MatrixMultiply" else -1
    q = quantize(x, s_in, rounding="half_away").astype(np.float32)
    bare = {k: v for k, v in op.params.items() if k != "post_ops"}
    weights = {k: v for k, v in op.weights.items() if not k.startswith(("bias", "post_bias"))}
    acc = inner_run(dataclasses.replace(op, params=bare, weights=weights), [q])[0]
    acc = np.rint(acc).astype(np.int64)
    if not op.params.get("post_ops") and "bias" not in op.weights:
        mult = np.float32(s_in) * w_scale / np.float32(s_out)
        return dequantize(requantize(acc.astype(np.int32), mult, axis=axis % acc.ndim, rounding="half_away"), s_out)
    shape = [1] * acc.ndim
    shape[axis] = -1
    y = acc.astype(np.float32) * (np.float32(s_in) * w_scale).reshape(shape)
    if "bias" in op.weights:
        y = y + np.asarray(op.weights["bias"], np.float32).reshape(shape)
    if op.params.get("post_ops"):
        from native.cpu.kernels.fused import apply_post_ops
        y = apply_post_ops(np.ascontiguousarray(y, np.float32), op, [x])
    return fake_quant(y, s_out)


def _round_out(y, precision, scale):
    if not isinstance(y, np.ndarray) or y.dtype.kind != "f":
        return y
    if precision == "int8" and scale is not None:
        return fake_quant(y, scale)
    return round_fp16(y)


def _hard_sigmoid(x, alpha, beta):
    y = round_fp16(x * np.float32(alpha) + np.float32(beta))    # Scale
    return np.clip(y, 0, 1)                                     # Clipped ReLU(1): exact


def activation_dla(x, t, alpha, beta):
    """A decomposed activation, rounding after each hardware op."""
    if t == "HARD_SIGMOID":
        return _hard_sigmoid(x, alpha, beta)
    if t == "HARD_SWISH":   # TensorRT's kHARD_SWISH: x * clip(x / 6 + 0.5, 0, 1)
        return round_fp16(x * _hard_sigmoid(x, 1 / 6, 0.5))
    if t == "SILU":
        return round_fp16(x * round_fp16(1.0 / (1.0 + np.exp(-x))))
    raise ValueError(t)


def staged_pool(x, kind, axes=(2, 3)):
    """Global MAX / AVERAGE over H, W as the DLA runs it: pools of windows <= 8 in stages, FP16 between them."""
    y = np.asarray(x, np.float32)
    for ax in axes:
        for k in pool_stages(y.shape[ax]) or [y.shape[ax]]:
            shp = list(y.shape)
            shp[ax:ax + 1] = [shp[ax] // k, k]
            r = y.reshape(shp)
            y = round_fp16(r.max(axis=ax + 1) if kind == "MAX" else r.mean(axis=ax + 1, dtype=np.float32))
    return y


def softmax_dla(x, axis, mode):
    x = np.asarray(x, np.float32)
    m = x.max(axis=axis, keepdims=True)
    e = round_fp16(np.exp(x - m))
    if mode == "accurate":
        return round_fp16(e / e.sum(axis=axis, keepdims=True, dtype=np.float32))
    e16 = np.moveaxis(e, axis, 0).astype(np.float16)
    acc = np.zeros(e16.shape[1:], np.float16)
    for row in e16:                                              # running FP16 sum: error grows with the axis
        acc = (acc + row).astype(np.float16)
    return round_fp16(e / np.expand_dims(acc.astype(np.float32), axis))


def _pointwise_dla(inner_run, op, inputs):
    """Each step of a fused chain as its own DLA op, rounded after every step."""
    program = op.params["program"]
    vals = []
    for j, st in enumerate(program):
        p = st.get("params", {})
        if st["op"] == "Activation" and p.get("type") in DECOMPOSED:
            a = st["args"][0]
            kind, key = a.split(":", 1)
            x = inputs[int(key)] if kind == "in" else (op.weights[key] if kind == "w" else vals[int(key)])
            vals.append(activation_dla(np.asarray(x, np.float32), p["type"], p.get("alpha", 0.0), p.get("beta", 0.0)))
            continue
        args, ins = [], []
        for a in st["args"]:
            kind, key = a.split(":", 1)
            if kind == "s":
                args.append(f"in:{len(ins)}")
                ins.append(vals[int(key)])
            elif kind == "in":
                args.append(f"in:{len(ins)}")
                ins.append(inputs[int(key)])
            else:
                args.append(a)
        one = dataclasses.replace(op, params=dict(op.params, program=[dict(st, args=args)]))
        vals.append(round_fp16(np.asarray(inner_run(one, ins)[0], np.float32)))
    return [vals[-1]]


def run_dla(inner_run, op, inputs, dla: dict):
    """Run one layer with DLA numerics. `inner_run(op, inputs)` is the CPU kernel; `dla` holds the layer's
    precision and, for INT8, its tensor scales."""
    precision = dla.get("precision", "float16")
    in_scales = dla.get("in_scales") or []
    out_scales = dla.get("out_scales") or []
    if precision == "int8" and op.kind in CONV_KINDS and dla.get("w_scale") is not None and \
            in_scales and in_scales[0] is not None and out_scales and out_scales[0] is not None:
        return [_int8_conv(inner_run, op, np.asarray(inputs[0], np.float32), dla)]
    t = op.params.get("type") if op.kind == "Activation" else None
    upgraded = precision == "int8" and (t in FP16_UPGRADED or op.kind == "LRN")
    xs = []
    for i, x in enumerate(inputs):
        if isinstance(x, np.ndarray) and x.dtype.kind == "f":
            s = in_scales[i] if i < len(in_scales) else None
            x = fake_quant(x, s) if precision == "int8" and s is not None else round_fp16(x)
        xs.append(x)
    if op.kind == "Activation" and t in DECOMPOSED:
        outs = [activation_dla(xs[0], t, op.params.get("alpha", 0.0), op.params.get("beta", 0.0))]
    elif op.kind == "Pointwise" and precision != "int8":
        outs = _pointwise_dla(inner_run, op, xs)
    elif op.kind == "Pooling" and op.params.get("global") and xs[0].ndim == 4 and max(xs[0].shape[2:]) > 8:
        outs = [staged_pool(xs[0], op.params.get("type", "MAX"))]
    elif op.kind == "Reduce" and op.params.get("op") == "AVG" and xs[0].ndim == 4 and max(xs[0].shape[2:]) > 8 \
            and op.params.get("keep_dims", True) and sorted(int(a) % 4 for a in op.params.get("axes") or []) == [2, 3]:
        outs = [staged_pool(xs[0], "AVERAGE")]
    elif op.kind == "Softmax" and dla.get("softmax_mode"):
        outs = [softmax_dla(xs[0], int(op.params.get("axis", -1)) % xs[0].ndim, dla["softmax_mode"])]
    elif op.kind in CONV_KINDS and any(s.get("type") in DECOMPOSED for s in op.params.get("post_ops") or []):
        post = op.params["post_ops"]
        cut = next(i for i, s in enumerate(post) if s.get("type") in DECOMPOSED)
        y = round_fp16(inner_run(dataclasses.replace(op, params=dict(op.params, post_ops=post[:cut])), xs)[0])
        for s in post[cut:]:
            if s["op"] == "activation" and s["type"] in DECOMPOSED:
                y = activation_dla(y, s["type"], s.get("alpha", 0.0), s.get("beta", 0.0))
            else:
                from native.cpu.kernels.fused import apply_post_ops
                one = dataclasses.replace(op, params=dict(op.params, post_ops=[s]))
                y = round_fp16(apply_post_ops(np.array(y, np.float32), one, xs))
        outs = [y]
    else:
        outs = list(inner_run(op, xs))
    return [_round_out(y, "float16" if upgraded else precision, out_scales[i] if i < len(out_scales) else None)
            for i, y in enumerate(outs)]

