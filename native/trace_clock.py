"""Clocks for execution timelines (`bench --timeline`): a mark taken when work is enqueued, resolved later to the
time the device ran it.

A clock has `mark()` (a token, taken on the host at enqueue) and `device_seconds(marks)` (those marks as seconds on
the host's perf_counter scale, when the device reached them). On a device that computes synchronously (the CPU)
the device reaches a mark when the host takes it; a GPU records an event on its stream (native/cuda/driver.py's
EventTraceClock) and places the events on the host scale from the first one.
"""
from __future__ import annotations

import time


class HostTraceClock:
    """Marks on the host clock: the device's time is the host's."""

    def mark(self):
        return time.perf_counter()

    def device_seconds(self, marks) -> list:
        return [float(m) for m in marks]
