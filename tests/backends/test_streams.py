"""Two streams (runtime/streams.py): a plan's branchy tail run as two lists of layers, one on the caller and one on
the pool's worker. Outputs stay bit for bit the layers-in-order ones whichever way a region runs (two streams, in
order, or one stream taking the other over when parallel_for runs the two on the caller), a failing layer is still
named, and with one thread no region is made."""
import numpy as np
import pytest
from onnx import TensorProto, helper

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.runtime import streams
from native.cpu import threads
from native.errors import ExecutionError


def _branchy():
    """x -> two branches of two 3x3 convolutions each, one branch adding the other's first layer (a wait), their
    concat; a Gather by the fed index `i` on the second branch (to fail on demand); a Sigmoid output besides."""
    rng = np.random.default_rng(0)

    def w(name, shape):
        return helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).astype(np.float32).ravel())
    inits = [w("wa1", [8, 8, 3, 3]), w("wa2", [8, 8, 3, 3]), w("wb1", [8, 8, 3, 3]), w("wb2", [8, 8, 3, 3])]
    conv = dict(pads=[1, 1, 1, 1])
    nodes = [helper.make_node("Conv", ["x", "wa1"], ["a1"], name="a1", **conv),
             helper.make_node("Relu", ["a1"], ["a1r"], name="a1r"),
             helper.make_node("Conv", ["x", "wb1"], ["b1"], name="b1", **conv),
             helper.make_node("Conv", ["a1r", "wa2"], ["a2"], name="a2", **conv),
             helper.make_node("Tanh", ["b1"], ["b1t"], name="b1t"),
             helper.make_node("Conv", ["b1t", "wb2"], ["b2"], name="b2", **conv),
             helper.make_node("Add", ["b2", "a1r"], ["b3"], name="b3"),
             helper.make_node("Gather", ["b3", "i"], ["b4"], name="pick", axis=1),
             helper.make_node("Concat", ["a2", "b4"], ["y"], name="cat", axis=1),
             helper.make_node("Sigmoid", ["a2"], ["z"], name="sig")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12]),
                                       helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(seed, i=(0, 2, 5, 7)):
    x = np.random.default_rng(seed).standard_normal((1, 8, 12, 12)).astype(np.float32)
    return {"x": x, "i": np.array(i, np.int64)}


@pytest.fixture
def two_threads(monkeypatch):
    """A pool of two threads, every layer worth a stream (the region does not hang on this machine's timings)."""
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    threads.tune()
    monkeypatch.setattr(streams, "_cost", lambda st: (1.0, 1.0))
    monkeypatch.setattr(streams, "MIN_GAIN", 0.0)
    return monkeypatch


def _engine():
    return Runtime().deserialize_engine(build_plan_from_onnx(_branchy().SerializeToString()))


def _regions(ctx):
    return [u for p in ctx.arenas.compiled.values() for u in p.__dict__.get("_units", ((), ()))[0]
            if isinstance(u, streams.Region)]


def _check(engine, ctx, seeds):
    for seed in seeds:
        out = ctx.execute(_feeds(seed))
        ref = engine.executor._run_general(_feeds(seed))
        for name in ("y", "z"):
            np.testing.assert_array_equal(out[name], ref[name])


def test_a_region_matches_the_layers_in_order_bit_for_bit_both_ways(two_threads):
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))   # (the straight-line function, and with it the region, from the third plan run)
    (region,) = _regions(ctx)
    assert all(region.streams) and any(e[7] for e in region.order), "two streams, one waiting on the other"
    for side in (True, False):
        region.side = side
        _check(engine, ctx, range(20, 24))


def test_a_region_keeps_the_faster_way_of_its_trials(two_threads):
    """Its build-timing schedule and a schedule from its measured layer times, each against the layers in order;
    where in order wins, the plan runs without the region from then on (its layers on the arena again)."""
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))
    (region,) = _regions(ctx)
    _check(engine, ctx, range(4, 5 + 2 * (streams.WARM + 2 * (streams.TRIALS + 1))))
    assert region.side is not None and all(len(b) == len(a) == streams.TRIALS for _, b, a in region.trials)
    assert bool(_regions(ctx)) == (region.side or region.retry > 0)
    _check(engine, ctx, range(40, 44))


def test_trials_whose_helper_had_no_cpu_run_again_later(two_threads):
    """Trials during which a stream took the other over (its thread had no CPU) decide nothing when in order won:
    the region runs in order RETRY_RUNS times and then times itself again; after RETRIES such rounds it is dropped."""
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))
    (region,) = _regions(ctx)
    for round_ in range(streams.RETRIES + 1):
        region.trials = [(region.where, [2.0] * streams.TRIALS, [1.0] * streams.TRIALS)]   # in order won
        region.taken += 1
        region._decide()
        assert region.side is False
        if round_ == streams.RETRIES:
            break
        assert region.retry == streams.RETRY_RUNS and _regions(ctx) == [region]
        _check(engine, ctx, range(100, 100 + streams.RETRY_RUNS))
        assert region.side is None and region.runs == 0 and region.trials == []   # (its trials start again)
    assert not _regions(ctx), "dropped after the last retry"
    _check(engine, ctx, range(5))


def test_a_dropped_region_is_not_run_again_by_the_repeated_execute(two_threads):
    """execute's repeated run (the context's keyed function) follows the plan made again without the region: the
    dropped region is never called, and the outputs stay the layers' in order."""
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))
    (region,) = _regions(ctx)
    calls = []
    run = region.run
    region.run = lambda *a, **k: (calls.append(1), run(*a, **k))[1]
    _check(engine, ctx, range(4, 6))
    assert calls, "the region ran before it was dropped"
    calls.clear()
    region.cp.drop_region()
    _check(engine, ctx, range(6, 12))
    assert calls == [] and not _regions(ctx)


class _LateHelper:
    """A helper thread that gets no CPU until the caller's stream is done (it runs its job in `wait`)."""

    def start(self, job):
        self.job = job

    def wait(self, spin):
        self.job()


@pytest.mark.parametrize("helper", ["late", "busy"])
def test_a_stream_takes_over_the_other_when_its_thread_has_not_started(two_threads, helper):
    """The stream that must wait for the other, not yet started (its thread has no CPU, or another region holds the
    helper), runs what is left of both in plan order instead of waiting for ever."""
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))
    (region,) = _regions(ctx)
    region.side, region.taken = True, 0
    if helper == "late":
        two_threads.setattr(streams, "_helper", _LateHelper)
        _check(engine, ctx, range(30, 33))
    else:
        with streams._HELPER_LOCK:
            _check(engine, ctx, range(30, 33))
    assert region.taken == (3 if any(e[7] for e in region.streams[0]) else 0)   # (only a wait takes over)


def test_a_failing_layer_in_a_stream_is_named(two_threads):
    engine = _engine()
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(4))
    (region,) = _regions(ctx)
    for side in (True, False):
        region.side = side
        with pytest.raises(ExecutionError, match="pick"):
            ctx.execute(_feeds(1, i=(0, 2, 5, 99)))
        _check(engine, ctx, [5])


def test_no_region_with_one_thread_or_streams_off(monkeypatch):
    monkeypatch.setattr(streams, "_cost", lambda st: (1.0, 1.0))
    monkeypatch.setattr(streams, "MIN_GAIN", 0.0)
    engine = _engine()
    monkeypatch.setenv("DEBUGKIT_THREADS", "1")
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(5))
    assert not _regions(ctx)
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    monkeypatch.setattr(streams, "ENABLED", False)
    ctx = engine.create_execution_context()
    _check(engine, ctx, range(5))
    assert not _regions(ctx)


def _fake(edges, n):
    """A compiled plan's steps for find_region: step k reads slots edges[k] and makes slot k + 1."""
    class Node:
        meta = {}
        name = "n"
    steps = [(None, False, None, tuple(edges[k]), (k + 1,), 1, None, None, (), None, Node(), None) for k in range(n)]

    class CP:
        pass
    cp = CP()
    cp.steps = steps
    return cp


def test_find_region_starts_at_the_fork_and_balances_the_branches(monkeypatch):
    monkeypatch.setattr(streams, "_cost", lambda st: (1.0, 1.25))
    # a chain of 3, then a fork into two chains of 4 that a last layer joins
    edges = [(0,), (1,), (2,), (3,), (3,), (4,), (5,), (6,), (7,), (8,), (9,), (10, 11)]
    cp = _fake(edges, len(edges))
    p, where = streams.find_region(cp)
    assert p == 3 and len(where) == len(edges) - 3
    branch_a = [where[k - 3] for k in (3, 5, 7, 9)]
    branch_b = [where[k - 3] for k in (4, 6, 8, 10)]
    assert len(set(branch_a)) == 1 and len(set(branch_b)) == 1 and branch_a[0] != branch_b[0]
    # a plain chain: nothing to gain
    assert streams.find_region(_fake([(k,) for k in range(12)], 12)) is None


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_a_forked_child_gets_a_helper_of_its_own(two_threads):
    """The parent's helper thread does not exist in a forked child: the child's first region makes its own."""
    import os
    parent = streams._helper()
    pid = os.fork()
    if pid == 0:   # the child: a region runs both streams to the end, with a helper of its own
        code = 1
        try:
            engine = _engine()
            ctx = engine.create_execution_context()
            _check(engine, ctx, range(4))
            (region,) = _regions(ctx)
            region.side = True
            _check(engine, ctx, range(4, 8))
            code = 0 if streams._helper() is not parent and streams._helper().pid == os.getpid() else 2
        finally:
            os._exit(code)
    import time
    for _ in range(600):   # (up to 60 s: a child that hangs fails the test instead of the suite)
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.1)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child's region did not finish")
    assert os.WEXITSTATUS(status) == 0


def test_schedule_keeps_the_critical_chain_on_one_stream():
    """A neck of 8 dependent layers with a two-layer head hanging off every second one (plan order interleaved, as
    an exporter writes a detector): the neck stays on one stream, the heads fill the other, and the estimate is
    the neck's length plus at most one wait and the last head."""
    layers, one, neck = [], [], []
    slot = 100
    for k in range(8):
        layers.append(((k,), (k + 1,)))   # neck layer k reads slot k, makes k + 1
        one.append(1.0)
        neck.append(len(layers) - 1)
        if k % 2 == 1:
            layers.append(((k + 1,), (slot,)))
            layers.append(((slot,), (slot + 1,)))
            one += [0.6, 0.6]
            slot += 2
    span, where = streams._schedule(layers, one, start=0.05)
    assert len({where[j] for j in neck}) == 1
    assert span <= 8.0 + 1.2 + 2 * streams.WAIT_MS + 1e-9
    assert span == pytest.approx(streams._span(layers, one, where, 0.05))


def test_taps_inside_a_region_are_the_layers_in_order_ones(two_threads):
    """--mark-all's taps: a tapped tensor made inside the region comes out of it, bit for bit."""
    engine = _engine()
    ctx = engine.create_execution_context()
    taps = [n for n in engine.tensor_names() if n not in ("x", "i")]
    for seed in range(12):
        out = ctx.execute(_feeds(seed), taps=taps)
        ref = engine.executor._run_general(_feeds(seed), keep=set(taps))
        for name, value in out.items():
            np.testing.assert_array_equal(value, ref[engine.graph.aliases.get(name, name)])
    (region,) = _regions(ctx)
    made = {i for _, outs in region.layers for i in outs}
    tapped_inside = [n for n in taps if region.cp.slot.get(n) in made]
    assert region.runs > 0 and tapped_inside and all(region.cp.slot[n] in region.outs for n in tapped_inside)
