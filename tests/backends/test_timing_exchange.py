"""Two timing caches with one TimingExchange directory: what one measures, the other takes instead of timing."""
import os

from backends.engine.builder import TimingCache
from backends.engine.builder.timing_exchange import TimingExchange


def test_a_timing_put_by_one_cache_is_found_by_the_other(tmp_path):
    a, b = TimingCache(), TimingCache()
    a.exchange, b.exchange = TimingExchange(str(tmp_path)), TimingExchange(str(tmp_path))
    assert b.get("k1") is None and b.misses == 1
    a.put("k1", {"3": 0.25, "4": -1.0})
    assert b.get("k1") == {"3": 0.25, "4": -1.0} and b.hits == 1 and b.exchange.taken == 1
    assert b.entries["k1"] == {"3": 0.25, "4": -1.0}     # kept: the next lookup does not read the file
    assert a.exchange.given == 1 and not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]


def test_an_exchange_that_is_gone_or_garbled_is_a_miss(tmp_path):
    c = TimingCache()
    c.exchange = TimingExchange(str(tmp_path / "gone"))
    c.put("k", {"1": 0.5})                 # the directory is gone: kept here, nothing raised
    assert c.entries["k"] == {"1": 0.5} and c.exchange.given == 0
    (tmp_path / "x.json").write_text("[1, 2")
    c.exchange = TimingExchange(str(tmp_path))
    assert c.get("x") is None and c.misses == 1
