"""NVRTC: compile the device's `.cu` sources (native/cuda/kernels/) for this GPU's architecture, load them as
modules and launch their kernels. Compiled code is cached per (source, architecture) for the process."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from native.cuda.driver import CudaError, _cu, check, context

KERNEL_DIR = os.path.join(os.path.dirname(__file__), "kernels")
_MODULES: dict = {}


def _nvrtc_check(result, what, prog=None):
    from cuda.bindings import nvrtc
    err, *rest = result
    if int(err) != 0:
        log = ""
        if prog is not None:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            buf = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.decode(errors="replace")
        raise CudaError(f"NVRTC {what} failed: {err}\n{log}")
    return rest[0] if len(rest) == 1 else tuple(rest)


def compile_source(source: str, name: str, arch: str) -> bytes:
    """CUDA C++ source -> cubin for `arch` (e.g. sm_90)."""
    from cuda.bindings import nvrtc
    prog = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []), "create")
    opts = [f"--gpu-architecture={arch}".encode(), b"-std=c++17"]
    try:
        _nvrtc_check(nvrtc.nvrtcCompileProgram(prog, len(opts), opts), f"compile of {name}", prog)
        size = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        _nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def module(file: str):
    """The loaded module of kernels/<file>, compiled on first use."""
    ctx = context()
    with open(os.path.join(KERNEL_DIR, file)) as f:
        src = f.read()
    key = (hashlib.sha1(src.encode()).hexdigest(), ctx.arch)
    mod = _MODULES.get(key)
    if mod is None:
        cubin = compile_source(src, file, ctx.arch)
        mod = {"handle": check(_cu().cuModuleLoadData(cubin), f"cuModuleLoadData({file})"), "fns": {}}
        _MODULES[key] = mod
    return mod


def kernel(file: str, name: str):
    mod = module(file)
    fn = mod["fns"].get(name)
    if fn is None:
        fn = mod["fns"][name] = check(_cu().cuModuleGetFunction(mod["handle"], name.encode()),
                                      f"cuModuleGetFunction({name})")
    return fn


def launch(fn, grid, block, args, shared=0):
    """Launch `fn` on the context's stream; each arg is a numpy scalar/array whose bytes are the parameter."""
    ctx = context()
    holders = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
    params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    check(_cu().cuLaunchKernel(fn, *grid, *block, shared, ctx.stream, params.ctypes.data, 0), "cuLaunchKernel")


def grid_for(n: int, block: int = 256):
    ctx = context()
    return (max(1, min((int(n) + block - 1) // block, ctx.sm_count * 32)), 1, 1)
