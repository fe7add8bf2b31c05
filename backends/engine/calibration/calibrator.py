"""INT8 calibrators with TensorRT's protocol, and `Calibrator`, the one most scripts need.

The builder asks a calibrator, in this order: `read_calibration_cache()` (bytes or None; with a cache no batch is
read), `get_batch_size()`, then `get_batch(names)` until it returns None (a list of arrays in `names` order, or a
{name: array} dict), and finally `write_calibration_cache(data)`. `get_algorithm()` says which statistics to take.
Subclass one of the `IInt8*Calibrator` classes as in TensorRT, or pass feed dicts to `Calibrator`.
"""
from __future__ import annotations

import enum
import os

import numpy as np

from native.errors import CalibrationError, UsageError


class CalibrationAlgoType(enum.Enum):
    LEGACY_CALIBRATION = "percentile"
    ENTROPY_CALIBRATION = "entropy"
    ENTROPY_CALIBRATION_2 = "entropy2"
    MINMAX_CALIBRATION = "minmax"


ALGORITHMS = tuple(a.value for a in CalibrationAlgoType)
# calibrated on the network as parsed (portable caches; TensorRT's default for these) or on the fused one
BEFORE_FUSION = {"entropy2", "minmax"}


class IInt8Calibrator:
    """The protocol; subclasses implement get_batch (and usually the cache methods)."""

    algorithm = CalibrationAlgoType.ENTROPY_CALIBRATION_2

    def get_batch_size(self) -> int:
        return 1

    def get_batch(self, names):
        raise NotImplementedError

    def get_algorithm(self) -> CalibrationAlgoType:
        return self.algorithm

    def read_calibration_cache(self):
        return None

    def write_calibration_cache(self, cache: bytes):
        pass


class IInt8EntropyCalibrator2(IInt8Calibrator):
    algorithm = CalibrationAlgoType.ENTROPY_CALIBRATION_2


class IInt8MinMaxCalibrator(IInt8Calibrator):
    algorithm = CalibrationAlgoType.MINMAX_CALIBRATION


class IInt8EntropyCalibrator(IInt8Calibrator):
    algorithm = CalibrationAlgoType.ENTROPY_CALIBRATION


class IInt8LegacyCalibrator(IInt8Calibrator):
    """Percentile calibration: `get_quantile()` is the fraction of |x| kept (0.9999 by default)."""

    algorithm = CalibrationAlgoType.LEGACY_CALIBRATION

    def get_quantile(self) -> float:
        return 0.9999


class Calibrator(IInt8Calibrator):
    """A calibrator over `batches`, an iterable of feed dicts {input name: array}.

    algorithm: "entropy2" (default) | "minmax" | "entropy" | "percentile"; percentile: for "percentile", in %.
    cache: a path; read back when the file exists (then no batch is read), written after calibrating.
    """

    def __init__(self, batches, algorithm="entropy2", cache=None, percentile=99.99):
        if algorithm not in ALGORITHMS:
            raise UsageError(f"unknown calibration algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
        if not 0 < float(percentile) <= 100:
            raise UsageError(f"calibration percentile must be in (0, 100], got {percentile}")
        self.batches = batches
        self.algorithm = CalibrationAlgoType(algorithm)
        self.cache = os.fspath(cache) if cache is not None else None
        self.percentile = float(percentile)
        self._iter = None
        self._first = None
        self.batches_read = 0

    def _next(self):
        if self._iter is None:
            self._iter = iter(self.batches if self.batches is not None else ())
        if self._first is not None:
            b, self._first = self._first, None
            return b
        return next(self._iter, None)

    def get_batch_size(self) -> int:
        if self._first is None and self._iter is None:
            self._first = self._next()
        b = self._first
        if not b:
            return 1
        first = np.asarray(next(iter(b.values())))
        return int(first.shape[0]) if first.ndim else 1

    def get_batch(self, names):
        b = self._next()
        if b is None:
            return None
        if not isinstance(b, dict):
            raise CalibrationError(f"calibration batch {self.batches_read} is a {type(b).__name__}, expected a "
                                   f"feed dict {{input name: array}}")
        missing = [n for n in names if n not in b]
        if missing:
            raise CalibrationError(f"calibration batch {self.batches_read} has no data for input(s) {missing}; "
                                   f"it has {sorted(b)}")
        self.batches_read += 1
        return [np.asarray(b[n]) for n in names]

    def get_quantile(self) -> float:
        return self.percentile / 100.0

    def read_calibration_cache(self):
        if self.cache and os.path.lexists(self.cache):
            from native.files import read_side_file
            return read_side_file(self.cache, "calibration cache")
        return None

    def write_calibration_cache(self, cache: bytes):
        if self.cache:
            from native.files import write_bytes
            write_bytes(self.cache, cache, "calibration cache")   # never a half-written cache


def algorithm_of(calibrator) -> str:
    algo = calibrator.get_algorithm()
    return CalibrationAlgoType(algo).value if not isinstance(algo, str) else algo


def percentile_of(calibrator) -> float:
    q = getattr(calibrator, "get_quantile", None)
    return 100.0 * float(q()) if q is not None else 99.99
