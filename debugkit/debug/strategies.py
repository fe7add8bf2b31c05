"""Search strategies as plain functions over "does this candidate still show the property?".

`fails(candidate) -> bool` answers for one candidate (for `debug reduce`: does this subgraph still fail the check;
for `debug precision`: does the check pass with these layers kept in higher precision). Every strategy also accepts
a `Prober` in place of `fails`, which memoises answers, records each probe in a `ProbeLog` (so `--resume` replays
them), counts probes, and sends independent candidates to an executor in batches of `executor.workers`. The answer
never depends on the number of workers: within a batch the first candidate (in sequential order) that shows the
property wins, exactly as a one-worker search would have picked it.

- `ddmin(items, fails)`: Zeller's delta debugging, a 1-minimal subset (removing any one item loses the property).
- `bisect_prefix(n, fails)`: the smallest k in 0..n with fails(k), for a monotone predicate ((w+1)-ary with w workers).
- `linear(n, fails)`: the first k in start..n with fails(k), scanning in order (no monotonicity assumed).
- `greedy(ranked, fails)`: the shortest prefix of a ranked list that shows the property (galloping 1, 2, 4, ...
  then bisection), the usual first step before `ddmin`.
- `peel(ranked, fails)`: the needed items of a ranked list one at a time (the shortest passing prefix ends in a
  needed item; keep it and bisect again in what lies before it): d·log2(n) probes for d needed items, 1-minimal for
  a monotone property, and always a set that shows the property.
"""
from __future__ import annotations

import json
import math
import time

from debugkit.debug.executor import InlineExecutor


def _artifact(candidate):
    if isinstance(candidate, (list, tuple, set, frozenset)):
        try:
            return sorted(candidate)
        except TypeError:
            return sorted(candidate, key=str)
    return candidate


class _Timed:
    """Picklable wrapper: (fn(x), seconds) so each probe's cost is measured where it runs."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        t0 = time.perf_counter()
        r = self.fn(x)
        return r, time.perf_counter() - t0


def probe_workers(executor):
    """The workers (slots) that take probes beside this process, or None for all of them. Where this process
    probes too (`driver_slot`: local workers with a GPU each), a worker on this process's GPU does not: cold, its
    first probes cost it several of this process's, and its builds slow this process's own (measured on 2 H200s,
    docs/scale-out.md); it still probes where every worker shares this process's GPU."""
    if not getattr(executor, "driver_slot", False):
        return None
    off = executor.off_caller_gpu()
    return off if off and len(off) < int(getattr(executor, "workers", 1)) else None


def probe_slots(executor) -> int:
    """How many probes a search evaluates at once on `executor`: its probing workers (probe_workers), plus one
    where this process takes probes itself (`driver_slot`: local workers with a GPU each, see LocalExecutor)."""
    some = probe_workers(executor)
    n = len(some) if some is not None else max(1, int(getattr(executor, "workers", 1)))
    return n + (1 if getattr(executor, "driver_slot", False) else 0)


class _Failure:
    """A probe's exception, carried back as a value (so the search can raise the first error in order)."""

    def __init__(self, error):
        self.error = error


class _Caught:
    """Picklable wrapper: fn(x), or a _Failure holding the exception fn raised."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, x):
        try:
            return self.fn(x)
        except Exception as e:
            return _Failure(e)


def _map_with_driver(executor, fn, items) -> list:
    """[fn(x) for x in items], this process working beside the executor's workers: both take the lowest item no
    one has taken yet, one at a time, so a slow probe on either side does not hold a batch's other items back
    (the search's process keeps its parsed model, plans and packed weights from the base build: its probes are the
    cheapest; a worker's first probe pays for its own). Errors are raised in order, as a serial run would."""
    import threading
    lock, taken, state = threading.Lock(), set(), {"stop": False}

    def claim(i) -> bool:
        with lock:
            if state["stop"] or i in taken:
                return False
            taken.add(i)
            return True

    box = {}
    taken.add(0)    # the first is this process's: the cheapest probe starts at once

    def rest():
        try:
            box["out"] = executor.map(_Caught(fn), items, slots=probe_workers(executor), claim=claim)
        except BaseException as e:   # a worker lost for good: raised below
            box["error"] = e
    t = threading.Thread(target=rest, name="probes on the workers", daemon=True)
    t.start()
    mine, i = {}, 0
    while i is not None:
        try:
            mine[i] = fn(items[i])
        except Exception as e:
            mine[i] = _Failure(e)
            with lock:
                state["stop"] = True   # what no one has taken comes after i: a serial run would not reach it
        with lock:
            i = None if state["stop"] else next((j for j in range(len(items)) if j not in taken), None)
            if i is not None:
                taken.add(i)
    # (Ctrl-C: no wait for the workers' probes; closing the executor, as the search's with-block does, stops them)
    t.join()
    if "error" in box:
        raise box["error"]
    out = [mine[i] if i in mine else box["out"][i] for i in range(len(items))]
    for i, r in enumerate(out):
        if isinstance(r, _Failure):
            raise r.error
        if r is None:     # not run: an earlier item failed (raised above)
            break
    return out


def _truth(result) -> bool:
    """A probe's answer: a bool, or a dict with "hit" (or "fails", for searches for a failure) plus details."""
    if isinstance(result, dict):
        return bool(result["hit"] if "hit" in result else result.get("fails"))
    return bool(result)


class Prober:
    """Evaluates candidates for a strategy: memo + probe log + executor + probe count.

    fails: the predicate (picklable when the executor runs processes or Ray). log: a ProbeLog (its records answer
    repeated candidates, including those of a resumed search). on_probe(record, n): called after each new probe
    (progress bars). `fails` may return a dict with a "hit" (or "fails") key plus details, which go to the log.
    """

    def __init__(self, fails, *, log=None, executor=None, on_probe=None):
        self.fails = fails
        self.log = log
        self.executor = executor or InlineExecutor()
        self.on_probe = on_probe
        self.memo: dict[str, object] = {}
        self.probes = 0          # candidates evaluated by this search (not answered from memo or log)
        self.replayed = 0        # answered from a resumed log
        self.history: list[dict] = []
        self.rounds = 0          # batches evaluated at once: the search's critical path in probes
        self.critical_s = 0.0    # sum over rounds of the slowest probe: the wall time of unlimited workers
        self.probe_s = 0.0       # sum of every probe's seconds: the wall time of one worker
        self.wall_s = 0.0        # the rounds' measured wall time on this search's slots

    @property
    def workers(self):
        """Probes evaluated at once: the executor's workers, plus this process where it probes too."""
        return probe_slots(self.executor)

    def seed(self, candidate, result):
        """Tell the prober an answer it already knows (e.g. the full candidate fails by assumption)."""
        self.memo[self._key(candidate)] = result

    def settle(self, candidate, result):
        """Record an answer that came without a probe (debug precision: the base build answers the empty set):
        memoised and logged, so a resumed search replays it, but neither counted nor timed as a probe."""
        self.memo[self._key(candidate)] = result
        if self.log is not None:
            self.log.record(_artifact(candidate), result, 0.0)

    def _key(self, candidate):
        return json.dumps(_artifact(candidate), sort_keys=True, default=str)

    def known(self, candidate):
        k = self._key(candidate)
        if k in self.memo:
            return True, self.memo[k]
        if self.log is not None:
            rec = self.log.lookup(_artifact(candidate))
            if rec is not None:
                self.memo[k] = rec["result"]
                self.replayed += 1
                return True, rec["result"]
        return False, None

    def many(self, candidates) -> list[bool]:
        """Answers for all candidates; unknown ones are evaluated together on the executor."""
        candidates = list(candidates)
        todo, seen = [], set()
        for c in candidates:
            k = self._key(c)
            if not self.known(c)[0] and k not in seen:
                seen.add(k)
                todo.append(c)
        if todo:
            timed = _Timed(self.fails)
            t0 = time.perf_counter()
            if getattr(self.executor, "driver_slot", False):   # one here, any others on the workers meanwhile
                outs = _map_with_driver(self.executor, timed, todo) if len(todo) > 1 else [timed(todo[0])]
            else:
                outs = self.executor.map(timed, todo) if len(todo) > 1 or self.workers > 1 else [timed(todo[0])]
            self.wall_s += time.perf_counter() - t0
            self.rounds += 1
            self.critical_s += max(cost for _, cost in outs)
            self.probe_s += sum(cost for _, cost in outs)
            for c, (result, cost) in zip(todo, outs):
                self.add(c, result, cost)
        return [_truth(self.known(c)[1]) for c in candidates]

    def here(self, candidates) -> list[bool]:
        """Answers for the candidates, the unknown ones evaluated in this process one after another, without the
        executor (debug precision: while its workers rank the layers). Each is a round of its own."""
        timed = _Timed(self.fails)
        for c in candidates:
            if not self.known(c)[0]:
                result, cost = timed(c)
                self.rounds += 1
                self.critical_s += cost
                self.probe_s += cost
                self.wall_s += cost
                self.add(c, result, cost)
        return [_truth(self.known(c)[1]) for c in candidates]

    def add(self, candidate, result, cost: float, alongside: bool = False):
        """Record a probe's answer: memoised, logged, counted and timed. `alongside`: it was evaluated
        elsewhere, beside other work (debug precision's all-higher probe runs on a worker during the base build),
        so it adds to the probe time but to no round of the critical path."""
        self.memo[self._key(candidate)] = result
        self.probes += 1
        rec = {"artifact": _artifact(candidate), "result": result, "cost": cost}
        if self.log is not None:
            rec = self.log.record(_artifact(candidate), result, cost)
        self.history.append(rec)
        if alongside:
            self.probe_s += cost
        if self.on_probe is not None:
            self.on_probe(rec, self.probes)

    def __call__(self, candidate) -> bool:
        return self.many([candidate])[0]

    def critical_path(self) -> dict:
        """How parallel the search was: its probes, the rounds they ran in (each round's probes at once), the sum of
        each round's slowest probe (critical path: the wall time with a worker per probe) and of all probes (one
        worker's), their ratio (`speedup`: what unlimited workers would give), and the rounds' measured wall time
        on the search's slots with the speed-up it is over one worker (`wall_speedup`: what they gave, a round of
        more probes than slots included)."""
        return {"probes": self.probes, "rounds": self.rounds, "critical_path_s": round(self.critical_s, 3),
                "probe_s": round(self.probe_s, 3),
                "speedup": round(self.probe_s / self.critical_s, 2) if self.critical_s > 0 else None,
                "wall_s": round(self.wall_s, 3),
                "wall_speedup": round(self.probe_s / self.wall_s, 2) if self.wall_s > 0 else None}

    def first(self, candidates):
        """Index of the first candidate that shows the property (batches of `workers`), or None."""
        candidates = list(candidates)
        w = self.workers
        for start in range(0, len(candidates), w):
            batch = candidates[start:start + w]
            for i, hit in enumerate(self.many(batch)):
                if hit:
                    return start + i
        return None


def _prober(fails, log, executor):
    return fails if isinstance(fails, Prober) else Prober(fails, log=log, executor=executor)


def _split(items, n):
    k, m = divmod(len(items), n)
    out, i = [], 0
    for j in range(n):
        size = k + (1 if j < m else 0)
        out.append(items[i:i + size])
        i += size
    return [c for c in out if c]


def ddmin(items, fails, *, log=None, executor=None) -> list:
    """A 1-minimal sublist of `items` for which `fails` holds (`fails(items)` is assumed, not probed).

    Subsets are tried before complements, granularity doubles when neither shows the property (Zeller and
    Hildebrandt 2002). Item order is kept. A single remaining item is dropped if the empty list also shows it.
    """
    probe = _prober(fails, log, executor)
    items = list(items)
    probe.seed(items, True) if not probe.known(items)[0] else None
    n = 2
    while len(items) >= 2:
        chunks = _split(items, min(n, len(items)))
        comps = [[x for j, c in enumerate(chunks) if j != i for x in c] for i in range(len(chunks))] \
            if len(chunks) > 2 else []
        # subsets first, then complements, in one ordered scan: with spare workers a batch that runs past the last
        # subset evaluates the first complements speculatively (the first hit in this order wins, as serially)
        hit = probe.first(chunks + comps)
        if hit is not None and hit < len(chunks):
            items, n = chunks[hit], 2
            continue
        if hit is not None:
            items, n = comps[hit - len(chunks)], max(len(chunks) - 1, 2)
            continue
        if len(chunks) >= len(items):
            break
        n = min(len(items), 2 * len(chunks))
    if len(items) == 1 and probe([]):
        return []
    return items


def _bisect(bad: int, good: int, many, workers: int) -> int:
    """Shrink (bad, good] to the first k with the property; many(points) answers a batch."""
    while good - bad > 1:
        w = min(workers, good - bad - 1)
        points = sorted({bad + max(1, round((i + 1) * (good - bad) / (w + 1))) for i in range(w)})
        points = [p for p in points if bad < p < good] or [bad + 1]
        for p, r in zip(points, many(points)):
            if r:
                good = p
                break
            bad = p
    return good


def bisect_prefix(n: int, fails, *, log=None, executor=None, lo: int = 0, candidate=None) -> int:
    """The smallest k in lo..n with fails(k), for fails monotone in k (False ... False True ... True).

    fails(n) is assumed (returned when nothing smaller shows the property). With w workers each round probes w
    evenly spaced points at once, so the interval shrinks (w+1)-fold per round. `candidate(k)` turns k into what
    `fails` is asked about (e.g. the first k layers), so a shared Prober memoises and logs real artifacts.
    """
    probe = _prober(fails, log, executor)
    make = candidate or (lambda k: k)
    return _bisect(lo - 1, n, lambda ks: probe.many([make(k) for k in ks]), probe.workers)


def linear(n: int, fails, *, log=None, executor=None, start: int = 0, candidate=None):
    """The first k in start..n (in order) with fails(k), or None. No monotonicity is assumed."""
    probe = _prober(fails, log, executor)
    make = candidate or (lambda k: k)
    hit = probe.first([make(k) for k in range(start, n + 1)])
    return None if hit is None else start + hit


def greedy(ranked, fails, *, log=None, executor=None) -> list:
    """The shortest prefix of `ranked` (most suspect first) that shows the property; `fails(ranked)` is assumed.

    Gallops through prefix lengths 1, 2, 4, ... then bisects between the last miss and the first hit, so an answer of
    k items costs about 2·log2(k) probes. For a non-monotone predicate it still returns a prefix that shows the
    property (the one found), which `ddmin` can then minimise.
    """
    probe = _prober(fails, log, executor)
    ranked = list(ranked)
    if not ranked:
        return []
    probe.seed(ranked, True) if not probe.known(ranked)[0] else None
    sizes, k = [], 1
    while k < len(ranked):
        sizes.append(k)
        k *= 2
    sizes.append(len(ranked))
    hit = probe.first([ranked[:s] for s in sizes])
    hi = sizes[hit]
    lo = sizes[hit - 1] if hit > 0 else 0
    k = _bisect(lo, hi, lambda sizes: probe.many([ranked[:s] for s in sizes]), probe.workers)
    return ranked[:k]


# Bounds: the most probes each strategy can make, so a progress bar's total is a promise, not a guess.

def _log(n: int, base: int = 2) -> int:
    return max(0, math.ceil(math.log(max(n, 1), base) - 1e-9))


def bisect_bound(n: int, workers: int = 1) -> int:
    """Probes `bisect_prefix` makes over n+1 candidates: w points per round, (w+1)-fold shrink per round."""
    return workers * (_log(n + 1, workers + 1) + 1)


def greedy_bound(n: int, workers: int = 1) -> int:
    """Probes `greedy` makes over n ranked items (the full list is known): the gallop 1, 2, 4, ... < n, rounded up
    to whole batches, then the bisection inside the last doubling."""
    gallop = _log(n)
    return workers * math.ceil(gallop / workers) + bisect_bound(max(1, n // 2), workers)


def one_minimal_bound(k: int, workers: int = 1, limit: int = 8) -> int:
    """Probes `one_minimal` makes on k items: each probe (one worker) drops an item or proves it needed; over
    `limit` items it is ddmin's bound."""
    return k * workers if k <= limit else ddmin_bound(k)


def ddmin_bound(k: int) -> int:
    """Zeller's worst case for ddmin on k items (k² + 3k), plus the final empty-set probe."""
    return k * k + 3 * k + 1


def peel_bound(n: int, answer_guess: int = 8, workers: int = 1) -> int:
    """Probes `peel` makes over n ranked items for an answer of up to `answer_guess` items: greedy's first round,
    then per further item the kept-alone probe (with spare workers, in one batch with the first bisection points:
    `workers` probes) and a bisection."""
    return greedy_bound(n, workers) + max(0, answer_guess - 1) * (workers + bisect_bound(n, workers)) + 1


def minimal_candidates(guess) -> list:
    """The probes that show `guess` 1-minimal: the guess, then each set with one item fewer (confirm_minimal)."""
    guess = list(guess)
    return [guess] + [[x for x in guess if x != y] for y in guess]


def confirm_minimal(guess, fails, *, log=None, executor=None) -> bool:
    """Whether `guess` is 1-minimal for `fails`: it shows the property and no set with one item fewer does. Its
    |guess| + 1 probes are independent, so they run in batches as wide as the workers (one round each batch), the
    first answer against the guess ending it. For a monotone property with a unique minimal set, a confirmed guess
    is that set: what `peel` would find, in one or two rounds instead of one per item."""
    probe = _prober(fails, log, executor)
    guess = list(guess)
    if not guess:
        return False
    cands = minimal_candidates(guess)
    expected = [True] + [False] * len(guess)
    w = probe.workers
    for start in range(0, len(cands), w):
        if probe.many(cands[start:start + w]) != expected[start:start + w]:
            return False
    return True


def peel(ranked, fails, *, log=None, executor=None) -> list:
    """The items of `ranked` (most suspect first) that are needed for `fails` (assumed for the whole list, and false
    for the empty one), found one per round: the shortest prefix P[:k] that, with the items kept so far, shows the
    property ends in a needed item P[k-1]; keep it and look again in P[:k-1]. Round one gallops (1, 2, 4, ...) then
    bisects, as `greedy` does; each later round first asks whether the kept items pass alone (then the search ends),
    else bisects over 1..k-1.

    For a monotone property with a unique minimal set S (here: "these layers in higher precision pass"), the answer is
    S, in about |S|·log2(n) probes, 1-minimal: each kept item x was needed with a superset of the others. For any
    property the answer shows it (the last round proved so). Returned in the order found (last needed first).
    """
    probe = _prober(fails, log, executor)
    ranked = list(ranked)
    if not ranked:
        return []
    probe.seed(ranked, True) if not probe.known(ranked)[0] else None
    k = len(greedy(ranked, probe))
    kept = [ranked[k - 1]]
    hi = k - 1                      # kept + ranked[:hi] shows the property (by the round that found the last item)
    while hi > 0:
        bad, good = 0, hi
        w = probe.workers - 1
        if w > 0 and hi > 1:   # spare workers: the first bisection points alongside the kept-alone probe
            points = sorted({max(1, round((i + 1) * hi / (w + 1))) for i in range(w)} - {hi})
            res = probe.many([kept] + [kept + ranked[:p] for p in points])
            if res[0]:
                break
            for p, r in zip(points, res[1:]):
                if r:
                    good = p
                    break
                bad = p
        elif probe(kept):   # the kept items alone: one probe that usually ends the search
            break
        j = _bisect(bad, good, lambda js: probe.many([kept + ranked[:j] for j in js]), probe.workers)
        kept.append(ranked[j - 1])
        hi = j - 1
    return kept

