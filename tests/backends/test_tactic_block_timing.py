"""Tactic timing in blocks (tactic_selection.time_candidates): a tactic that is fast only right after itself (a
split whose pool worker is still awake, as the engine runs it layer after layer) is scored on its later runs in a
block; one run a turn, round-robin, still holds for a device with timing_block 1 (the GPU). A fake device and
tactics whose cost is a number, not a clock: no timing luck."""
from types import SimpleNamespace

import numpy as np

from backends.engine.builder.tactic_selection import fastest, time_candidates, timing_plan
from native.cpu import threads
from native.cpu.device import CpuDevice
from native.device import Device


class CountingDevice(Device):
    """A host-memory device whose clock reads the cost the tactic just run reports (ms); it logs the run order."""
    name = "counting"

    def __init__(self, block):
        self.timing_block = block
        self.order, self.last = [], None

    def run(self, tactic, op, inputs, outputs=None, workspace=None, stream=None):
        self.cost = tactic.cost(self.last)
        self.order.append(tactic.name)
        self.last = tactic.name
        return [inputs[0]]

    def time(self, fn, stream=None):
        fn()
        return self.cost


class Tactic:
    def __init__(self, id_, name, alone, after_itself=None):
        self.id, self.name, self.alone = id_, name, alone
        self.after_itself = alone if after_itself is None else after_itself

    def prepare(self, op):
        return op.weights

    def cost(self, previous):
        return self.after_itself if previous == self.name else self.alone


NODE = SimpleNamespace(kind="MatrixMultiply", name="mm", params={}, weights={}, precision="float32")


def _tactics():
    # "split": 3 ms after another tactic (its worker asleep), 1 ms right after itself; "plain": 1.5 ms always
    return [Tactic(1, "plain", 1.5), Tactic(2, "split", 3.0, 1.0)]


def test_block_timing_picks_the_tactic_that_is_fast_right_after_itself():
    dev = CountingDevice(block=3)
    cands = _tactics()
    got = time_candidates(NODE, cands, [np.zeros(2, np.float32)], 4, device=dev)
    assert got == {1: 1.5, 2: 1.0}
    assert fastest(cands, got, dev).name == "split"
    # warm-ups, then 2 rounds (2 scored runs a block for 4 iterations) of a block of 3 per candidate
    assert dev.order == ["plain", "split"] + (["plain"] * 3 + ["split"] * 3) * 2


def test_one_run_a_turn_where_the_device_asks_for_no_blocks():
    """timing_block 1 (the GPU's default): the candidates alternate run by run, every run scored, as before blocks;
    here the split never follows itself and reads its slow time."""
    dev = CountingDevice(block=1)
    cands = _tactics()
    got = time_candidates(NODE, cands, [np.zeros(2, np.float32)], 4, device=dev)
    assert got == {1: 1.5, 2: 3.0}
    assert fastest(cands, got, dev).name == "plain"
    assert dev.order == ["plain", "split"] * 5


def test_a_lone_candidate_is_timed_run_after_run():
    dev = CountingDevice(block=3)
    got = time_candidates(NODE, [Tactic(2, "split", 3.0, 1.0)], [np.zeros(2, np.float32)], 4, device=dev)
    assert got == {2: 1.0} and dev.order == ["split"] * 5


def test_timing_plan_scores_about_the_iterations_asked():
    assert timing_plan(4, 3, 5) == (2, 3)      # 2 rounds x 2 scored runs
    assert timing_plan(1, 3, 5) == (1, 3)      # onnx_backend's 1 iteration: one block of a lead + 2
    assert timing_plan(5, 3, 2) == (3, 3)
    assert timing_plan(4, 1, 5) == (4, 1)      # no blocks: round-robin
    assert timing_plan(4, 3, 1) == (4, 1)      # one candidate: nothing to alternate with
    assert timing_plan(0, 3, 2) == (1, 3)


def test_the_cpu_times_in_blocks_only_while_its_pool_is_on(monkeypatch):
    monkeypatch.setattr(threads, "num_threads", lambda: 2)
    assert CpuDevice().timing_block == 3
    monkeypatch.setattr(threads, "num_threads", lambda: 1)
    assert CpuDevice().timing_block == 1
