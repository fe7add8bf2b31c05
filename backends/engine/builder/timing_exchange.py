"""Timings that two processes building at the same time hand each other as they measure them.

A `debug precision` search on GPU workers makes its base build in the search process while a worker on another GPU
builds the ranking's engine (every layer alone, in the same low precision): both time the same layer variants,
each on its own GPU, at the same time. With a `TimingExchange` on both processes' timing caches, a variant one of
them has timed is taken from the other's measurement instead of timed again; the worker walks the layers in reverse
order, so the two meet in the middle instead of timing everything twice. One small file per timing key in a
directory both see (local workers: one machine), written atomically, read on a cache miss; a key both time at once
is timed twice, which costs time, never correctness. The GPUs are of one kind (a worker per visible GPU of one
host), so a timing from either ranks the tactics alike.
"""
from __future__ import annotations

import json
import os


class TimingExchange:
    """A directory of timing-cache entries shared by concurrent builds (TimingCache.exchange)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.taken = 0    # entries this process took from the other's measurements
        self.given = 0

    def __getstate__(self):
        return {"directory": self.directory, "taken": 0, "given": 0}

    def _path(self, key: str) -> str:
        return os.path.join(self.directory, f"{key}.json")

    def get(self, key: str):
        """The entry another process put, or None."""
        try:
            with open(self._path(key)) as f:
                value = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(value, dict):
            return None
        self.taken += 1
        return value

    def put(self, key: str, timings: dict):
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(timings, f)
            os.replace(tmp, path)
            self.given += 1
        except OSError:   # the search ended and removed the directory: nothing to hand over any more
            pass
