"""Reformat: converts a tensor between storage types (float32 / float16 / bfloat16 / fp8) where a producer and a
consumer of different precisions meet. The builder's precision pass inserts these; they round to nearest even."""
from native import numerics
from native.tactics import Tactic, register_tactic


@register_tactic
class Reformat(Tactic):
    kind, name = "Reformat", "numpy"
    precisions = ("float32", "float16", "bfloat16", "fp8")
    own_precisions = True

    def run(self, op, inputs):
        return [numerics.to_storage(numerics.from_storage(inputs[0]), op.params["to"])]
