"""On the GPU the builder chooses precision and NHWC layout by timing (builder/timed_choice.py): every candidate
layer records what was timed, its choice is the fastest of those, and a rebuild with the timing cache makes the
same choices without timing anything. Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine.builder.config import TimingCache
from backends.engine.builder.timed_choice import pick, pick_precision

pytestmark = pytest.mark.cuda


def _convnet():
    rng = np.random.default_rng(21)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 32, 3, 3)).astype(np.float32) * 0.05, "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05, "w2")
    w3 = numpy_helper.from_array(rng.standard_normal((128, 64, 1, 1)).astype(np.float32) * 0.1, "w3")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p", "w3"], ["y"], name="conv3")]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 32, 56, 56])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 128, 28, 28])], [w1, w2, w3])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _mlp():
    rng = np.random.default_rng(22)
    w1 = numpy_helper.from_array(rng.standard_normal((256, 1024)).astype(np.float32) * 0.05, "w1")
    b1 = numpy_helper.from_array(rng.standard_normal(1024).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((1024, 256)).astype(np.float32) * 0.05, "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="fc1"),
             helper.make_node("Add", ["h", "b1"], ["hb"], name="bias1"),
             helper.make_node("Relu", ["hb"], ["r"], name="relu1"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="fc2")]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 256])], [w1, b1, w2])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _cos(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _engine_layers(model, tmp_path, x, cache=None, reference=True):
    """The GPU engine's inspector layers, its output and the CPU FP32 engine's; `log`: what the build said about
    timing layout and precision (verbose), for the assertion messages."""
    from backends.engine.builder import BuilderConfig, BuilderFlag
    from backends.runners import EngineRunner
    from native.logger import G_LOGGER
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.FP16)          # (a runner given a config takes its flags from it)
    config.timing_cache = cache
    name = model.graph.output[0].name
    log, real = [], G_LOGGER.log

    def keep(severity, message):
        if any(w in str(message) for w in ("timed", "timing", "layout:", "precision:")):
            log.append(str(message)[:400])
        return real(severity, message) if severity >= G_LOGGER.min_severity else None
    G_LOGGER.log = keep
    try:
        with EngineRunner(str(path), device="cuda", config=config) as gpu:
            y = gpu.infer({"x": x})[name]
            layers = gpu.engine.create_engine_inspector().layers()
    finally:
        del G_LOGGER.log
    ref = None
    if reference:
        with EngineRunner(str(path)) as cpu:
            ref = cpu.infer({"x": x})[name]
    return layers, y, ref, log


def _check_timed_precision(layer, log):
    ms = layer["PrecisionTimings_ms"]
    assert ms and "float32" in ms and "float16" in ms, (layer["Name"], layer["Precision"], log)
    ordered = {p: (False, ms[p]) for p in ("float16", "bfloat16", "float32") if p in ms}
    assert layer["Precision"] == pick_precision(ordered), (layer["Name"], ms, log)


def test_convnet_precision_and_layout_come_from_timing(tmp_path):
    x = np.random.default_rng(23).standard_normal((8, 32, 56, 56)).astype(np.float32)
    layers, y, ref, log = _engine_layers(_convnet(), tmp_path, x)
    convs = [l for l in layers if l["LayerType"] in ("Convolution", "ConvolutionNHWC")]
    assert len(convs) == 3, [l["LayerType"] for l in layers]
    for c in convs:
        _check_timed_precision(c, log)
        lay = c["LayoutTimings_ms"]
        assert lay and lay["nhwc"] > 0 and lay["nchw"] > 0, (c["Name"], lay, log)
        want = pick({"nhwc": (False, lay["nhwc"]), "nchw": (False, lay["nchw"])})
        assert (c["LayerType"] == "ConvolutionNHWC") == (want == "nhwc"), (c["Name"], lay, log)
    assert _cos(y, ref) > 0.999


def test_mlp_precision_comes_from_timing(tmp_path):
    x = np.random.default_rng(24).standard_normal((512, 256)).astype(np.float32)
    layers, y, ref, log = _engine_layers(_mlp(), tmp_path, x)
    mms = [l for l in layers if l["LayerType"] == "MatrixMultiply"]
    assert len(mms) == 2, [l["LayerType"] for l in layers]
    for m in mms:
        _check_timed_precision(m, log)
    assert _cos(y, ref) > 0.999


def test_rebuild_with_the_timing_cache_times_nothing_and_chooses_the_same(tmp_path, monkeypatch):
    from backends.engine.builder import tactic_selection
    x = np.random.default_rng(25).standard_normal((8, 32, 56, 56)).astype(np.float32)
    cache = TimingCache()
    first, _, _, _ = _engine_layers(_convnet(), tmp_path, x, cache, reference=False)

    def no_timing(node, cands, inputs, *a, **k):
        key = tactic_selection._key(node, inputs, "cuda")
        raise AssertionError(f"timed layer '{node.name}' ({node.kind}, {node.precision}, tactics "
                             f"{[t.name for t in cands]}) although the timing cache holds every measurement; the "
                             f"cache holds for its key: {cache.entries.get(key)}; {len(cache.entries)} entries")
    monkeypatch.setattr(tactic_selection, "time_candidates", no_timing)
    again, _, _, log = _engine_layers(_convnet(), tmp_path, x, cache, reference=False)
    key = lambda ls: [(l["Name"], l["LayerType"], l["Precision"], l["TacticName"]) for l in ls]   # noqa: E731
    assert key(again) == key(first), log


def test_precision_by_timing_off_gives_every_layer_the_lowest_enabled_precision(tmp_path):
    """What debug precision builds with: no layer moves to FP32 because FP32 timed faster (the search's answer
    must not hang on timing), and nothing is timed for precision."""
    from backends.engine.builder import BuilderConfig, BuilderFlag
    from backends.runners import EngineRunner
    path = tmp_path / "m.onnx"
    onnx.save(_mlp(), path)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.FP16)
    config.precision_by_timing = False
    with EngineRunner(str(path), device="cuda", config=config) as r:
        r.infer({"x": np.random.default_rng(3).standard_normal((512, 256)).astype(np.float32)})
        layers = r.engine.create_engine_inspector().layers()
    mms = [l for l in layers if l["LayerType"] == "MatrixMultiply"]
    assert len(mms) == 2 and all(m["Precision"] == "float16" and not m["PrecisionTimings_ms"] for m in mms), mms


def test_tf32_convolutions_run_nhwc_on_cudnn_with_tf32_math(tmp_path):
    """A --tf32 build times its layout in TF32 (passes/layout_timing.py): the convolutions run NHWC with TF32 math
    (cuDNN plans, or cuBLAS's TF32 GEMM behind im2col: which one wins each layer's timing is the GPU's to say; on
    an H200 under -n 8 one of the three convolutions went to im2col-cublas-nhwc), and the engine stays close to
    FP32 (TF32 keeps a 10-bit mantissa)."""
    from backends.engine.builder import BuilderConfig, BuilderFlag
    from backends.runners import EngineRunner
    path = tmp_path / "m.onnx"
    onnx.save(_convnet(), path)
    x = np.random.default_rng(5).standard_normal((8, 32, 56, 56)).astype(np.float32)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.TF32)
    with EngineRunner(str(path), device="cuda", config=config) as r:
        y = r.infer({"x": x})["y"]
        convs = [n for n in r.engine.graph.nodes if n.kind.startswith("Convolution")]
    with EngineRunner(str(path), device="cpu") as ref:
        y_ref = ref.infer({"x": x})["y"]
    assert convs and all(n.meta.get("math") == "tf32" and n.precision == "float32" for n in convs)
    tf32_tactics = [n.tactic_name or "" for n in convs]   # tactics that compute with op.math == "tf32"
    assert all(t.startswith("cudnn-plan-") or t == "im2col-cublas-nhwc" for t in tf32_tactics), tf32_tactics
    assert sum(n.kind == "ConvolutionNHWC" for n in convs) >= 2, [(n.name, n.kind, n.meta.get("layout_ms"))
                                                                  for n in convs]
    assert _cos(y, y_ref) > 0.99999
