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
