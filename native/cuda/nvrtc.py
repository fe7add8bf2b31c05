"""NVRTC: compile the device's `.cu` sources (each beside its tactics in native/cuda/tactics/, sharing the `.cuh`
headers there) and generated sources (fused pointwise programs) for this GPU's architecture, load them as modules
and launch their kernels. Compiled code is cached per (source, architecture) for the process and, between
processes, in a kernel cache on disk (native.config.kernel_cache_dir: DEBUGKIT_KERNEL_CACHE=DIR, or 0 to keep
nothing; entries keyed by source, headers, architecture, options and NVRTC version, checksummed); `cubins()` /
`preload()` move the compiled code into and out of a plan, so loading a plan compiles nothing."""
from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from native.cuda.driver import CudaError, _cu, check, context

KERNEL_DIR = os.path.join(os.path.dirname(__file__), "tactics")   # each family's .cu beside its .py
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


def _headers():
    names = sorted(f for f in os.listdir(KERNEL_DIR) if f.endswith(".cuh"))
    return [open(os.path.join(KERNEL_DIR, f)).read().encode() for f in names], [f.encode() for f in names]


_DISK_MAGIC = b"DKCUBIN1"


def disk_key(source: str, arch: str, opts, headers, version) -> str:
    """The name of a compile's cubin in the kernel cache: everything the compile's output depends on (the source,
    the headers it may include, the architecture and options, NVRTC's version)."""
    h = hashlib.sha256()
    for part in (source.encode(), arch.encode(), b" ".join(opts), repr(tuple(version)).encode(), *headers):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def disk_get(key: str) -> bytes | None:
    """The cubin the kernel cache (native.config.kernel_cache_dir) holds under `key`, or None (no cache, no entry,
    or an entry that fails its checksum: never loaded)."""
    from native import config
    d = config.kernel_cache_dir()
    if d is None:
        return None
    try:
        with open(os.path.join(d, key + ".cubin"), "rb") as f:
            data = f.read()
    except OSError:
        return None
    body = data[len(_DISK_MAGIC) + 32:]
    if not data.startswith(_DISK_MAGIC) or not body or \
            hashlib.sha256(body).digest() != data[len(_DISK_MAGIC):len(_DISK_MAGIC) + 32]:
        return None
    return body


def disk_put(key: str, cubin: bytes) -> None:
    """Keep `cubin` in the kernel cache (written whole, then renamed into place: a reader never sees a partial
    file; several processes may write the same entry). A cache that cannot be written is skipped silently: it only
    saves compile time."""
    from native import config
    d = config.kernel_cache_dir()
    if d is None or not cubin:
        return
    try:
        os.makedirs(d, exist_ok=True)
        tmp = os.path.join(d, f".{key}.{os.getpid()}.{threading.get_ident()}.tmp")
        with open(tmp, "wb") as f:
            f.write(_DISK_MAGIC + hashlib.sha256(cubin).digest() + cubin)
        os.replace(tmp, os.path.join(d, key + ".cubin"))
    except OSError:
        return


def _nvrtc_version() -> tuple:
    from cuda.bindings import nvrtc
    try:
        return tuple(int(x) for x in _nvrtc_check(nvrtc.nvrtcVersion(), "version"))
    except Exception:
        return ()


ARCH_SPECIFIC = "// nvrtc-arch: a"    # a source's first line: it uses arch-specific instructions (Hopper's wgmma)


def target(source: str, arch: str) -> str:
    """The architecture NVRTC compiles `source` for: sm_90 -> sm_90a for a source that starts with ARCH_SPECIFIC
    (its cubin runs on that GPU only, which is what the plan's cubins keyed by architecture already assume)."""
    return arch + "a" if arch == "sm_90" and source.startswith(ARCH_SPECIFIC) else arch


def compile_source(source: str, name: str, arch: str) -> bytes:
    """CUDA C++ source -> cubin for `arch` (e.g. sm_90): from the kernel cache kept between processes when it has
    this compile (DEBUGKIT_KERNEL_CACHE), else compiled by NVRTC and kept there."""
    contents, names = _headers()
    opts = [f"--gpu-architecture={target(source, arch)}".encode(), b"-std=c++17"]
    key = disk_key(source, arch, opts, contents, _nvrtc_version())
    cubin = disk_get(key)
    if cubin is not None:
        return cubin
    cubin = _compile(source, name, opts, contents, names)
    disk_put(key, cubin)
    return cubin


def _compile(source, name, opts, contents, names) -> bytes:
    from cuda.bindings import nvrtc
    prog = _nvrtc_check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), len(names), contents, names),
                        "create")
    try:
        _nvrtc_check(nvrtc.nvrtcCompileProgram(prog, len(opts), opts), f"compile of {name}", prog)
        size = _nvrtc_check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = b" " * size
        _nvrtc_check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return cubin


_SOURCES: dict = {}  # tactics/<file> -> (source, sha1): read and hashed once per process, not per launch
_CUBINS: dict = {}    # (source sha1, arch) -> cubin bytes: compiled here, or preloaded from a plan


def _source(file: str) -> tuple[str, str]:
    hit = _SOURCES.get(file)
    if hit is None:
        with open(os.path.join(KERNEL_DIR, file)) as f:
            src = f.read()
        headers = "".join(h.decode() for h in _headers()[0])   # a header change recompiles its users
        src += "\n// headers " + hashlib.sha1(headers.encode()).hexdigest() + "\n"
        hit = _SOURCES[file] = (src, source_key(src))
    return hit


def source_key(src: str) -> str:
    return hashlib.sha1(src.encode()).hexdigest()


def module_from_source(src: str, name: str = "generated.cu", key: str | None = None):
    """The loaded module of a CUDA source (`key`: its source_key when the caller has it), compiled for this GPU on
    first use (or taken from a preloaded plan, or from precompile())."""
    ctx = context()
    key = (key or source_key(src), ctx.arch)
    mod = _MODULES.get(key)
    if mod is None:
        cubin = cubin_for(key[0], src, name, ctx.arch)
        mod = {"handle": check(_cu().cuModuleLoadData(cubin), f"cuModuleLoadData({name})"), "fns": {}}
        _MODULES[key] = mod
    return mod


_PENDING: dict = {}     # (source sha1, arch) -> [done Event, cubin bytes | the compile's exception]: precompile()
# the sources nearly every network's build runs kernels of (activations and binary ops, copies / casts / pooling /
# reductions, resize and padding, gathers): precompiled by default; INT8, FP8, quantize and RNN ones on first use
COMMON = ("pointwise.cu", "tensor.cu", "geometry.cu", "index.cu")


def precompile(arch: str, files=None) -> int:
    """Start compiling tactics/<file> sources (default: COMMON) for `arch` in background threads, for a
    build that will need them: NVRTC is thread-safe, and where the bindings release the GIL around the compile
    (cuda-bindings' generated calls) the compiles overlap the build's first passes, so its first kernel of each
    file finds the code compiled (or compiling) instead of the files compiling one after another as layers reach
    them (~0.7 s each on an H200 host). Only the compile runs there; loading a module stays on the
    caller's thread (cubin_for). A failed background compile is redone, and reported, where its kernel is first
    used. Returns how many compiles were started."""
    names = COMMON if files is None else files
    started = 0
    for f in names:
        src, key = _source(f)
        k = (key, arch)
        if k in _CUBINS or k in _PENDING:
            continue
        slot = _PENDING[k] = [threading.Event(), None]

        def work(src=src, f=f, slot=slot):
            try:
                slot[1] = compile_source(src, f, arch)
            except BaseException as e:   # said where the kernel is used: compiled again there, in the open
                slot[1] = e
            finally:
                slot[0].set()
        threading.Thread(target=work, name=f"nvrtc {f}", daemon=True).start()
        started += 1
    return started


def cubin_for(key: str, src: str, name: str, arch: str) -> bytes:
    """The cubin of a source (its source_key `key`) for `arch`: compiled before (here, by precompile(), or
    preloaded from a plan), else compiled now."""
    k = (key, arch)
    cubin = _CUBINS.get(k)
    if cubin is None:
        slot = _PENDING.pop(k, None)
        if slot is not None:
            slot[0].wait()
            cubin = slot[1] if isinstance(slot[1], bytes) else None
        if cubin is None:
            cubin = compile_source(src, name, arch)
        _CUBINS[k] = cubin
    return cubin


def module(file: str):
    """The loaded module of tactics/<file>, compiled on first use."""
    src, key = _source(file)
    return module_from_source(src, file, key)


def cubins(arch: str | None = None) -> dict:
    """{source sha1: cubin} compiled in this process for `arch` (what a plan carries)."""
    arch = arch or context().arch
    return {k: v for (k, a), v in _CUBINS.items() if a == arch}


def preload(arch: str, table: dict):
    """Make cubins from a plan available, so the kernels they hold are not compiled again."""
    for k, v in table.items():
        _CUBINS.setdefault((k, arch), bytes(v))


def kernel_from_source(src: str, name: str, file: str = "generated.cu", key: str | None = None):
    return _function(module_from_source(src, file, key), name)


def kernel(file: str, name: str):
    return _function(module(file), name)


def _function(mod, name: str):
    fn = mod["fns"].get(name)
    if fn is None:
        fn = mod["fns"][name] = check(_cu().cuModuleGetFunction(mod["handle"], name.encode()),
                                      f"cuModuleGetFunction({name})")
    return fn


_DYNAMIC_SHARED: dict = {}    # function handle -> the dynamic shared memory it may take (set once)


def allow_dynamic_shared(fn, nbytes: int):
    """Let `fn` take more than 48 KiB of dynamic shared memory (the default limit), once per function."""
    key = int(fn)
    if _DYNAMIC_SHARED.get(key, 0) < nbytes:
        cu = _cu()
        check(cu.cuFuncSetAttribute(fn, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    int(nbytes)), "cuFuncSetAttribute")
        _DYNAMIC_SHARED[key] = int(nbytes)


def launch(fn, grid, block, args, shared=0):
    """Launch `fn` on the context's stream; each arg is a numpy scalar/array whose bytes are the parameter."""
    ctx = context()
    holders = [a if isinstance(a, np.ndarray) else np.asarray(a) for a in args]
    params = np.array([h.ctypes.data for h in holders], dtype=np.uint64)
    check(_cu().cuLaunchKernel(fn, *grid, *block, shared, ctx.stream, params.ctypes.data, 0), "cuLaunchKernel")


def grid_for(n: int, block: int = 256):
    ctx = context()
    return (max(1, min((int(n) + block - 1) // block, ctx.sm_count * 32)), 1, 1)
