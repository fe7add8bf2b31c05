"""A layer's requested precision is what it computes, stores and prepares weights in, on every device: an --fp16
engine whose every layer is asked to run FP32 equals the FP32 engine (bit for bit on the CPU, within FP32 tolerance
on the GPU), on a model whose planted convolutions overflow FP16 (tools/make_fp16_sensitive.py). The layers a pass
adds for a layer (the NHWC transposes around a convolution) carry its request."""
import importlib.util
import os

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine import BuilderConfig
from backends.engine.build import build_plan_from_onnx
from backends.engine.builder import BuilderFlag
from backends.engine.builder.precision_spec import parse_layer_precisions
from backends.engine.runtime import Runtime

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")   # the FP16 overflow is the point


def _plant_tool():
    spec = importlib.util.spec_from_file_location("make_fp16_sensitive",
                                                  os.path.join(ROOT, "tools", "make_fp16_sensitive.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory):
    """conv1 → relu → conv2 → relu → maxpool → conv3, conv1 and conv2 planted (weights and outputs past 65504)."""
    from backends.runners import OnnxrtRunner
    rng = np.random.default_rng(0)

    def init(name, shape):
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w3", "b3"], ["y"], name="conv3")]
    graph = helper.make_graph(nodes, "overflowing", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [init("w1", [8, 3, 3, 3]), init("b1", [8]), init("w2", [8, 8, 3, 3]),
                               init("b2", [8]), init("w3", [4, 8, 1, 1]), init("b3", [4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": rng.random((1, 3, 16, 16), dtype=np.float32)}
    with OnnxrtRunner(model, mark=["c1", "c2"]) as r:
        values = r.infer(feeds, taps=["c1", "c2"])
    answer = _plant_tool().plant(model, ["conv1", "conv2"], values)
    assert all(a["peak_scaled"] > 65504 for a in answer.values())
    path = tmp_path_factory.mktemp("overflowing") / "overflowing.onnx"
    import onnx
    onnx.save(model, str(path))
    return str(path), feeds


def _engine(path, device, *, fp16, nhwc=None):
    config = BuilderConfig()
    if device == "cpu":   # bit for bit needs the same tactics in both engines: chosen by rule, not by a timing race
        config.set_flag("enable_tactic_heuristic")
    if fp16:
        config.set_flag(BuilderFlag.FP16)
        config.set_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
        config.layer_precisions = parse_layer_precisions([("*", "fp32")])
    if nhwc is not None:
        config.prefer_nhwc = nhwc
    return Runtime().deserialize_engine(build_plan_from_onnx(path, device=device, config=config))


def _run(engine, feeds):
    return np.asarray(engine.create_execution_context().execute(feeds)["y"])


def _stored_fp16(engine):
    return [f"{n.name} ({n.kind}, {n.precision})" for n in engine.graph.nodes
            if n.kind != "Constant" and (n.precision != "float32" or "float16" in (n.meta.get("output_types") or []))]


@pytest.mark.parametrize("nhwc", [None, True], ids=["rule-layout", "nhwc"])
def test_cpu_all_fp32_request_under_fp16_is_the_fp32_engine_bit_for_bit(overflowing, nhwc):
    path, feeds = overflowing
    fp32 = _run(_engine(path, "cpu", fp16=False, nhwc=nhwc), feeds)
    asked = _engine(path, "cpu", fp16=True, nhwc=nhwc)
    assert _stored_fp16(asked) == []
    got = _run(asked, feeds)
    assert np.isfinite(fp32).all() and np.array_equal(got, fp32)


def test_cpu_fp16_without_the_request_overflows(overflowing):
    """The model is a real test: plain --fp16 overflows it."""
    path, feeds = overflowing
    config = BuilderConfig()
    config.set_flag(BuilderFlag.FP16)
    out = _run(Runtime().deserialize_engine(build_plan_from_onnx(path, config=config)), feeds)
    assert not np.isfinite(out).all()


@pytest.mark.cuda
def test_cuda_all_fp32_request_under_fp16_is_the_fp32_engine(overflowing):
    path, feeds = overflowing
    fp32 = _run(_engine(path, "cuda", fp16=False), feeds)
    asked = _engine(path, "cuda", fp16=True)
    assert _stored_fp16(asked) == []
    got = _run(asked, feeds)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, fp32, rtol=1e-4, atol=1e-4 * float(np.abs(fp32).max()))
