"""Two streams: the tail of a compiled plan whose layers form independent branches runs as two lists of layers, one
on the caller and one on a helper thread, each layer on one core.

Splitting each layer over the pool pays one hand-off per layer (the worker starts a Python share 35-50 us late,
docs/PERFORMANCE.md), so small layers gain little from the second core. A detector's neck and head are branches
(yolov8n: after each scale's feature map, a box and a class chain of three convolutions beside the neck's next
layers): run as two streams they pay one hand-off for the whole region, and a wait where a layer reads a tensor the
other stream makes. `find_region` picks the region once per plan (from a fork to the plan's end, where the build's
timings say two streams beat the layers in order) and assigns its layers to the streams by list scheduling;
compiled.straight_line calls a `Region` in place of those layers. The region times itself on its first runs (two
streams, or its layers in order, each split over the pool as before) and keeps the faster way.

Outputs are the same floats either way: the same tactics with the same arguments, each layer's floats independent of
how the pool splits it (the splits are bit-identical to one thread). What changes for the region's layers: they
allocate their outputs instead of writing into the arena (the arena reuses memory in the plan's order), and the
worker's stream has a workspace of its own.
"""
from __future__ import annotations

import os
import statistics
import threading
import time

import numpy as np

from native.cpu import jit, threads
from native.errors import DebugkitError
from native.logger import G_LOGGER

ENABLED = True        # False: plans compiled from now on run every layer in order (A/B runs: tools/streams_ab.py)
ONE_CORE = 1.25       # a timed layer on one core takes this much longer than split over two (the build's timing)
WAIT_MS = 0.03        # what a wait on the other stream costs
START_MS = 0.06       # what starting the helper's stream costs
MIN_GAIN = 0.08       # the region must save this much (ms, by the timings) and this share of its time
MIN_SHARE = 0.05
IMPROVE_MAX = 400     # layers up to which a schedule is improved by single moves (each pass ~n^2 steps)
FORKS = 48            # region starts considered: the last this many forks of the plan
SPIN_POLLS = 1 << 15  # a wait polls this long (~1 ms) outside the GIL, then sleep(0) and shorter polls in turn:
SPIN_POLLS_AFTER = 1 << 11   # a thread woken by the GIL's futex costs 25-100 us here (a sleep(0) loop held it often)
START_POLLS = 1 << 13  # the caller waits up to ~250 us outside the GIL for the helper's stream to start
TRIALS = 4            # timed runs of each way (after WARM, in blocks) per schedule before a region keeps the fastest
WARM = 1
RETRIES, RETRY_RUNS = 3, 50   # trials where the helper had no CPU decide nothing: run again (this often) after this many


def find_region(cp):
    """(first step, [stream of each step from there on]) for compiled plan `cp`, or None: the region from a fork (a
    step whose output more than one layer reads, or the plan's start) to the plan's end that saves the most time by the build's timings
    (`_schedule`), where that is at least MIN_GAIN ms and MIN_SHARE of the region's time in order."""
    if not ENABLED:
        return None
    steps = cp.steps
    n = len(steps)
    cost = [_cost(st) for st in steps]
    readers = {}
    for k, st in enumerate(steps):
        for i in st[3]:
            readers.setdefault(i, set()).add(k)
    bodies = max((k for k, st in enumerate(steps) if st[9] is not None), default=-1)  # If / Loop: never in a region
    forks = [k for k in range(bodies + 1, n) if any(len(readers.get(i, ())) > 1 for i in steps[k][4])]
    best = None
    tail = 0.0
    starts = {k + 1 for k in forks[-FORKS:]} | ({0} if bodies < 0 else set())   # (graph inputs fork too)
    for p in range(n - 1, bodies, -1):
        tail += cost[p][0]
        if p not in starts:
            continue
        span, where = _schedule([st[3:5] for st in steps[p:]], [c[1] for c in cost[p:]], improve=False)
        gain = tail - span
        if gain >= MIN_GAIN and gain >= MIN_SHARE * tail and (best is None or gain > best[0]):
            best = (gain, p, where)
    if best is None:
        return None
    p = best[1]
    layers, one = [st[3:5] for st in steps[p:]], [c[1] for c in cost[p:]]
    if len(layers) <= IMPROVE_MAX:
        _, where = _improve(layers, one, (_span(layers, one, best[2], START_MS), best[2]), START_MS)
        return p, where
    return p, best[2]


def _schedule(layers, one, start=START_MS, improve=True):
    """(estimated ms, stream per layer) of `layers` ((input slots, output slots) each, in plan order) as two
    streams, layer j taking one[j] ms, the helper's stream starting `start` ms late: the better by `_span` of two
    assignments, then improved by moving single layers (`_improve`). Greedy: each layer, in plan order, to the
    stream where it would finish first. Critical path: the longest chain of dependent layers on the caller's
    stream, every other layer on the helper's (greedy alone interleaves a detector's head chains into its neck,
    which then waits)."""
    made = {}
    free = [0.0, start]
    greedy = []
    for (ins, outs), t1 in zip(layers, one):
        best = None
        for s in (0, 1):
            t = free[s]
            for i in ins:
                m = made.get(i)
                if m is not None:
                    t = max(t, m[0] + (WAIT_MS if m[1] != s else 0.0))
            if best is None or t + t1 < best[0]:
                best = (t + t1, s)
        end, s = best
        free[s] = end
        greedy.append(s)
        for i in outs:
            made[i] = (end, s)
    best = min((_span(layers, one, w, start), w) for w in (greedy, _critical(layers, one)))
    return _improve(layers, one, best, start) if improve and len(layers) <= IMPROVE_MAX else best


def _improve(layers, one, best, start, passes=3):
    """(span, where) after moving single layers to the other stream while that shortens the estimate."""
    span, where = best
    where = list(where)
    for _ in range(passes):
        moved = False
        for j in range(len(where)):
            where[j] ^= 1
            t = _span(layers, one, where, start)
            if t < span - 1e-9:
                span, moved = t, True
            else:
                where[j] ^= 1
        if not moved:
            break
    return span, where


def _critical(layers, one) -> list:
    """Stream per layer: 0 for the layers of the longest (by one[j]) chain of dependent layers, 1 for the rest."""
    made_by = {}
    readers = [[] for _ in layers]
    for j, (ins, outs) in enumerate(layers):
        for i in ins:
            if i in made_by:
                readers[made_by[i]].append(j)
        for i in outs:
            made_by[i] = j
    below = [0.0] * len(layers)   # the longest chain from each layer to the end
    for j in range(len(layers) - 1, -1, -1):
        below[j] = one[j] + max((below[r] for r in readers[j]), default=0.0)
    where = [1] * len(layers)
    j = max(range(len(layers)), key=lambda k: below[k]) if layers else None
    while j is not None:
        where[j] = 0
        j = max(readers[j], key=lambda k: below[k]) if readers[j] else None
    return where


def _span(layers, one, where, start) -> float:
    """The estimated ms of `layers` run as streams `where` (each in plan order, WAIT_MS per cross-stream input)."""
    made = {}
    free = [0.0, start]
    for (ins, outs), t1, s in zip(layers, one, where):
        t = free[s]
        for i in ins:
            m = made.get(i)
            if m is not None:
                t = max(t, m[0] + (WAIT_MS if m[1] != s else 0.0))
        free[s] = t + t1
        for i in outs:
            made[i] = (t + t1, s)
    return max(free)


def _cost(st):
    """(ms in order, ms on one core) of a layer: its build timing where the build timed its tactic (split over the
    pool when the build ran tuned), else a guess from its output size (a numpy layer, not split)."""
    node, tactic = st[10], st[11]
    t = (node.meta.get("timings_ms") or {}).get(getattr(tactic, "name", None))
    if t:
        return float(t), float(t) * ONE_CORE
    shapes = node.meta.get("output_shapes") or ()   # ~0.1 ns an output element
    t = 0.002 + 1e-7 * sum(int(np.prod(sh)) for sh in shapes if sh and all(type(d) is int and d >= 0 for d in sh))
    return t, t


class _Helper:
    """The thread that runs a region's second stream (one per process, `_helper`): parked on a lock between
    regions; kernels called on it run on it (the pool's worker-thread flag: no hand-offs from it). Not the pool's
    worker: a Python share handed to that one waited ~1 ms for the GIL and, refused while the pool backs off, ran on
    the caller (docs/PERFORMANCE.md, h79)."""

    def __init__(self):
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.job = None
        self.flag = np.zeros(1, np.int64)   # 1 once the job has returned (polled outside the GIL by `wait`)
        self.pid = os.getpid()
        self.thread = threading.Thread(target=self._loop, name="debugkit-stream", daemon=True)
        self.thread.start()

    def _loop(self):
        threads._LOCAL.worker = True
        while True:
            self.go.acquire()
            job, self.job = self.job, None
            try:
                job()
            finally:
                self.flag[0] = 1
                self.done.release()

    def start(self, job):
        self.flag[0] = 0
        self.job = job
        self.go.release()

    def wait(self, spin):
        if spin is not None:
            spin(self.flag, 0, 0, SPIN_POLLS)
        self.done.acquire()


_HELPER_LOCK = threading.Lock()   # one region at a time has the helper
_HELPER: list = []


def _helper() -> _Helper:
    """This process's helper (a forked child gets one of its own: its parent's thread is not in it)."""
    if not _HELPER or _HELPER[0].pid != os.getpid():
        _HELPER[:] = [_Helper()]
    return _HELPER[0]


def _spin():
    """jit_spin.wait_change (a poll of a flag word outside the GIL) where numba runs, else None (sleep(0) polls)."""
    try:
        spin = jit.module("jit_spin")     # None without numba (the optional jit extra)
    except Exception:  # noqa: BLE001 - any failure to compile means sleep(0) polls
        return None
    return spin.wait_change if spin is not None else None


class _Failed(Exception):
    """A stream stopped because the other one failed (its error is raised instead)."""


class Region:
    """Steps p.. of a compiled plan as two streams, called by the plan's straight-line function with the region's
    inputs (`ins`, in `self.ins` order); returns the values of `self.outs`. Two streams: the caller's and the helper
    thread's (`_Helper`), a layer that reads a tensor of the other
    stream waiting for it; or the layers in order on the caller. Which, it decides by timing on its first runs:
    the build timings' schedule against the layers in order (TRIALS runs each, in blocks), then a schedule made from
    the first one's measured layer times (and the helper's measured start) against the layers in order again; the
    fastest of the three is kept."""

    def __init__(self, cp, p, where, outs):
        self.cp = cp
        self.p = p
        steps = cp.steps
        self.name = steps[p][10].name
        self.layers = [steps[k][3:5] for k in range(p, len(steps))]
        self._assign(where)
        made = {i for _, outs_i in self.layers for i in outs_i}
        self.ins = tuple(sorted({i for ins, _ in self.layers for i in ins if i not in made}))
        self.outs = tuple(outs)
        self.runs = 0
        self.trials = []           # per schedule tried: (where, [seconds as two streams], [seconds in order])
        self.spent = []            # the first schedule's runs: seconds per layer, and the helper's start
        self.side = None           # the decision once made
        self.ws2 = None            # the helper stream's workspace
        self.taken = 0             # runs in which one stream took the other over (it had not started)
        self.taken_before = 0      # ... when the current trials began
        self.retry = 0             # runs in order left before the trials run again
        self.retries = 0

    def _assign(self, where):
        steps, p = self.cp.steps, self.p
        self.where = list(where)
        made_by = {}
        self.order = []
        self.streams = ([], [])
        for j, s in enumerate(where):
            k = p + j
            fn, full, op, ins, outs_i = steps[k][:5]
            waits = tuple(sorted({made_by[i][0] for i in ins if i in made_by and made_by[i][1] != s}))
            entry = (j, k, fn, full, op, ins, outs_i, waits)
            self.order.append(entry)
            self.streams[s].append(entry)
            for i in outs_i:
                made_by[i] = (j, s)

    def run(self, ins, workspace, stream):
        env = dict(zip(self.ins, ins))
        env[0] = None
        side = self.side
        if side is False or threads.num_threads() < 2:
            self._in_order(env, workspace, stream)
            if side is False and self.retry:   # an undecided trial (its helper had no CPU): again later
                self.retry -= 1
                if not self.retry:
                    self.side, self.runs, self.trials, self.spent = None, 0, [], []
        elif side is None:
            self._trial(env, workspace, stream)
        else:
            self._two(env, workspace, stream)
        return [env[i] for i in self.outs]

    def _in_order(self, env, workspace, stream):
        for entry in self.order:
            self._layer(entry, env, workspace, stream)

    def _two(self, env, workspace, stream, spent=None):
        """The two streams, stream 0 on the caller and stream 1 on the helper thread (`_Helper`), which the caller
        lets take the GIL first. A stream that must wait for a layer of the other one, which has not started (the
        helper has no CPU yet, or another region has it), takes it over: it runs what is left of both in plan
        order. spent: a list, given the seconds each layer took and, last, when the helper's stream started."""
        if workspace is not None and (self.ws2 is None or self.ws2.shape != workspace.shape):
            self.ws2 = np.empty_like(workspace)
        done = np.zeros(len(self.order), np.int64)
        owner, failed = {}, []
        spin = _spin()
        started = np.zeros(1, np.int64)
        clock = time.perf_counter
        t0 = clock()

        def run(s):
            if owner.setdefault(s, s) != s:   # taken over by the other stream
                return
            if s == 1:
                started[0] = 1
                if spent is not None:
                    spent[-1] = clock() - t0
            elif spin is not None:   # let the helper take the GIL and start: else it sleeps on the GIL's futex and
                spin(started, 0, 0, START_POLLS)   # loses it to this thread's next layers for up to ~1 ms
            ws = workspace if s == 0 else self.ws2
            mine = self.streams[s]
            try:
                for x, entry in enumerate(mine):
                    for j in entry[7]:
                        if done[j]:
                            continue
                        if owner.setdefault(1 - s, s) == s:   # (dict.setdefault: one of the two wins)
                            self.taken += 1
                            rest = sorted(mine[x:] + [e for e in self.streams[1 - s] if not done[e[0]]])
                            for e in rest:
                                t = clock()
                                self._layer(e, env, ws, stream)
                                if spent is not None:
                                    spent[e[0]] = clock() - t
                            return
                        polls = SPIN_POLLS
                        while not done[j]:   # polled outside the GIL, which the other stream needs
                            if failed:
                                raise _Failed()
                            if spin is None or not spin(done, j, 0, polls):
                                time.sleep(0)
                                polls = SPIN_POLLS_AFTER
                    if spent is None:
                        self._layer(entry, env, ws, stream)
                    else:
                        t = clock()
                        self._layer(entry, env, ws, stream)
                        spent[entry[0]] = clock() - t
                    done[entry[0]] = 1
            except _Failed:
                return
            except BaseException as e:  # noqa: BLE001 - raised on the caller once both streams stopped
                failed.append(e)
        helper = _helper() if _HELPER_LOCK.acquire(blocking=False) else None
        if helper is None:   # another context's region has the helper: one stream takes the other over
            run(0)
            run(1)
        else:
            local = threads._LOCAL   # (the caller's kernels run here, as a pool worker's do: no nested hand-offs)
            was = getattr(local, "worker", False)
            try:
                threads.rest()   # the pool's worker, polling ~1 ms after the last split layer, leaves the helper a CPU
                helper.start(lambda: run(1))
                local.worker = True
                run(0)
            finally:
                local.worker = was
                helper.wait(spin)
                _HELPER_LOCK.release()
        if failed:
            raise failed[0]

    def _trial(self, env, workspace, stream):
        """One of the first runs: after WARM runs as two streams, per schedule a block of 1 + TRIALS runs as two
        streams, then one in order, each block's first untimed (one way per execute, and each way timed in its
        steady state: a run right after the other way's was slower, 9.5 against 4.3 ms for yolov8n's region, 13:20)."""
        n = self.runs
        self.runs += 1
        if n < WARM:
            self._two(env, workspace, stream)
            return
        if not self.trials:
            self.trials.append((self.where, [], []))
        where, both, alone = self.trials[-1]
        m = n - WARM
        two = m <= TRIALS
        timed = m not in (0, TRIALS + 1)
        spent = [0.0] * (len(self.order) + 1) if two and timed and len(self.trials) == 1 else None
        t0 = time.perf_counter()
        if two:
            self._two(env, workspace, stream, spent)
        else:
            self._in_order(env, workspace, stream)
        if not timed:
            return
        (both if two else alone).append(time.perf_counter() - t0)
        if spent is not None:
            self.spent.append(spent)
        if len(alone) < TRIALS:
            return
        if len(self.trials) == 1:   # a second schedule from what the first one's layers took
            one = [statistics.median(r[j] for r in self.spent) * 1e3 for j in range(len(self.order))]
            start = statistics.median(r[-1] for r in self.spent) * 1e3
            _, again = _schedule(self.layers, one, start)
            if again != self.where:
                self._assign(again)
                self.trials.append((again, [], []))
                self.runs = WARM
                return
        self._decide()

    def _decide(self):
        """The trials' verdict: the fastest schedule, or the layers in order (then the plan drops the region, or, where
        a stream took the other over during the trials, runs in order RETRY_RUNS times and tries again)."""
        ways = [(statistics.median(b), w) for w, b, _ in self.trials]
        in_order = statistics.median([t for _, _, a in self.trials for t in a])
        best, where = min(ways, key=lambda x: x[0])
        self.side = best < in_order
        if where != self.where:
            self._assign(where)
        if not self.side and self.taken > self.taken_before and self.retries < RETRIES:
            # a stream took the other over in these trials: the helper had no CPU (another process, ONNX Runtime's
            # spinning threads), so they say nothing about a quiet machine: in order for RETRY_RUNS runs, then again
            self.retries += 1
            self.retry = RETRY_RUNS
            self.taken_before = self.taken
        elif not self.side:   # the plan's functions made again without the region: its layers back on the arena
            self.cp.drop_region()
        G_LOGGER.verbose(f"the {len(self.order)} layers from '{self.name}': "
                         f"{'two streams' if self.side else 'in order'} (two streams "
                         f"{', '.join(f'{b * 1e3:.3f}' for b, _ in ways)} ms, in order {in_order * 1e3:.3f})")

    def _layer(self, entry, env, workspace, stream):
        _, k, fn, full, op, ins, outs_i, _ = entry
        cp = self.cp
        args = [env[i] for i in ins]
        try:
            r = fn(op, args, None, workspace, stream) if full else fn(op, args)
        except DebugkitError:
            raise
        except Exception as e:  # the layer named, as the straight-line function names it
            raise cp._layer_failed(k, args, e) from e
        if len(r) < len(outs_i):
            raise cp._too_few(k, r)
        for v in r:
            if getattr(v, "nbytes", 0) > cp.max_bytes:
                cp._backstop(k, r)
        for i, v in zip(outs_i, r):
            env[i] = v
