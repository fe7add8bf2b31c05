"""Search strategies over synthetic predicates: the answers, the probe counts, the log, and the executors."""
import json
import math

import pytest

from debugkit.debug.executor import InlineExecutor, LocalExecutor, make_executor
from debugkit.debug.probe_log import ProbeLog, ProbeLogError
from debugkit.debug.strategies import Prober, bisect_prefix, ddmin, greedy, linear


class Contains:
    """fails(subset) iff subset contains every culprit (picklable, counts calls in this process)."""

    def __init__(self, culprits):
        self.culprits = set(culprits)
        self.calls = 0

    def __call__(self, subset):
        self.calls += 1
        return self.culprits <= set(subset)


class AtLeast:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x >= self.k


@pytest.mark.parametrize("culprits", [[7], [3, 90], [0, 50, 99], list(range(10, 14))])
def test_ddmin_finds_exactly_the_culprits(culprits):
    f = Contains(culprits)
    got = ddmin(list(range(100)), f)
    assert sorted(got) == sorted(culprits)
    # delta debugging on n items with c culprits costs O(c log n) probes
    assert f.calls <= 2 * len(culprits) * math.ceil(math.log2(100)) * 2 + 4


def test_ddmin_result_is_one_minimal_for_an_or_predicate():
    # fails if {1,2} or {5} is present: the answer must be one of them and removing any item must pass
    fails = lambda s: {1, 2} <= set(s) or 5 in s
    got = ddmin(list(range(8)), fails)
    assert fails(got)
    assert all(not fails([x for x in got if x != y]) for y in got)


def test_ddmin_returns_empty_when_empty_still_fails():
    assert ddmin([1, 2, 3], lambda s: True) == []


@pytest.mark.parametrize("k", [0, 1, 17, 63, 64])
def test_bisect_prefix_finds_the_threshold(k):
    calls = []
    got = bisect_prefix(64, lambda x: calls.append(x) or x >= k)
    assert got == k
    assert len(calls) <= 7 and 64 not in calls    # log2(65) rounded up; fails(n) is assumed


def test_bisect_prefix_with_workers_takes_fewer_rounds():
    class Two(InlineExecutor):
        workers = 2
        rounds = 0

        def map(self, fn, items):
            Two.rounds += 1
            return [fn(x) for x in items]
    ex = Two()
    assert bisect_prefix(100, AtLeast(37), executor=ex) == 37
    assert Two.rounds <= math.ceil(math.log(101, 3)) + 1 < math.ceil(math.log2(101))


def test_linear_scans_in_order_and_returns_none():
    calls = []
    assert linear(10, lambda x: calls.append(x) or x in (4, 8)) == 4
    assert calls == [0, 1, 2, 3, 4]
    assert linear(5, lambda x: False) is None


def test_greedy_returns_shortest_prefix_in_about_2_log_k_probes():
    ranked = list(range(200))
    f = Contains([0, 1, 2, 3, 4])
    got = greedy(ranked, f)
    assert got == [0, 1, 2, 3, 4]
    assert f.calls <= 2 * math.ceil(math.log2(5)) + 1


def test_greedy_then_ddmin_shares_the_prober_and_counts_probes(tmp_path):
    log = ProbeLog(tmp_path / "p.jsonl", {"model": "m", "search": "s"})
    f = Contains(["b", "x"])
    probe = Prober(f, log=log)
    ranked = ["x", "q", "b", "r", "s", "t", "u"]
    kept = greedy(ranked, probe)
    assert kept == ["x", "q", "b"]
    assert sorted(ddmin(kept, probe)) == ["b", "x"]
    assert probe.probes == f.calls == len(log)
    lines = [json.loads(line) for line in open(tmp_path / "p.jsonl")]
    assert lines[0] == {"meta": {"model": "m", "search": "s"}}
    assert all({"artifact", "result", "cost"} <= set(r) for r in lines[1:])


def test_resume_replays_probes_without_evaluating_them(tmp_path):
    path = tmp_path / "p.jsonl"
    first = Contains([3, 40])
    ddmin(list(range(64)), Prober(first, log=ProbeLog(path, {"model": "abc", "search": "reduce"})))
    again = Contains([3, 40])
    log = ProbeLog(path, {"model": "abc", "search": "reduce"}, resume=True)
    probe = Prober(again, log=log)
    assert sorted(ddmin(list(range(64)), probe)) == [3, 40]
    assert again.calls == 0 and probe.replayed == first.calls


def test_resume_refuses_a_log_of_another_model(tmp_path):
    path = tmp_path / "p.jsonl"
    ProbeLog(path, {"model": "abc", "search": "reduce"})
    with pytest.raises(ProbeLogError, match="another search.*model"):
        ProbeLog(path, {"model": "def", "search": "reduce"}, resume=True)
    with pytest.raises(ProbeLogError, match="does not exist"):
        ProbeLog(tmp_path / "none.jsonl", {"model": "abc"}, resume=True)
    (tmp_path / "junk.jsonl").write_text("not json\n")
    with pytest.raises(ProbeLogError, match="not a debugkit probe log"):
        ProbeLog(tmp_path / "junk.jsonl", {"model": "abc"}, resume=True)


def test_resume_names_every_differing_key_with_both_full_values(tmp_path):
    path = tmp_path / "p.jsonl"
    long = "x" * 40
    ProbeLog(path, {"model": "abc", "--atol": long + "1", "--old": 1})
    with pytest.raises(ProbeLogError) as e:
        ProbeLog(path, {"model": "abc", "--atol": long + "2", "--new": [1, 2]}, resume=True)
    msg = str(e.value)
    assert f'--atol: the log has "{long}1", this search has "{long}2"' in msg
    assert "--old: the log has 1, this search has (not recorded)" in msg
    assert "--new: the log has (not recorded), this search has [1, 2]" in msg


def test_a_torn_last_line_is_dropped_and_the_log_repaired(tmp_path):
    path = tmp_path / "p.jsonl"
    log = ProbeLog(path, {"model": "abc"})
    log.record([1], True)
    log.record([2], False)
    text = path.read_text()
    path.write_text(text[:-7])   # the last record cut mid-line
    again = ProbeLog(path, {"model": "abc"}, resume=True)
    assert again.lookup([1])["result"] is True and again.lookup([2]) is None
    again.record([2], False)
    assert path.read_text() == text   # whole lines again
    assert len(ProbeLog(path, {"model": "abc"}, resume=True)) == 2


def test_local_executor_gives_the_same_answers_as_inline():
    with LocalExecutor(2) as ex:
        assert ex.map(AtLeast(3), [1, 2, 3, 4]) == [False, False, True, True]
        assert sorted(ddmin(list(range(40)), Contains([5, 31]), executor=ex)) == [5, 31]
        assert bisect_prefix(50, AtLeast(19), executor=ex) == 19


class Pinned:
    """A probe that reports where and how it ran: pid, kernel pool size, BLAS threads, and which probes it saw
    running beside it. Each probe writes its item into `folder` and waits (a hang guard of 120 s) until `expect`
    probes have: a rendezvous, so "at once" is proven by the probes meeting, not by comparing clocks that a loaded
    machine skews (a worker that starts its probe late would not overlap a fixed sleep)."""

    def __init__(self, folder, expect):
        self.folder, self.expect = str(folder), expect

    def __call__(self, item):
        import os
        import time
        from native.cpu.threads import blas_threads, pool_size
        open(os.path.join(self.folder, f"{item}.started"), "w").close()
        end = time.monotonic() + 120
        while len(os.listdir(self.folder)) < self.expect and time.monotonic() < end:
            time.sleep(0.01)
        return os.getpid(), sorted(os.listdir(self.folder)), pool_size(), blas_threads()


def test_local_executor_runs_probes_at_once_on_single_threaded_workers(tmp_path):
    import os
    before = {k: os.environ.get(k) for k in ("DEBUGKIT_THREADS", "OPENBLAS_NUM_THREADS")}
    with LocalExecutor(2) as ex:
        (pa, seen_a, pool_a, blas_a), (pb, seen_b, pool_b, blas_b) = ex.map(Pinned(tmp_path, 2), [0, 1])
    assert pa != pb and pa != os.getpid()
    assert seen_a == seen_b == ["0.started", "1.started"]   # each probe saw the other running: they ran at once
    assert pool_a == pool_b == 1                          # our kernel pool off in each worker
    assert blas_a in (1, None) and blas_b in (1, None)    # BLAS single-threaded (None: no OpenBLAS to ask)
    assert {k: os.environ.get(k) for k in before} == before   # the parent's environment is restored


def test_make_executor_choices():
    assert isinstance(make_executor(1), InlineExecutor) and make_executor(1).workers == 1
    ex = make_executor(3)
    assert isinstance(ex, LocalExecutor) and ex.workers == 3
    from native.errors import UsageError
    with pytest.raises(UsageError):
        make_executor(0)


def test_ray_executor_matches_inline():
    pytest.importorskip("ray")
    from debugkit.debug.executor import RayExecutor
    import ray
    try:
        ex = RayExecutor("auto", workers=2)
        assert sorted(ddmin(list(range(30)), Contains([2, 17]), executor=ex)) == [2, 17]
    finally:
        ray.shutdown()


@pytest.mark.parametrize("culprits", [[0, 1, 2, 3], [3, 4, 9, 10], [60], [5, 70, 71, 199]])
def test_peel_finds_exactly_the_needed_items_in_about_d_log_n_probes(culprits):
    """A ranked list with the needed items near the top among decoys (ties of a ranking), or deep in it."""
    from debugkit.debug.strategies import peel
    ranked = list(range(200))
    f = Contains(culprits)
    probe = Prober(f)
    found = peel(ranked, probe)
    assert sorted(found) == sorted(culprits)
    d, n = len(culprits), len(ranked)
    assert f.calls <= 2 * d * math.log2(n) + 2, f.calls
    if max(culprits) < 16:   # well ranked: far fewer
        assert f.calls <= d * math.log2(max(culprits) + 2) + 6, f.calls


def test_peel_always_returns_a_passing_set_even_for_a_non_monotone_property():
    from debugkit.debug.strategies import peel
    calls = []

    def odd(subset):   # passes for sets holding 7 and an odd count of items: not monotone
        calls.append(subset)
        return 7 in subset and len(subset) % 2 == 1
    ranked = list(range(32))
    found = peel(ranked, Prober(odd))
    assert odd(found)


class _Wide(InlineExecutor):
    """An inline executor that says it has `workers` workers: batches are formed as for a pool of that size."""

    def __init__(self, workers):
        self.workers = workers


@pytest.mark.parametrize("search", ["peel", "ddmin"])
def test_spare_workers_shorten_the_critical_path_with_the_same_answer(search):
    """Probes known in advance (peel's kept-alone probe and its first bisection points, ddmin's complements after
    its subsets) run in the same round: fewer rounds with 3 workers than with 1, the same answer."""
    from debugkit.debug.strategies import Prober, peel
    items, culprits = list(range(64)), [5, 40, 41, 63]
    answers, rounds = {}, {}
    for w in (1, 3):
        p = Prober(Contains(culprits), executor=_Wide(w))
        answers[w] = sorted(peel(items, p) if search == "peel" else ddmin(items, p))
        rounds[w] = p.critical_path()
        assert rounds[w]["rounds"] <= rounds[w]["probes"]
        if search == "peel":   # the progress bar's bound holds with the speculative probes too
            from debugkit.debug.strategies import peel_bound
            assert p.probes <= peel_bound(len(items), len(culprits), w)
    assert answers[1] == answers[3] == culprits
    assert rounds[1]["rounds"] == rounds[1]["probes"]                    # one worker: every probe is a round
    assert rounds[3]["rounds"] < 0.75 * rounds[1]["rounds"], rounds
