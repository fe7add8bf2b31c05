"""debug reduce: ddmin over node sets finds planted faulty nodes on branches; outputs are valid; bad input exits 2."""
import importlib.util
import json
import os
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from debugkit.cli.main import main
from debugkit.debug.checks import CompareOptions
from debugkit.debug.reduce import ReduceProbe, Subgraphs, capture_values
from debugkit.debug.strategies import Prober, ddmin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
PLANT = os.path.join(ROOT, "tools", "plant_fault.py")


def _plant_module():
    spec = importlib.util.spec_from_file_location("plant_fault", PLANT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def branchy_model():
    """x → 3 parallel branches of 4 nodes each (MatMul, Add, Tanh, Mul) → Sum → Sigmoid → y, plus a shape chain."""
    rng = np.random.default_rng(0)
    nodes, inits, outs = [], [], []
    for b in range(3):
        w = numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32) * 0.3, f"w{b}")
        c = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), f"c{b}")
        inits += [w, c]
        nodes += [helper.make_node("MatMul", ["x", f"w{b}"], [f"m{b}"], name=f"mm{b}"),
                  helper.make_node("Add", [f"m{b}", f"c{b}"], [f"a{b}"], name=f"add{b}"),
                  helper.make_node("Tanh", [f"a{b}"], [f"t{b}"], name=f"tanh{b}"),
                  helper.make_node("Mul", [f"t{b}", f"c{b}"], [f"o{b}"], name=f"mul{b}")]
        outs.append(f"o{b}")
    nodes += [helper.make_node("Sum", outs, ["s"], name="sum"),
              helper.make_node("Shape", ["x"], ["shp"], name="shape"),
              helper.make_node("Reshape", ["s", "shp"], ["r"], name="reshape"),
              helper.make_node("Sigmoid", ["r"], ["y"], name="sig")]
    g = helper.make_graph(nodes, "branchy", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def planted():
    undo = []
    mod = _plant_module()

    def plant(names, together=False):
        undo.append(mod.plant(names, 0.5, together))
    yield plant
    for u in undo:
        u()


def _reduce(model, workdir):
    feeds = {"x": np.random.default_rng(1).random((2, 8), dtype=np.float32)}
    sub = Subgraphs(model, feeds, capture_values(model, feeds))
    probe = Prober(ReduceProbe(str(workdir), "graph-input", CompareOptions(), subgraphs=sub))
    assert probe(sub.items)
    return ddmin(sub.items, probe), probe, sub


def test_one_planted_node_on_a_branch_is_found(tmp_path, planted):
    planted(["tanh1"])
    found, probe, sub = _reduce(branchy_model(), tmp_path)
    assert found == ["tanh1"]
    model, feeds, expected = sub.build(found)
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["a1"] and [o.name for o in model.graph.output] == ["t1"]
    np.testing.assert_allclose(expected["t1"], np.tanh(sub.values["a1"]), rtol=1e-6)
    assert probe.probes <= 20


def test_two_planted_nodes_on_different_branches_are_both_kept(tmp_path, planted):
    planted(["add0", "mul2"], together=True)
    found, _, sub = _reduce(branchy_model(), tmp_path)
    assert sorted(found) == ["add0", "mul2"]
    model, _, _ = sub.build(found)
    assert {o.name for o in model.graph.output} == {"a0", "o2"}   # a disconnected, multi-output subgraph


def test_integer_tensors_are_folded_and_sums_keep_all_inputs(tmp_path):
    model = branchy_model()
    feeds = {"x": np.ones((2, 8), np.float32)}
    sub = Subgraphs(model, feeds, capture_values(model, feeds))
    m, f, expected = sub.build(["reshape"])
    assert [i.name for i in m.graph.input] == ["s"] and "shp" in {t.name for t in m.graph.initializer}
    m, f, _ = sub.build(["sum"])
    assert sorted(f) == ["o0", "o1", "o2"]
    fold = Subgraphs(model, feeds, sub.values, mode="fold")
    m, f, _ = fold.build(["sum"])
    assert not f and {"o0", "o1", "o2"} <= {t.name for t in m.graph.initializer}


def _cli(tmp_path, model, *extra):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return main(["debug", "reduce", str(path), "-o", str(tmp_path / "red.onnx"), "--log",
                 str(tmp_path / "probes.jsonl"), *extra])


CHECK = """import os, sys, onnx
m = onnx.load(sys.argv[1])
assert os.path.exists(sys.argv[2]), "inputs file missing"
sys.exit(1 if {"mul0", "tanh2"} <= {n.name for n in m.graph.node} else 0)
"""


def test_cli_with_a_check_command_and_min_good(tmp_path, capsys):
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    rc = _cli(tmp_path, branchy_model(), "--min-good", str(tmp_path / "good.onnx"), "--fail-code", "1", "--check",
              sys.executable, str(script), "{model}", "{inputs}")
    out = capsys.readouterr().out
    assert rc == 0, out
    red = onnx.load(tmp_path / "red.onnx")
    assert sorted(n.name for n in red.graph.node) == ["mul0", "tanh2"]
    good = onnx.load(tmp_path / "good.onnx")
    assert 0 < len(good.graph.node) < 16
    assert os.path.exists(tmp_path / "red_inputs.h5")
    page = (tmp_path / "red.html").read_text()
    assert "<code>mul0</code>" in page and "<code>tanh2</code>" in page and "Probe history" in page
    lines = [json.loads(line) for line in open(tmp_path / "probes.jsonl")]
    assert lines[0]["meta"]["search"] == "reduce" and len(lines) > 3


def test_bad_inputs_exit_2(tmp_path, capsys):
    model = branchy_model()
    assert _cli(tmp_path, model, "--check", "no-such-command-xyz", "{model}") == 2
    assert "not found" in capsys.readouterr().err
    assert _cli(tmp_path, model) == 2                      # nothing planted: the model passes
    assert "passes on the whole model" in capsys.readouterr().err
    assert _cli(tmp_path, model, "--check", "false") == 2  # fails whatever the model: empty after reduction
    assert "empty model" in capsys.readouterr().err
    other = branchy_model()
    other.graph.node[0].name = "renamed"
    assert _cli(tmp_path, other, "--resume", "--check", "false") == 2
    assert "another search" in capsys.readouterr().err
    bad = branchy_model()
    bad.graph.node[-1].op_type = "NoSuchOp"
    onnx.save(bad, tmp_path / "bad.onnx")
    assert main(["debug", "reduce", str(tmp_path / "bad.onnx"), "--log", str(tmp_path / "b.jsonl")]) == 2
    assert "reference" in capsys.readouterr().err


def if_model():
    """x → Relu 'pre' → If(cond = ReduceSum(x) > 0) {then: Mul 'then_mul' → Tanh 'then_tanh'; else: Neg} → Sigmoid."""
    then_g = helper.make_graph([helper.make_node("Mul", ["p", "two"], ["tm"], name="then_mul"),
                                helper.make_node("Tanh", ["tm"], ["tt"], name="then_tanh")], "then", [],
                               [helper.make_tensor_value_info("tt", TensorProto.FLOAT, [2, 8])],
                               [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    else_g = helper.make_graph([helper.make_node("Neg", ["p"], ["en"], name="else_neg")], "else", [],
                               [helper.make_tensor_value_info("en", TensorProto.FLOAT, [2, 8])])
    nodes = [helper.make_node("Relu", ["x"], ["p"], name="pre"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["b"], name="branch", then_branch=then_g, else_branch=else_g),
             helper.make_node("Sigmoid", ["b"], ["y"], name="post")]
    g = helper.make_graph(nodes, "ifm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
                          [numpy_helper.from_array(np.array(0.0, np.float32), "zero")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_reduce_reaches_inside_the_taken_if_branch(tmp_path, planted):
    from debugkit.debug.reduce import inline_taken_ifs
    planted(["then_tanh"])
    model = if_model()
    feeds = {"x": np.random.default_rng(1).random((2, 8), dtype=np.float32)}   # sum > 0: then-branch
    inlined, n = inline_taken_ifs(model, capture_values(model, feeds))
    assert n == 1 and "If" not in {x.op_type for x in inlined.graph.node}
    found, _, sub = _reduce(inlined, tmp_path)
    assert found == ["then_tanh"]


def loop_model(trips=3):
    """x → Relu 'pre' → Loop 'loop' (trips × {MatMul w 'body_mm' → Add c 'body_add' → Tanh 'body_tanh' → Mul 'body_scale'},
    w and c from the outer scope, plus a scan output) → Sigmoid 'post' → y."""
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["v_in", "w"], ["bm"], name="body_mm"),
         helper.make_node("Add", ["bm", "c"], ["ba"], name="body_add"),
         helper.make_node("Tanh", ["ba"], ["bt"], name="body_tanh"),
         helper.make_node("Mul", ["bt", "half"], ["v_out"], name="body_scale"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Identity", ["bt"], ["scan_out"], name="body_scan")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2, 8]),
         helper.make_tensor_value_info("scan_out", TensorProto.FLOAT, [2, 8])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "half")])
    nodes = [helper.make_node("Relu", ["x"], ["p"], name="pre"),
             helper.make_node("Loop", ["trips", "true", "p"], ["v_final", "scans"], name="loop", body=body),
             helper.make_node("Sigmoid", ["v_final"], ["y"], name="post"),
             helper.make_node("ReduceMean", ["scans"], ["z"], name="scan_mean", keepdims=0)]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array((rng.standard_normal((8, 8)) * 0.3).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "c")]
    g = helper.make_graph(nodes, "loopm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def scan_model():
    """x [4,8] scanned by rows (reverse) → state s += Tanh(row * w) ('scan_mul', 'scan_tanh', 'scan_add') → y = s."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["row", "w"], ["bm"], name="scan_mul"),
         helper.make_node("Tanh", ["bm"], ["bt"], name="scan_tanh"),
         helper.make_node("Add", ["s_in", "bt"], ["s_out"], name="scan_add"),
         helper.make_node("Identity", ["s_out"], ["each"], name="scan_each")],
        "scan_body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("row", TensorProto.FLOAT, [8])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [8]),
         helper.make_tensor_value_info("each", TensorProto.FLOAT, [8])])
    nodes = [helper.make_node("Scan", ["s0", "x"], ["y", "all"], name="scan", body=body, num_scan_inputs=1,
                              scan_input_directions=[1])]
    inits = [numpy_helper.from_array(np.zeros(8, np.float32), "s0"),
             numpy_helper.from_array(np.linspace(-1, 1, 8).astype(np.float32), "w")]
    g = helper.make_graph(nodes, "scanm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8]),
                           helper.make_tensor_value_info("all", TensorProto.FLOAT, [4, 8])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_loop_iterations_replay_the_carried_values():
    from debugkit.debug.loop_body import BodyIterations
    model = loop_model(trips=3)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)}
    values = capture_values(model, feeds)
    it = BodyIterations(model, model.graph.node[1], values)
    assert len(it.feeds) == 3
    w, c = (numpy_helper.to_array(t) for t in model.graph.initializer[2:4])
    v = np.maximum(feeds["x"], 0)
    for i, f in enumerate(it.feeds):
        assert int(f["i"]) == i and bool(f["cond_in"]) and set(f) == {"i", "cond_in", "v_in"}
        np.testing.assert_allclose(f["v_in"], v, rtol=1e-5, atol=1e-6)
        v = np.tanh(v @ w + c) * 0.5
    np.testing.assert_allclose(values["v_final"], v, rtol=1e-5, atol=1e-6)
    m, f = it.iteration_model(2)
    assert [x.name for x in m.graph.input] == ["v_in"] and {"i", "cond_in", "w", "c"} <= {
        t.name for t in m.graph.initializer}


def test_scan_iterations_slice_the_scanned_input_in_its_direction():
    from debugkit.debug.loop_body import BodyIterations
    model = scan_model()
    x = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    it = BodyIterations(model, model.graph.node[0], capture_values(model, {"x": x}))
    s = np.zeros(8, np.float32)
    for i, f in enumerate(it.feeds):
        np.testing.assert_array_equal(f["row"], x[3 - i])          # reverse direction: last row first
        np.testing.assert_allclose(f["s_in"], s, rtol=1e-5, atol=1e-6)
        s = s + np.tanh(x[3 - i] * np.linspace(-1, 1, 8).astype(np.float32))


def _loop_cli(tmp_path, model, *extra):
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    return main(["debug", "reduce", str(path), "-o", str(tmp_path / "red.onnx"), "--log",
                 str(tmp_path / "probes.jsonl"), *extra])


@pytest.mark.parametrize("make, loop, fault", [(loop_model, "loop", "body_tanh"), (scan_model, "scan", "scan_tanh")])
def test_reduce_descends_into_the_body_of_a_loop(tmp_path, planted, capsys, make, loop, fault):
    planted([fault])
    assert _loop_cli(tmp_path, make()) == 0
    out = capsys.readouterr().out
    assert [n.name for n in onnx.load(tmp_path / "red.onnx").graph.node] == [loop]
    body = onnx.load(tmp_path / f"red_{loop}_body.onnx")
    onnx.checker.check_model(body, full_check=True)
    assert [n.name for n in body.graph.node] == [fault]
    assert "the fault is inside the body of" in out and f"reduced to 1 in " in out and f"probes: {fault}" in out
    assert "iteration 0 of its body fails on its own" in out


def test_keep_loops_and_a_fault_no_single_iteration_shows(tmp_path, planted, capsys):
    planted(["body_tanh"])
    assert _loop_cli(tmp_path, loop_model(), "--keep-loops") == 0
    assert "inside the body" not in capsys.readouterr().out and not os.path.exists(tmp_path / "red_loop_body.onnx")
    script = tmp_path / "needs_loop.py"   # fails only while the model still has the Loop node around body_tanh
    script.write_text("import sys, onnx\nm = onnx.load(sys.argv[1])\n"
                      "sys.exit(1 if any(n.op_type == 'Loop' for n in m.graph.node) else 0)\n")
    assert _loop_cli(tmp_path, loop_model(), "--fail-code", "1", "--check", sys.executable, str(script),
                     "{model}") == 0
    out = capsys.readouterr().out
    assert "no single iteration of its body fails on its own (first 3 tried)" in out and "kept whole" in out
    assert not os.path.exists(tmp_path / "red_loop_body.onnx")


def test_two_workers_with_a_check_command_give_the_serial_answer(tmp_path, capsys):
    """The workers get the model and its values in the probe (shipped, no files of the driver's workdir), write
    each probe's model into the search's directory, and reduce to the same two nodes."""
    script = tmp_path / "check.py"
    script.write_text(CHECK)
    rc = _cli(tmp_path, branchy_model(), "--workers", "2", "--fail-code", "1", "--check", sys.executable, str(script),
              "{model}", "{inputs}")
    assert rc == 0, capsys.readouterr().out
    assert sorted(n.name for n in onnx.load(tmp_path / "red.onnx").graph.node) == ["mul0", "tanh2"]
