"""EngineRunner given both a BuilderConfig and flags applies the flags to that config (it used to drop them)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model():
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_flags_are_set_on_a_given_config():
    from backends.engine.builder import BuilderConfig
    from backends.engine.builder.config import BuilderFlag
    from backends.runners import EngineRunner
    config = BuilderConfig()
    with EngineRunner(_model(), flags=("fp16",), config=config) as r:
        precisions = {n.kind: n.precision for n in r.engine.graph.nodes}
    assert precisions["MatrixMultiply"] == "float16"
    assert config.get_flag(BuilderFlag.FP16)
    with EngineRunner(_model(), config=BuilderConfig()) as r:     # no flags: the config decides alone
        assert {n.kind: n.precision for n in r.engine.graph.nodes}["MatrixMultiply"] == "float32"
