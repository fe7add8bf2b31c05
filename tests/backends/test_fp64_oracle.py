"""The fp64 oracle computes in float64 for real: per op family it matches onnx.reference on the float64 model to
~1e-12 (a kernel that rounds through float32 would be off by ~1e-7)."""
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.runners.oracle import Fp64OracleRunner, to_float64

RNG = np.random.default_rng(0)


def _model(nodes, inputs, output_shape, inits=(), out="y"):
    g = helper.make_graph(nodes, "t", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, output_shape)],
                          [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def w(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "conv": ([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])], [("x", [1, 8, 10, 10])],
             [1, 16, 10, 10], [("w", w(16, 8, 3, 3)), ("b", w(16))]),
    "conv_depthwise": ([helper.make_node("Conv", ["x", "w"], ["y"], group=8, pads=[1, 1, 1, 1])],
                       [("x", [1, 8, 10, 10])], [1, 8, 10, 10], [("w", w(8, 1, 3, 3))]),
    "conv_1x1": ([helper.make_node("Conv", ["x", "w"], ["y"])], [("x", [1, 8, 6, 6])], [1, 16, 6, 6],
                 [("w", w(16, 8, 1, 1))]),
    "conv_transpose": ([helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2])],
                       [("x", [1, 4, 5, 5])], [1, 6, 11, 11], [("w", w(4, 6, 3, 3))]),
    "matmul": ([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [2, 5, 32])], [2, 5, 24], [("w", w(32, 24))]),
    "gemm": ([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], [("x", [4, 32])], [4, 24],
             [("w", w(24, 32)), ("b", w(24))]),
    "layernorm": ([helper.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1)], [("x", [2, 5, 32])],
                  [2, 5, 32], [("g", w(32)), ("b", w(32))]),
    "softmax": ([helper.make_node("Softmax", ["x"], ["y"], axis=-1)], [("x", [3, 40])], [3, 40], []),
    "batchnorm": ([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
                  [("x", [1, 4, 5, 5])], [1, 4, 5, 5],
                  [("s", w(4)), ("b", w(4)), ("m", w(4)), ("v", np.abs(w(4)) + 0.5)]),
    "avgpool": ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2])],
                [("x", [1, 4, 9, 9])], [1, 4, 4, 4], []),
    "globalavgpool": ([helper.make_node("GlobalAveragePool", ["x"], ["y"])], [("x", [1, 4, 9, 9])], [1, 4, 1, 1],
                      []),
    "reducemean": ([helper.make_node("ReduceMean", ["x"], ["y"], axes=[1], keepdims=0)], [("x", [3, 50])], [3], []),
    "erf_gelu": ([helper.make_node("Erf", ["x"], ["e"]), helper.make_node("Mul", ["x", "e"], ["y"])],
                 [("x", [4, 30])], [4, 30], []),
    "sigmoid_tanh_exp": ([helper.make_node("Sigmoid", ["x"], ["s"]), helper.make_node("Tanh", ["s"], ["t"]),
                          helper.make_node("Exp", ["t"], ["y"])], [("x", [4, 30])], [4, 30], []),
    "div_sqrt_pow": ([helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Sqrt", ["a"], ["s"]),
                      helper.make_node("Pow", ["s", "p"], ["q"]), helper.make_node("Div", ["q", "d"], ["y"])],
                     [("x", [4, 30])], [4, 30], [("p", np.float32(1.7)), ("d", np.float32(3.0))]),
    "resize": ([helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="linear")], [("x", [1, 2, 5, 5])],
               [1, 2, 10, 10], [("sc", np.array([1, 1, 2, 2], np.float32))]),
    "clip_hardswish": ([helper.make_node("HardSwish", ["x"], ["h"]), helper.make_node("Clip", ["h", "lo", "hi"],
                                                                                       ["y"])],
                       [("x", [4, 30])], [4, 30], [("lo", np.float32(-0.2)), ("hi", np.float32(2.0))]),
}


# onnx.reference rounds these through float32 (Erf's np.vectorize(otypes="f"), HardSwish's float32 alpha): exact
# float64 formulas instead
EXACT = {"erf_gelu": lambda x: x * np.vectorize(math.erf)(x),
         "clip_hardswish": lambda x: np.clip(x * np.clip(x / 6 + 0.5, 0, 1), np.float64(np.float32(-0.2)), 2.0)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_oracle_computes_in_float64(case):
    from onnx.reference import ReferenceEvaluator
    nodes, inputs, out_shape, inits = CASES[case]
    model = _model(nodes, inputs, out_shape, inits)
    feeds = {n: RNG.standard_normal(s).astype(np.float32) for n, s in inputs}
    wide = {k: v.astype(np.float64) for k, v in feeds.items()}
    ref = EXACT[case](*wide.values()) if case in EXACT else ReferenceEvaluator(to_float64(model)).run(None, wide)[0]
    with Fp64OracleRunner(model, shapes={k: v.shape for k, v in feeds.items()}) as r:
        got = r.infer(feeds)["y"]
    assert got.dtype == np.float64
    err = np.max(np.abs(got - ref)) / max(np.max(np.abs(ref)), 1e-30)
    assert err < 1e-11, f"{case}: relative error {err:.3g} vs a float64 reference (float32 rounding is ~1e-7)"


def test_to_float64_rewrites_constants_casts_and_types():
    nodes = [helper.make_node("Constant", [], ["c"], value_float=0.5),
             helper.make_node("Cast", ["x"], ["xc"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["xc", "c"], ["y"])]
    m = to_float64(_model(nodes, [("x", [2])], [2]))
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert m.graph.output[0].type.tensor_type.elem_type == TensorProto.DOUBLE
    assert m.graph.node[0].attribute[0].t.data_type == TensorProto.DOUBLE
    assert m.graph.node[1].attribute[0].i == TensorProto.DOUBLE
    onnx.checker.check_model(m, full_check=True)


class _Shifted:
    """A runner whose outputs are another runner's plus an error (an engine with a wrong kernel)."""

    def __init__(self, inner, name, delta):
        self.inner, self.name, self.delta = inner, name, delta

    def observable_tensors(self):
        return self.inner.observable_tensors()

    def infer(self, feeds, taps=None):
        out = self.inner.infer(feeds, taps=taps)
        return {k: v + np.float32(self.delta) if k == "y" else v for k, v in out.items()}


def test_oracle_report_names_the_wrong_side():
    from backends.runners import OnnxrtRunner
    from debugkit.debug.oracle import compare_with_oracle, render, verdict
    nodes, inputs, out_shape, inits = CASES["layernorm"]
    model = _model(nodes, inputs, out_shape, inits)
    feeds = {"x": RNG.standard_normal((2, 5, 32)).astype(np.float32)}
    with OnnxrtRunner(model) as ort, OnnxrtRunner(model) as inner:
        rows = compare_with_oracle(model, [_Shifted(inner, "engine-runner", 3e-2), ort], feeds)
    (row,) = rows["outputs"]
    assert row["errors"]["ONNX Runtime"] < 1e-5 and abs(row["errors"]["engine"] - 3e-2) < 1e-4
    assert row["verdict"] == "engine is the wrong side"
    assert "engine error vs oracle 0.03, ONNX Runtime error vs oracle" in render(rows)
    assert verdict({"engine": 1e-7, "ONNX Runtime": 2e-7}, 1.0) == "both agree with the oracle to float32 rounding"
    assert verdict({"engine": 1e-7, "ONNX Runtime": 5e-2}, 1.0) == "ONNX Runtime is the wrong side"


def test_run_reference_fp64_prints_the_oracle_section(tmp_path, capsys):
    from debugkit.cli.main import main
    nodes, inputs, out_shape, inits = CASES["gemm"]
    path = tmp_path / "g.onnx"
    onnx.save(_model(nodes, inputs, out_shape, inits), path)
    assert main(["run", str(path), "--engine", "--onnxrt", "--reference", "fp64"]) == 0
    out = capsys.readouterr().out
    assert "output y: engine error vs oracle" in out and "both agree with the oracle" in out
