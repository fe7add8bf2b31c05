"""Incremental rebuilds: builds sharing a TimingCache reuse each unchanged layer's tactic selection
(builder/selection_memo.py), and the engine is bit for bit the one a from-scratch build makes."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine import Runtime
from backends.engine.build import parse_onnx, profile_from_shapes
from backends.engine.builder import Builder, BuilderConfig, BuilderFlag, TimingCache
from backends.engine.builder.precision_spec import parse_layer_precisions
from backends.engine.builder.selection_memo import SelectionMemo

X = np.random.default_rng(0).standard_normal((1, 8, 16)).astype(np.float32)


def _model():
    rng = np.random.default_rng(1)

    def w(name, *shape):
        return numpy_helper.from_array((rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32), name)
    nodes = [
        helper.make_node("MatMul", ["x", "wa"], ["a"], name="mm_a"),
        helper.make_node("MatMul", ["x", "wb"], ["b"], name="mm_b"),
        helper.make_node("Add", ["a", "ba"], ["a1"], name="add_a"),
        helper.make_node("Relu", ["a1"], ["a2"], name="relu"),
        helper.make_node("Mul", ["b", "scale"], ["b1"], name="mul_scale"),
        helper.make_node("Add", ["a2", "b1"], ["s"], name="sum"),
        helper.make_node("MatMul", ["s", "wc"], ["c"], name="mm_c"),
        helper.make_node("Add", ["c", "x"], ["y"], name="residual"),
    ]
    inits = [w("wa", 16, 32), w("wb", 16, 32), w("wc", 32, 16),
             numpy_helper.from_array(np.linspace(-1, 1, 32).astype(np.float32), "ba"),
             numpy_helper.from_array(np.full(32, 0.5, np.float32), "scale")]
    graph = helper.make_graph(nodes, "memo", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def network():
    net, _ = parse_onnx(_model())
    return net


def _build(network, cache, fp32_layers, prefix=None, reuse=True):
    config = BuilderConfig()
    config.reuse_selections = reuse
    config.set_flag(BuilderFlag.FP16)
    config.layer_precisions = parse_layer_precisions([(n, "fp32") for n in fp32_layers])
    if fp32_layers:
        config.set_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
    config.timing_cache = cache
    profile = profile_from_shapes(network, {"x": X.shape}, None)
    if profile is not None:
        config.add_optimization_profile(profile)
    graph = Builder().build_graph(network, config, prefix_memo=prefix)
    out = Runtime().engine_from_graph(graph, config).create_execution_context().execute({"x": X})
    return graph, out


def _layers(graph):
    return [(n.name, n.kind, n.precision, n.tactic_id, n.inputs, n.outputs,
             {k: (np.asarray(v).dtype.str, np.asarray(v).shape, np.asarray(v).tobytes()) for k, v in n.weights.items()})
            for n in graph.nodes]


def test_incremental_probe_equals_a_from_scratch_build(network):
    cache, prefix = TimingCache(), {}
    _build(network, cache, ["relu"], prefix)                # the parent build: all but one layer FP16
    memo = cache.selections
    assert memo is not None and memo.hits == 0 and memo.misses > 0
    misses = memo.misses
    child, out = _build(network, cache, ["relu", "mm_c"], prefix)   # a probe: one more layer in FP32
    assert memo.hits >= 4                                   # the unchanged layers were copied, not selected again
    assert 0 < memo.misses - misses < len(child.nodes)       # mm_c (and what its precision touches) selected afresh
    assert {n.precision for n in child.nodes if "mm_c" in n.source_nodes} == {"float32"}
    # from scratch: the same timings, no memo, no reused prefix
    fresh, ref = _build(network, TimingCache(dict(cache.entries)), ["relu", "mm_c"])
    assert fresh.nodes and _layers(child) == _layers(fresh)
    assert out.keys() == ref.keys() and all(out[k].tobytes() == ref[k].tobytes() for k in out)
    # and the FP32 layer changed the outputs: the probe really is another engine than its parent
    _, parent_out = _build(network, cache, ["relu"], prefix)
    assert parent_out["y"].tobytes() != out["y"].tobytes()


def test_a_replaced_weight_array_is_another_key(network):
    graph, _ = _build(network, TimingCache(), [])
    node = next(n for n in graph.nodes if n.weights)
    memo = SelectionMemo()
    k1 = memo.key(("build",), node, {}, False)
    same = memo.key(("build",), node, {}, False)
    name = next(iter(node.weights))
    node.weights = dict(node.weights, **{name: np.array(node.weights[name], copy=True)})   # equal values, new array
    k2 = memo.key(("build",), node, {}, False)
    assert k1 == same and k1 != k2
    node.precision = "float32" if node.precision != "float32" else "float16"
    k3 = memo.key(("build",), node, {}, False)
    assert k3 != k2
    env16, env32 = ({i: np.zeros((1, 8, 16), t) for i in node.inputs if i} for t in (np.float16, np.float32))
    assert len({memo.key(("build",), node, env16, True), memo.key(("build",), node, env32, True), k3}) == 3
    assert memo.key(("build",), node, env32, True) == memo.key(("build",), node, dict(env32), True)


def test_a_selector_without_a_memo_token_turns_the_memo_off(network):
    class Selector:   # an arbitrary user selector: its answers may depend on anything
        def select_algorithms(self, context, choices):
            return []

        def report_algorithms(self, contexts, choices):
            pass
    assert SelectionMemo.build_key(BuilderConfig(), "cpu", Selector()) is None
    config = BuilderConfig()
    config.algorithm_selector = Selector()
    config.timing_cache = cache = TimingCache()
    Builder().build_graph(network, config)
    assert cache.selections is None


def test_another_set_of_registered_tactics_is_another_build_key(monkeypatch):
    """A tactics module loaded between two builds adds candidates: no layer selection is copied across."""
    from native import tactics as T
    before = SelectionMemo.build_key(BuilderConfig(), "cpu", None)
    assert SelectionMemo.build_key(BuilderConfig(), "cpu", None) == before

    class Extra(T.Tactic):
        kind, name = "MemoTestKind", "extra"
    monkeypatch.setitem(T._REGISTRY, ("cpu", "MemoTestKind"), [Extra()])
    assert SelectionMemo.build_key(BuilderConfig(), "cpu", None) != before


def test_a_build_that_reuses_no_selections_leaves_the_memo_alone(network):
    """BuilderConfig.reuse_selections = False (a one-off build: the precision search's layers-alone engine) neither
    copies from the timing cache's selection memo nor adds to it, and builds the same engine."""
    cache = TimingCache()
    _build(network, cache, ["relu"])
    memo = cache.selections
    entries, hits, misses = len(memo.entries), memo.hits, memo.misses
    alone, out = _build(network, cache, ["relu", "mm_c"], reuse=False)
    assert (len(memo.entries), memo.hits, memo.misses) == (entries, hits, misses)
    kept, ref = _build(network, TimingCache(dict(cache.entries)), ["relu", "mm_c"])
    assert _layers(alone) == _layers(kept) and out["y"].tobytes() == ref["y"].tobytes()
