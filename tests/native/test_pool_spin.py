"""The CPU pool's spin-waits (native/cpu/jit_spin.py, numba extra): the flag polls see a change made by another
thread and give up after their polls; a pool whose workers spin hands off correctly whether the next job comes while
the worker still polls or after it went to sleep on its lock; without numba the pool waits on its locks only."""
import threading
import time

import numpy as np
import pytest

from native.cpu import threads


def test_wait_change_sees_another_threads_store_and_gives_up_after_its_polls():
    spin = pytest.importorskip("native.cpu.jit_spin")
    flags = np.zeros(4, np.int64)
    assert not spin.wait_change(flags, 0, 0, 100)                   # nothing changed: False after 100 polls
    assert spin.wait_change(flags, 0, 7, 1)                         # already different
    assert not spin.publish_wait_change(flags, 1, 5, 0, 0, 10, 2, 3) and flags[1] == 5
    assert flags[2] == 0                                            # "polling" is 1 only while it polls
    setter = threading.Timer(0.02, lambda: flags.__setitem__(0, 3))
    setter.start()
    assert spin.wait_change(flags, 0, 0, 1 << 40)                   # returns once the other thread stores (no GIL held)
    setter.join()


@pytest.mark.parametrize("polls", [0, 1 << 12])
def test_spinning_pool_hands_off_with_and_without_the_spin(monkeypatch, polls):
    threads.init()
    monkeypatch.setattr(threads, "WORKER_SPIN_POLLS", polls)
    monkeypatch.setattr(threads, "CALLER_SPIN_POLLS", polls)

    def work(i):
        if i % 3 == 1:
            time.sleep(0.001)      # the caller finishes first and waits for the worker
        return np.full(4, i).sum()
    for rep in range(200):
        assert threads.parallel_for(work, range(4)) == [4 * i for i in range(4)]
        if rep % 50 == 0:
            time.sleep(0.02)       # longer than any spin: the worker sleeps on its lock, the next job wakes it
    w = threads._pool()[0]
    assert w.flags[0] == w.posted


def test_without_numba_the_pool_waits_on_its_locks(monkeypatch):
    from native import config
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert threads._spinner() is None
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()


def test_while_contended_nobody_polls_and_hand_offs_still_work(monkeypatch):
    """After a polling worker was seen not starting its share in time, for BACKOFF_S nobody polls and parallel_for
    runs every item on the caller."""
    threads.init()
    monkeypatch.setitem(threads._SPIN, "quiet_after", time.perf_counter() + 60)
    assert threads._contended()
    for _ in range(50):
        assert threads.parallel_for(lambda i: i + 1, range(4)) == [1, 2, 3, 4]
    me = threading.get_ident()      # and every item runs on the caller: a preempted worker would hold it up
    assert threads.parallel_for(lambda i: threading.get_ident(), range(4)) == [me] * 4
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    assert not threads._contended()
    assert threads.parallel_for(lambda i: i * 2, range(4)) == [0, 2, 4, 6]


def test_a_share_whose_worker_has_no_cpu_is_run_by_the_caller_and_the_worker_skips_it(monkeypatch):
    """A worker that claims to poll for its next job but does not see it (here: held at a gate, as a preempted thread
    is held by the scheduler) does not hold the caller up: the caller runs its share, the worker skips that share
    when it gets going, gets no share until it has, and then takes shares again."""
    real = pytest.importorskip("native.cpu.jit_spin")
    gate = threading.Event()

    class Held:
        wait_change = staticmethod(real.wait_change)

        @staticmethod
        def publish_wait_change(flags, j, value, i, seen, polls, busy, seen_at):
            flags[j] = value
            flags[busy] = 1          # "polling", but it sees nothing until the gate opens
            gate.wait()
            flags[busy] = 0
            return False
    monkeypatch.setattr(threads, "_spinner", lambda: Held)
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    w = threads._Worker(99)
    deadline = time.perf_counter() + 10
    while not w.flags[3] and time.perf_counter() < deadline:
        time.sleep(0.001)
    ran_on = {}

    def work(i):
        ran_on[i] = threading.get_ident()
        return i * 10
    results = [None] * 3
    opener = threading.Timer(3.0, gate.set)     # without the take-over the wait would last until the gate opens
    opener.start()
    t0 = time.perf_counter()
    w.start(work, [0, 1, 2], [1, 2], results)
    w.wait()
    assert time.perf_counter() - t0 < 2.5                            # not held up by the gate
    opener.cancel()
    assert results[1:] == [10, 20] and set(ran_on.values()) == {threading.get_ident()}
    assert threads._contended() and w.owes and not w.ready()          # the worker has not passed its share yet
    gate.set()
    while not w.ready() and time.perf_counter() < deadline:          # it skips the share, then is ready again
        time.sleep(0.001)
    assert w.ready() and not w.owes
    monkeypatch.setitem(threads._SPIN, "quiet_after", 0.0)
    ran_on.clear()
    results = [None] * 2
    w.start(work, [0, 1], [1], results)
    w.wait()
    assert results == [None, 10] and list(ran_on) == [1]             # each item run once, by whichever thread
