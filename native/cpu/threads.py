"""CPU threading for engine kernels: one small pool that kernels split their work over (bands of output rows or
channels), with BLAS itself single-threaded while the pool is in use.

Why not let OpenBLAS thread each GEMM: its worker threads busy-wait after every call (~0.1 s), so (a) a 2-thread
GEMM on a 2-core machine that is also running anything else stalls for whole scheduler slices (measured 4-10x
slower than one thread under load), and (b) its spinning idle worker steals the core from whatever kernel runs
next. Kernels that split work themselves run each band's im2col copy, GEMM and epilogue on one thread and wait on
futures (blocking, not spinning): near 2x on an idle 2-core machine, about single-thread speed under load, and the
copies and epilogues run in parallel too, which BLAS threading does not give.

DEBUGKIT_THREADS=N sets the pool size (default: the CPUs this process may run on; 1 disables the pool and leaves
BLAS threading alone).
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading

import numpy as np

from native.cpu import allocator

_LOCK = threading.Lock()
_STATE = {"pool": None, "blas": None}
_LOCAL = threading.local()


def num_threads() -> int:
    env = os.environ.get("DEBUGKIT_THREADS")
    if env:
        return max(1, int(env))
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _blas_setter():
    """The OpenBLAS `set_num_threads` of the library numpy links (scipy-openblas wheels), or None."""
    here = os.path.dirname(np.__file__)
    for path in glob.glob(os.path.join(here, "..", "numpy.libs", "*openblas*")) + \
            glob.glob(os.path.join(here, ".dylibs", "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                    "openblas_set_num_threads64_", "openblas_set_num_threads"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                return fn
    return None


class _Worker:
    """One pool thread, parked on a lock: `start` hands it a share of a parallel_for and releases the lock; the
    caller later waits on `done` (`wait`). Two bare locks per hand-off (~25-57 us on a 2-vCPU VM) instead of an executor's
    queue, future and condition (~83-107 us measured for a no-op parallel_for)."""

    def __init__(self, index):
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job = None
        self.thread = threading.Thread(target=self._loop, name=f"debugkit-cpu-{index}", daemon=True)
        self.thread.start()

    def _loop(self):
        _LOCAL.worker = True
        while True:
            self.go.acquire()
            fn, items, idxs, results = self.job
            try:
                for i in idxs:
                    results[i] = fn(items[i])
            except BaseException as e:  # noqa: BLE001 - handed back to the caller, re-raised there
                results[idxs[0]] = _Failed(e)
            self.job = None
            self.done.release()

    def start(self, fn, items, idxs, results):
        self.job = (fn, items, idxs, results)
        self.go.release()

    def wait(self):
        self.done.acquire()


class _Failed:
    def __init__(self, error):
        self.error = error


def _pool():
    pool = _STATE["pool"]
    if pool is None:
        with _LOCK:
            if _STATE["pool"] is None:
                setter = _blas_setter()
                if setter is not None:
                    setter(1)
                _STATE["blas"] = setter
                _STATE["pool"] = [_Worker(i) for i in range(num_threads() - 1)]
            pool = _STATE["pool"]
    return pool


def init():
    """Start the pool (and turn BLAS threading off) now, so every kernel of an engine sees the same BLAS setting
    whichever kernel happens to run first, and keep freed buffers mapped (allocator.py): engines call this when
    they are loaded."""
    allocator.tune()
    if num_threads() > 1:
        _pool()


_BUSY = threading.Lock()  # one parallel_for at a time owns the workers; a concurrent caller runs inline


def parallel_for(fn, items):
    """fn(item) for every item, spread over the pool (the caller takes every T-th item starting with the first,
    the workers the others); returns the results in order. Runs inline when there is one item, one thread, when
    called from a pool worker (no nested waits), or while another thread's parallel_for holds the pool."""
    items = list(items)
    if len(items) <= 1 or num_threads() == 1 or getattr(_LOCAL, "worker", False):
        return [fn(i) for i in items]
    workers = _pool()[:len(items) - 1]
    if not workers or not _BUSY.acquire(blocking=False):
        return [fn(i) for i in items]
    try:
        t = len(workers) + 1
        results = [None] * len(items)
        for k, w in enumerate(workers):
            w.start(fn, items, list(range(k + 1, len(items), t)), results)
        error = None
        try:
            for i in range(0, len(items), t):
                results[i] = fn(items[i])
        except BaseException as e:  # noqa: BLE001 - the workers must be collected before raising
            error = e
        for w in workers:
            w.wait()
        if error is not None:
            raise error
        for r in results:
            if isinstance(r, _Failed):
                raise r.error
        return results
    finally:
        _BUSY.release()


def split(total: int, parts: int):
    """`parts` near-equal [start, stop) ranges covering range(total) (fewer when total < parts)."""
    parts = max(1, min(parts, total))
    return [(total * i // parts, total * (i + 1) // parts) for i in range(parts)]
