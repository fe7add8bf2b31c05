"""Precision: what a layer computes in. One enum from the command line to the kernels.

The members are strings (`Precision.FP16 == "float16"`), and a plan stores the value, so plan files and the
inspector's JSON read as they always did. Every spelling a user may type (`fp16`, `half`, `float16`,
`DataType.HALF`, `e4m3`) is parsed here and nowhere else (`Precision.parse`); the builder flags that enable the
reduced precisions are mapped here too (`enabled_by_flags`), so "which precisions may this build use" has one
answer.

    INT8 < FP8 < FP16 < BF16 < FP32   (LADDER: the order a device's precision rule tries them)
"""
from __future__ import annotations

import enum

from native.errors import UsageError


class Precision(str, enum.Enum):
    INT8 = "int8"
    FP8 = "fp8"
    FP16 = "float16"
    BF16 = "bfloat16"
    FP32 = "float32"

    __str__ = str.__str__          # messages and f-strings show the value ("float16"), as plans store it
    __format__ = str.__format__
    __repr__ = str.__repr__        # 'float16': reprs of configs and generated code read as when it was a string

    @classmethod
    def parse(cls, text, what: str = "precision") -> "Precision":
        """The member a user's spelling names (fp32 / float / fp16 / half / bf16 / int8 / fp8 / e4m3 /
        DataType.HALF ...); UsageError naming `what` otherwise."""
        if isinstance(text, Precision):
            return text
        key = str(text).strip().lower()
        if key.startswith("datatype."):
            key = key[len("datatype."):]
        if key not in SPELLINGS:
            raise UsageError(f"{what}: unknown precision {text!r}; use one of fp32, fp16, bf16, int8, fp8")
        return SPELLINGS[key]

    @property
    def storage(self) -> str:
        """The float storage type a layer of this precision writes its outputs in and reads its inputs in
        (INT8 layers read and write float32 arrays holding dequantized values; FP8 ones store float16)."""
        return STORAGE[self]

    @property
    def short(self) -> str:
        """The builder flag's spelling (fp16, bf16, fp8, int8; fp32)."""
        return SHORT[self]


SPELLINGS = {
    "fp32": Precision.FP32, "float32": Precision.FP32, "float": Precision.FP32,
    "fp16": Precision.FP16, "float16": Precision.FP16, "half": Precision.FP16,
    "bf16": Precision.BF16, "bfloat16": Precision.BF16,
    "int8": Precision.INT8,
    "fp8": Precision.FP8, "float8": Precision.FP8, "float8_e4m3fn": Precision.FP8, "e4m3": Precision.FP8,
}
STORAGE = {Precision.FP32: "float32", Precision.FP16: "float16", Precision.BF16: "bfloat16",
           Precision.FP8: "float16", Precision.INT8: "float32"}
SHORT = {Precision.FP32: "fp32", Precision.FP16: "fp16", Precision.BF16: "bf16", Precision.FP8: "fp8",
         Precision.INT8: "int8"}
LADDER = (Precision.INT8, Precision.FP8, Precision.FP16, Precision.BF16, Precision.FP32)
REDUCED = (Precision.FP16, Precision.BF16, Precision.FP8, Precision.INT8)

# builder flag value -> the precisions it enables (FP8 brings FP16 as its companion, as TensorRT's does)
FLAG_ENABLES = {"fp16": (Precision.FP16,), "bf16": (Precision.BF16,), "fp8": (Precision.FP8, Precision.FP16),
                "int8": (Precision.INT8,)}


def enabled_by_flags(flag_values) -> frozenset:
    """The reduced precisions a set of builder flag values ("fp16", "int8", ...) enables (FP32 is always allowed
    and not listed)."""
    return frozenset(p for f in flag_values for p in FLAG_ENABLES.get(str(f), ()))


def as_precision(value) -> "Precision | str":
    """`value` as a Precision where it names one; other strings (a layer of integer data: "int32") unchanged."""
    if isinstance(value, Precision) or value is None:
        return value
    return SPELLINGS.get(str(value).lower(), value)
