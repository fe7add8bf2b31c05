"""Helpers for the fusion / layout tests: build small ONNX models, build engines with options, run them."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from backends.engine.runtime.executor import GraphExecutor

RNG = np.random.default_rng(0)


def const(name, arr):
    return numpy_helper.from_array(np.asarray(arr), name)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    return onnx.shape_inference.infer_shapes(m)


def build(m, fusion=True, nhwc=None, layout=True):
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    if not fusion:
        cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    if not layout:
        cfg.set_flag(BuilderFlag.DISABLE_LAYOUT)
    cfg.prefer_nhwc = nhwc
    cfg.algorithm_selector = _NoWinograd()
    return Builder().build_graph(net, cfg)


class _NoWinograd(AlgorithmSelector):
    """Fusion tests compare a fused engine with an unfused one elementwise at 1e-5: both must use exact-order
    convolutions. Winograd (~1e-5 off by design) would be picked by timing in one build and not the other."""

    def select_algorithms(self, context, choices):
        keep = [i for i, c in enumerate(choices) if "winograd" not in str(getattr(c, "implementation", c))]
        return keep or list(range(len(choices)))


def run(graph, feeds):
    env = GraphExecutor(graph).run(dict(feeds))
    return [env[n] for n in graph.output_names]


def fused_names(graph):
    return [n.fused_name for n in graph.nodes]


def kinds(graph):
    return [n.kind for n in graph.nodes if n.kind != "Constant"]
