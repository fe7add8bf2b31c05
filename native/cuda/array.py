"""GpuArray: a tensor in device memory (pointer, shape, dtype), the value type of the CUDA device's tensors."""
from __future__ import annotations

import numpy as np

from native.cuda import driver as _driver
from native.cuda.driver import context


class GpuArray:
    """Device memory owned by this object (freed to the stream-ordered pool when it dies), or a view of another
    GpuArray's (or another library's device tensor's) memory (`base`, kept alive by the view). Shapes and dtypes follow numpy's conventions."""

    __slots__ = ("ptr", "shape", "dtype", "base", "_owns", "__weakref__")

    def __init__(self, shape, dtype, ptr: int | None = None, base=None):
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.base = base
        self._owns = ptr is None
        self.ptr = context().alloc(self.nbytes) if ptr is None else int(ptr)

    def __del__(self):
        if getattr(self, "_owns", False) and _driver is not None and _driver._CTX is not None:
            _driver._CTX.free(self.ptr)   # (module globals may be gone at interpreter shutdown)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def reshape(self, shape) -> "GpuArray":
        shape = tuple(int(d) for d in shape)
        if -1 in shape:
            known = int(np.prod([d for d in shape if d != -1], dtype=np.int64)) or 1
            shape = tuple(self.size // known if d == -1 else d for d in shape)
        assert int(np.prod(shape, dtype=np.int64)) == self.size, f"cannot reshape {self.shape} to {shape}"
        return GpuArray(shape, self.dtype, self.ptr, base=self if self.base is None else self.base)

    @classmethod
    def from_host(cls, host) -> "GpuArray":
        host = _c_order(host)
        out = cls(host.shape, host.dtype)
        context().upload(out.ptr, host)
        return out

    def get(self) -> np.ndarray:
        return context().download(self.ptr, self.shape, self.dtype)

    def __array__(self, dtype=None, copy=None):
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    @property
    def __cuda_array_interface__(self) -> dict:
        """CUDA Array Interface v3: torch.as_tensor(x, device="cuda") or cupy.asarray(x) wrap this memory without
        a copy. No stream is named: the engine synchronizes before it hands device outputs out."""
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "version": 3,
                "strides": None, "stream": None}

    @classmethod
    def wrap(cls, obj) -> "GpuArray":
        """A view of another library's device tensor (torch, cupy: anything with `__cuda_array_interface__`), kept
        alive by the view; no copy. Waits for the producer's stream when the interface names one. Non-contiguous
        tensors are refused (make them contiguous first: the engine reads dense C-order buffers)."""
        cai = obj.__cuda_array_interface__
        shape, dtype = tuple(int(d) for d in cai["shape"]), np.dtype(cai["typestr"])
        strides = cai.get("strides")
        if strides is not None and tuple(strides) != _c_strides(shape, dtype.itemsize) and int(np.prod(shape)) > 1:
            from native.errors import FeedError
            raise FeedError(f"a device tensor of shape {list(shape)} with strides {list(strides)} is not "
                            f"C-contiguous; pass tensor.contiguous()")
        stream = cai.get("stream")
        if stream is not None and int(cai.get("version", 0)) >= 3:
            _driver.check(_driver._cu().cuStreamSynchronize(int(stream)), "cuStreamSynchronize(producer stream)")
        ptr = int(cai["data"][0])
        return cls(shape, dtype, ptr, base=obj)

    def __repr__(self):
        return f"GpuArray(shape={self.shape}, dtype={self.dtype.name}, ptr=0x{self.ptr:x})"


def _c_strides(shape, itemsize) -> tuple:
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def _c_order(x) -> np.ndarray:
    """x as a C-contiguous array of its own shape (np.ascontiguousarray would turn a 0-d array into shape (1,))."""
    x = np.asarray(x)
    return x if x.flags.c_contiguous else x.copy(order="C")


def to_host(x):
    """numpy for a GpuArray (one synchronizing copy), anything else unchanged."""
    return x.get() if isinstance(x, GpuArray) else x


def to_device(x):
    """GpuArray for a numeric numpy array or another library's device tensor (a view, no copy); other values
    (None, strings, sequences) unchanged."""
    if isinstance(x, GpuArray) or x is None:
        return x
    if hasattr(x, "__cuda_array_interface__"):
        return GpuArray.wrap(x)
    if isinstance(x, (np.ndarray, np.generic)) and x.dtype.kind in "biuf" or (
            isinstance(x, np.ndarray) and x.dtype.name in ("bfloat16", "float8_e4m3fn")):
        return GpuArray.from_host(x)
    return x
