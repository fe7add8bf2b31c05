"""Small ONNX models for the tactic tests: a chain of 3x3 convolutions with distinct channel counts (so a faulty
tactic's condition picks exactly one layer) and a final MatMul."""
import numpy as np
from onnx import TensorProto, helper, numpy_helper

CHANNELS = [3, 16, 24, 32, 40, 48, 56, 64]


def conv_chain(channels=CHANNELS, hw=12, seed=0):
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    prev = "x"
    for i, (cin, cout) in enumerate(zip(channels[:-1], channels[1:])):
        w = (rng.standard_normal((cout, cin, 3, 3)) / np.sqrt(cin * 9)).astype(np.float32)
        b = (rng.standard_normal(cout) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                                      pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        prev = f"r{i}"
    nodes.append(helper.make_node("GlobalAveragePool", [prev], ["p"], name="pool"))
    nodes.append(helper.make_node("Flatten", ["p"], ["f"], name="flat"))
    wf = (rng.standard_normal((channels[-1], 10)) / np.sqrt(channels[-1])).astype(np.float32)
    inits.append(numpy_helper.from_array(wf, "wf"))
    nodes.append(helper.make_node("MatMul", ["f", "wf"], ["y"], name="fc"))
    graph = helper.make_graph(nodes, "conv_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels[0], hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def save(model, tmp_path, name="chain.onnx"):
    import onnx
    path = str(tmp_path / name)
    onnx.save(model, path)
    return path
