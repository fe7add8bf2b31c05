"""Tactic preparations (packed / transformed weights) reused across builds through the timing cache's F.prep."""
import numpy as np
import pytest

from backends.engine.build import parse_onnx
from backends.engine.builder import Builder, BuilderConfig
from backends.engine.builder import prep_cache
from backends.engine.builder.prep_cache import PrepCacheError, worth_caching
from backends.engine.builder.timing_cache_file import load_timing_cache, prep_path, save_timing_cache
from backends.engine.runtime.executor import GraphExecutor, node_op
from debugkit.cli.main import main
from native.tactics import tactic_by_id
from tests.tactics.models import conv_chain, save

X = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)


def build(path, cache_file):
    network, _ = parse_onnx(path)
    config = BuilderConfig()
    config.timing_cache = load_timing_cache(cache_file, config)
    graph = Builder().build_graph(network, config, timing_feeds={"x": X})
    save_timing_cache(config.timing_cache, cache_file, config)
    return graph, config.timing_cache.prepared


def prepared_layers(graph):
    """Layers whose chosen tactic really prepares something (packs, transforms)."""
    return [n for n in graph.nodes if n.tactic_id is not None and
            worth_caching(tactic_by_id(n.kind, n.tactic_id), node_op(n))]


@pytest.fixture
def model(tmp_path):
    return save(conv_chain(), tmp_path)


def test_warm_rebuild_reuses_preparations_bit_identically(model, tmp_path):
    cache_file = str(tmp_path / "tc.json")
    cold, prep = build(model, cache_file)
    n = len(prep.used)
    assert n == len(prepared_layers(cold)) >= 7   # seven convolutions: im2col packing or Winograd transforms
    assert prep.hits == n   # the winners' preparations made while timing are not made again
    assert set(prep_cache.PrepCache.load(prep_path(cache_file)).entries) == prep.used   # the losers' are not kept
    warm, prep2 = build(model, cache_file)
    assert prep2.misses == 0 and prep2.hits == n and prep2.used == prep.used
    assert [(a.name, a.tactic_id) for a in cold.nodes] == [(b.name, b.tactic_id) for b in warm.nodes]
    for a, b in zip(cold.nodes, warm.nodes):
        assert list(a.weights) == list(b.weights)   # same names in the same order: same plan layout
        for k in a.weights:
            np.testing.assert_array_equal(np.asarray(a.weights[k]), np.asarray(b.weights[k]))
    y0 = GraphExecutor(cold).run({"x": X})
    y1 = GraphExecutor(warm).run({"x": X})
    assert all(np.array_equal(y0[k], y1[k]) for k in y0)


def test_key_covers_weights_and_code(model, tmp_path, monkeypatch):
    cache_file = str(tmp_path / "tc.json")
    build(model, cache_file)
    other = save(conv_chain(seed=1), tmp_path, "other.onnx")   # same shapes, other weights
    _, prep = build(other, cache_file)
    assert prep.hits == 0 and prep.misses >= 7
    # an edited kernel file changes the native package's stamp: nothing prepared by the old code is reused
    monkeypatch.setattr(prep_cache, "_NATIVE_STAMP", ["edited"])
    _, prep = build(other, cache_file)
    assert prep.hits == 0 and prep.misses >= 7


def test_corrupt_prep_file_is_refused_naming_it(model, tmp_path):
    cache_file = str(tmp_path / "tc.json")
    build(model, cache_file)
    side = prep_path(cache_file)
    data = bytearray(open(side, "rb").read())
    data[-5] ^= 0xFF   # inside the last array
    open(side, "wb").write(bytes(data))
    with pytest.raises(PrepCacheError, match="tc.json.prep is corrupt.*CRC32"):
        build(model, cache_file)
    assert main(["convert", model, "-o", str(tmp_path / "m.plan"), "--timing-cache", cache_file]) == 2
    assert not (tmp_path / "m.plan").exists()
    open(side, "wb").write(bytes(data[:100]))   # truncated
    with pytest.raises(PrepCacheError, match="tc.json.prep is corrupt"):
        build(model, cache_file)
