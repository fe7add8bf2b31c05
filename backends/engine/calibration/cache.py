"""The calibration cache in TensorRT's text layout.

    TRT-8601-EntropyCalibration2
    input: 3c010204
    conv1_out: 3d8f5c29

The first line names the producer version and the algorithm; every other line is `tensor name: scale`, the scale
(= dynamic range / 127) written as the 8 hex digits of its IEEE-754 float32 bits, so a cache round-trips exactly.
Tensor names may themselves contain ':' (ONNX's "onnx::Conv_193"): the scale is after the LAST ': '. A cache
TensorRT wrote is read the same way, and ours can be handed to TensorRT 8.6.
"""
from __future__ import annotations

import struct

from native.errors import CalibrationError

VERSION_TAG = "TRT-8601"
ALGORITHM_NAMES = {"entropy2": "EntropyCalibration2", "minmax": "MinMaxCalibration",
                   "entropy": "EntropyCalibration", "percentile": "LegacyCalibration"}


def float_to_hex(x: float) -> str:
    return struct.pack(">f", x).hex()


def hex_to_float(h: str) -> float:
    return struct.unpack(">f", bytes.fromhex(h.rjust(8, "0")))[0]


def write_cache(scales: dict, algorithm: str) -> bytes:
    """Cache bytes for {tensor: float32 scale}, tensors in the given (network) order."""
    lines = [f"{VERSION_TAG}-{ALGORITHM_NAMES.get(algorithm, algorithm)}"]
    lines += [f"{name}: {float_to_hex(scale)}" for name, scale in scales.items()]
    return ("\n".join(lines) + "\n").encode()


def read_cache(data: bytes, source: str = "calibration cache") -> tuple[str, dict]:
    """(algorithm name from the header, {tensor: scale}); CalibrationError naming the line on anything malformed."""
    try:
        text = bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise CalibrationError(f"{source}: not a text calibration cache (byte {e.start} is not UTF-8)") from None
    lines = text.splitlines()
    if not lines or lines[0].count("-") < 2 or ":" in lines[0]:
        raise CalibrationError(f"{source} line 1: expected a header like '{VERSION_TAG}-EntropyCalibration2', "
                               f"got {lines[0][:80]!r}" if lines else f"{source} is empty")
    algorithm = lines[0].split("-", 2)[2]
    scales = {}
    for no, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, sep, value = line.rpartition(": ")
        value = value.strip()
        if not sep or not name or not (1 <= len(value) <= 8) or any(c not in "0123456789abcdefABCDEF" for c in value):
            raise CalibrationError(f"{source} line {no}: expected 'tensor_name: <8 hex digits of a float32 scale>', "
                                   f"got {line[:120]!r}")
        scale = hex_to_float(value)
        if not (scale > 0 and scale < float("inf")):
            raise CalibrationError(f"{source} line {no}: scale of tensor '{name}' is {scale}; a scale must be "
                                   f"finite and > 0 (a tensor that is always zero has no entry)")
        scales[name] = scale
    return algorithm, scales
