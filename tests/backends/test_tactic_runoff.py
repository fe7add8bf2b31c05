"""The near-tie runoff (tactic_selection.runoff): candidates within RUNOFF_MARGIN of the fastest after the first
rounds are timed again, among themselves, and scored on the fastest of all their runs, so a candidate whose first
blocks all ran while its worker waited for a CPU is not lost to a slower one. A fake device whose clock reads
planted costs (per tactic, per block): no timing luck."""
from types import SimpleNamespace

import numpy as np
import pytest

from backends.engine.builder import tactic_selection
from backends.engine.builder.tactic_selection import (RUNOFF_MARGIN, RUNOFF_ROUNDS, fastest, runoff,
    time_candidates, timing_plan)
from native.device import Device

NODE = SimpleNamespace(kind="MatrixMultiply", name="mm", params={}, weights={}, precision="float32")
INPUTS = [np.zeros(2, np.float32)]


class PlantedDevice(Device):
    """A device whose clock reads the planted cost of the tactic just run: `costs[name]` is a list, one cost per
    block of that tactic (warm-up excluded), its last repeated; it logs the tactic of every run."""
    name = "planted"

    def __init__(self, costs, block=3, host_memory=True):
        self.costs, self.timing_block, self.host_memory = costs, block, host_memory
        self.order, self.blocks, self.last = [], {}, None
        self.warm = set()

    def copy_to_device(self, x):
        return x

    def run(self, tactic, op, inputs, outputs=None, workspace=None, stream=None):
        name = tactic.name
        if name not in self.warm:       # the warm-up run
            self.warm.add(name)
            self.cost = 0.0
        else:
            if self.last != name:       # a new block of this tactic
                self.blocks[name] = self.blocks.get(name, -1) + 1
            seq = self.costs[name]
            self.cost = seq[min(self.blocks[name], len(seq) - 1)]
        self.order.append(name)
        self.last = name
        return [inputs[0]]

    def time(self, fn, stream=None):
        fn()
        return self.cost


class Tactic:
    def __init__(self, id_, name):
        self.id, self.name = id_, name

    def prepare(self, op):
        return op.weights


def _tactics(*names):
    return [Tactic(i + 1, n) for i, n in enumerate(names)]


def test_a_near_tie_whose_first_blocks_were_slowed_wins_its_runoff():
    # "shares" is 1.00 ms, but both its first blocks ran while its worker had no CPU (1.30); "jit" is 1.10 always;
    # "slow" (2.0) is far behind and is not timed again
    dev = PlantedDevice({"jit": [1.10], "shares": [1.30, 1.30, 1.00], "slow": [2.0]})
    cands = _tactics("jit", "shares", "slow")
    got = time_candidates(NODE, cands, INPUTS, 4, device=dev)
    assert got == {1: 1.10, 2: 1.00, 3: 2.0}
    assert fastest(cands, got, dev).name == "shares"
    rounds, block = timing_plan(4, 3, 3)
    extra = RUNOFF_ROUNDS * rounds
    # warm-ups, the first rounds of all three, then the runoff's rounds of the two near-ties, each round starting
    # one candidate later
    runoff_order = []
    for r in range(extra):
        for n in (["jit", "shares"] if r % 2 == 0 else ["shares", "jit"]):
            runoff_order += [n] * block
    assert dev.order == ["jit", "shares", "slow"] + (["jit"] * 3 + ["shares"] * 3 + ["slow"] * 3) * rounds \
        + runoff_order


def test_without_the_runoff_the_slowed_candidate_loses(monkeypatch):
    """The same planted costs with the runoff off (the build before it): the first rounds alone pick 'jit'."""
    monkeypatch.setattr(tactic_selection, "RUNOFF_ROUNDS", 0)
    dev = PlantedDevice({"jit": [1.10], "shares": [1.30, 1.30, 1.00], "slow": [2.0]})
    cands = _tactics("jit", "shares", "slow")
    got = time_candidates(NODE, cands, INPUTS, 4, device=dev)
    assert got == {1: 1.10, 2: 1.30, 3: 2.0}
    assert fastest(cands, got, dev).name == "jit"


def test_a_clear_winner_is_not_timed_again():
    dev = PlantedDevice({"a": [1.0], "b": [1.0 * (1 + RUNOFF_MARGIN) + 0.01]})
    got = time_candidates(NODE, _tactics("a", "b"), INPUTS, 4, device=dev)
    assert got == {1: 1.0, 2: pytest.approx(1.0 * (1 + RUNOFF_MARGIN) + 0.01)}
    assert dev.order == ["a", "b"] + (["a"] * 3 + ["b"] * 3) * 2


def test_a_true_tie_goes_to_the_earlier_registered_every_time():
    """Two tactics within TIE_MARGIN after the runoff: the first registered wins, whichever read faster."""
    for first, second in ((1.00, 1.01), (1.01, 1.00)):
        dev = PlantedDevice({"a": [first], "b": [second]})
        cands = _tactics("a", "b")
        got = time_candidates(NODE, cands, INPUTS, 4, device=dev)
        assert fastest(cands, got, dev).name == "a"


def test_round_robin_devices_run_off_too_and_score_every_run():
    """timing_block 1 (the CPU without its pool): one run a turn, every run scored, the runoff as well."""
    dev = PlantedDevice({"a": [1.2, 1.2, 1.2, 1.2, 0.9], "b": [1.0]}, block=1)
    cands = _tactics("a", "b")
    got = time_candidates(NODE, cands, INPUTS, 4, device=dev)
    assert got == {1: 0.9, 2: 1.0}
    assert len(dev.order) == 2 + 2 * 4 + 2 * RUNOFF_ROUNDS * 4


def test_a_device_with_its_own_memory_has_no_runoff():
    """A GPU times on its own events (no host CPU shared with its worker): the first rounds decide, as before."""
    dev = PlantedDevice({"a": [1.10], "b": [1.30, 1.30, 1.00]}, host_memory=False)
    got = time_candidates(NODE, _tactics("a", "b"), INPUTS, 4, device=dev)
    assert got == {1: 1.10, 2: 1.30}
    assert len(dev.order) == 2 + 2 * 3 * 2


def test_runoff_takes_the_candidates_near_the_fastest_and_only_those_that_ran():
    a, b, c, d = _tactics("a", "b", "c", "d")
    live = [(t, None, None) for t in (a, b, c, d)]
    best = {1: 1.0, 2: 1.0 + RUNOFF_MARGIN, 3: 1.0 + RUNOFF_MARGIN + 0.01, 4: float("inf")}
    assert [x[0].name for x in runoff(live, best)] == ["a", "b"]
    assert runoff(live[:1], best) == []                       # one candidate: nothing to run off
    assert runoff([live[0], live[2]], best) == []              # a clear winner


class BackingOffDevice(PlantedDevice):
    """A planted device whose pool backs off once, before the `at`-th timed run: `before_timed_run` then reports
    a wait (True), and that run's cost is the one-core cost it would have read without the wait."""

    def __init__(self, costs, at, **k):
        super().__init__(costs, **k)
        self.at, self.calls, self.waits = at, 0, 0

    def before_timed_run(self):
        self.calls += 1
        if self.calls == self.at:
            self.waits += 1
            self.order.append("wait")
            return True
        return False


def test_a_run_after_a_wait_for_the_pool_is_not_scored():
    """After the device waited out its pool's back-off, one run wakes the pool (unscored) before the scored one."""
    dev = BackingOffDevice({"a": [1.0], "b": [1.0]}, at=2, block=3)
    got = time_candidates(NODE, _tactics("a", "b"), INPUTS, 4, device=dev)
    assert got == {1: 1.0, 2: 1.0} and dev.waits == 1
    # warm-ups, then a's first block: its lead run, the wait, a run that wakes the pool, then its two scored runs
    assert dev.order[:8] == ["a", "b", "a", "wait", "a", "a", "a", "b"]


def _cpu_backing_off(monkeypatch, seconds_left):
    from native.cpu import device as cpu_device
    from native.cpu import threads
    slept = []
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    monkeypatch.setattr(cpu_device.time, "sleep", slept.append)
    now = cpu_device.time.perf_counter()
    monkeypatch.setitem(threads._SPIN, "quiet_after", now + seconds_left)
    return slept


def test_the_cpu_waits_out_its_pools_back_off_before_a_timed_run(monkeypatch):
    from native.cpu.device import CpuDevice
    slept = _cpu_backing_off(monkeypatch, 0.2)
    dev = CpuDevice()
    dev.begin_build()
    assert dev.before_timed_run() is True
    assert len(slept) == 1 and 0.15 < slept[0] <= 0.2 and dev.timing_waited == slept
    assert dev._timing_wait_left == pytest.approx(CpuDevice.TIMING_WAIT_S - slept[0])


def test_the_waits_of_a_build_are_bounded(monkeypatch):
    """A machine whose pool backs off all the time (load from other processes): the build waits TIMING_WAIT_S in
    all, then times as before."""
    from native.cpu.device import CpuDevice
    slept = _cpu_backing_off(monkeypatch, 0.2)
    monkeypatch.setattr(CpuDevice, "TIMING_WAIT_S", 0.3)
    dev = CpuDevice()
    dev.begin_build()
    assert dev.before_timed_run() and dev.before_timed_run()
    assert dev.before_timed_run() is False
    assert sum(slept) == pytest.approx(0.3)
    dev.begin_build()       # the next build has its own budget
    assert dev.before_timed_run() is True


def test_no_wait_without_a_back_off_or_without_the_pool(monkeypatch):
    from native.cpu import threads
    from native.cpu.device import CpuDevice
    slept = _cpu_backing_off(monkeypatch, -1.0)      # the back-off is over
    dev = CpuDevice()
    dev.begin_build()
    assert dev.before_timed_run() is False and slept == []
    _cpu_backing_off(monkeypatch, 0.2)
    monkeypatch.setattr(threads, "num_threads", lambda: 1)   # one thread: nothing splits, nothing to wait for
    assert dev.before_timed_run() is False
