"""INT8 convolution and matrix multiply on the GPU: the input quantized per tensor (NVRTC), an exact int8 x int8 ->
int32 GEMM on tensor cores (cuBLASLt, IMMA), then dequantization with the per-output-channel weight scales, the
rest of the epilogue in float32 and requantization when the output is INT8. The numerics are the CPU INT8
kernels' (native/cpu/kernels/conv_int8.py, matmul_int8.py): same quantized weights, same int32 accumulators, same
float32 rescale, so both devices agree to the last bit where the epilogue is ReLU or nothing.

The convolution is im2col into pixel-major rows ([P, K], K padded to a multiple of 16 with zeros) times the
weights as [M, K]: cuBLASLt's INT8 kernels want that "TN" form."""
from __future__ import annotations

import dataclasses

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import missing
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics.common import on_device, out_array, weight
from native.cuda.tactics.epilogue import epilogue
from native.shared.conv_geometry import geometry
from native.shared.int8 import conv_reason, gemm_reason, int8_params, leading_biases
from native.tactics import Tactic, TacticRefusal, register_tactic

SRC = "int8.cu"
_ROUNDING = {"half_even": 0, "half_up": 1, "half_away": 2, "half_away_from_zero": 2}


def _rounding(p) -> int:
    mode = p.get("rounding", "half_even")
    if mode not in _ROUNDING:
        raise TacticRefusal(f"rounding {mode!r} runs on the host")
    return _ROUNDING[mode]


def quantize(x: GpuArray, scale: float, rounding: int) -> GpuArray:
    """int8 clamp(round(x / scale)) of a float32 tensor, per tensor."""
    if x.dtype != np.float32:
        raise TacticRefusal(f"INT8 layers read float32 (dequantized) inputs, got {x.dtype}")
    out = GpuArray(x.shape, np.int8)
    if x.size:
        launch(kernel(SRC, "quantize_i8"), grid_for(x.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size), np.float32(scale), np.int32(rounding),
                np.int32(0)])
    return out


def _requantizes(op, post_ops) -> bool:
    """finish_int8's choice: an INT8 output behind a ReLU-only (or empty) epilogue is requantized from int32."""
    relu_only = all(st["op"] == "activation" and st["type"] == "RELU" for st in post_ops) and len(post_ops) <= 1
    return int8_params(op).get("output_scale") is not None and relu_only


def finish_scale(op, post_ops, s_w) -> np.ndarray:
    """Per output channel: s_x * s_w (dequantize), divided by s_y when requantizing; float32 as on the CPU."""
    p = int8_params(op)
    combined = np.float32(p["input_scale"]) * np.asarray(s_w, np.float32)
    return (combined / np.float32(p["output_scale"]) if _requantizes(op, post_ops) else combined).astype(np.float32)


def finish(acc: GpuArray, out: GpuArray, out_offset: int, rs: int, cs: int, op, post_ops, scale, bias_q,
           rounding: int):
    """acc [rows, channels] int32 -> out (float32) at out_offset + r*rs + c*cs, as finish_int8 does on the CPU.
    Returns whether the float32 epilogue (post_ops) and requantization still have to run on `out`."""
    s_y = int8_params(op).get("output_scale")
    requant = _requantizes(op, post_ops)
    rows, cols = acc.shape
    launch(kernel(SRC, "int8_finish"), grid_for(rows * cols), (256, 1, 1),
           [np.uint64(out.ptr + out_offset * 4), np.uint64(acc.ptr),
            np.uint64(0 if bias_q is None else weight(bias_q).ptr), np.uint64(weight(scale).ptr),
            np.int64(rows), np.int64(cols), np.int64(rs), np.int64(cs), np.float32(s_y or 0.0),
            np.int32(1 if requant else 0), np.int32(1 if post_ops else 0), np.int32(rounding)])
    return not requant


def _fused_residual(post_ops, inputs, out):
    """The residual (a float32 array of the output's shape) when post_ops are [add] or [add, RELU], else None:
    then finish_cm runs the whole epilogue and the requantization in its own pass."""
    if not post_ops or post_ops[0]["op"] != "add" or len(post_ops) > 2 or (len(post_ops) == 2 and (
            post_ops[1]["op"] != "activation" or post_ops[1]["type"] != "RELU")):
        return None
    r = on_device(inputs[post_ops[0]["input"]])
    return r if r.dtype == np.float32 and tuple(r.shape) == tuple(out.shape) else None


def finish_cm(acc: GpuArray, out: GpuArray, P: int, op, post_ops, scale, bias_q, rounding: int, inputs=()):
    """finish() for a channel-major accumulator acc[M, N*P] of a whole batch into NCHW `out` [N, M, P]; a residual
    add [+ ReLU] epilogue and the requantization after it are fused in (the same float32 operations as `after`)."""
    s_y = int8_params(op).get("output_scale")
    requant = _requantizes(op, post_ops)
    res = None if requant else _fused_residual(post_ops, inputs, out)
    M, NP = acc.shape
    mode = 1 if requant else 2 if res is not None else 0
    relu = bool(post_ops) if mode == 1 else len(post_ops) == 2 if mode == 2 else False
    launch(kernel(SRC, "int8_finish_cm"), grid_for(M * NP), (256, 1, 1),
           [np.uint64(out.ptr), np.uint64(acc.ptr), np.uint64(0 if bias_q is None else weight(bias_q).ptr),
            np.uint64(weight(scale).ptr), np.int64(M), np.int64(NP), np.int64(P), np.float32(s_y or 0.0),
            np.int32(mode), np.int32(1 if relu else 0), np.int32(rounding),
            np.uint64(0 if res is None else res.ptr)])
    return mode == 0


def after(y: GpuArray, op, post_ops, inputs, rounding: int):
    """The float32 epilogue, then fake quantization to the output scale when the output is INT8."""
    if post_ops:
        epilogue(y, op, inputs, post_ops)
    s_y = int8_params(op).get("output_scale")
    if s_y is not None and y.size:
        launch(kernel(SRC, "fake_quant_i8"), grid_for(y.size), (256, 1, 1),
               [np.uint64(y.ptr), np.int64(y.size), np.float32(s_y), np.int32(rounding)])
    return y


# the batched convolution's im2col rows (bytes) at most; larger batches run image by image
BATCHED_COLS_BYTES = 1 << 30


def _pad16(k: int) -> int:
    return -(-k // 16) * 16


class _Int8Gemm(Tactic):
    """What both INT8 tactics share: the INT8 rule of every device (`rule`, native/shared/int8.py) decides what the
    layer is, the CPU INT8 tactic of the kind (`cpu_tactic`) prepares its quantized weights, and this GPU tactic
    adds its own limits (`gpu_reason`)."""

    device = "cuda"
    precisions = ("int8",)
    honours = frozenset({"post_ops"})
    writes_outputs = True   # outputs through out_array: the engine's arena views

    def rule(self, op) -> str | None:
        """The INT8 rule every device applies (native/shared/int8.py)."""
        raise NotImplementedError

    def cpu_tactic(self) -> Tactic:
        raise NotImplementedError

    def gpu_reason(self, op) -> str | None:
        return None

    def supports(self, op, input_shapes):
        if missing("cublasLt"):
            return missing("cublasLt")
        return self.rule(op) or self.gpu_reason(op)


@register_tactic
class GpuInt8MatMul(_Int8Gemm):
    """INT8 GEMM with a constant right operand (FullyConnected / Gemm / MatMul by weights)."""

    kind, name = "MatrixMultiply", "cublaslt-int8"

    def rule(self, op):
        return gemm_reason(op)

    def cpu_tactic(self):
        from native.cpu.kernels.matmul_int8 import Int8PackedGemm   # its weight preparation (quantized, packed)
        return Int8PackedGemm()

    def gpu_reason(self, op):
        b = op.weights.get("b", op.weights.get("b_q"))
        k, n = b.shape[::-1] if op.params.get("transpose_b") and "b_q" not in op.weights else b.shape
        if k % 4 or n % 4:
            return "INT8 GEMM needs K and N multiples of 4 (cuBLASLt)"
        return None

    def prepare(self, op):
        w = self.cpu_tactic().prepare(op)
        w["b_qt"] = np.ascontiguousarray(w["b_q"].T)      # [N, K]: cuBLASLt's TN form
        w["finish_scale"] = finish_scale(op, leading_biases(op)[1], w["b_scale"])
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm_lt import gemm
        if "b_qt" not in op.weights:
            op = dataclasses.replace(op, weights=self.prepare(op))
        p = int8_params(op)
        rounding = _rounding(p)
        a = on_device(inputs[0])
        k = a.shape[-1]
        n = op.weights["b_qt"].shape[0]
        x_q = quantize(a, p["input_scale"], rounding).reshape((-1, k))
        acc = gemm(x_q, weight(op.weights["b_qt"]), 0, transpose_b=True)
        _, rest = leading_biases(op)
        y = out_array(outputs, 0, tuple(a.shape[:-1]) + (n,), np.float32)
        if finish(acc, y, 0, n, 1, op, rest, op.weights["finish_scale"], op.weights.get("bias_q"), rounding):
            after(y, op, rest, inputs, rounding)
        return [y]


@register_tactic
class GpuInt8Conv(_Int8Gemm):
    """INT8 2-D convolution (groups 1, NCHW): quantize, im2col rows of the whole batch, one INT8 GEMM (the weights
    as cuBLASLt's A: channel-major int32 accumulators), dequantize to NCHW; image by image where N*P is not a
    multiple of 4 or the rows would pass BATCHED_COLS_BYTES."""

    kind, name = "Convolution", "im2col-cublaslt-int8"

    def rule(self, op):
        return conv_reason(op)

    def cpu_tactic(self):
        from native.cpu.kernels.conv_int8 import Int8Im2colGemm   # its weight preparation (quantized, packed)
        return Int8Im2colGemm()

    def gpu_reason(self, op):
        w = op.weights.get("kernel", op.weights.get("kernel_q"))
        if np.ndim(w) != 4:
            return "only 2-D INT8 convolutions run on the GPU"
        if (op.params.get("groups", 1) or 1) != 1:
            return "grouped INT8 convolutions run on the host"
        if np.shape(w)[0] % 4:
            return "INT8 GEMM needs output channels in multiples of 4 (cuBLASLt)"
        return None

    def prepare(self, op):
        w = self.cpu_tactic().prepare(op)
        q = w["kernel_q"]
        m, k = q.shape[0], int(np.prod(q.shape[1:]))
        rows = np.zeros((m, _pad16(k)), np.int8)
        rows[:, :k] = q.reshape(m, k)
        w["kernel_rows"] = rows
        w["finish_scale"] = finish_scale(op, list(op.params.get("post_ops") or ()), w["kernel_scale"])
        return w

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        from native.cuda.tactics.gemm_lt import gemm
        if "kernel_rows" not in op.weights:
            op = dataclasses.replace(op, weights=self.prepare(op))
        p = int8_params(op)
        rounding = _rounding(p)
        x = on_device(inputs[0])
        if x.ndim != 4 or (op.params.get("groups", 1) or 1) != 1:
            raise TacticRefusal("only 2-D ungrouped INT8 convolutions run on the GPU")
        wq, rows_w = op.weights["kernel_q"], op.weights["kernel_rows"]
        m, kh, kw = wq.shape[0], wq.shape[2], wq.shape[3]
        n, c, h, wd = x.shape
        strides, dil, pre, post, (oh, ow) = geometry(op.params, x.shape, [kh, kw])
        if any(v < 0 for v in list(pre) + list(post)):
            raise TacticRefusal("negative pads run on the host")
        P, Kp = oh * ow, rows_w.shape[1]
        y = out_array(outputs, 0, (n, m, oh, ow), np.float32)
        if y.size == 0:
            return [y]
        x_q = quantize(x, p["input_scale"], rounding)
        w_dev = weight(rows_w)
        post_ops = list(op.params.get("post_ops") or ())
        if (n * P) % 4 == 0 and n * P * Kp <= BATCHED_COLS_BYTES:
            # the whole batch as one GEMM, channel-major: acc[M, N*P] = W[M, Kp] @ cols[N*P, Kp]^T
            cols = GpuArray((n * P, Kp), np.int8)
            launch(kernel(SRC, "im2col_rows_batch_i8"), grid_for(n * P * Kp), (256, 1, 1),
                   [np.uint64(cols.ptr), np.uint64(x_q.ptr), np.int64(n), np.int64(c), np.int64(h), np.int64(wd),
                    np.int64(kh), np.int64(kw), np.int64(strides[0]), np.int64(strides[1]), np.int64(pre[0]),
                    np.int64(pre[1]), np.int64(dil[0]), np.int64(dil[1]), np.int64(oh), np.int64(ow),
                    np.int64(Kp)])
            acc = gemm(w_dev, cols, 0, transpose_b=True)                  # [M, N*P] int32
            if finish_cm(acc, y, P, op, post_ops, op.weights["finish_scale"], op.weights.get("bias_q"), rounding,
                         inputs):
                after(y, op, post_ops, inputs, rounding)
            return [y]
        cols = GpuArray((P, Kp), np.int8)
        rest = False
        for i in range(n):
            launch(kernel(SRC, "im2col_rows_i8"), grid_for(P * Kp), (256, 1, 1),
                   [np.uint64(cols.ptr), np.uint64(x_q.ptr + i * c * h * wd), np.int64(c), np.int64(h),
                    np.int64(wd), np.int64(kh), np.int64(kw), np.int64(strides[0]), np.int64(strides[1]),
                    np.int64(pre[0]), np.int64(pre[1]), np.int64(dil[0]), np.int64(dil[1]), np.int64(oh),
                    np.int64(ow), np.int64(Kp)])
            acc = gemm(cols, w_dev, 0, transpose_b=True)                    # [P, M] int32
            rest = finish(acc, y, i * m * P, 1, P, op, post_ops, op.weights["finish_scale"],
                          op.weights.get("bias_q"), rounding)
        if rest:
            after(y, op, post_ops, inputs, rounding)
        return [y]


_REFORMAT_FLOATS = ("float32", "float16")


@register_tactic
class GpuInt8Reformat(Tactic):
    """Reformat layers at the edges of the int8 tensors between INT8 layers (passes/int8_io.py): float32 / float16
    -> int8 as clamp(round(x / scale)) with the layer's rounding, int8 -> float32 / float16 as q * scale (then
    rounded once to float16): the CPU Reformat's numerics. A quantizing Reformat takes either float type, as the CPU's
    does (it quantizes the values it is given)."""

    device = "cuda"
    kind, name = "Reformat", "int8-kernel"
    writes_outputs = True
    own_precisions = True
    precisions = ("int8", "float32", "float16")

    def supports(self, op, input_shapes):
        pair = (op.params.get("from"), op.params.get("to"))
        if "int8" not in pair or not (set(pair) - {"int8"}) <= set(_REFORMAT_FLOATS) or pair[0] == pair[1]:
            return f"{pair[0]} -> {pair[1]} is no INT8 reformat"
        if op.params.get("scale") is None:
            return "an INT8 reformat needs its tensor's scale"
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x = on_device(inputs[0])
        src, dst, s = op.params["from"], op.params["to"], np.float32(op.params["scale"])
        have = np.dtype(x.dtype).name
        if have != src and not (dst == "int8" and have in _REFORMAT_FLOATS):
            raise TacticRefusal(f"Reformat {src} -> {dst} got a {x.dtype} tensor")
        if dst == "int8" and op.params.get("pack"):
            return [_stem_pack(x, op.params, have, outputs)]
        out = out_array(outputs, 0, x.shape, np.int8 if dst == "int8" else np.dtype(dst))
        if dst == "int8":
            return [_quantize(x, out, s, _rounding(op.params), have)]
        if not x.size:
            return [out]
        wide = _wide(x, out)
        n = np.int64(x.size // 8 if wide else x.size)
        name = ("dequantize_i8_f32" if dst == "float32" else "dequantize_i8_f16") + ("_x8" if wide else "")
        launch(kernel(SRC, name), grid_for(n), (256, 1, 1), [np.uint64(out.ptr), np.uint64(x.ptr), n, s])
        return [out]


def _wide(x, out) -> bool:
    """8 elements a thread where the size and the addresses allow it (16-byte float loads / stores)."""
    return x.size % 8 == 0 and x.ptr % 16 == 0 and out.ptr % 16 == 0


def _quantize(x, out, s, mode, have):
    """out = clamp(round(x / s)) of a float32 / float16 tensor, with the rounding `mode` (int8.cu's quantize
    kernels)."""
    if not x.size:
        return out
    wide = _wide(x, out)
    n = np.int64(x.size // 8 if wide else x.size)
    tail = "_x8" if wide else ""
    args = [np.uint64(out.ptr), np.uint64(x.ptr), n, np.float32(s), np.int32(mode)]
    if have == "float32":
        launch(kernel(SRC, "quantize_i8" + tail), grid_for(n), (256, 1, 1), args if wide else args + [np.int32(0)])
    else:
        launch(kernel(SRC, "quantize_f16_i8" + tail), grid_for(n), (256, 1, 1), args)
    return out


_STEM_SMEM = 48 * 1024          # the one-pass stem pack's shared memory, at most (no opt-in needed below it)


def _stem_pack(x, params, have, outputs):
    """The INT8 stem's quantizing Reformat (native/shared/int8_stem.py): the float32 / float16 NHWC or NCHW image
    (pack['layout']) quantized and packed in one pass (int8.cu's stem_pack_q: a block per packed row quantizes the
    two input rows it reads into shared memory once, each input element landing in up to kw2 packed channels), or,
    where a packed row's bytes do not fit in shared memory, quantized once whole and then packed (stem_pack_i8)."""
    pk = params["pack"]
    if pk.get("layout") == "nchw":
        n, c, h, w = (int(d) for d in x.shape)
        strides = (c * h * w, h * w, w, 1)
    else:
        n, h, w, c = (int(d) for d in x.shape)
        strides = (h * w * c, 1, w * c, c)
    if c != pk["c"] or pk["cp"] % 16:
        raise TacticRefusal(f"the stem pack expects {pk['c']} channels (packed to a multiple of 16), got {c}")
    out = out_array(outputs, 0, (n, pk["rows"], pk["ow"], pk["cp"]), np.int8)
    if out.ptr % 16:
        raise TacticRefusal("the stem pack stores 16 bytes a thread: its output must be 16-byte aligned")
    if x.size >= 2 ** 31 or out.size >= 2 ** 31:
        raise TacticRefusal("the stem pack indexes in 32 bits: 2^31 elements or more run on the host")
    geometry = np.array([*strides, n, h, w, c, pk["rows"], pk["ow"], pk["cp"], pk["k2"][1], *pk["lo"]], np.int32)
    if not out.size:
        return out
    shared = (pk["ow"] + pk["k2"][1] - 1) * 4 * c
    if shared <= _STEM_SMEM:
        launch(kernel(SRC, "stem_pack_q_f32" if have == "float32" else "stem_pack_q_f16"), (n * pk["rows"], 1, 1),
               (128, 1, 1), [np.uint64(out.ptr), np.uint64(x.ptr), geometry, np.float32(params["scale"]),
                             np.int32(_rounding(params))], shared=shared)
        return out
    q = _quantize(x, GpuArray(tuple(x.shape), np.int8), params["scale"], _rounding(params), have)
    launch(kernel(SRC, "stem_pack_i8"), grid_for(out.size // pk["cp"]), (256, 1, 1),
           [np.uint64(out.ptr), np.uint64(q.ptr), geometry])
    return out
