"""check lint: every problem named with its node; exit 1 on errors, 0 when clean; Polygraphy-shaped JSON."""
import json

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from debugkit.cli.main import main as cli
from debugkit.surgeon.lint import ERROR, WARNING, lint_model


def _bad_model():
    nodes = [h.make_node("MatMul", ["A", "B"], ["C"], name="MatMul_3"),
             h.make_node("Add", ["C", "Z"], ["D"], name="dup"),
             h.make_node("Relu", ["D"], ["E"], name="dup"),
             h.make_node("FooBar", ["E"], ["F"], name="foo"),
             h.make_node("Relu", ["E"], ["G"], name="dead")]
    g = h.make_graph(nodes, "", [h.make_tensor_value_info("A", T.FLOAT, [2, 3]),
                                 h.make_tensor_value_info("B", T.FLOAT, [4, 5]),
                                 h.make_tensor_value_info("U", T.FLOAT, [1])],
                     [h.make_tensor_value_info("F", T.FLOAT, None), h.make_tensor_value_info("Q", T.FLOAT, None)])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)])


def _messages(report, node=None):
    return [e.message for e in report.entries if node is None or node in e.nodes]


def test_lint_names_every_problem():
    r = lint_model(_bad_model())
    assert any("name" in m and "graph" in m for m in _messages(r))  # onnx checker: empty graph name
    assert any("Incompatible dimensions" in m for m in _messages(r, "MatMul_3"))
    assert any("share the name 'dup'" in m for m in _messages(r, "dup"))
    assert any("input 'Z'" in m for m in _messages(r, "dup"))
    assert any("unknown op 'FooBar'" in m for m in _messages(r, "foo"))
    assert any("'Q' is not produced" in e.message and e.level == ERROR for e in r.entries)
    assert any("input 'U' does not affect" in e.message and e.level == WARNING for e in r.entries)
    assert any("dead" in e.nodes and e.level == WARNING for e in r.entries)
    # nodes downstream of a failing node are not blamed for its failure
    assert not any("dead" in e.nodes and e.level == ERROR for e in r.entries)
    assert set(r.failing) == {"MatMul_3", "dup", "foo"}


def test_lint_type_mismatch_and_empty_graph():
    g = h.make_graph([h.make_node("Add", ["x", "i"], ["y"], name="mixed")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("i", T.INT64, [2])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2])])
    r = lint_model(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    assert r.failing == ["mixed"] and any(e.level == ERROR for e in r.entries)
    empty = h.make_model(h.make_graph([], "e", [], []), opset_imports=[h.make_opsetid("", 17)])
    assert any("no nodes" in m for m in _messages(lint_model(empty)))


def test_lint_declared_shape_contradiction():
    g = h.make_graph([h.make_node("Transpose", ["x"], ["y"], perm=[1, 0], name="tr")], "g",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    r = lint_model(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]))
    assert "tr" in r.failing


def test_cli_lint_exit_codes_and_json(tmp_path):
    bad = tmp_path / "bad.onnx"
    onnx.save(_bad_model(), str(bad))
    report = tmp_path / "r.json"
    assert cli(["check", "lint", str(bad), "--json", str(report)]) == 1
    data = json.loads(report.read_text())
    assert set(data) == {"summary", "lint_entries"} and "MatMul_3" in data["summary"]["failing"]
    assert {"level", "source", "message", "nodes"} <= set(data["lint_entries"][0])
    w = numpy_helper.from_array(np.ones((3, 3), np.float32), "w")
    g = h.make_graph([h.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "good",
                     [h.make_tensor_value_info("x", T.FLOAT, [1, 3])], [h.make_tensor_value_info("y", T.FLOAT, [1, 3])],
                     [w])
    good = tmp_path / "good.onnx"
    onnx.save(h.make_model(g, opset_imports=[h.make_opsetid("", 17)]), str(good))
    assert cli(["check", "lint", str(good)]) == 0
    assert cli(["check", "lint", str(tmp_path / "missing.onnx")]) == 2
