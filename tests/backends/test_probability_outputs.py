"""FP16 builds keep the layer computing a probability output (Sigmoid/Softmax/Exp) in FP32
(backends/engine/builder/passes/probability_outputs.py): the mechanism on a small model, the opt-out, user
constraints first, and the walk through data movement."""
import io

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine.build import parse_onnx
from backends.engine.builder import Builder, BuilderConfig, BuilderFlag
from backends.engine.builder.precision_spec import parse_layer_precisions
from backends.engine.runtime import Runtime
from native.logger import Logger

X = np.random.default_rng(1).uniform(0, 1, (1, 32, 24, 24)).astype(np.float32)


def _model(nodes, out_shape, extra_inits=(), out="p"):
    """x[1,32,24,24] → Relu 'pre' (an FP16 layer: the head reads FP16 values) → 1x1 Conv 'head' (32 → 2 channels,
    bias -16: logits around -16 +- 0.5, probabilities around 1e-7 as in a detector's background) → the given nodes
    → `out`."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((2, 32, 1, 1)) * 0.15).astype(np.float32)
    b = np.full(2, -16.0, np.float32)
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["xr"], name="pre"),
                           helper.make_node("Conv", ["xr", "w", "b"], ["z"], name="head"), *nodes], "tail",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(X.shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"), *extra_inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def sigmoid_model():
    return _model([helper.make_node("Sigmoid", ["z"], ["p"], name="sig")], [1, 2, 24, 24])


def build(model, *flags, layer_precisions=None, log=None):
    net, _ = parse_onnx(model.SerializeToString())
    cfg = BuilderConfig()
    for f in flags:
        cfg.set_flag(BuilderFlag(f))
    if layer_precisions:
        cfg.layer_precisions = parse_layer_precisions(layer_precisions)
    logger = Logger(Logger.VERBOSE, stream=log) if log is not None else None
    return Runtime().deserialize_engine(Builder(logger).build_serialized_network(net, cfg))


def run(engine):
    return engine.create_execution_context().execute({"x": X})


def precisions(engine):
    return {l["Name"]: l["Precision"] for l in engine.create_engine_inspector().layers()
            if l["LayerType"] not in ("Constant",)}


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_sigmoid_output_of_a_conv_keeps_its_layer_fp32_and_passes_cosine():
    ref = run(build(sigmoid_model()))["p"]
    assert ref.max() < 6.1e-5            # every probability is subnormal in FP16: the case the rule is for
    log = io.StringIO()
    eng = build(sigmoid_model(), "fp16", log=log)
    got = run(eng)["p"]
    assert cosine(got, ref) >= 0.999
    layer = "head + sig"                  # the Sigmoid fused into the conv's epilogue: that one layer runs FP32
    assert precisions(eng)[layer] == "float32"
    assert f"layer '{layer}' (Convolution) runs in float32, not float16: it computes network output 'p' through " \
           "SIGMOID" in log.getvalue()
    assert "--reduced-probability-outputs" in log.getvalue()
    # without the rule (the opt-out), the same build stores the probabilities in FP16 and fails the bar
    off = build(sigmoid_model(), "fp16", "reduced_probability_outputs")
    assert precisions(off)[layer] == "float16"
    old = run(off)["p"]
    assert cosine(old, ref) < 0.999
    # what breaks is the FP16 storage of the output itself: rounding the FP32 answer to FP16 breaks it as much
    assert cosine(ref.astype(np.float16), ref) < 0.999


def test_user_constraint_wins_over_the_rule():
    eng = build(sigmoid_model(), "fp16", "obey_precision_constraints", layer_precisions="sig:fp16,head:fp16")
    assert precisions(eng)["head + sig"] == "float16"
    ref = run(build(sigmoid_model()))["p"]
    assert cosine(run(eng)["p"], ref) < 0.999


def test_fp8_build_keeps_the_layer_fp32_too():
    """FP8's companion precision is FP16, whose storage is the problem: the rule applies to FP8 layers as well."""
    assert precisions(build(sigmoid_model(), "fp8"))["head + sig"] == "float32"
    assert precisions(build(sigmoid_model(), "fp8", "reduced_probability_outputs"))["head + sig"] == "fp8"


def test_bf16_and_fp32_builds_are_untouched():
    assert precisions(build(sigmoid_model(), "bf16"))["head + sig"] == "bfloat16"
    assert set(precisions(build(sigmoid_model())).values()) == {"float32"}


def test_declared_fp16_output_is_left_alone():
    net, _ = parse_onnx(sigmoid_model().SerializeToString())
    from backends.engine.dtypes import DataType
    net.get_output(0).dtype = DataType.HALF
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.FP16)
    eng = Runtime().deserialize_engine(Builder().build_serialized_network(net, cfg))
    assert precisions(eng)["head + sig"] == "float16"


def test_walks_through_data_movement_to_a_softmax():
    """Softmax over the channels, then a Transpose and a Concat with a non-probability tensor: the Softmax and the
    data movement carrying its values run FP32; the conv (not fused with the softmax) and the Relu side stay FP16."""
    nodes = [helper.make_node("Softmax", ["z"], ["s"], name="soft", axis=1),
             helper.make_node("Transpose", ["s"], ["t"], name="perm", perm=[0, 2, 3, 1]),
             helper.make_node("Relu", ["x"], ["r"], name="side"),
             helper.make_node("Transpose", ["r"], ["rt"], name="perm_side", perm=[0, 2, 3, 1]),
             helper.make_node("Concat", ["t", "rt"], ["p"], name="cat", axis=3)]
    eng = build(_model(nodes, [1, 24, 24, 34]), "fp16")
    pr = {k: v for k, v in precisions(eng).items() if not k.startswith("Reformat")}
    assert pr["soft"] == pr["perm"] == pr["cat"] == "float32"
    assert pr["head"] == pr["side"] == pr["perm_side"] == "float16"


def test_outputs_without_a_tail_function_are_untouched():
    nodes = [helper.make_node("Relu", ["z"], ["p"], name="act")]
    eng = build(_model(nodes, [1, 2, 24, 24]), "fp16")
    assert precisions(eng)["head + act"] == "float16"
    # a Sigmoid whose result is computed on further (not a probability output) is not the rule's business
    nodes = [helper.make_node("Sigmoid", ["z"], ["s"], name="sig"), helper.make_node("Mul", ["s", "z"], ["p"],
                                                                                      name="gate")]
    pr = precisions(build(_model(nodes, [1, 2, 24, 24]), "fp16"))
    assert "float32" not in {v for k, v in pr.items() if not k.startswith("Reformat")}


@pytest.mark.parametrize("argv, on", [(["--fp16"], True), (["--fp16", "--reduced-probability-outputs"], False)])
def test_cli_flag(argv, on):
    import argparse

    from debugkit.options import Options, add_groups
    p = argparse.ArgumentParser()
    add_groups(p, "build")
    cfg = Options.from_args(p.parse_args(argv)).builder_config()
    assert cfg.get_flag(BuilderFlag.REDUCED_PROBABILITY_OUTPUTS) is not on


def _build_with(model, device="cpu", nhwc=None, *flags):
    net, _ = parse_onnx(model.SerializeToString())
    cfg = BuilderConfig()
    cfg.device = device
    cfg.prefer_nhwc = nhwc
    for f in ("fp16",) + flags:
        cfg.set_flag(BuilderFlag(f))
    return Runtime().deserialize_engine(Builder().build_serialized_network(net, cfg))


def _layer_of(engine, onnx_node):
    return next(l for l in engine.create_engine_inspector().layers() if onnx_node in (l.get("SourceNodes") or ()))


def test_through_the_layout_pass_transposes():
    """The GPU's graph: the conv runs channels-last between transposes; the rule finds the fused conv + sigmoid
    through the output transpose and keeps both in FP32."""
    eng = _build_with(sigmoid_model(), "cpu", True)
    pr = precisions(eng)
    assert _layer_of(eng, "sig")["LayerType"] == "ConvolutionNHWC" and _layer_of(eng, "sig")["Precision"] == "float32"
    assert pr["head + sig_transpose_output_0"] == "float32" and pr["pre"] == "float16"
    assert cosine(run(eng)["p"], run(build(sigmoid_model()))["p"]) >= 0.999


@pytest.mark.cuda
def test_on_the_gpu():
    ref = run(build(sigmoid_model()))["p"]
    eng = _build_with(sigmoid_model(), "cuda")
    assert _layer_of(eng, "sig")["Precision"] == "float32"
    assert cosine(np.asarray(run(eng)["p"]), ref) >= 0.999
    off = _build_with(sigmoid_model(), "cuda", None, "reduced_probability_outputs")
    if _layer_of(off, "sig")["Precision"] == "float16":   # timing may pick FP32 for so small a layer
        assert cosine(np.asarray(run(off)["p"]), ref) < 0.999
