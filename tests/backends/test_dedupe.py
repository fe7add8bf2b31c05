"""Duplicate layers (passes/dedupe.py): equal constants become one, then a layer that computes what an earlier one
does from the same tensors is dropped (bert_mini's per-block attention-mask Where); layers that differ, that are not
deterministic, or whose output is a graph output stay, and so do all in reduced-precision builds; the values are
the unfused engine's."""
import numpy as np
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.passes.dedupe import _key
from backends.engine.engine_graph import Node
from tests.backends.fusion_helpers import RNG, build, const, kinds, model, run


def _blocks(second_value=-1e4, outputs=("y",)):
    """Two 'blocks' each making the mask bias Where(m, c_i, z_i) and adding it to its own input."""
    nodes, inits = [], []
    for i, v in enumerate((-1e4, second_value)):
        nodes += [helper.make_node("Where", ["m", f"c{i}", f"z{i}"], [f"w{i}"], name=f"where{i}"),
                  helper.make_node("Add", [f"x{i}", f"w{i}"], [f"a{i}"], name=f"add{i}")]
        inits += [const(f"c{i}", np.array(v, np.float32)), const(f"z{i}", np.array(0.0, np.float32))]
    nodes.append(helper.make_node("Add", ["a0", "a1"], ["y"], name="sum"))
    m = model(nodes, [("x0", [2, 5]), ("x1", [2, 5])], list(outputs), inits)
    m.graph.input.append(helper.make_tensor_value_info("m", 9, [2, 5]))   # bool
    return m


def _feeds():
    return {"x0": RNG.standard_normal((2, 5)).astype(np.float32), "x1": RNG.standard_normal((2, 5)).astype(np.float32),
            "m": RNG.random((2, 5)) < 0.5}


def test_equal_constants_merge_then_the_duplicate_where_goes():
    m, feeds = _blocks(), _feeds()
    g = build(m)
    assert kinds(g).count("Select") == 1
    np.testing.assert_array_equal(run(g, feeds)[0], run(build(m, fusion=False), feeds)[0])


def test_layers_that_differ_or_are_graph_outputs_stay():
    assert kinds(build(_blocks(second_value=-5e3))).count("Select") == 2
    g = build(_blocks(outputs=("y", "w1")))     # the second Where's output is a graph output
    assert kinds(g).count("Select") == 2


def test_reduced_precision_builds_keep_their_copies():
    net, _ = parse_onnx(_blocks())
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.FP16)
    assert kinds(Builder().build_graph(net, cfg)).count("Select") == 2


def test_only_deterministic_single_output_layers_are_candidates():
    fill = Node(name="f", kind="Fill", inputs=["s"], outputs=["r"], params={"op": "RANDOM_NORMAL"})
    split = Node(name="s", kind="Split", inputs=["x"], outputs=["a", "b"], params={"axis": 0})
    where = Node(name="w", kind="Select", inputs=["m", "c", "z"], outputs=["y"])
    assert _key(fill) is None and _key(split) is None and _key(where) is not None
    held = Node(name="w2", kind="Select", inputs=["m", "c", "z"], outputs=["y2"], meta={"output_types": ["float16"]})
    assert _key(held) is None
