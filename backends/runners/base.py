"""The Runner base: activate → infer* → deactivate, input metadata, context manager, timing."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from native.device_arrays import shape_and_dtype
from native.errors import FeedError, UsageError


@dataclass
class TensorMeta:
    """An input as a runner sees it: numpy dtype and shape (-1 or a dim name string where dynamic)."""

    name: str
    dtype: np.dtype
    shape: tuple | None

    def is_dynamic(self):
        return self.shape is None or any(not isinstance(d, int) or d < 0 for d in self.shape)

    def __str__(self):
        shape = None if self.shape is None else list(self.shape)
        return f"{self.name} [dtype={np.dtype(self.dtype).name}, shape={shape}]"


class Runner:
    """Subclasses implement `_activate`, `_infer(feeds, taps)`, `_deactivate` and `_input_metadata`.

    `infer(feeds, taps=None)` returns {name: array} for the outputs and for any requested intermediate tensors
    (named as in ONNX); `self.inference_time` holds the seconds the last call took.
    """

    prefix = "runner"

    def __init__(self, name: str | None = None):
        self.name = name or self.prefix
        self.is_active = False
        self.inference_time = None

    # lifecycle ---------------------------------------------------------------------------------------
    def activate(self):
        if not self.is_active:
            self._activate()
            self.is_active = True
        return self

    def deactivate(self):
        if self.is_active:
            self._deactivate()
            self.is_active = False

    def __enter__(self):
        return self.activate()

    def __exit__(self, *exc):
        self.deactivate()

    # inference ---------------------------------------------------------------------------------------
    def input_metadata(self) -> dict[str, TensorMeta]:
        self._require_active("input_metadata")
        return self._input_metadata()

    def observable_tensors(self) -> list[str]:
        """Intermediate tensors this runner can return through `taps` (ONNX names, topological order)."""
        return []

    def infer(self, feeds: dict, taps=None, check_inputs: bool = True) -> dict:
        self._require_active("infer")
        if check_inputs:
            self.check_feeds(feeds)
        t0 = time.perf_counter()
        out = self._infer(feeds, list(taps or []))
        self.inference_time = time.perf_counter() - t0
        if not taps:  # outputs-only calls are the ones worth timing (taps add copies)
            self.__dict__.setdefault("inference_times", []).append(self.inference_time)
        return out

    def check_feeds(self, feeds):
        meta = self.input_metadata()
        unknown = [k for k in feeds if k not in meta]
        if unknown:
            raise FeedError(f"unknown input name(s) {unknown}; the model's inputs are {list(meta)}")
        missing = [k for k in meta if k not in feeds]
        if missing:
            raise FeedError(f"missing feed(s) for input(s) {missing}")
        for name, m in meta.items():
            shape, _ = shape_and_dtype(feeds[name])   # a GPU tensor's shape is read from its interface, not copied
            if m.shape is not None:
                if len(shape) != len(m.shape) or any(isinstance(d, int) and d >= 0 and d != s for d, s in zip(m.shape, shape)):
                    raise FeedError(f"input '{name}' has shape {list(shape)}, which does not fit the model's "
                                    f"shape {list(m.shape)}")

    def _require_active(self, what):
        if not self.is_active:
            raise UsageError(f"{self.name}: call activate() (or use 'with runner:') before {what}()")

    # to implement ------------------------------------------------------------------------------------
    def _activate(self):
        raise NotImplementedError

    def _deactivate(self):
        pass

    def _input_metadata(self):
        raise NotImplementedError

    def _infer(self, feeds, taps):
        raise NotImplementedError

    def __repr__(self):
        return f"<{type(self).__name__} {self.name}>"
