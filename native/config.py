"""The one place debugkit reads its environment (DEBUGKIT_* variables), and the process-wide settings they seed.

Every other module asks `settings()` instead of reading os.environ, so the knobs are listed (and documented) here:

    DEBUGKIT_THREADS=N          size of the CPU kernel pool (default: the CPUs this process may use; 1 = no pool)
    DEBUGKIT_MALLOC_TUNE=0      never raise glibc's mmap/trim thresholds, even when process tuning is on
    DEBUGKIT_TUNE_PROCESS=0|1   default of the process-tuning option (Runtime(tune_process=...)); unset: off for
                                the Python API, on for the `debugkit` CLI and tools/benchmark.py
    DEBUGKIT_CHECK_FINGERPRINT=0  load plans whose device fingerprint differs (Runtime(check_fingerprint=False),
                                the CLI's --ignore-fingerprint)
    DEBUGKIT_LINT=1             run Graph.lint() after every builder pass (the test suite sets it)
    DEBUGKIT_JIT=0              never use numba for CPU kernels, even where it is installed (native/cpu/jit.py)
    DEBUGKIT_MAX_TENSOR_BYTES=N largest tensor an untrusted ONNX model may declare (onnx_parser/validate.py), an
                                HDF5 dataset may hold, a kernel may allocate; sizes like 1e9, 512M, 2G (garbage
                                is an error, never ignored)
    DEBUGKIT_MAX_DATA_FILE_BYTES=N  largest data file --load-inputs/--load-outputs open (default 64G)
    DEBUGKIT_DUMP_PASSES=DIR    write the builder's graph before and after every pass into DIR
    DEBUGKIT_CORPUS=DIR         the real-model corpus (tests/corpus, tools/corpus_run.py)
    DEBUGKIT_MODEL_CACHE=DIR    where fetched corpus models are kept
    DEBUGKIT_NO_FETCH=1         corpus tests skip models that are not cached instead of fetching them
    DEBUGKIT_KERNEL_CACHE=DIR|0 where compiled CUDA kernels (NVRTC cubins) are kept between processes (default
                                $XDG_CACHE_HOME/debugkit/kernels, else ~/.cache/debugkit/kernels; 0: not kept)

Set for child processes (never read here), by `child_env()` and `single_core_env()`:

    DEBUGKIT_PLAN, DEBUGKIT_TACTICS   the artifacts a `debug build --check` command judges
    DEBUGKIT_THREADS=1 (+ BLAS thread counts of 1)   a worker that should use one core

Settings are read once, on first use; `reload()` re-reads them (tests that monkeypatch the environment call it).
The live readers below (`threads()`, `max_tensor_bytes()`, `corpus_dir()`, ...) read on every call.
"""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from native.errors import UsageError


@dataclass
class Settings:
    threads: int | None = None          # None: the CPUs this process may run on
    malloc_tune: bool = True
    tune_process: bool | None = None    # None: the caller's default (API off, CLI on)
    check_fingerprint: bool = True
    lint: bool = False
    jit: bool = True                    # numba-compiled CPU kernels where numba is installed (native/cpu/jit.py)
    dump_passes: str | None = None
    corpus: str | None = None
    model_cache: str | None = None


_SETTINGS: dict = {}


def _flag(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    if v.lower() in ("1", "true", "yes", "on"):
        return True
    if v.lower() in ("0", "false", "no", "off"):
        return False
    raise UsageError(f"environment variable {name}={v!r}: expected 0 or 1")


def _int(name):
    v = os.environ.get(name)
    if not v:
        return None
    try:
        return max(1, int(v))
    except ValueError:
        raise UsageError(f"environment variable {name}={v!r}: expected a positive integer") from None


def reload() -> Settings:
    s = Settings(threads=_int("DEBUGKIT_THREADS"), malloc_tune=_flag("DEBUGKIT_MALLOC_TUNE", True),
                 tune_process=_flag("DEBUGKIT_TUNE_PROCESS", None), lint=_flag("DEBUGKIT_LINT", False),
                 jit=_flag("DEBUGKIT_JIT", True),
                 check_fingerprint=_flag("DEBUGKIT_CHECK_FINGERPRINT", True),
                 dump_passes=os.environ.get("DEBUGKIT_DUMP_PASSES") or None,
                 corpus=corpus_dir(), model_cache=model_cache_dir())
    _SETTINGS["s"] = s
    return s


def check_environment() -> Settings:
    """Read every DEBUGKIT_* variable now (the CLI does this first): a malformed value is a UsageError at the
    start of a command, never a surprise mid-run and never silently ignored."""
    s = reload()
    max_tensor_bytes()
    max_data_file_bytes()
    return s


def settings() -> Settings:
    s = _SETTINGS.get("s")
    return s if s is not None else reload()


def kernel_cache_dir() -> str | None:
    """DEBUGKIT_KERNEL_CACHE, read live: the directory of compiled CUDA kernels kept between processes, or None
    (set to 0/off/empty). Default: $XDG_CACHE_HOME/debugkit/kernels, else ~/.cache/debugkit/kernels."""
    v = os.environ.get("DEBUGKIT_KERNEL_CACHE")
    if v is not None:
        return None if v.strip().lower() in ("", "0", "off", "false", "no") else v
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "debugkit", "kernels")


def threads() -> int | None:
    """DEBUGKIT_THREADS, read live (tests and benchmarks change it between runs). Kernels ask per call (bert_mini
    ~37 times a run, mobilenetv3 ~25), so through os.environ's own dict where it has one (CPython): a lookup
    ~0.05 us, where os.environ.get costs ~0.6-1 us with the variable unset (a KeyError raised and caught inside);
    each raw value is read by `_int` once (a bad one is not kept: it raises every time)."""
    if _ENV_FAST:
        raw = _ENV_DATA.get(_THREADS_KEY)
        if raw is None:
            return None
        got = _THREADS_READ.get(raw, _THREADS_READ)
        if got is _THREADS_READ:
            got = _THREADS_READ[raw] = _int("DEBUGKIT_THREADS")
        return got
    return _int("DEBUGKIT_THREADS")


_ENV_DATA = getattr(os.environ, "_data", None)   # CPython's os.environ storage: {encoded key: encoded value}
try:
    _THREADS_KEY = os.environ.encodekey("DEBUGKIT_THREADS")
except Exception:  # noqa: BLE001 - another os.environ: read through its get
    _THREADS_KEY = None
_ENV_FAST = type(_ENV_DATA) is dict and _THREADS_KEY is not None
_THREADS_READ = {}   # raw DEBUGKIT_THREADS value -> _int's reading of it


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
          "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}


def parse_bytes(text: str, name: str = "value") -> int:
    """'2G' / '2GiB' -> 2*2**30, '2GB' -> 2*10**9, '1e9' / '1000000' -> bytes; UsageError for anything else
    (garbage, zero, negative, NaN): a size setting is never silently ignored."""
    import math
    import re
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", text or "")
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise UsageError(f"{name}={text!r}: expected a size in bytes such as 1000000, 1e9, 512M or 2G "
                         f"(K/M/G/T are powers of 1024; KB/MB/GB/TB powers of 1000)")
    value = float(m.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 1:
        raise UsageError(f"{name}={text!r}: a size must be at least 1 byte")
    return int(value)


def _bytes_env(name) -> int | None:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    return parse_bytes(v, f"environment variable {name}")


def max_tensor_bytes() -> int | None:
    """DEBUGKIT_MAX_TENSOR_BYTES (read live; 1e9, 512M, 2G), None when unset; UsageError when unreadable."""
    return _bytes_env("DEBUGKIT_MAX_TENSOR_BYTES")


def max_data_file_bytes() -> int | None:
    """DEBUGKIT_MAX_DATA_FILE_BYTES (read live): the largest data file --load-inputs/--load-outputs open."""
    return _bytes_env("DEBUGKIT_MAX_DATA_FILE_BYTES")


def corpus_dir() -> str | None:
    """DEBUGKIT_CORPUS (read live): the directory holding the exported corpus models, None when unset."""
    return os.environ.get("DEBUGKIT_CORPUS") or None


def model_cache_dir() -> str | None:
    """DEBUGKIT_MODEL_CACHE (read live): where fetched corpus models are kept, None for the default."""
    return os.environ.get("DEBUGKIT_MODEL_CACHE") or None


def no_fetch() -> bool:
    """DEBUGKIT_NO_FETCH (read live): never download a corpus model that is not cached."""
    return bool(_flag("DEBUGKIT_NO_FETCH", False))


def malloc_tune() -> bool:
    return _flag("DEBUGKIT_MALLOC_TUNE", True)


def tune_process_default(fallback: bool) -> bool:
    """The process-tuning default: DEBUGKIT_TUNE_PROCESS when set, else `fallback` (the caller's default)."""
    v = settings().tune_process
    return fallback if v is None else v


# One core per worker process: our kernel pool off and BLAS single-threaded (an idle OpenBLAS thread busy-waits
# and, with N workers on N cores, steals the core of the next kernel: measured 10-30x slower probes).
SINGLE_CORE_ENV = {"DEBUGKIT_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}


def single_core_env() -> dict:
    """The environment a worker process that should use one core starts with (set it before numpy loads)."""
    return dict(SINGLE_CORE_ENV)


_CHILD_SETTINGS = {"plan": "DEBUGKIT_PLAN", "tactics": "DEBUGKIT_TACTICS"}


def child_env(**settings_) -> dict:
    """This process's environment plus settings handed to a child process (`plan=`, `tactics=`: the paths a
    `debug build --check` command reads as $DEBUGKIT_PLAN / $DEBUGKIT_TACTICS)."""
    env = dict(os.environ)
    for key, value in settings_.items():
        if key not in _CHILD_SETTINGS:
            raise TypeError(f"unknown child setting {key!r}; known: {', '.join(_CHILD_SETTINGS)}")
        env[_CHILD_SETTINGS[key]] = "" if value is None else str(value)
    return env


@contextlib.contextmanager
def environment(overrides: dict):
    """Set `overrides` in os.environ for the block (processes spawned inside inherit them), then restore every
    variable as it was (unset ones are removed again): a process-wide side effect, undone."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update({k: str(v) for k, v in overrides.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def cli_defaults():
    """What the `debugkit` CLI and the benchmark tools use: process tuning on (unless DEBUGKIT_TUNE_PROCESS=0),
    so engines they build and run are timed and run with the kernel pool, as the performance numbers assume."""
    s = settings()
    if s.tune_process is None:
        s.tune_process = True
    return s
