"""Timing loops and latency statistics for `debugkit bench` (trtexec's measurements, in one place).

`timed_loop(fn, iterations, duration_s)` calls `fn` until both at least `iterations` calls and `duration_s` seconds
have passed (trtexec's --iterations / --duration) and returns each call's seconds plus the loop's wall time;
`warm_up(fn, ms)` calls it, untimed, for at least `ms` milliseconds. `interleaved` times several contenders in
alternating blocks, so a shared machine's drift hits all of them alike and their ratio stays meaningful; at each
switch it first waits (`settle`) until the other contender's threads have gone idle, so neither is timed beside the
other's spinning workers.
`latency_stats` gives min/mean/median/p90/p99/max in ms.
"""
from __future__ import annotations

import os
import threading
import time

import numpy as np

from native.cpu import threads as cpu_threads

STAT_KEYS = ("min", "mean", "median", "p90", "p99", "max")


def latency_stats(seconds) -> dict:
    """{min, mean, median, p90, p99, max} in milliseconds (percentiles by linear interpolation)."""
    t = np.asarray(list(seconds), dtype=np.float64) * 1e3
    if t.size == 0:
        return {k: None for k in STAT_KEYS}
    return {"min": float(t.min()), "mean": float(t.mean()), "median": float(np.median(t)),
            "p90": float(np.percentile(t, 90)), "p99": float(np.percentile(t, 99)), "max": float(t.max())}


def warm_up(fn, ms: float) -> int:
    """Call fn untimed for at least `ms` milliseconds (at least once when ms > 0); returns the number of calls."""
    if ms <= 0:
        return 0
    end, n = time.perf_counter() + ms / 1e3, 0
    while True:
        fn()
        n += 1
        if time.perf_counter() >= end:
            return n


def timed_loop(fn, iterations: int, duration_s: float, after=None) -> tuple[list, float]:
    """([seconds of each call], wall seconds of the whole loop). `after()` runs after each call, untimed (e.g. to
    collect the device's own timings of that call)."""
    times = []
    start = time.perf_counter()
    end = start + duration_s
    while len(times) < iterations or time.perf_counter() < end:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if after is not None:
            after()
    return times, time.perf_counter() - start


def interleaved(fns: dict, iterations: int, duration_s: float, block: int = 5, after=None,
                settle_s: float | None = None) -> tuple[dict, dict]:
    """Time every contender in alternating blocks of `block` calls (the order rotating each round), until each has
    at least `iterations` timed calls and `duration_s` has passed. Returns ({name: [seconds]}, {name: timed
    seconds in total}); `after(name)` runs after each timed call.

    At each switch the process's other threads are first let go idle (`settle`, at most `settle_s`, default
    SETTLE_MAX_S): ONNX Runtime's intra-op workers keep spinning ~40 ms of CPU after each run (measured on 1.32,
    spinning on), so a contender timed right after it had one core fewer for its whole block (our two-thread
    kernels then ran at one thread's speed); and our CPU pool's worker is told to sleep now (`threads.rest`), not
    to poll and doze beside the next block (ONNX Runtime ran 15-40% slower beside it). Then one untimed call warms
    the contender's caches."""
    times = {k: [] for k in fns}
    order = list(fns.items())
    end = time.perf_counter() + duration_s
    r = 0
    while min(len(v) for v in times.values()) < iterations or time.perf_counter() < end:
        for name, fn in order[r % len(order):] + order[:r % len(order)]:
            if len(fns) > 1:
                cpu_threads.rest()
                settle(SETTLE_MAX_S if settle_s is None else settle_s)
            fn()   # untimed: warms this contender's code and data after the other's block
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
                if after is not None:
                    after(name)
        r += 1
    return times, {k: float(sum(v)) for k, v in times.items()}


SETTLE_MAX_S = 0.2        # the longest `settle` waits (a thread that never goes idle costs this per switch)
SETTLE_POLL_S = 0.001     # idle: no other thread runnable at two polls in a row this far apart
SETTLE_FALLBACK_S = 0.05  # where threads' states cannot be read: a plain wait, ONNX Runtime's spin and some


def settle(max_s: float = SETTLE_MAX_S) -> float:
    """Wait until none of this process's other threads is running or waiting for a CPU (Linux: their states in
    /proc/self/task; a spinning thread is runnable even while another process holds its CPU, which its CPU clock
    would take for idle), for at most `max_s`; returns the seconds waited. Where the states cannot be read, waits
    min(max_s, SETTLE_FALLBACK_S)."""
    t0 = time.perf_counter()
    quiet = 0
    while quiet < 2:
        busy = runnable_threads()
        if busy is None:
            time.sleep(max(0.0, min(max_s, SETTLE_FALLBACK_S) - (time.perf_counter() - t0)))
            break
        quiet = quiet + 1 if busy == 0 else 0
        if quiet == 2 or time.perf_counter() - t0 >= max_s:
            break
        time.sleep(SETTLE_POLL_S)
    return time.perf_counter() - t0


def runnable_threads() -> int | None:
    """How many of this process's threads other than the caller are running or runnable (state R in
    /proc/self/task/*/stat), or None where that cannot be read (not Linux)."""
    me = threading.get_native_id()
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return None
    n = 0
    for t in tids:
        if int(t) == me:
            continue
        try:
            with open(f"/proc/self/task/{t}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split(None, 1)[0]
        except (OSError, IndexError):   # the thread ended
            continue
        n += state == b"R"
    return n


def throughput(count: int, wall_s: float, batch: int | None) -> dict:
    """Inferences per second over the wall time of the timed calls, and samples per second (× the batch)."""
    ips = count / wall_s if wall_s > 0 else None
    return {"inferences_per_s": ips, "samples_per_s": (ips * batch if ips is not None and batch else None),
            "batch": batch}


# ONNX Runtime as the benchmarks' peer: one session factory, so `debugkit bench --compare onnxrt` and the corpus
# driver (tools/benchmark.py) time the same ONNX Runtime, and both print what it was.

def onnxrt_settings(threads: int | None = None) -> dict:
    """The session settings the benchmarks use: every CPU this process may run on for intra-op work (as our
    engine's kernel pool), one inter-op thread, sequential execution, ORT's defaults otherwise (spinning on, memory
    arena on, all graph optimisations)."""
    if threads is None:
        try:
            threads = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            threads = os.cpu_count() or 1
    return {"intra_op_threads": int(threads), "inter_op_threads": 1, "execution_mode": "sequential",
            "spinning": True, "memory_arena": True, "graph_optimization": "all",
            "providers": ["CPUExecutionProvider"]}


def onnxrt_session(model, settings: dict | None = None):
    """An onnxruntime.InferenceSession for `model` (a path, bytes or ModelProto) with `settings` (default
    onnxrt_settings())."""
    import onnxruntime as ort
    s = settings or onnxrt_settings()
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = s["intra_op_threads"]
    opts.inter_op_num_threads = s["inter_op_threads"]
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.enable_cpu_mem_arena = s["memory_arena"]
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if s["spinning"] else "0")
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    try:
        return ort.InferenceSession(model, opts, providers=list(s["providers"]))
    except Exception as e:
        from native.errors import ModelError
        raise ModelError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0][:300]}") from None


def onnxrt_settings_line(s: dict) -> str:
    return (f"onnxrt settings: {s['intra_op_threads']} intra-op thread(s), {s['inter_op_threads']} inter-op, "
            f"{s['execution_mode']}, spinning {'on' if s['spinning'] else 'off'}, memory arena "
            f"{'on' if s['memory_arena'] else 'off'}, graph optimization {s['graph_optimization']}")
