"""Builds examples/example.onnx: a small model that agrees in FP32 and would overflow in FP16.

x[1,8] → MatMul(W) → Add(b) → Relu → Mul(self) → ReduceSum → y. The MatMul output is ~1e5, so its square (~1e10)
is far beyond FP16's maximum (65504) while FP32 computes it exactly enough: `debugkit run --engine --onnxrt`
passes, and an FP16 build (--fp16) shows where the overflow is born.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = (rng.uniform(0.5, 1.0, (8, 4)) * 2e4).astype(np.float32)   # x in [0,1] → x @ w ~ 5e4 .. 1e5
    b = rng.uniform(-1, 1, (4,)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="matmul"),
        helper.make_node("Add", ["mm", "b"], ["biased"], name="add_bias"),
        helper.make_node("Relu", ["biased"], ["act"], name="relu"),
        helper.make_node("Mul", ["act", "act"], ["squared"], name="square"),
        helper.make_node("ReduceSum", ["squared", "axes"], ["y"], name="reduce", keepdims=1),
    ]
    graph = helper.make_graph(
        nodes, "example",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
         numpy_helper.from_array(np.array([1], np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="debugkit-example")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


if __name__ == "__main__":
    path = os.path.join(HERE, "example.onnx")
    onnx.save(make_model(), path)
    print(f"wrote {path}")
