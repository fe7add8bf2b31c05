"""WorkerPool: local worker processes that are replaced when they die, each with its own environment.

One task per worker at a time, so the pool always knows which probe each worker holds: a worker lost mid-probe
(killed, out of memory, a crash in native code) is restarted with the same environment and its probe runs again, up
to `retries` times; then `WorkerLostError` names the probe. Each worker gets an environment of its own (one GPU per
worker: CUDA_VISIBLE_DEVICES), set before it imports anything. A probe function is pickled once per call of `map`
and sent to a worker only when that worker does not hold it yet (by content digest), so a search's model, inputs and
reference outputs reach each worker once, not once per probe. A large one (a search's model and captured tensors:
hundreds of MB) is written once to a file in this process's scratch directory and read by each worker from there:
through the pipe, this process would copy it once more per worker while its other thread (the base build) held
the interpreter, and the workers would wait for each other's turn (3.7 s before the first probe of a 368-layer
ResNet's search, 2x H200).
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import signal
import threading
import time
from multiprocessing.connection import wait

from native.errors import DebugkitError
from native.logger import G_LOGGER


class WorkerLostError(DebugkitError):
    """A probe killed its worker process every time it ran (bounded retries)."""


def describe_item(x, limit: int = 120) -> str:
    """A probe's artifact, short: a list of layers as its size and first names."""
    if isinstance(x, (list, tuple)):
        head = ", ".join(map(str, x[:3])) + (", ..." if len(x) > 3 else "")
        return f"[{head}] ({len(x)} item{'s' if len(x) != 1 else ''})"
    text = repr(x)
    return text if len(text) <= limit else text[:limit] + "..."


def _worker_main(conn, env):
    """A worker: set its environment, import the engine, then answer ("fn", digest, bytes) / ("call", ...)."""
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the driver's: it stops the workers itself
    from native import config
    config.reload()
    import backends.runners  # noqa: F401  (the engine, once per worker, before the first probe)
    if env.get("CUDA_VISIBLE_DEVICES"):   # a GPU worker: its context and kernel compiles now, not in its first probe
        try:
            from native.device import get_device
            get_device("cuda").warm_up()
        except Exception:
            pass   # no usable GPU: the probe that needs one says why
    fns: dict = {}
    conn.send(("ready", os.getpid()))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            return
        if msg[0] == "stop":
            return
        if msg[0] == "fn":
            _, digest, blob = msg
            fns = {digest: pickle.loads(blob)}   # one search's probe at a time: the previous one is dropped
            continue
        if msg[0] == "fnfile":   # a large probe function, handed over in a file (the module docstring)
            _, digest, path = msg
            fns = {}
            try:
                with open(path, "rb") as f:
                    fns = {digest: pickle.load(f)}
            except OSError as e:   # its calls answer with the reason
                fns = {digest: _Unreadable(path, e)}
            continue
        _, digest, index, item = msg
        try:
            result = ("ok", index, fns[digest](item))
        except BaseException as e:   # the probe's own error goes back to the driver, which re-raises it
            try:
                pickle.dumps(e)
                result = ("err", index, e)
            except Exception:
                result = ("err", index, RuntimeError(f"{type(e).__name__}: {e}"))
        conn.send(result)


class _Unreadable:
    """A probe function whose hand-off file this worker could not read: each call says so."""

    def __init__(self, path, error):
        self.path, self.error = path, error

    def __call__(self, item):
        raise WorkerLostError(f"a local worker could not read the probe's hand-off file {self.path} ({self.error})")


FILE_HANDOFF_BYTES = 8 << 20   # probe functions at least this large go to the workers through a file


def _how(process) -> str:
    process.join(1)
    code = process.exitcode
    return f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"


class _Raised:
    def __init__(self, error):
        self.error = error


def emit_in_order(results: dict, emitted: int, total: int, on_done=None) -> int:
    """Hand on the finished prefix of `results` ({index: result or _Raised}) from `emitted` on: on_done for each in
    order, the first error raised in order, as a serial run would. Returns the new count emitted."""
    while emitted < total and emitted in results:
        if isinstance(results[emitted], _Raised):
            raise results[emitted].error
        if on_done is not None:
            on_done(results[emitted])
        emitted += 1
    return emitted


class _Worker:
    def __init__(self, ctx, env: dict, slot: int):
        self.env, self.slot = dict(env), slot
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_worker_main, args=(child, self.env), daemon=True,
                                   name=f"debugkit-worker-{slot}")
        self.process.start()
        child.close()
        self.ready = False
        self.digest = None    # the probe function this worker holds
        self.index = None     # the item it is running

    def ask_to_stop(self):
        """Tell the worker to end after its current item (a dead one or a closed pipe: nothing to tell)."""
        try:
            if self.process.is_alive():
                self.conn.send(("stop",))
        except (OSError, ValueError):
            pass

    def stop(self, grace_s: float = 2.0):
        self.ask_to_stop()
        self.process.join(grace_s)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5)
        self.conn.close()


class WorkerPool:
    """`workers` spawned processes (spawn, not fork: the engine's thread pool does not survive fork); `envs[i]` is
    worker i's environment on top of this one's (e.g. one core, one GPU)."""

    def __init__(self, workers: int, envs=None, retries: int = 2, ready_timeout_s: float = 300.0):
        self.size = workers
        self.envs = list(envs) if envs is not None else [{} for _ in range(workers)]
        self.retries = retries
        self.restarts = 0
        self._ctx = multiprocessing.get_context("spawn")
        self._workers: list[_Worker] = []
        self._ready_timeout_s = ready_timeout_s
        self._files: dict = {}     # digest -> [hand-off file, maps using it] (_handoff)
        self._piped: set = set()   # digests whose hand-off file could not be written: sent through the pipes
        self._lock = threading.Lock()

    def spawn(self):
        """Start the worker processes without waiting for them: they import the engine (and, given a GPU, create
        its context) while the caller works, e.g. during a search's base build."""
        if not self._workers:
            self._workers = [_Worker(self._ctx, self.envs[i], i) for i in range(self.size)]
        return self

    def start(self):
        """Spawned, and every worker ready."""
        self.spawn()
        self._wait_ready([w for w in self._workers if not w.ready])
        return self

    def _wait_ready(self, workers):
        """Every worker has imported the engine: until then a free worker would take every probe."""
        end = time.monotonic() + self._ready_timeout_s
        for w in workers:
            while not w.ready:
                left = end - time.monotonic()
                if left <= 0 or not wait([w.conn, w.process.sentinel], timeout=left):
                    raise WorkerLostError(f"local worker {w.slot} did not start within {self._ready_timeout_s:.0f} s")
                if not w.process.is_alive() and not w.conn.poll():
                    raise WorkerLostError(f"local worker {w.slot} exited while starting (exit code "
                                          f"{w.process.exitcode}); run with --workers 1 to see why")
                msg = w.conn.recv()
                w.ready = msg[0] == "ready"

    def _handoff(self, digest, blob):
        """What a worker is sent to load the probe function `blob`: itself, or (large) a file holding it, written
        once per map and removed when the map ends (_release). Returns the message."""
        if len(blob) < FILE_HANDOFF_BYTES or digest in self._piped:
            return ("fn", digest, blob)
        with self._lock:
            entry = self._files.get(digest)
            if entry is None:
                from debugkit.debug.scratch import process_scratch_dir
                t0 = time.perf_counter()
                path = None
                try:
                    path = os.path.join(process_scratch_dir(), f"probe_{digest[:16]}.pkl")
                    with open(path + ".tmp", "wb") as f:
                        f.write(blob)
                    os.replace(path + ".tmp", path)
                except OSError as e:   # a full or read-only scratch disk: the pipe still works, only slower
                    if path is not None:
                        try:
                            os.remove(path + ".tmp")
                        except OSError:
                            pass
                    self._piped.add(digest)
                    G_LOGGER.warning(f"could not write the probe's hand-off file ({e}); the workers get the probe "
                                     f"({len(blob) / 1e6:.0f} MB) through their pipes instead (slower: free space "
                                     f"in the scratch directory, or set TMPDIR, to avoid it)")
                    return ("fn", digest, blob)
                G_LOGGER.verbose(f"probe function ({len(blob) / 1e6:.0f} MB) handed to the workers through {path} "
                                 f"(written in {time.perf_counter() - t0:.2f} s)")
                entry = self._files[digest] = [path, 0]
            entry[1] += 1
            return ("fnfile", digest, entry[0])

    def _release(self, msg):
        if msg[0] != "fnfile":
            return
        with self._lock:
            entry = self._files.get(msg[1])
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del self._files[msg[1]]
                    try:
                        os.remove(entry[0])
                    except OSError:
                        pass

    @staticmethod
    def _send(w: _Worker, digest, load, i, item) -> bool:
        """Item i to worker w, preceded by `load` (the probe function's message) when w does not hold it."""
        try:
            if w.digest != digest:
                w.conn.send(load)
                w.digest = digest
            w.conn.send(("call", digest, i, item))
        except (OSError, ValueError):
            return False
        w.index = i
        return True

    def _replace(self, w: _Worker) -> _Worker:
        w.stop(0)
        new = _Worker(self._ctx, w.env, w.slot)
        self._workers[self._workers.index(w)] = new
        self.restarts += 1
        self._wait_ready([new])
        return new

    def map(self, fn, items, on_done=None, slots=None, claim=None) -> list:
        """[fn(x) for x in items], in order; on_done(result) for each in order. fn is pickled once. `slots`: the
        workers (by slot) that may take items; default every one. `claim(i)`: asked before item i goes to a worker;
        False means another thread took it (its result here is None, the taker's to fill in)."""
        items = list(items)
        if not items:
            return []
        self.start()
        blob = pickle.dumps(fn, protocol=pickle.HIGHEST_PROTOCOL)
        digest = hashlib.sha1(blob).hexdigest()
        load = self._handoff(digest, blob)
        del blob
        todo = list(range(len(items)))[::-1]     # a stack: pop() gives the lowest index first
        results: dict = {}
        attempts = [0] * len(items)
        emitted = 0
        try:
            while emitted < len(items):
                for w in list(self._workers):
                    if w.index is None and todo and (slots is None or w.slot in slots):
                        i = todo.pop()
                        if claim is not None and not claim(i):
                            results[i] = None
                            continue
                        if not self._send(w, digest, load, i, items[i]):   # it died while idle: replace it
                            G_LOGGER.warning(f"local worker {w.slot} (pid {w.process.pid}) died ("
                                             f"{_how(w.process)}) between probes; restarting it")
                            w = self._replace(w)
                            if not self._send(w, digest, load, i, items[i]):
                                raise WorkerLostError(f"local worker {w.slot} died as soon as it started")
                busy = [w for w in self._workers if w.index is not None]
                if not busy:    # every item left was claimed elsewhere
                    emitted = emit_in_order(results, emitted, len(items), on_done)
                    continue
                ready = wait([w.conn for w in busy] + [w.process.sentinel for w in busy])
                for w in list(busy):
                    if w.conn in ready or (w.process.sentinel in ready and w.conn.poll()):
                        try:
                            kind, i, value = w.conn.recv()
                        except (EOFError, OSError):
                            kind = None
                        if kind is not None:
                            w.index = None
                            results[i] = _Raised(value) if kind == "err" else value
                            continue
                    if w.process.sentinel in ready or not w.process.is_alive():
                        i = w.index
                        attempts[i] += 1
                        how = _how(w.process)
                        if attempts[i] > self.retries:
                            raise WorkerLostError(
                                f"a local worker died ({how}) each of the {attempts[i]} times it ran the probe "
                                f"{describe_item(items[i])}; that probe kills its process (out of memory? a "
                                f"crash in native code?): run it alone with --workers 1 to see the error")
                        G_LOGGER.warning(f"local worker {w.slot} (pid {w.process.pid}) died ({how}) during the probe "
                                         f"{describe_item(items[i])}; restarting it and running that probe again "
                                         f"(retry {attempts[i]} of {self.retries})")
                        todo.append(i)
                        self._replace(w)
                emitted = emit_in_order(results, emitted, len(items), on_done)
        except BaseException:
            self.close()    # workers still holding probes of an abandoned map would answer the next one
            raise
        finally:
            self._release(load)
        return [results[i] for i in range(len(items))]

    def pids(self) -> list:
        return [w.process.pid for w in self._workers]

    def close(self):
        """Stop every worker: all are told first, then each is waited for, so their exits (a GPU worker tears down
        its CUDA context) overlap instead of queueing."""
        for w in self._workers:
            w.ask_to_stop()
        for w in self._workers:
            w.stop()    # asks again (harmless), waits, kills a worker that does not end
        self._workers = []
