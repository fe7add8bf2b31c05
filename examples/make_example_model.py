"""Builds examples/example.onnx: a small model that agrees in FP32 and overflows FP16 in exactly one layer.

x[1,8] → MatMul(w) → Add(b) → Relu → act[1,4] (130..234) → Mul(act, act) "square" (16900..54500) → ReduceSum
"reduce" → y[1,1] (68000..215000). Every tensor but y fits FP16 (max 65504); y does not. So, with inputs in [0, 1]
(the data loader's default range):
- `debugkit run examples/example.onnx --engine --onnxrt` passes (FP32);
- `... --fp16` fails: "reduce", an FP16 layer, sums in float32 but rounds its output (> 65504) to inf;
- `... --fp16 --mark-all` names the ONNX node "reduce" as the first divergence (its input still agrees within FP16
  rounding);
- `... --fp16 --layer-precisions reduce:fp32` passes: "reduce" reads the FP16 squares (reformatted to FP32) and
  computes and stores y in FP32, within the default tolerances of FP32 outputs (rtol 1e-3).
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))


def make_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.uniform(11.0, 14.0, (8, 4)).astype(np.float32)      # x in [0,1]^8 → x @ w in [0, ~100]
    b = rng.uniform(130.0, 131.0, (4,)).astype(np.float32)      # act in [130, ~231]: act² < 65504, 4 act² > 65504
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
