import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def chain_model(scale=1.0):
    """x[2,4] → MatMul(w) 'mm' → Add(b) 'add' → Relu 'relu' → Mul(c) 'scale' → y; `scale` perturbs w."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 4)).astype(np.float32) * np.float32(scale)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t_mm"], name="mm"),
             helper.make_node("Add", ["t_mm", "b"], ["t_add"], name="add"),
             helper.make_node("Relu", ["t_add"], ["t_relu"], name="relu"),
             helper.make_node("Mul", ["t_relu", "c"], ["y"], name="scale")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                          [numpy_helper.from_array(w, "w"),
                           numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b"),
                           numpy_helper.from_array(np.full(4, 2.0, np.float32), "c")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def chain(tmp_path):
    path = tmp_path / "chain.onnx"
    onnx.save(chain_model(), path)
    return str(path)


@pytest.fixture
def chain_bad(tmp_path):
    m = chain_model()
    w = numpy_helper.to_array(m.graph.initializer[0]).copy()
    w[:, 1] += 3.0                                  # the MatMul 'mm' now computes something else
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w, "w"))
    path = tmp_path / "chain_bad.onnx"
    onnx.save(m, path)
    return str(path)


@pytest.fixture
def cli(capsys):
    """Run `debugkit ARGS` in-process; returns (exit code, stdout, stderr)."""
    from debugkit.cli.main import main

    def run(*argv):
        code = main([str(a) for a in argv])
        out = capsys.readouterr()
        return code, out.out, out.err
    return run
