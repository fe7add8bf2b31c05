"""surgeon: folding with our kernels, shape folding, failures left unfolded, no-ops, cleanup, toposort, shapes,
external data, extract, insert and the CLI."""
import io
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from debugkit.cli.main import main as cli
from debugkit.surgeon.cleanup import cleanup_graph
from debugkit.surgeon.extract import extract_model, parse_input_specs, parse_output_specs
from debugkit.surgeon.fold import FoldOptions, fold_constants
from debugkit.surgeon.insert import insert_node, parse_attrs
from debugkit.surgeon.shapes import infer_shapes, override_input_shapes, parse_shape_spec
from debugkit.surgeon.toposort import toposort_graph
from native.errors import ModelError, UsageError
from native.logger import G_LOGGER
from native.plugins import Plugin, register_plugin


def init(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=()):
    g = h.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return h.make_model(g, opset_imports=[h.make_opsetid("", opset)] + list(extra_opsets))


def inits_of(m):
    return {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}


class _Boom(Plugin):
    name = "DkTestBoom"

    def enqueue(self, inputs, fields):
        raise RuntimeError("boom on purpose")


class _Twice(Plugin):
    name = "DkTestTwice"

    def enqueue(self, inputs, fields):
        return [np.asarray(inputs[0]) * 2]


register_plugin(_Boom, override=True)
register_plugin(_Twice, override=True)


@pytest.fixture
def log():
    stream = io.StringIO()
    old_stream, old_sev = G_LOGGER.stream, G_LOGGER.min_severity
    G_LOGGER.stream, G_LOGGER.min_severity = stream, G_LOGGER.WARNING
    yield stream
    G_LOGGER.stream, G_LOGGER.min_severity = old_stream, old_sev


# folding --------------------------------------------------------------------------------------------------------
def test_fold_constant_chain_by_our_kernels():
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 0.5, np.float32)
    m = model([h.make_node("Add", ["a", "b"], ["c"], name="add"),
               h.make_node("Constant", [], ["k"], value=init("k", np.float32(3.0))),
               h.make_node("Mul", ["c", "k"], ["d"], name="mul"),
               h.make_node("Mul", ["x", "d"], ["y"], name="use")],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
              [init("a", a), init("b", b)])
    report = fold_constants(m)
    assert [n.name for n in m.graph.node] == ["use"]
    assert report.folded == 3 and report.failures == {}  # Add, Mul and the Constant (now an initializer): 4 -> 1
    np.testing.assert_array_equal(inits_of(m)["d"], (a + b) * 3)
    assert set(inits_of(m)) == {"d"}  # a, b and the Constant are gone


def test_fold_shape_subgraph_with_dynamic_batch():
    # Reshape(x, Concat([-1], Shape(x)[1:])) where only the static dims 1: are read
    m = model([h.make_node("Shape", ["x"], ["s"], name="shape"),
               h.make_node("Slice", ["s", "st", "en"], ["tail"], name="slice"),
               h.make_node("Concat", ["neg", "tail"], ["target"], axis=0, name="concat"),
               h.make_node("Reshape", ["x", "target"], ["y"], name="reshape")],
              [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 4, 5])],
              [h.make_tensor_value_info("y", T.FLOAT, None)],
              [init("st", np.array([1], np.int64)), init("en", np.array([4], np.int64)),
               init("neg", np.array([-1], np.int64))])
    report = fold_constants(m)
    assert [n.op_type for n in m.graph.node] == ["Reshape"]
    np.testing.assert_array_equal(inits_of(m)[m.graph.node[0].input[1]], [-1, 3, 4, 5])
    assert report.nodes_before == 4 and report.nodes_after == 1


def test_fold_gather_of_static_dim_and_size():
    m = model([h.make_node("Shape", ["x"], ["s"]), h.make_node("Gather", ["s", "i"], ["d"], axis=0),
               h.make_node("Unsqueeze", ["d", "ax"], ["du"]),
               h.make_node("Concat", ["du", "du"], ["shape2"], axis=0),
               h.make_node("Reshape", ["x", "shape2"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [6, 6])], [h.make_tensor_value_info("y", T.FLOAT, None)],
              [init("i", np.array(1, np.int64)), init("ax", np.array([0], np.int64))])
    fold_constants(m)
    # the static [6, 6] Reshape of a [6, 6] tensor is a no-op too
    assert len(m.graph.node) == 0 or [n.op_type for n in m.graph.node] == ["Reshape"]


def test_failing_kernel_is_reported_by_name_and_left_unfolded(log):
    m = model([h.make_node("DkTestBoom", ["a"], ["b"], name="boom_node", domain="dk.test"),
               h.make_node("Add", ["b", "a"], ["c"], name="after_boom"),
               h.make_node("DkTestTwice", ["a"], ["t"], name="twice", domain="dk.test"),
               h.make_node("Add", ["x", "c"], ["y0"], name="use1"),
               h.make_node("Add", ["y0", "t"], ["y"], name="use2")],
              [h.make_tensor_value_info("x", T.FLOAT, [3])], [h.make_tensor_value_info("y", T.FLOAT, [3])],
              [init("a", np.array([1, 2, 3], np.float32))], extra_opsets=[h.make_opsetid("dk.test", 1)])
    report = fold_constants(m)
    names = [n.name for n in m.graph.node]
    assert "boom_node" in names and "after_boom" in names and "twice" not in names
    np.testing.assert_array_equal(inits_of(m)["t"], [2, 4, 6])
    assert "boom_node" in report.failures and "boom on purpose" in report.failures["boom_node"]
    assert "boom_node" in log.getvalue()  # a warning names the node


def test_missing_importer_is_skipped_gracefully(log):
    m = model([h.make_node("NoSuchOpAnywhere", ["a"], ["b"], name="unknown_op", domain="dk.nowhere"),
               h.make_node("Neg", ["a"], ["n"], name="neg"),
               h.make_node("Add", ["b", "n"], ["c"], name="add"),
               h.make_node("Add", ["x", "c"], ["y"], name="use")],
              [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
              [init("a", np.array([1, 2], np.float32))], extra_opsets=[h.make_opsetid("dk.nowhere", 1)])
    report = fold_constants(m)
    assert [n.name for n in m.graph.node] == ["unknown_op", "add", "use"]
    np.testing.assert_array_equal(inits_of(m)["n"], [-1, -2])
    assert "unsupported op" in report.failures["unknown_op"]
    assert "add" not in report.failures  # only root causes are reported
    assert "unknown_op" in log.getvalue()


def test_size_threshold_keeps_large_results():
    nodes = [h.make_node("Tile", ["a", "r"], ["big"], name="tile"), h.make_node("Add", ["x", "big"], ["y"])]
    ins = [h.make_tensor_value_info("x", T.FLOAT, [100, 100])]
    outs = [h.make_tensor_value_info("y", T.FLOAT, [100, 100])]
    inits = [init("a", np.ones((1, 1), np.float32)), init("r", np.array([100, 100], np.int64))]
    small = model(nodes, ins, outs, inits)
    fold_constants(small, FoldOptions(size_threshold=1024))
    assert [n.name for n in small.graph.node][0] == "tile"
    big = model(nodes, ins, outs, inits)
    fold_constants(big)
    assert [n.op_type for n in big.graph.node] == ["Add"] and inits_of(big)["big"].shape == (100, 100)


def test_noops_removed_and_output_names_kept():
    m = model([h.make_node("Identity", ["x"], ["i"]), h.make_node("Dropout", ["i"], ["d"]),
               h.make_node("Cast", ["d"], ["c"], to=T.FLOAT), h.make_node("Relu", ["c"], ["r"], name="relu"),
               h.make_node("Mul", ["r", "one"], ["m"]), h.make_node("Identity", ["m"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
              [init("one", np.ones((3,), np.float32))])
    report = fold_constants(m)
    assert [n.name for n in m.graph.node] == ["relu"]
    assert list(m.graph.node[0].input) == ["x"] and list(m.graph.node[0].output) == ["y"]
    assert report.noops_removed == 5
    onnx.checker.check_model(m)


def test_random_ops_are_never_folded():
    m = model([h.make_node("RandomUniformLike", ["a"], ["r"]), h.make_node("Add", ["x", "r"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
              [init("a", np.zeros(2, np.float32))])
    fold_constants(m)
    assert [n.op_type for n in m.graph.node] == ["RandomUniformLike", "Add"]


# cleanup / toposort / shapes ------------------------------------------------------------------------------------
def test_cleanup_removes_dead_nodes_inputs_initializers():
    m = model([h.make_node("Relu", ["x"], ["y"]), h.make_node("Neg", ["u"], ["dead"]),
               h.make_node("Add", ["x", "w"], ["dead2"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2]), h.make_tensor_value_info("u", T.FLOAT, [2])],
              [h.make_tensor_value_info("y", T.FLOAT, [2])], [init("w", np.zeros(2, np.float32))])
    m.graph.value_info.append(h.make_tensor_value_info("dead", T.FLOAT, [2]))
    stats = cleanup_graph(m.graph)
    assert [n.op_type for n in m.graph.node] == ["Relu"]
    assert [i.name for i in m.graph.input] == ["x"] and len(m.graph.initializer) == 0
    assert (stats.nodes, stats.inputs, stats.initializers, stats.value_info) == (2, 1, 1, 1)


def test_toposort_and_cycle():
    m = model([h.make_node("Neg", ["b"], ["y"], name="second"), h.make_node("Relu", ["x"], ["b"], name="first")],
              [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])])
    assert toposort_graph(m.graph)
    assert [n.name for n in m.graph.node] == ["first", "second"]
    onnx.checker.check_model(m)
    cyc = model([h.make_node("Neg", ["b"], ["a"], name="n1"), h.make_node("Neg", ["a"], ["b"], name="n2")],
                [], [h.make_tensor_value_info("a", T.FLOAT, [2])])
    with pytest.raises(ModelError, match="cycle"):
        toposort_graph(cyc.graph)


def test_override_shapes_and_symbolic_inference():
    m = model([h.make_node("Relu", ["x"], ["r"]), h.make_node("Transpose", ["r"], ["y"], perm=[1, 0])],
              [h.make_tensor_value_info("x", T.FLOAT, ["batch", 7])], [h.make_tensor_value_info("y", T.FLOAT, None)])
    infer_shapes(m)
    vi = {v.name: v for v in m.graph.value_info}
    assert vi["r"].type.tensor_type.shape.dim[0].dim_param == "batch"
    assert m.graph.output[0].type.tensor_type.shape.dim[1].dim_param == "batch"
    override_input_shapes(m, parse_shape_spec(["x:[3,7]"]))
    infer_shapes(m)
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [7, 3]
    assert parse_shape_spec("a:[1,3,224,224] b:[N,16]") == {"a": [1, 3, 224, 224], "b": ["N", 16]}
    with pytest.raises(UsageError):
        override_input_shapes(m, {"nope": [1]})


# extract / insert ----------------------------------------------------------------------------------------------
def _chain():
    return model([h.make_node("Relu", ["x"], ["a"], name="relu"), h.make_node("Neg", ["a"], ["b"], name="neg"),
                  h.make_node("Add", ["b", "w"], ["c"], name="add"), h.make_node("Exp", ["c"], ["y"], name="exp")],
                 [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, [2, 3])],
                 [init("w", np.ones(3, np.float32))])


def test_extract_infers_auto_shapes_and_dtypes():
    out = extract_model(_chain(), parse_input_specs(["a:auto:auto"]), parse_output_specs(["c:auto"]))
    assert [n.name for n in out.graph.node] == ["neg", "add"]
    assert out.graph.input[0].name == "a" and out.graph.input[0].type.tensor_type.elem_type == T.FLOAT
    assert [d.dim_value for d in out.graph.input[0].type.tensor_type.shape.dim] == [2, 3]
    onnx.checker.check_model(out)
    explicit = extract_model(_chain(), parse_input_specs(["b:[5,3]:float32"]), parse_output_specs(["c:float32"]))
    assert [d.dim_value for d in explicit.graph.input[0].type.tensor_type.shape.dim] == [5, 3]
    with pytest.raises(UsageError, match="not in the model"):
        extract_model(_chain(), parse_input_specs(["zz:auto"]), None)


def test_insert_replaces_subgraph():
    m = _chain()
    removed = insert_node(m, ["a"], ["c"], "Sigmoid", name="sig")
    assert removed == 2
    assert [n.name for n in m.graph.node] == ["relu", "sig", "exp"]
    onnx.checker.check_model(m)
    assert parse_attrs(["alpha=0.5", "perm=[0,2,1]", "mode=linear"]) == {"alpha": 0.5, "perm": [0, 2, 1],
                                                                        "mode": "linear"}


# CLI ----------------------------------------------------------------------------------------------------------
def test_cli_sanitize_external_data_roundtrip(tmp_path):
    w = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    m = model([h.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]), h.make_node("MatMul", ["x", "wt"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [1, 64])], [h.make_tensor_value_info("y", T.FLOAT, [1, 64])],
              [init("w", w)])
    src = tmp_path / "in.onnx"
    onnx.save_model(m, str(src), save_as_external_data=True, location="in.weights", size_threshold=0)
    out = tmp_path / "out" / "o.onnx"
    rc = cli(["surgeon", "sanitize", str(src), "-o", str(out), "--fold-constants", "--save-external-data", "-q"])
    assert rc == 0 and (tmp_path / "out" / "o.onnx.data").exists()
    back = onnx.load(str(out))
    assert [n.op_type for n in back.graph.node] == ["MatMul"]
    np.testing.assert_array_equal(inits_of(back)["wt"], w.T)


def test_cli_bad_input_exits_2(tmp_path, capsys):
    assert cli(["surgeon", "sanitize", str(tmp_path / "missing.onnx"), "-o", str(tmp_path / "o.onnx")]) == 2
    assert "not found" in capsys.readouterr().err
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model at all")
    assert cli(["surgeon", "sanitize", str(bad), "-o", str(tmp_path / "o.onnx"), "--cleanup"]) == 2
    src = tmp_path / "m.onnx"
    onnx.save(_chain(), str(src))
    assert cli(["surgeon", "sanitize", str(src), "-o", str(tmp_path / "o.onnx"),
                "--override-input-shapes", "x:[1,2"]) == 2


def test_cli_extract_insert(tmp_path):
    src = tmp_path / "m.onnx"
    onnx.save(_chain(), str(src))
    assert cli(["surgeon", "extract", str(src), "-o", str(tmp_path / "e.onnx"), "--inputs", "a:auto",
                "--outputs", "b:auto", "-q"]) == 0
    assert [n.name for n in onnx.load(str(tmp_path / "e.onnx")).graph.node] == ["neg"]
    assert cli(["surgeon", "insert", str(src), "-o", str(tmp_path / "i.onnx"), "--inputs", "x", "--outputs", "b",
                "--op", "LeakyRelu", "--attrs", "alpha=0.2", "-q"]) == 0
    ins = onnx.load(str(tmp_path / "i.onnx"))
    assert [n.op_type for n in ins.graph.node] == ["LeakyRelu", "Add", "Exp"]
    assert ins.graph.node[0].attribute[0].f == pytest.approx(0.2)


def test_if_with_constant_condition_is_inlined():
    then_g = h.make_graph([h.make_node("Add", ["x", "k"], ["t_out"], name="then_add")], "then", [],
                          [h.make_tensor_value_info("t_out", T.FLOAT, [2])], [init("k", np.ones(2, np.float32))])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e_out"], name="else_neg")], "else", [],
                          [h.make_tensor_value_info("e_out", T.FLOAT, [2])])
    m = model([h.make_node("Equal", ["a", "b"], ["cond"], name="eq"),
               h.make_node("If", ["cond"], ["r"], name="if", then_branch=then_g, else_branch=else_g),
               h.make_node("Relu", ["r"], ["y"], name="relu")],
              [h.make_tensor_value_info("x", T.FLOAT, [2])], [h.make_tensor_value_info("y", T.FLOAT, [2])],
              [init("a", np.array(3, np.int64)), init("b", np.array(3, np.int64))])
    fold_constants(m)
    assert [n.name for n in m.graph.node] == ["then_add", "relu"]
    assert list(m.graph.node[0].output) == ["r"]
    np.testing.assert_array_equal(inits_of(m)["k"], [1, 1])
    onnx.checker.check_model(m)


def test_inconsistent_inferred_shapes_are_not_written(log):
    from debugkit.surgeon.sanitize import SanitizeOptions, sanitize
    from debugkit.surgeon.shapes import inconsistency
    m = model([h.make_node("Relu", ["x"], ["r"]), h.make_node("MatMul", ["r", "w"], ["y"])],
              [h.make_tensor_value_info("x", T.FLOAT, [2, 3])], [h.make_tensor_value_info("y", T.FLOAT, None)],
              [init("w", np.ones((3, 4), np.float32))])
    m.graph.value_info.append(h.make_tensor_value_info("r", T.FLOAT, [2, 5]))  # wrong on purpose
    sanitize(m, SanitizeOptions(cleanup=True))
    assert inconsistency(m) is None and "inconsistent" in log.getvalue()


def test_fold_summary_counts_add_up_to_the_node_totals(tmp_path, capsys):
    """Papercut: 'original N, after M | F folded, K no-ops removed, D dead removed' with N - M == F + K + D."""
    import onnx as _onnx
    from onnx import TensorProto as _T
    from onnx import helper as _h

    from debugkit.cli.main import main as _main
    from debugkit.surgeon.fold import fold_constants
    nodes = [_h.make_node("Constant", [], ["c"], value=_h.make_tensor("v", _T.FLOAT, [2], [1.0, 2.0])),
             _h.make_node("Mul", ["c", "c"], ["c2"], name="const_mul"),          # folds
             _h.make_node("Add", ["x", "c2"], ["a"], name="add"),
             _h.make_node("Identity", ["a"], ["y"], name="noop"),                # no-op
             _h.make_node("Relu", ["x"], ["unused"], name="dead")]               # dead
    g = _h.make_graph(nodes, "g", [_h.make_tensor_value_info("x", _T.FLOAT, [2])],
                      [_h.make_tensor_value_info("y", _T.FLOAT, [2])])
    m = _h.make_model(g, opset_imports=[_h.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    _onnx.save(m, path)
    r = fold_constants(_onnx.load(path))
    assert r.nodes_before == 5 and r.nodes_after == 1
    assert r.nodes_before - r.nodes_after == r.folded + r.noops_removed + r.dead_removed
    assert (r.folded, r.noops_removed, r.dead_removed) == (2, 1, 1)
    code = _main(["surgeon", "sanitize", str(path), "-o", str(tmp_path / "o.onnx"), "--fold-constants", "-v"])
    assert code == 0
    err = capsys.readouterr().err
    assert "original: 5, after folding: 1 | 2 folded, 1 no-ops removed, 1 dead removed" in err
