"""Reformat: converts a tensor between storage types (float32 / float16 / bfloat16 / fp8) where a producer and a
consumer of different precisions meet. The builder's precision pass inserts these; they round to nearest even.
At the edges of int8 tensors between INT8 layers (passes/int8_io.py) a Reformat quantizes (float -> int8:
clamp(round(x / scale)), the layer's rounding) or dequantizes (int8 -> float: q * scale) with its tensor's scale;
the INT8 stem's quantizing Reformat also packs (params['pack'], native/shared/int8_stem.py)."""
import numpy as np

from native import numerics
from native.shared import int8_stem
from native.tactics import Tactic, register_tactic


@register_tactic
class Reformat(Tactic):
    kind, name = "Reformat", "numpy"
    precisions = ("float32", "float16", "bfloat16", "fp8", "int8")
    own_precisions = True

    def run(self, op, inputs):
        src, dst = op.params.get("from"), op.params["to"]
        if dst == "int8":
            x = numerics.from_storage(inputs[0])
            if op.params.get("pack"):
                pk = op.params["pack"]
                x = int8_stem.pack_values(x.transpose(0, 2, 3, 1) if pk.get("layout") == "nchw" else x, pk)
            return [numerics.quantize(x, np.float32(op.params["scale"]),
                                      rounding=op.params.get("rounding", "half_even")).astype(np.int8)]
        if src == "int8":
            return [numerics.to_storage(numerics.dequantize(np.asarray(inputs[0]), np.float32(op.params["scale"])),
                                        dst)]
        return [numerics.to_storage(numerics.from_storage(inputs[0]), op.params["to"])]
