"""CPU threading for engine kernels: one small pool that kernels split their work over (bands of output rows or
channels), with BLAS itself single-threaded while the pool is in use.

Why not let OpenBLAS thread each GEMM: its worker threads busy-wait after every call (~0.1 s), so (a) a 2-thread
GEMM on a 2-core machine that is also running anything else stalls for whole scheduler slices (measured 4-10x
slower than one thread under load), and (b) its spinning idle worker steals the core from whatever kernel runs
next. Kernels that split work themselves run each band's im2col copy, GEMM and epilogue on one thread and wait on
futures (blocking, not spinning): near 2x on an idle 2-core machine, about single-thread speed under load, and the
copies and epilogues run in parallel too, which BLAS threading does not give.

Both the pool and the BLAS setting are process-wide, so they are an explicit, reversible option (`tune()` /
`untune()`, reached through `Runtime(tune_process=True)`, the `debugkit` CLI and tools/benchmark.py), never a side
effect of loading an engine: until something asks, kernels run on the calling thread and OpenBLAS keeps whatever
threading the process had. DEBUGKIT_THREADS=N sets the pool size (default: the CPUs this process may run on; 1
disables the pool and leaves BLAS threading alone). See docs/architecture.md, "Process-wide tuning".
Compiled kernels hand work to the pool without the GIL: GEMM shares (`gemm_shares`) and kernel shares
(`kernel_shares`: a C function's halves, stage by stage), both served from the worker's poll loop.
"""
from __future__ import annotations

import ctypes
import glob
import os
import threading
import time

import numpy as np

from native import config
from native.cpu import allocator, jit

_LOCK = threading.Lock()
_STATE = {"pool": None, "blas": None, "tuned": False, "blas_before": None}
_LOCAL = threading.local()


def num_threads() -> int:
    """Threads a parallel_for may use: 1 until process tuning is on, then DEBUGKIT_THREADS or the CPU count."""
    if not _STATE["tuned"]:
        return 1
    return pool_size()


def pool_size() -> int:
    env = config.threads()   # (read live, ~0.1 us: kernels ask per call)
    if env:
        return env
    cpus = _STATE.get("cpus")
    if cpus is None:   # asked once per process: kernels ask per call, and the system call cost ~10 us each time
        try:
            cpus = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            cpus = max(1, os.cpu_count() or 1)
        _STATE["cpus"] = cpus
    return cpus


def _blas_setter():
    """The OpenBLAS `set_num_threads` of the library numpy links (scipy-openblas wheels), or None."""
    return _blas_fn(("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                     "openblas_set_num_threads64_", "openblas_set_num_threads"))


def _blas_getter():
    """The matching `get_num_threads`, or None."""
    fn = _blas_fn(("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads",
                   "openblas_get_num_threads64_", "openblas_get_num_threads"))
    if fn is not None:
        fn.restype = ctypes.c_int
    return fn


def blas_threads() -> int | None:
    """OpenBLAS's current thread count (None where numpy's BLAS is not an OpenBLAS we can ask)."""
    getter = _blas_getter()
    return int(getter()) if getter is not None else None


def _blas_fn(symbols):
    here = os.path.dirname(np.__file__)
    for path in glob.glob(os.path.join(here, "..", "numpy.libs", "*openblas*")) + \
            glob.glob(os.path.join(here, ".dylibs", "*openblas*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for sym in symbols:
            fn = getattr(lib, sym, None)
            if fn is not None:
                return fn
    return None


class _Worker:
    """One pool thread, parked on a lock: `start` hands it a share of a parallel_for and releases the lock; the
    caller later waits on `done` (`wait`). Two bare locks per hand-off (~25-57 us on a 2-vCPU VM) instead of an executor's
    queue, future and condition (~83-107 us measured for a no-op parallel_for). Where numba runs (native/cpu/jit_spin.py)
    both sides first poll a flag word outside the GIL for a bounded time (the worker for its next job, the caller
    for the worker's end), so hand-offs within a run do not wait for a sleeping thread to be woken: a no-op
    parallel_for ~100 -> ~20 us; the locks still carry every hand-off. Polling and splitting pay only while each
    thread has a CPU of its own: when a worker that was polling for its next job has not started it a short while
    after the caller handed it over (its CPU taken: another process, or ONNX Runtime's workers spinning ~40 ms
    after a run), the caller takes the share back and runs it itself (`_take_over`: a share left to a preempted
    worker waited a scheduler slice), the worker skips it when it wakes and gets no new share until it has, and
    for the next BACKOFF_S seconds nobody polls and parallel_for runs every item on the caller (`_contended`): a
    polling thread would keep the CPU from the very thread it waits for. A worker that saw its job polls a few us
    more before it asks for the GIL (`GIL_GRACE_POLLS`, ended early by the caller's `wait`), so it takes the GIL
    the caller has just left for numpy instead of sleeping on it until a futex wakes it."""

    def __init__(self, index):
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job = None
        self.mine = None      # the caller's copy of the current job (fn, items, idxs, results), for `_take_over`
        self.claim = None     # taken by whoever runs the current job's share: the worker, or the caller instead
        self.owes = False     # the caller took a share over: the worker has not yet passed it (its `done` pending)
        self.posted = 0
        # [jobs posted, finished, started, polling now, GEMM shares posted, claimed, done, dozing, the job the caller
        # waits for outside the GIL], read by the spins
        self.flags = np.zeros(9, np.int64)
        self.polling = False
        self.asleep = False    # on its lock (a kernel share wakes it with a job, `_kick`), not dozing in `serve`
        self.spin = _spinner()
        self.gemm = np.zeros(10, np.int64)   # the GEMM share posted to it (jit_gemm_share's descriptor)
        self.gemm_posted = 0
        self.gemm_wanted = False             # a GEMM found it not polling: after this job, poll GEMM_KICK_POLLS
        self.serve = _gemm_server(self.spin)
        self.thread = threading.Thread(target=self._loop, name=f"debugkit-cpu-{index}", daemon=True)
        self.thread.start()

    def _loop(self):
        _LOCAL.worker = True
        finished = 0
        for_gemm = False
        while True:
            if self.serve is not None and not _contended():
                # publish the last job's end, then poll for the next job a while, running GEMM shares meanwhile
                # (longer when a GEMM share found it asleep: `gemm_shares`)
                self.serve(self.flags, self.gemm, 1, finished, 0, finished,
                           GEMM_KICK_POLLS if for_gemm else WORKER_SPIN_POLLS, 3, 2, GEMM_SPIN_POLLS, DOZES, NAP_US,
                           GIL_GRACE_POLLS, 8)
            elif self.spin is not None and not _contended():
                # publish the last job's end, then poll for the next job a while
                self.spin.publish_wait_change(self.flags, 1, finished, 0, finished, WORKER_SPIN_POLLS, 3, 2)
            else:
                self.flags[1] = finished
            self.asleep = True
            self.go.acquire()
            self.asleep = False
            self.flags[2] = self.flags[0]   # started
            fn, items, idxs, results = self.job
            for_gemm, self.gemm_wanted = self.gemm_wanted, False
            if self.claim.acquire(blocking=False):   # else the caller ran this share while this thread had no CPU
                _run_share(fn, items, idxs, results)
            self.job = None
            finished += 1
            self.done.release()

    def ready(self) -> bool:
        """Whether a share can be handed over: not while the worker has yet to pass a share the caller took over
        (it has had no CPU since). Called with the pool held (_BUSY)."""
        if self.owes:
            if not self.done.acquire(blocking=False):
                return False
            self.owes = False
        return True

    def start(self, fn, items, idxs, results):
        self.job = self.mine = (fn, items, idxs, results)
        self.claim = threading.Lock()
        self.posted += 1
        self.polling = bool(self.flags[3])   # polling: it starts at once unless its CPU is taken
        self.flags[0] = self.posted
        self.go.release()

    def wait(self):
        self.flags[8] = self.posted   # (its GIL grace ends: the caller's polls below leave the GIL free)
        try:
            if self.spin is not None and not _contended():
                if self._started():
                    self.spin.wait_change(self.flags, 1, self.posted - 1, CALLER_SPIN_POLLS)
                else:   # its CPU is taken: nobody polls for a while, and the share is run here if still unclaimed
                    _back_off()
                    if self._take_over():
                        return
            self.done.acquire()
        finally:
            self.mine = None

    def _started(self) -> bool:
        """Whether the worker took up the current job soon enough: at once if it was polling for it (the polls
        publish what they see before taking the GIL), within ~250 us more if it was asleep on its lock."""
        if self.flags[2] == self.posted or self.spin.wait_change(self.flags, 2, self.posted - 1, START_POLLS):
            return True
        return not self.polling and self.spin.wait_change(self.flags, 2, self.posted - 1, WAKE_POLLS)

    def _take_over(self) -> bool:
        """Run the current share here if the worker has not claimed it yet (True: it will skip it, and owes its
        `done`); False when it already has (then wait for it)."""
        if not self.claim.acquire(blocking=False):
            return False
        self.owes = True
        _run_share(*self.mine)
        return True


def _run_share(fn, items, idxs, results):
    """results[i] = fn(items[i]) for a share's items; an exception is kept in the share's first slot."""
    try:
        for i in idxs:
            results[i] = fn(items[i])
    except BaseException as e:  # noqa: BLE001 - handed back to the caller, re-raised there
        results[idxs[0]] = _Failed(e)


# polls (~30 ns each on a 2.4 GHz x86) a worker spends waiting for its next job after one (~120 us: the next
# threaded layer of a run often comes sooner), a caller waiting for a worker to start its share, and then for its
# end, before sleeping on the lock
WORKER_SPIN_POLLS = 1 << 12
START_POLLS = 1 << 10
WAKE_POLLS = 1 << 13       # further polls for a worker that was asleep on its lock (a wake-up costs 25-100 us here)
CALLER_SPIN_POLLS = 1 << 12
GEMM_SPIN_POLLS = 1 << 15  # ~1 ms: after a GEMM share (jit_gemm_share) a worker polls on through a run's small layers
GEMM_KICK_POLLS = 1 << 17  # ~4 ms: after the Python share of a GEMM that found it asleep: the next GEMM may come after a
                           # few other layers (or, in the build's round-robin timing, after every other candidate's run)
DOZES, NAP_US = 1600, 50  # then ~0.2 s dozing without the GIL (usleep naps, ~115 us each here: ~1% of a CPU)
                           # before sleeping on the lock: a kernel share wakes a dozing worker with a store
                           # (`kernel_shares`), no GIL needed; long enough to outlast the ~40 ms a benchmark waits for
                           # ONNX Runtime's spinning workers between its blocks of runs
GIL_GRACE_POLLS = 96       # ~3-4 us: a worker that saw a Python job (parallel_for's share) polls this long more, or
                           # until the caller waits for it, before it asks for the GIL. Asked at once, the GIL is
                           # still the caller's (posting, entering its own share), so the worker slept on the GIL's
                           # condition variable and a futex woke it ~20 us later (35-50 in kernels with more Python
                           # before their first numpy call); by now the caller is usually inside numpy (GIL free).
                           # tools/handoff_latency.py (12:24-12:28, gated): 32 polls too few (the worker still
                           # sleeps), 64-96 start it 4.5-5 us after the caller instead of ~20, 512 waits too long
BACKOFF_S = 0.02           # no polling for this long after a worker was seen not starting (its CPU taken); short,
                           # since a share handed to a worker without a CPU is taken back (`_take_over`): ONNX
                           # Runtime's spinning workers hold a CPU ~40 ms after a run, then both cores are ours
SHARED_CPU_BACKOFF_S = 0.25  # after a kernel share's worker half ran late or stalled mid-share (its CPU shared with
                             # another process): each such half costs the caller ~0.1-3 ms, a take-over ~30 us
                             # (mobilenetv3 at load 4-5: every 20 ms made runs ~11% slower than without shares)
_SPIN = {"quiet_after": 0.0}


def _back_off(seconds=None):
    """A worker was seen without a CPU: nobody polls for BACKOFF_S (or `seconds`), and a worker polling now (in the
    middle of its ~1-4 ms of polls) stops and dozes (jit_gemm_share.serve: flags[DOZING] = 3), since its polls would
    keep the CPU from the threads it waits for, the caller among them, where another process holds the other CPU."""
    _SPIN["quiet_after"] = time.perf_counter() + (BACKOFF_S if seconds is None else seconds)
    for w in _STATE["pool"] or ():
        if w.flags[3]:
            w.flags[7] = 3


def rest():
    """Let the pool's worker stop polling and dozing now and sleep on its lock, rather than after its ~1-4 ms of
    polls and ~0.2 s of dozing (`DOZES`): for when this process hands both CPUs to other work, as
    debugkit.benchmark.interleaved does before each contender's block. ONNX Runtime's two threads ran 15-40% slower
    in a process whose worker dozed beside them (its naps wake it every ~115 us). The next GEMM or kernel share finds
    the worker asleep and wakes it (that share's halves run on the caller)."""
    for w in _STATE["pool"] or ():
        if w.flags[3] or w.flags[7]:
            w.flags[7] = 4


def _contended() -> bool:
    """A worker recently did not start its share in time: poll nowhere until BACKOFF_S has passed."""
    return time.perf_counter() < _SPIN["quiet_after"]


def back_off_left() -> float:
    """Seconds until the pool's current back-off ends (0.0: none): the builder waits it out before a timed run
    (CpuDevice.before_timed_run), so a split tactic is timed split."""
    return max(0.0, _SPIN["quiet_after"] - time.perf_counter())


def _spinner():
    """native/cpu/jit_spin.py where numba runs (and DEBUGKIT_JIT is not 0), else None: plain lock waits."""
    if not jit.available():
        return None
    try:
        from native.cpu import jit_spin   # function-level: imports numba (the optional jit extra)
    except Exception:  # noqa: BLE001 - any failure to compile means plain waits
        return None
    return jit_spin


def _gemm_share():
    """native/cpu/jit_gemm_share.py and the address of numpy's 64-bit-integer cblas_sgemm, or (None, 0) where numba
    or that symbol is missing. Asked once per process."""
    got = _STATE.get("gemm_share")
    if got is None:
        got = (None, 0)
        if jit.available():
            try:
                from native.cpu import jit_gemm_share as gs   # function-level: imports numba (the jit extra)
                addr = gs.sgemm_address(_blas_fn)
                if addr:
                    got = (gs, addr)
            except Exception:  # noqa: BLE001 - any failure to compile means the GIL-holding path
                got = (None, 0)
        _STATE["gemm_share"] = got
    return got


def sgemm_address() -> int:
    """The address of numpy's 64-bit-integer cblas_sgemm where GIL-free shares can run (numba and that symbol), else
    0: for kernels of a kernel share (`kernel_shares`) that call it."""
    return _gemm_share()[1]


def _gemm_server(spin):
    """The worker's poll that also runs GEMM shares (jit_gemm_share.serve), where the spinner is jit_spin's and
    jit_gemm_share loads; else None (the spinner's publish_wait_change, or plain lock waits)."""
    if spin is None or getattr(spin, "__name__", "") != "native.cpu.jit_spin":
        return None
    gs, addr = _gemm_share()
    return gs.serve if gs is not None else None


def gemm_share(a, b, y) -> np.ndarray:
    """The GEMM share (gemm_shares' descriptor) of y = a @ b: a [m, k], b [k, n], y [m, n] float32 views with unit
    column stride, each row a row stride (its lda / ldb / ldc, in elements) after the last. The caller checks the
    dtypes and strides; the arrays must outlive the share's run."""
    (m, k), n = a.shape, b.shape[1]
    return np.array([m, n, k, a.ctypes.data, a.strides[0] // 4, b.ctypes.data, b.strides[0] // 4, y.ctypes.data,
                     y.strides[0] // 4], np.int64)


def gemm_shares(shares, between=None, before=None) -> bool:
    """Run GEMM shares at once, outside the GIL: each an int64 [9] (m, n, k, a, lda, b, ldb, c, ldc: one row-major
    float32 cblas_sgemm, alpha 1, beta 0, addresses of live arrays; jit_gemm_share), the first on the caller, each
    other on a pool worker that is polling for work right now. A worker that does not claim its share in time (its
    CPU taken) has it run by the caller instead, as parallel_for's take-over. Returns False, having run nothing,
    where that cannot be (no numba or no 64-bit cblas_sgemm, BLAS threading not switched off by `tune()`, one
    thread, a pool worker calling, the pool busy, contended or owed a share, or a worker not polling now): the
    caller then runs the product as Python shares (parallel_for), after which a worker that was not polling polls
    for GEMM shares ~4 ms (`GEMM_KICK_POLLS`), so the next GEMM finds it. `between()`, when given, runs on the
    caller after its own share and before it waits for the others (an epilogue of its own share's part)."""
    if len(shares) < 2 or num_threads() == 1 or _STATE["blas"] is None or getattr(_LOCAL, "worker", False) \
            or _contended():
        return False
    gs, addr = _gemm_share()
    if gs is None:
        return False
    pool = _pool()[:len(shares) - 1]
    if len(pool) < len(shares) - 1 or not _BUSY.acquire(blocking=False):
        return False
    try:
        if not all(w.serve is not None and w.ready() for w in pool):
            return False
        if not all(w.flags[3] for w in pool):
            for w in pool:
                w.gemm_wanted = True
            return False
        for w, share in zip(pool, shares[1:]):
            w.gemm_posted += 1
            w.gemm[0] = addr                  # before the post's release store publishes the share
            gs.post(w.flags, w.gemm, share, w.gemm_posted)
        own = np.empty(10, np.int64)
        own[0] = addr
        own[1:] = shares[0]
        try:
            if before is not None:
                before()
            gs.run_share(own)
            if between is not None:
                between()
        finally:   # the posted shares write into the caller's arrays: always wait for them
            for w in pool:
                got = gs.finish(w.flags, w.gemm, w.gemm_posted, START_POLLS)
                if got == 1 and w.flags[3]:   # run here: still "polling" but it did not claim it (its CPU taken),
                    _back_off()    # so nobody polls for a while
                elif got == 2:      # claimed, then preempted mid-share: sleep on it rather than spin
                    while w.flags[6] != w.gemm_posted:
                        time.sleep(1e-5)
        return True
    finally:
        _BUSY.release()


def share_block(words: int, dims: dict, arrays: dict) -> np.ndarray:
    """A kernel share's argument block (kernel_shares' `args`): `words` int64 words, `dims` {word: int} and `arrays`
    {word: array} (their addresses: the caller keeps them alive as long as the block)."""
    out = np.zeros(words, np.int64)
    for k, v in dims.items():
        out[k] = int(v)
    for k, v in arrays.items():
        out[k] = v.ctypes.data
    return out


def kernel_shares(fn, args, x, y, sample, stages) -> bool:
    """Run a compiled kernel in `stages` stages, each cut in two halves: stage st is fn(args, 2 * st) and
    fn(args, 2 * st + 1), and each stage starts once both halves of the one before it are done
    (jit_gemm_share.kernel_stages). fn: the address of a C function void(int64 *args, int64 code) (a numba
    @cfunc); args: its int64 argument block, words 0 and 1 set here to the addresses of x[sample] and y[sample]
    (C-contiguous arrays; they change from call to call, the block's other words do not). Where a pool worker is
    polling for work, the second halves run on it, at once with the first on the caller: the whole run is one
    compiled call without the GIL, so a hand-off costs a store and a poll (~1 us) instead of a Python hand-off's
    25-100 us, and 20-80 us kernels are worth splitting. Otherwise both halves run here, in the same order of
    stages (the same floats): one thread, no numba or cblas_sgemm, BLAS threads not switched off by `tune()`, a
    pool worker calling, the pool busy, contended or owed a share, or the worker not polling; it is then woken to
    poll ~4 ms for the next call: with a store where it dozes outside the GIL (`DOZES`), else with an empty job
    (`_kick`: it needs the GIL). `gemm_shares`' take-over holds: a half the worker does not
    claim in time is run here (and nobody polls for BACKOFF_S), and so is every later stage; so does a half the
    worker finished late (over twice the caller's time and ~20 us more: its CPU shared with another process, where
    splitting only makes the caller wait). Returns whether the worker took part."""
    gs, _ = _gemm_share()
    if gs is None:
        raise RuntimeError("kernel shares need numba and numpy's 64-bit-integer cblas_sgemm (threads.sgemm_address)")
    if KERNEL_SHARES and num_threads() > 1 and _STATE["blas"] is not None and not getattr(_LOCAL, "worker", False) \
            and not _contended() and _BUSY.acquire(blocking=False):
        try:
            w = _pool()[0]
            if w.serve is not None and w.ready():
                if w.flags[3]:
                    _shared_stages(gs, w, fn, args, x, y, sample, stages)
                    w.gemm_wanted = True     # after its next Python job (another layer's parts) it polls ~4 ms
                    return True
                if w.asleep:
                    _kick(w)
                elif w.flags[7]:   # dozing (jit_gemm_share.serve) or told to: poll again for the next call
                    w.flags[7] = 2
        finally:
            _BUSY.release()
    gs.kernel_stages(_ALONE[0], _ALONE[1], 0, fn, args, x, y, sample, 0, stages, True, 0)
    return False


_ALONE = (np.zeros(8, np.int64), np.zeros(10, np.int64))
# False: kernel shares never hand a half to the worker (both on the caller: the same floats, the *-shares tactics'
# single-thread speed). A process-wide switch for A/B runs on a busy machine, where a worker polling for halves pushes
# other processes onto the caller's CPU (docs/PERFORMANCE.md, h75)
KERNEL_SHARES = True   # kernel_stages' flags and job when nothing is posted


def _shared_stages(gs, w, fn, args, x, y, sample, stages):
    """kernel_shares' stages with worker `w` (polling; the pool held)."""
    st, status, n = gs.kernel_stages(w.flags, w.gemm, w.gemm_posted, fn, args, x, y, sample, 0, stages, False,
                                     START_POLLS)
    w.gemm_posted = n
    if status == 1 and w.flags[3]:  # taken over ("polling" but it did not claim it): its CPU is taken
        _back_off()
    elif status == 3:    # run, but late: its CPU is shared with another process
        _back_off(SHARED_CPU_BACKOFF_S)
    elif status == 2:    # claimed, then preempted mid-share: sleep on it, then the rest here
        while w.flags[6] != n:
            time.sleep(1e-5)
        _back_off(SHARED_CPU_BACKOFF_S)
        gs.kernel_stages(w.flags, w.gemm, n, fn, args, x, y, sample, st, stages, True, 0)


def _noop(_):
    return None


def _kick(w):
    """Wake a worker asleep on its lock with an empty job, after which it polls for shares GEMM_KICK_POLLS; nobody
    waits for it (its `done` is collected by `ready`). Called with the pool held (_BUSY)."""
    w.gemm_wanted = True
    w.start(_noop, [], [], [])
    w.owes = True


class _Failed:
    def __init__(self, error):
        self.error = error


def _pool():
    pool = _STATE["pool"]
    if pool is None or len(pool) < pool_size() - 1:
        with _LOCK:
            pool = _STATE["pool"] or []
            pool += [_Worker(i) for i in range(len(pool), pool_size() - 1)]
            _STATE["pool"] = pool
    return pool


def tune() -> bool:
    """Process-wide tuning for engine speed, on request: start the kernel pool, turn OpenBLAS's own threading off
    (its spinning workers fight the pool) and keep freed buffers mapped (allocator.py). Reversible with
    `untune()`. Returns True when it changed anything. With DEBUGKIT_THREADS=1 the pool stays off and BLAS
    threading is left alone."""
    with _LOCK:
        if _STATE["tuned"]:
            return False
        _STATE["tuned"] = True
        allocator.tune()
        if pool_size() > 1:
            setter = _blas_setter()
            if setter is not None:
                _STATE["blas_before"] = blas_threads()
                setter(1)
            _STATE["blas"] = setter
    if pool_size() > 1:
        _pool()
    return True


def untune() -> bool:
    """Undo `tune()`: OpenBLAS gets its thread count back, kernels run on the calling thread again (pool threads
    stay parked), glibc's malloc thresholds return to their defaults. Returns True when it changed anything."""
    with _LOCK:
        if not _STATE["tuned"]:
            return False
        _STATE["tuned"] = False
        before, setter = _STATE["blas_before"], _STATE["blas"]
        if setter is not None and before:
            setter(int(before))
        _STATE["blas_before"] = None
        allocator.untune()
    return True


def tuned() -> bool:
    return _STATE["tuned"]


def init():
    """Old name of `tune()` (explicit process tuning)."""
    tune()


_BUSY = threading.Lock()  # one parallel_for at a time owns the workers; a concurrent caller runs inline


def parallel_for(fn, items):
    """fn(item) for every item, spread over the pool (the caller takes every T-th item starting with the first,
    the workers the others); returns the results in order. Runs inline when there is one item, one thread, when
    called from a pool worker (no nested waits), or while another thread's parallel_for holds the pool."""
    items = list(items)
    if len(items) <= 1 or num_threads() == 1 or getattr(_LOCAL, "worker", False) or _contended():
        return [fn(i) for i in items]
    pool = _pool()[:len(items) - 1]
    if not pool or not _BUSY.acquire(blocking=False):
        return [fn(i) for i in items]
    try:
        workers = [w for w in pool if w.ready()]
        if not workers:
            return [fn(i) for i in items]
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
