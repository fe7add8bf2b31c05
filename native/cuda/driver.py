"""The CUDA context of this process: one device, one stream, a stream-ordered memory pool, events and copies.

Everything goes through cuda-python's driver bindings (`cuda.bindings.driver`). The context is created on first
use (`context()`), never at import, so importing the package costs nothing on a machine without a GPU.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from native.errors import ExecutionError


class CudaError(ExecutionError):
    """A CUDA driver, NVRTC or cuBLAS call failed; the message names the call and the CUDA error."""


def _cu():
    from cuda.bindings import driver
    return driver


def check(result, what="CUDA call"):
    """Unpack a cuda-python (err, *values) tuple, raising CudaError on a non-zero status."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        cu = _cu()
        try:
            name = cu.cuGetErrorName(err)[1].decode()
        except Exception:
            name = str(err)
        raise CudaError(f"{what} failed: {name}")
    if not rest:
        return None
    return rest[0] if len(rest) == 1 else tuple(rest)


# Uploads above this size are split into chunks that copier threads stage while earlier chunks are in flight.
UPLOAD_CHUNK_BYTES = 4 << 20
COPY_THREADS = max(1, min(8, (os.cpu_count() or 2) // 2))


class Context:
    """Primary context of one GPU, its stream, its memory pool (cached: freed blocks are reused, not returned to
    the driver) and a pinned staging buffer for host<->device copies."""

    def __init__(self, ordinal: int = 0):
        cu = _cu()
        check(cu.cuInit(0), "cuInit")
        self.dev = check(cu.cuDeviceGet(ordinal), "cuDeviceGet")
        self.ctx = check(cu.cuDevicePrimaryCtxRetain(self.dev), "cuDevicePrimaryCtxRetain")
        check(cu.cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")
        attr = cu.CUdevice_attribute
        self.cc = (check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, self.dev)),
                   check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, self.dev)))
        self.sm_count = check(cu.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, self.dev))
        self.name = check(cu.cuDeviceGetName(256, self.dev)).split(b"\0")[0].decode()
        self.stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
        pool = check(cu.cuDeviceGetDefaultMemPool(self.dev), "cuDeviceGetDefaultMemPool")
        check(cu.cuMemPoolSetAttribute(pool, cu.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                                       cu.cuuint64_t(2**63)), "cuMemPoolSetAttribute")
        self._pinned, self._pinned_size, self._pinned_used = None, 0, 0
        self._owner_thread = threading.get_ident()

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"

    def make_current(self):
        if threading.get_ident() != self._owner_thread:
            check(_cu().cuCtxSetCurrent(self.ctx), "cuCtxSetCurrent")

    # memory ---------------------------------------------------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        return int(check(_cu().cuMemAllocAsync(max(int(nbytes), 256), self.stream), "cuMemAllocAsync"))

    def free(self, ptr: int):
        try:
            _cu().cuMemFreeAsync(ptr, self.stream)
        except Exception:   # interpreter shutdown
            pass

    def _staging(self, nbytes: int) -> int:
        """A pinned host region of nbytes, valid until the next synchronize()."""
        cu = _cu()
        if self._pinned_used + nbytes > self._pinned_size:
            self.synchronize()
            size = max(1 << 22, 2 * (self._pinned_used + nbytes))
            if self._pinned is not None:
                cu.cuMemFreeHost(self._pinned)
            self._pinned = int(check(cu.cuMemHostAlloc(size, 0), "cuMemHostAlloc"))
            self._pinned_size, self._pinned_used = size, 0
        ptr = self._pinned + self._pinned_used
        self._pinned_used += (nbytes + 255) // 256 * 256
        return ptr

    def upload(self, dst: int, host: np.ndarray):
        """Host -> device through the pinned staging buffer (asynchronous on the stream).

        Large arrays go in chunks: copier threads fill the pinned buffer chunk by chunk while the DMA engine
        already moves the chunks before, so the host copy runs on several cores and overlaps the transfer
        instead of preceding it (a single-threaded copy into pinned memory held pageable uploads to ~6 GB/s)."""
        host = np.asarray(host)
        if not host.flags.c_contiguous:
            host = host.copy(order="C")
        n = host.nbytes
        if n == 0:
            return
        stage = self._staging(n)
        staged = np.frombuffer((np.ctypeslib.as_ctypes_type(np.uint8) * n).from_address(stage), dtype=np.uint8)
        src = host.reshape(-1).view(np.uint8)
        cu = _cu()
        if n <= UPLOAD_CHUNK_BYTES:
            np.copyto(staged, src)
            check(cu.cuMemcpyHtoDAsync(dst, stage, n, self.stream), "cuMemcpyHtoDAsync")
            return
        chunks = [(o, min(UPLOAD_CHUNK_BYTES, n - o)) for o in range(0, n, UPLOAD_CHUNK_BYTES)]
        pool = self._copiers()
        pending = [pool.submit(np.copyto, staged[o:o + k], src[o:o + k]) for o, k in chunks]
        for (o, k), done in zip(chunks, pending):
            done.result()
            check(cu.cuMemcpyHtoDAsync(dst + o, stage + o, k, self.stream), "cuMemcpyHtoDAsync")

    def upload_from_device(self, dst: int, src: int, nbytes: int):
        """Device -> device (a feed that is already a GPU tensor): one copy on the stream, no host round trip."""
        self.copy(dst, src, nbytes)

    def _copiers(self):
        """The host-copy threads of large uploads: created on first need, owned by this context and shut down by
        `close_copiers()` (process-wide side effect: at most COPY_THREADS idle threads while it lives)."""
        if getattr(self, "_copy_pool", None) is None:
            from concurrent.futures import ThreadPoolExecutor
            self._copy_pool = ThreadPoolExecutor(max_workers=COPY_THREADS, thread_name_prefix="debugkit-h2d")
        return self._copy_pool

    def close_copiers(self):
        pool, self._copy_pool = getattr(self, "_copy_pool", None), None
        if pool is not None:
            pool.shutdown(wait=True)

    def download(self, src: int, shape, dtype) -> np.ndarray:
        """Device -> host through the staging buffer; synchronizes the stream."""
        out = np.empty(shape, dtype=dtype)
        if out.nbytes == 0:
            return out
        stage = self._staging(out.nbytes)
        check(_cu().cuMemcpyDtoHAsync(stage, src, out.nbytes, self.stream), "cuMemcpyDtoHAsync")
        self.synchronize()
        out.reshape(-1).view(np.uint8)[:] = np.frombuffer(
            (np.ctypeslib.as_ctypes_type(np.uint8) * out.nbytes).from_address(stage), dtype=np.uint8)
        return out

    def copy(self, dst: int, src: int, nbytes: int):
        if nbytes:
            check(_cu().cuMemcpyDtoDAsync(dst, src, nbytes, self.stream), "cuMemcpyDtoDAsync")

    def memset0(self, dst: int, nbytes: int):
        if nbytes:
            check(_cu().cuMemsetD8Async(dst, 0, nbytes, self.stream), "cuMemsetD8Async")

    def synchronize(self):
        check(_cu().cuStreamSynchronize(self.stream), "cuStreamSynchronize")
        self._pinned_used = 0

    def new_stream(self):
        """Another non-blocking stream of this context (for replaying captured graphs beside each other); it lives
        as long as the context."""
        cu = _cu()
        s = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value), "cuStreamCreate")
        self.__dict__.setdefault("_extra_streams", []).append(s)
        return s

    def synchronize_stream(self, stream):
        check(_cu().cuStreamSynchronize(stream), "cuStreamSynchronize")

    # timing ---------------------------------------------------------------------------------------------------
    def time_ms(self, fn) -> float:
        """Milliseconds between two events recorded around fn() on the stream."""
        cu = _cu()
        start = check(cu.cuEventCreate(0), "cuEventCreate")
        stop = check(cu.cuEventCreate(0), "cuEventCreate")
        check(cu.cuEventRecord(start, self.stream), "cuEventRecord")
        fn()
        check(cu.cuEventRecord(stop, self.stream), "cuEventRecord")
        check(cu.cuEventSynchronize(stop), "cuEventSynchronize")
        ms = check(cu.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
        cu.cuEventDestroy(start)
        cu.cuEventDestroy(stop)
        self._pinned_used = 0
        return float(ms)


class Timeline:
    """Events recorded on the stream between the phases of one execution; durations() synchronizes once."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.reset()

    def reset(self):
        self.marks = [("start", self._event())]

    def _event(self):
        cu = _cu()
        ev = check(cu.cuEventCreate(0), "cuEventCreate")
        check(cu.cuEventRecord(ev, self.ctx.stream), "cuEventRecord")
        return ev

    def mark(self, name: str):
        self.marks.append((name, self._event()))

    def durations(self) -> dict:
        """{"<phase>_ms": time since the previous mark} for every mark after the start."""
        cu = _cu()
        check(cu.cuEventSynchronize(self.marks[-1][1]), "cuEventSynchronize")
        out = {}
        for (_, a), (name, b) in zip(self.marks, self.marks[1:]):
            out[f"{name}_ms"] = out.get(f"{name}_ms", 0.0) + float(check(cu.cuEventElapsedTime(a, b),
                                                                          "cuEventElapsedTime"))
        for _, ev in self.marks:
            cu.cuEventDestroy(ev)
        self.marks = []
        return out


class EventTraceClock:
    """A timeline clock on the stream (native/trace_clock.py): each mark records an event; `device_seconds` waits
    for the last one and places every event on the host's perf_counter scale from the first, which is recorded
    when the stream is idle (after the previous execution's wait), so the GPU reaches it as the host records it."""

    def __init__(self, ctx: Context):
        self.ctx, self._time = ctx, time.perf_counter
        self.origin = None

    def mark(self):
        cu = _cu()
        ev = check(cu.cuEventCreate(0), "cuEventCreate")
        check(cu.cuEventRecord(ev, self.ctx.stream), "cuEventRecord")
        if self.origin is None:
            self.origin = (ev, self._time())
        return ev

    def device_seconds(self, marks) -> list:
        cu = _cu()
        if not marks:
            return []
        check(cu.cuEventSynchronize(marks[-1]), "cuEventSynchronize")
        ev0, t0 = self.origin
        out = [t0 + float(check(cu.cuEventElapsedTime(ev0, ev), "cuEventElapsedTime")) / 1e3 for ev in marks]
        for ev in marks:
            if ev is not ev0:
                cu.cuEventDestroy(ev)
        return out

    def close(self):
        if self.origin is not None:
            _cu().cuEventDestroy(self.origin[0])
            self.origin = None


_CTX: Context | None = None


def unavailable_reason() -> str | None:
    """Why the CUDA device cannot be used in this process (None when it can)."""
    try:
        from cuda.bindings import driver
    except Exception as e:
        return f"cuda-python is not installed ({type(e).__name__}: {e}); install the GPU extra: pip install -e '.[cuda]'"
    try:
        if int(driver.cuInit(0)[0]) != 0:
            return "the CUDA driver does not initialise (no NVIDIA GPU or driver on this machine)"
        err, count = driver.cuDeviceGetCount()
        if int(err) != 0 or count == 0:
            return "no NVIDIA GPU is visible to this process"
    except Exception as e:
        return f"the CUDA driver failed: {e}"
    return None


def context() -> Context:
    global _CTX
    if _CTX is None:
        why = unavailable_reason()
        if why is not None:
            from native.errors import UsageError
            raise UsageError(f"--device cuda cannot run here: {why}; use --device cpu")
        _CTX = Context(0)
    _CTX.make_current()
    return _CTX
