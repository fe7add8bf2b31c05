"""Executors: evaluate independent probes in parallel — inline, local processes, or a Ray cluster.

`executor.map(fn, items)` returns `[fn(x) for x in items]` in order. Process and Ray executors pickle `fn`, so it
must be a module-level function or an instance of a module-level class (a probe object that loads its model once
per worker: see `WorkerCache`). `make_executor(workers, ray)` picks one from the CLI's `--workers` / `--ray`.
"""
from __future__ import annotations

import multiprocessing
import os

from native import config
from native.errors import UsageError


class InlineExecutor:
    """Runs probes one after another in this process (workers=1: no pickling, easiest to debug)."""

    workers = 1
    name = "inline"

    def map(self, fn, items, on_done=None):
        """[fn(x) for x in items]; on_done(result) after each one (progress bars)."""
        out = []
        for x in items:
            out.append(fn(x))
            if on_done is not None:
                on_done(out[-1])
        return out

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LocalExecutor(InlineExecutor):
    """A pool of `workers` spawned processes (spawn, not fork: the engine's CPU thread pool does not survive fork).

    Each worker runs single-threaded kernels (DEBUGKIT_THREADS=1) so N workers use N cores instead of fighting
    over them.
    """

    name = "local"

    def __init__(self, workers: int = 2):
        if workers < 1:
            raise UsageError(f"--workers must be >= 1, got {workers}")
        self.workers = workers
        self._pool = None

    def _get_pool(self):
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor
            # the children inherit it (numpy's BLAS reads it at import); restored when the workers have started
            with config.environment(config.single_core_env()):
                self._pool = ProcessPoolExecutor(max_workers=self.workers,
                                                 mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_init_worker)
                self._wait_ready()
        return self._pool

    def _wait_ready(self, timeout_s: float = 120.0):
        """Start every worker now, with this environment, and return once each has run its initializer (imports):
        until then a free worker would take every probe while the others still load, and a batch would not run in
        parallel. Each round holds every worker busy a moment, so the tasks spread over the started ones."""
        import time
        seen, end = set(), time.monotonic() + timeout_s
        while len(seen) < self.workers and time.monotonic() < end:
            seen |= set(self._pool.map(_ready, [0.05] * self.workers))

    def map(self, fn, items, on_done=None):
        items = list(items)
        if not items:
            return []
        futures = [self._get_pool().submit(fn, x) for x in items]
        out = []
        for f in futures:   # in order: the caller's answer never depends on which worker finished first
            out.append(f.result())
            if on_done is not None:
                on_done(out[-1])
        return out

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _init_worker():
    config.reload()   # the settings of the environment this worker was spawned with (one core)
    import backends.runners  # noqa: F401  (import the engine once per worker, while the pool starts)


def _ready(hold_s):
    import time
    time.sleep(hold_s)
    return os.getpid()


class RayExecutor(InlineExecutor):
    """Probes as Ray tasks on the cluster at `address` ("auto" joins a running one or starts a local instance)."""

    name = "ray"

    def __init__(self, address: str = "auto", workers: int | None = None):
        try:
            import ray
        except ImportError:
            raise UsageError("--ray needs Ray: pip install 'debugkit[ray]'") from None
        self._ray = ray
        if not ray.is_initialized():
            try:
                ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                         runtime_env={"env_vars": config.single_core_env()})
            except ConnectionError:
                if address != "auto":
                    raise UsageError(f"--ray {address}: no Ray cluster answers there") from None
                ray.init(ignore_reinit_error=True, log_to_driver=False, num_cpus=workers,
                         runtime_env={"env_vars": config.single_core_env()})
        self.workers = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._remote = ray.remote(_ray_call)

    def map(self, fn, items, on_done=None):
        ref = self._ray.put(fn)
        out = []
        for r in [self._remote.remote(ref, x) for x in items]:
            out.append(self._ray.get(r))
            if on_done is not None:
                on_done(out[-1])
        return out


def _ray_call(fn, x):
    return fn(x)


class WorkerCache:
    """Per-process cache for probe objects: the model, reference outputs, ... loaded once per worker."""

    _store: dict = {}

    @classmethod
    def get(cls, key, make):
        if key not in cls._store:
            cls._store[key] = make()
        return cls._store[key]


def make_executor(workers: int = 1, ray: str | None = None):
    """--ray ADDRESS wins; else workers > 1 gives a local process pool; else inline."""
    if ray:
        return RayExecutor(ray, workers=workers if workers and workers > 1 else None)
    if workers and workers > 1:
        return LocalExecutor(workers)
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")
    return InlineExecutor()
