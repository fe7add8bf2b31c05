"""How many times a CPU build runs the graph (docs/architecture.md, "How many times a build runs the graph"):
the timing run, plus shape folding's run when a Shape layer reads a tensor whose shape needs it; constant folding
runs only the layers that read constants, and nothing when there are none."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine import BuilderConfig
from backends.engine.build import build_plan_from_onnx
from backends.engine.runtime import executor


def _model(with_shape):
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"])]
    nodes += ([helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Reshape", ["r", "s"], ["y"])]
              if with_shape else [helper.make_node("Identity", ["r"], ["y"])])
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("with_shape, runs", [(False, 1), (True, 2)])
def test_a_cpu_build_runs_the_graph_as_few_times_as_it_needs(monkeypatch, with_shape, runs):
    sizes = []
    real = executor.GraphExecutor.run

    def run(self, feeds, *a, **k):
        sizes.append(len(self.graph.nodes))
        return real(self, feeds, *a, **k)
    monkeypatch.setattr(executor.GraphExecutor, "run", run)
    build_plan_from_onnx(_model(with_shape).SerializeToString(), config=BuilderConfig())
    assert len(sizes) == runs, sizes
