"""tools/benchmark.py's round-by-round ratio: drift that hits both contenders alike must cancel out."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tools"))
import benchmark  # noqa: E402


def test_paired_ratio_cancels_drift():
    rng = np.random.default_rng(0)
    drift = np.repeat(rng.uniform(1.0, 2.0, 20), 5)          # the machine slows and speeds up round by round
    b = drift * 10.0 * rng.uniform(0.99, 1.01, 100)
    a = drift * 9.5 * rng.uniform(0.99, 1.01, 100)            # a is 5% faster in every round
    p = benchmark.paired_ratio(list(a), list(b), block=5)
    assert p["rounds"] == 20 and p["a_faster_rounds"] == 20
    assert abs(p["median"] - 0.95) < 0.01
    assert p["ci95"][0] <= p["median"] <= p["ci95"][1] and p["ci95"][1] < 1.0
    # the plain ratio of medians would carry the drift's spread; the paired one does not
    same = benchmark.paired_ratio(list(b), list(b), block=5)
    assert same["median"] == 1.0 and same["a_faster_rounds"] == 0


def test_paired_ratio_needs_a_full_round():
    assert benchmark.paired_ratio([1.0, 2.0], [1.0, 2.0], block=5) == {}


def test_alternate_runs_abba_and_pairs_calls():
    calls = []
    ta, tb = benchmark.alternate(lambda: calls.append("a"), lambda: calls.append("b"), 3, warmup=1)
    assert calls == ["a", "b"] + ["a", "b", "b", "a", "a", "b"]
    assert len(ta) == len(tb) == 3
