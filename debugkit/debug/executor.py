"""Executors: evaluate independent probes in parallel — inline, local processes, or a Ray cluster.

`executor.map(fn, items)` returns `[fn(x) for x in items]` in order. Process and Ray executors pickle `fn`, so it
must be a module-level function or an instance of a module-level class (a probe object that loads its model once
per worker: see `WorkerCache`). `fn` crosses to the workers once per search: the local pool sends it to a worker
only when that worker does not hold it yet, Ray puts it into the object store once (both by content digest).
`make_executor(workers, ray, device)` picks one from the CLI's `--workers` / `--ray` / `--device`.

`executor.remote` is True where workers may not see this machine's files (Ray): probes then carry the model's bytes
instead of its path (see `debugkit.debug.shipping`).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import time

from native import config
from native.errors import UsageError


class InlineExecutor:
    """Runs probes one after another in this process (workers=1: no pickling, easiest to debug)."""

    workers = 1
    name = "inline"
    remote = False
    own_gpus = False   # whether each worker has a GPU of its own (debug precision then shares the base timing)
    driver_slot = False   # whether the caller's process evaluates one probe of each batch too (Prober)

    def map(self, fn, items, on_done=None, slots=None, claim=None):
        """[fn(x) for x in items]; on_done(result) after each one (progress bars). `slots`: which workers may take
        them (LocalExecutor; the others run everything anywhere). `claim(i)`: asked before item i runs; False means
        another thread took it (its result here is None)."""
        out = []
        for i, x in enumerate(items):
            out.append(fn(x) if claim is None or claim(i) else None)
            if on_done is not None:
                on_done(out[-1])
        return out

    def warm(self):
        """Start the workers without waiting (they get ready while the caller works); inline: nothing to start."""
        return self

    def off_caller_gpu(self) -> list:
        """The workers (slots) known to run on a GPU other than the one this process builds on (LocalExecutor)."""
        return []

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def visible_gpus() -> list:
    """The GPU ordinals this process may use: CUDA_VISIBLE_DEVICES when set, else every GPU the driver counts."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip() and x.strip() != "-1"]
    try:
        from cuda.bindings import driver   # the cuda extra; asked only for --device cuda
        if int(driver.cuInit(0)[0]) != 0:
            return []
        err, count = driver.cuDeviceGetCount()
        return [str(i) for i in range(count)] if int(err) == 0 else []
    except Exception:
        return []


def worker_envs(workers: int, device: str = "cpu", gpus=None) -> list:
    """The environment of each local worker: one core each, and with --device cuda one GPU each
    (CUDA_VISIBLE_DEVICES=<its GPU>, round robin when there are more workers than GPUs)."""
    base = config.single_core_env()
    if str(device) != "cuda":
        return [dict(base) for _ in range(workers)]
    gpus = list(gpus) if gpus is not None else visible_gpus()
    if not gpus:
        return [dict(base) for _ in range(workers)]
    return [{**base, "CUDA_VISIBLE_DEVICES": gpus[i % len(gpus)]} for i in range(workers)]


def auto_workers(device: str = "cpu", gpus=None) -> int:
    """--workers auto: one per visible GPU with --device cuda, else one per core this process may use."""
    if str(device) == "cuda":
        n = len(gpus if gpus is not None else visible_gpus())
        if n:
            return n
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class LocalExecutor(InlineExecutor):
    """A pool of `workers` spawned processes that are replaced when they die (`debugkit.debug.pool`).

    Each worker runs single-threaded kernels (DEBUGKIT_THREADS=1) so N workers use N cores instead of fighting
    over them; with device="cuda" each worker owns one GPU (CUDA_VISIBLE_DEVICES).
    """

    name = "local"

    def __init__(self, workers: int = 2, device: str = "cpu", retries: int = 2, gpus=None):
        if workers < 1:
            raise UsageError(f"--workers must be >= 1, got {workers}")
        from debugkit.debug.pool import WorkerPool
        self.workers = workers
        self.envs = worker_envs(workers, device, gpus)
        # each worker a GPU of its own (not two on one: their timings would measure each other)
        self.own_gpus = str(device) == "cuda" and \
            len({e.get("CUDA_VISIBLE_DEVICES") for e in self.envs} - {None}) == workers
        # with a GPU per worker the search's own process takes one probe of each batch too (strategies.Prober):
        # it holds the base build's plans and packed weights, and would otherwise wait; CPU workers have a core
        # each already, so there it only waits
        self.driver_slot = self.own_gpus
        self._off_caller = None   # off_caller_gpu(), worked out on first use
        self._pool = WorkerPool(workers, self.envs, retries=retries)

    @property
    def restarts(self) -> int:
        return self._pool.restarts

    def pids(self) -> list:
        return self._pool.start().pids()

    def warm(self):
        self._pool.spawn()
        return self

    def map(self, fn, items, on_done=None, slots=None, claim=None):
        return self._pool.map(fn, items, on_done, slots, claim)

    def off_caller_gpu(self) -> list:
        """The workers (slots) whose GPU is not the one this process builds on (the first it may use): their load
        cannot skew this process's tactic timing. Empty without GPU workers."""
        if not self.own_gpus:
            return []
        if self._off_caller is None:   # asked per batch of probes: the driver query once per executor
            mine = (visible_gpus() or [None])[0]
            self._off_caller = [i for i, e in enumerate(self.envs) if e.get("CUDA_VISIBLE_DEVICES") != mine]
        return list(self._off_caller)

    def close(self):
        self._pool.close()


class ProbeActor:
    """One Ray worker process for the length of a search: it keeps its parsed models, caches and CUDA context
    between probes (Ray gives a GPU *task* a fresh process per call: max_calls=1)."""

    def run(self, fn, x):
        return fn(x)


class RayExecutor(InlineExecutor):
    """Probes on the Ray cluster at `address` ("auto" joins a running one or starts a local instance), on one
    `ProbeActor` per worker.

    Each actor asks for one CPU, and with device="cuda" one GPU (num_gpus=1): Ray places it on a node with a free
    GPU and sets its CUDA_VISIBLE_DEVICES for the actor's life. An actor that dies is restarted and its probe
    rerun (`retries` times); then `WorkerLostError` names the probe."""

    name = "ray"
    remote = True

    def __init__(self, address: str = "auto", workers: int | None = None, device: str = "cpu", retries: int = 3):
        from debugkit.debug.ray_cluster import connect
        self._ray = connect(address, num_cpus=workers)
        ray = self._ray
        gpu = str(device) == "cuda"
        res = ray.cluster_resources()
        if gpu and not res.get("GPU"):
            raise UsageError(f"--ray {address} --device cuda: the Ray cluster has no GPUs (its resources: "
                             f"{', '.join(f'{k} {v:g}' for k, v in sorted(res.items()) if '.' not in k and ':' not in k)}"
                             f"); start its nodes with --num-gpus, or search on the CPU")
        room = max(1, int(res.get("GPU" if gpu else "CPU", 1)))
        if workers and workers > room:
            from native.logger import G_LOGGER
            G_LOGGER.warning(f"--workers {workers}: the Ray cluster has {room} {'GPU' if gpu else 'CPU'}(s); "
                             f"using {room} workers (more would wait for resources that never come)")
        self.workers = min(workers or room, room)
        self.own_gpus = gpu   # num_gpus=1 per actor
        self.retries = retries
        self._actor_cls = ray.remote(num_cpus=1, num_gpus=1 if gpu else 0, max_restarts=retries,
                                     max_task_retries=retries)(ProbeActor)
        self._actors: list = []
        self._refs: dict = {}   # digest -> ObjectRef: each probe object goes into the object store once

    def put(self, fn):
        """The ObjectRef of `fn` (put once per distinct content)."""
        blob = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        digest = hashlib.sha1(blob).hexdigest()
        if digest not in self._refs:
            self._refs = {digest: self._ray.put(fn)}   # the previous search's probe is released
        return self._refs[digest]

    def map(self, fn, items, on_done=None, slots=None, claim=None):
        """Each idle actor takes the next probe; results are returned (and on_done called) in order. (`slots` is
        not used: Ray places the actors.) `claim`: as InlineExecutor.map's."""
        from debugkit.debug.pool import WorkerLostError, _Raised, describe_item, emit_in_order
        ray = self._ray
        items = list(items)
        self.warm()
        ref = self.put(fn)
        idle, running, results, todo, emitted = list(self._actors), {}, {}, list(range(len(items))), 0
        try:
            while emitted < len(items):
                while idle and todo:
                    i = todo.pop(0)
                    if claim is not None and not claim(i):
                        results[i] = None
                        continue
                    actor = idle.pop(0)
                    running[actor.run.remote(ref, items[i])] = (i, actor)
                if not running:     # every item left was claimed elsewhere
                    emitted = emit_in_order(results, emitted, len(items), on_done)
                    continue
                done, _ = ray.wait(list(running), num_returns=1)
                i, actor = running.pop(done[0])
                idle.append(actor)
                try:
                    results[i] = ray.get(done[0])
                except ray.exceptions.RayActorError as e:
                    raise WorkerLostError(
                        f"a Ray worker died each of the {self.retries + 1} times it ran the probe "
                        f"{describe_item(items[i])} ({type(e).__name__}); that probe kills its process (out of "
                        f"memory? a crash in native code?): run it alone with --workers 1 to see the error") from None
                except Exception as e:      # the probe's own error: raised in order, as a serial run would
                    results[i] = _Raised(e)
                emitted = emit_in_order(results, emitted, len(items), on_done)
        except BaseException:
            self.close()    # actors still running probes of an abandoned map would answer the next one
            raise
        return [results[i] for i in range(len(items))]

    def warm(self):
        if not self._actors:   # created asynchronously: Ray starts their processes while the caller works
            self._actors = [self._actor_cls.remote() for _ in range(self.workers)]
        return self

    def close(self):
        for actor in self._actors:
            try:
                self._ray.kill(actor)
            except Exception:
                pass
        self._actors = []
        self._refs = {}


class WorkerCache:
    """Per-process cache for probe objects: the model, reference outputs, ... loaded once per worker. It keeps the
    `limit` entries used last, so a long-lived worker (Ray) that serves search after search does not grow."""

    _store: dict = {}
    limit = 16

    @classmethod
    def get(cls, key, make):
        if key in cls._store:
            cls._store[key] = cls._store.pop(key)   # most recently used last
        else:
            cls.put(key, make())
        return cls._store[key]

    @classmethod
    def put(cls, key, value):
        cls._store.pop(key, None)
        cls._store[key] = value
        while len(cls._store) > cls.limit:
            cls._store.pop(next(iter(cls._store)))


class ShippedModel:
    """A picklable probe's model (debug repeat's iterations, debug build's): its path on this machine, or after
    ship() the model's bytes, so workers on other nodes need none of this machine's files."""

    model_path = None
    model_bytes = model_key = None

    def ship(self, model):
        """Carry the model's bytes (external data included) and only the file's name; each worker writes them once
        into its own scratch directory (worker_model_file)."""
        import hashlib
        self.model_bytes = model.SerializeToString()
        self.model_key = hashlib.sha256(self.model_bytes).hexdigest()
        self.model_path = os.path.basename(self.model_path)
        return self

    def _model_file(self) -> str:
        """The model's path here: the driver's file, or (shipped) this worker's copy, written once per process."""
        if self.model_bytes is None:
            return self.model_path
        return worker_model_file(self.model_key, self.model_path, self.model_bytes)


def worker_model_file(model_key: str, name: str, data: bytes) -> str:
    """A shipped model as a file on this worker: written once per process into its scratch directory (and again
    if that directory was removed under a long-lived worker), for what needs a path (an external --check command,
    a repeat iteration)."""
    from debugkit.debug.scratch import process_scratch_dir

    def write():
        path = os.path.join(process_scratch_dir(), f"{model_key[:16]}_{name}")
        with open(path, "wb") as f:
            f.write(data)
        return path
    path = WorkerCache.get(("model file", model_key), write)
    if not os.path.exists(path):
        path = write()
        WorkerCache.put(("model file", model_key), path)
    return path


def parse_workers(text):
    """--workers N|auto."""
    if str(text).strip().lower() == "auto":
        return "auto"
    try:
        n = int(text)
    except ValueError:
        raise UsageError(f"--workers takes a number or 'auto', got '{text}'") from None
    if n < 1:
        raise UsageError(f"--workers must be >= 1, got {n}")
    return n


def make_executor(workers=1, ray: str | None = None, device="cpu"):
    """--ray ADDRESS wins; else workers > 1 (or auto) gives a local process pool; else inline."""
    if workers is not None and workers != "auto" and workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")
    if ray:
        n = None if workers in (None, "auto") or workers <= 1 else workers
        return RayExecutor(ray, workers=n, device=device)
    if workers == "auto":
        workers = auto_workers(device)
    if workers and workers > 1:
        return LocalExecutor(workers, device=device)
    return InlineExecutor()
