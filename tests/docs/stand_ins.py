"""Small models the docs' examples name as stand-ins for the reader's own (written into each example's scratch
directory by test_markdown_examples.py). Each has the tensor names the docs use."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits, name):
    g = helper.make_graph(nodes, name, inputs, outputs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="debugkit-docs")
    m.ir_version = 8
    return m


def tiny_cnn() -> onnx.ModelProto:
    """`model.onnx`: x [N,3,224,224] -> conv/relu -> layer2 conv/relu -> pool -> fc -> logits [N,10], with the
    names of a torchvision ResNet export ('/layer2/conv1/Conv_output_0', '/layer2/Relu_output_0')."""
    rng = np.random.default_rng(0)
    w = lambda *s: (rng.standard_normal(s) * 0.2).astype(np.float32)  # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "conv1.w", "conv1.b"], ["/conv1/Conv_output_0"], name="/conv1/Conv",
                              kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["/conv1/Conv_output_0"], ["/relu/Relu_output_0"], name="/relu/Relu"),
             helper.make_node("MaxPool", ["/relu/Relu_output_0"], ["/maxpool/MaxPool_output_0"], name="/maxpool/MaxPool",
                              kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["/maxpool/MaxPool_output_0", "l2.w", "l2.b"], ["/layer2/conv1/Conv_output_0"],
                              name="/layer2/conv1/Conv", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["/layer2/conv1/Conv_output_0"], ["/layer2/Relu_output_0"], name="/layer2/Relu"),
             helper.make_node("GlobalAveragePool", ["/layer2/Relu_output_0"], ["/avgpool/GlobalAveragePool_output_0"],
                              name="/avgpool/GlobalAveragePool"),
             helper.make_node("Flatten", ["/avgpool/GlobalAveragePool_output_0"], ["/Flatten_output_0"],
                              name="/Flatten"),
             helper.make_node("Gemm", ["/Flatten_output_0", "fc.w", "fc.b"], ["logits"], name="/fc/Gemm", transB=1)]
    inits = {"conv1.w": w(4, 3, 3, 3), "conv1.b": w(4), "l2.w": w(4, 4, 3, 3), "l2.b": w(4), "fc.w": w(10, 4),
             "fc.b": w(10)}
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 224, 224])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits, "tiny_cnn")


def lint_demo() -> onnx.ModelProto:
    """`bad.onnx`: docs/check.md's model with deliberate problems (empty graph name, two nodes named 'dup', an
    input nobody produces, an unknown op, an output nobody produces, an unused input, a dead node, a MatMul of
    incompatible shapes)."""
    nodes = [helper.make_node("MatMul", ["A", "B"], ["C"], name="MatMul_3"),
             helper.make_node("Add", ["C", "Z"], ["D"], name="dup"),
             helper.make_node("Relu", ["D"], ["E"], name="dup"),
             helper.make_node("FooBar", ["E"], ["F"], name="foo"),
             helper.make_node("Relu", ["E"], ["G"], name="dead")]
    g = helper.make_graph(nodes, "", [helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 3]),
                                      helper.make_tensor_value_info("B", TensorProto.FLOAT, [4, 5]),
                                      helper.make_tensor_value_info("U", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("F", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("Q", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


STAND_INS = {"model.onnx": tiny_cnn, "bad.onnx": lint_demo}


def write_stand_ins(directory) -> list[str]:
    import os
    written = []
    for name, make in STAND_INS.items():
        path = os.path.join(directory, name)
        onnx.save(make(), path)
        written.append(path)
    return written
