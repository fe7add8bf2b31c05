"""threads.pool_size reads DEBUGKIT_THREADS live (config.threads, through os.environ's own dict since h82: kernels
ask per call; the mapping's get cost ~1 us where the variable is unset): every change is seen at once, and values read exactly as
config.threads() reads them (empty: unset, 0: 1, garbage: UsageError each time), with or without that dict."""
import os

import pytest

from native import config
from native.cpu import threads
from native.errors import UsageError


@pytest.mark.parametrize("fast", [True, False])
def test_pool_size_follows_debugkit_threads_live(monkeypatch, fast):
    if fast and not config._ENV_FAST:
        pytest.skip("no CPython os.environ dict here")
    monkeypatch.setattr(config, "_ENV_FAST", fast)
    monkeypatch.delenv("DEBUGKIT_THREADS", raising=False)
    cpus = max(1, len(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else max(1, os.cpu_count() or 1)
    assert threads.pool_size() == cpus
    for value, want in (("3", 3), ("1", 1), ("7", 7), ("3", 3), ("", cpus), ("0", 1), ("-4", 1), (" 2 ", 2)):
        monkeypatch.setenv("DEBUGKIT_THREADS", value)
        assert threads.pool_size() == want == (config.threads() or cpus), value
    for _ in range(2):   # a bad value is not remembered: it raises every time, as config does
        monkeypatch.setenv("DEBUGKIT_THREADS", "many")
        with pytest.raises(UsageError, match="DEBUGKIT_THREADS"):
            threads.pool_size()
    monkeypatch.delenv("DEBUGKIT_THREADS")
    assert threads.pool_size() == cpus


def test_num_threads_is_one_until_tuned(monkeypatch):
    monkeypatch.setitem(threads._STATE, "tuned", False)
    monkeypatch.setenv("DEBUGKIT_THREADS", "4")
    assert threads.num_threads() == 1
    monkeypatch.setitem(threads._STATE, "tuned", True)
    assert threads.num_threads() == 4
