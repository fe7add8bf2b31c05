"""How the CPU device runs a layer in a reduced floating-point precision, and which layer kinds can.

The CPU has no FP16 arithmetic worth the name, so a reduced-precision layer is emulated with the numerics of a GPU
kernel (native/numerics.py does every rounding):

- Storage: a float tensor of an FP16 (BF16) layer is stored as float16 (bfloat16), rounded to nearest even when
  written. Every reduced-precision layer reads its storage-typed inputs, widens them to float32 exactly, computes
  in float32 and rounds each float output once to its storage type. For pointwise, normalisation, softmax,
  pooling, reduction and data-movement layers this is what a GPU's FP16 kernels give, up to the rounding of their
  internal float32 steps (they too load halves, compute in float registers and store halves).
- Convolution / matrix multiply in FP16 or BF16: operands (activations and weights) hold FP16 (BF16) values, each
  product is exact in float32 and accumulation is float32, the fused epilogue (bias, activation, residual add) runs
  in float32 and the result is rounded once: a tensor-core kernel with FP32 accumulators. The FP16-accumulating
  kernels are separate tactics (conv/fp16_accumulate.py, matmul_fp16acc.py).
- TF32 (a float32 layer with the TF32 flag): the GEMM operands of conv/matmul are rounded to TF32's 10 mantissa bits
  (weights at build time, activations per run), accumulation and output stay float32.
- FP8 (E4M3): conv/matmul operands are saturated to +-448 and rounded to FP8, accumulation is float32 and the output
  is stored in FP16, FP8's companion precision for every other layer.

`declare_precisions()` writes what each CPU tactic can run in onto its `precisions` (the builder reads them);
`FP32_ONLY` says why the other kinds have no reduced-precision implementation.
"""
from __future__ import annotations

import dataclasses
import weakref

import numpy as np

from native import numerics
from native.device import call_tactic

REDUCED_FLOAT = ("float16", "bfloat16")

# Layer kinds whose GEMM operands TF32 and FP8 round (activations and weights): the conv/matmul family.
GEMM_KINDS = ("Convolution", "ConvolutionNHWC", "Deconvolution", "MatrixMultiply", "Einsum")
FP8_KINDS = ("Convolution", "ConvolutionNHWC", "Deconvolution", "MatrixMultiply")

# Kinds with an FP16/BF16 implementation: float32 compute on widened storage, one rounding per output (see above).
REDUCED_KINDS = GEMM_KINDS + (
    "Activation", "ElementWise", "Unary", "Pointwise", "Scale", "Normalization", "Softmax", "Pooling",
    "PoolingNHWC", "Reduce", "LRN", "Resize", "Attention", "Cumulative", "TopK", "ArgReduce", "Padding",
    "Shuffle", "Concatenation", "Slice", "Split", "Gather", "Identity", "Expand", "Tile", "Select", "Scatter",
    "Constant", "NonZero", "Reformat")

# Kinds that only move or select elements: they run on the storage type itself (no widening, nothing to round).
DATA_MOVEMENT_KINDS = ("Shuffle", "Concatenation", "Slice", "Split", "Gather", "Identity", "Expand", "Tile")

# Inputs that carry the layer's float data (the rest are shapes, indices, scales or parameters that keep their type).
DATA_INPUTS = {"Shape": (), "Resize": (0,), "Slice": (0,), "Padding": (0,), "TopK": (0,), "Gather": (0,), "Expand": (0,),
               "Tile": (0,), "Shuffle": (0,), "Scatter": (0, 2), "Select": (1, 2), "Split": (0,),
               "Cumulative": (0,), "ArgReduce": (0,), "Reduce": (0,), "Pooling": (0,), "PoolingNHWC": (0,),
               "Softmax": (0,), "LRN": (0,), "Activation": (0,), "Unary": (0,)}

FP32_ONLY = {
    "Loop": "control flow: its body runs in FP32 on the CPU device",
    "If": "control flow: its branches run in FP32 on the CPU device",
    "Scan": "control flow: its body runs in FP32 on the CPU device",
    "RNN": "recurrent state: the CPU device has no FP16 RNN that rounds the hidden state at every step",
    "Plugin": "plugins run in the precision they declare, and CPU plugins declare FP32",
    "Cast": "a Cast produces exactly the type its ONNX node names",
    "Quantize": "a quantize layer's input precision is fixed by its scale",
    "Dequantize": "a dequantize layer's output precision is fixed by the model",
    "Range": "generates index-like values that FP16 cannot hold exactly",
    "Fill": "generates values from shape-like inputs",
}


def fp32_only_reason(kind: str) -> str:
    return FP32_ONLY.get(kind, "no reduced-precision implementation on the CPU device")


def declare_precisions(registry_tactics):
    """Set `precisions` of the CPU tactics of every kind that can run reduced (called once the kernels are
    registered). A tactic that declares its own reduced precisions (an FP16-accumulate variant) keeps them."""
    for t in registry_tactics:
        if getattr(t, "own_precisions", False) or "int8" in t.precisions:  # INT8 kernels declare their own
            continue
        if t.kind in REDUCED_KINDS:
            extra = REDUCED_FLOAT + (("fp8",) if t.kind in FP8_KINDS else ())
            t.precisions = ("float32",) + extra


def is_float_array(a) -> bool:
    return isinstance(a, np.ndarray) and (a.dtype.kind == "f" or a.dtype.name in ("bfloat16", "float8_e4m3fn"))


def data_inputs(kind: str, n_inputs: int):
    return DATA_INPUTS.get(kind, tuple(range(n_inputs)))


def gemm_operands(op, n_inputs: int) -> tuple:
    """Indices of the inputs that are GEMM operands (rounded by TF32/FP8), not epilogue inputs."""
    if op.kind == "MatrixMultiply":
        return (0, 1)
    if op.kind == "Einsum":
        return tuple(range(n_inputs))
    idx = [0]
    if n_inputs > 1 and "kernel" not in op.weights and not any(k.startswith("kernel_") for k in op.weights):
        idx.append(1)
    side = op.params.get("side")
    if side:
        idx.append(side["input"])
    return tuple(idx)


_GEMM_WEIGHTS = ("kernel", "side_kernel", "b")

# weight arrays rounded to a precision, by the array's identity: every candidate tactic timed for a layer, and every
# build of a precision search (which shares the network's weight arrays), prepares the same weights; rounding each
# once per precision saved a fifth of a bert_mini search's preparation time. Weights are never written in place
# (passes replace arrays), the entry goes with its array (weakref), and the rounded copy is read-only, so a write
# into it fails loudly instead of changing another layer's weights. Small arrays cost less than the lookup.
_ROUNDED: dict = {}
_MEMO_MIN_SIZE = 4096


def _rounded(w, how, fn):
    if w.size < _MEMO_MIN_SIZE:
        return fn(w)
    key = (id(w), how)
    hit = _ROUNDED.get(key)
    if hit is not None and hit[0]() is w:
        return hit[1]
    out = fn(w)
    if not isinstance(out, np.ndarray) or np.may_share_memory(out, w):   # the caller's array itself: not frozen
        return out
    try:
        ref = weakref.ref(w, lambda _, key=key: _ROUNDED.pop(key, None))
    except TypeError:   # an array type without weak references: not memoised
        return out
    out.flags.writeable = False
    _ROUNDED[key] = (ref, out)
    return out


def round_weights(op) -> dict:
    """The op's float weights rounded as its precision stores them (before the tactic packs them)."""
    math = op.math
    if op.precision == "float32" and math != "tf32":
        return op.weights
    out = {}
    for k, w in op.weights.items():
        if not is_float_array(w):
            out[k] = w
        elif math == "tf32":
            out[k] = _rounded(w, "tf32", numerics.round_tf32) if k in _GEMM_WEIGHTS else w
        elif op.precision == "fp8":
            out[k] = _rounded(w, "fp8", numerics.round_fp8_e4m3) if k in _GEMM_WEIGHTS else \
                _rounded(w, "fp16", numerics.round_fp16)
        elif op.precision == "float16":
            out[k] = _rounded(w, "fp16", numerics.round_fp16)
        elif op.precision == "bfloat16":
            out[k] = _rounded(w, "bf16", numerics.round_bf16)
        else:
            out[k] = w
    return out


def needs_adapter(op) -> bool:
    return op.precision != "float32" or bool(op.math) or any(op.output_types or ())


def run(tactic, op, inputs, outputs=None, workspace=None, stream=None):
    """Run `tactic` with the op's precision: widen storage inputs, round GEMM operands (TF32/FP8), compute, round
    the float outputs to their storage types."""
    if not needs_adapter(op):
        return call_tactic(tactic, op, inputs, outputs, workspace, stream)
    args = list(inputs)
    passthrough = op.kind in DATA_MOVEMENT_KINDS and op.precision in REDUCED_FLOAT
    if not passthrough:
        data = data_inputs(op.kind, len(args))
        for i in data:
            if i < len(args) and is_float_array(args[i]) and args[i].dtype != np.float32:
                args[i] = numerics.from_storage(args[i])
        math = op.math
        if op.kind in GEMM_KINDS and (math == "tf32" or op.precision == "fp8"):
            rnd = numerics.round_tf32 if math == "tf32" else numerics.round_fp8_e4m3
            for i in gemm_operands(op, len(args)):
                if i < len(args) and is_float_array(args[i]):
                    args[i] = rnd(args[i])
    if not passthrough and _nan_input(op, args):
        outs = _all_nan_outputs(tactic, op, args, workspace, stream)
    else:
        outs = list(call_tactic(tactic, op, args, None, workspace, stream))  # it allocates its (float32) results
    types = op.output_types or ()
    for i, t in enumerate(types):
        if t and i < len(outs) and is_float_array(outs[i]) and outs[i].dtype != numerics.storage_numpy_dtype(t):
            outs[i] = numerics.to_storage(outs[i], t)
    return outs


def _nan_input(op, args) -> bool:
    """Whether the op is a GEMM with an operand that is NaN everywhere (downstream of an overflow in reduced
    precision): then every output element is NaN whatever the tactic computes (each one sums products with that
    operand). Checked only where an operand's first element is NaN, so finite tensors cost one element read each."""
    if op.kind == "MatrixMultiply":
        idx = (0, 1)
    elif op.kind == "Convolution":   # an output whose window lies wholly in the padding is the bias, not NaN
        ks = op.params.get("kernel_shape") or ()
        dil = op.params.get("dilations") or [1] * len(ks)
        pads = list(op.params.get("pre_padding") or ()) + list(op.params.get("post_padding") or ())
        if not ks or any(p >= (k - 1) * d + 1 for p, k, d in zip(pads, list(ks) * 2, list(dil) * 2)):
            return False
        idx = (0,)
    else:
        return False
    for i in idx:
        x = args[i] if i < len(args) else None
        if is_float_array(x) and x.size and x.flat[0] != x.flat[0] and bool(np.isnan(x).all()):
            return True
    return False


def _all_nan_outputs(tactic, op, args, workspace, stream):
    """The outputs of a GEMM with an all-NaN operand: the tactic runs on zeros in place of its float operands (the
    same shapes, at full speed: NaN operands make BLAS up to 100x slower) and its float outputs are then set to
    NaN, which is what the NaN operand gives every element of them."""
    args = list(args)
    for i in ((0, 1) if op.kind == "MatrixMultiply" else (0,)):
        if i < len(args) and is_float_array(args[i]):
            args[i] = np.zeros_like(args[i])
    outs = list(call_tactic(tactic, op, args, None, workspace, stream))
    for o in outs:
        if is_float_array(o):
            o.fill(np.nan)
    return outs


def prepare(tactic, op) -> dict:
    """Round the op's weights to its precision, then let the tactic pack them."""
    if needs_adapter(op):
        op = dataclasses.replace(op, weights=round_weights(op))
    return tactic.prepare(op)
