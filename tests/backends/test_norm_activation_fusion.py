"""A LayerNorm followed by Relu / Clip (openwakeword's classifier MLPs) is one layer on the CPU: the activation a
post-op of the Normalization, the same floats as the pair for every CPU Normalization tactic; what it does not
take (another activation, a second reader, a LayerNorm with its statistics outputs) stays two layers."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from tests.backends.fusion_helpers import const, kinds, model, run

RNG = np.random.default_rng(4)
X = RNG.standard_normal((3, 32)).astype(np.float32)


def _model(act="Relu", second_reader=False, stats=False):
    gamma = RNG.standard_normal(32).astype(np.float32)
    beta = RNG.standard_normal(32).astype(np.float32)
    ln_out = ["ln", "mean", "istd"] if stats else ["ln"]
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ln_out, name="ln", axis=-1)]
    if act == "Clip":
        nodes.append(helper.make_node("Clip", ["ln", "lo", "hi"], ["y"], name="act"))
    else:
        nodes.append(helper.make_node(act, ["ln"], ["y"], name="act"))
    outputs = ["y"]
    if second_reader:
        nodes.append(helper.make_node("Neg", ["ln"], ["z"], name="neg"))
        outputs.append("z")
    if stats:
        outputs += ["mean"]
    inits = [const("g", gamma), const("b", beta), const("lo", np.float32(-0.25)), const("hi", np.float32(0.5))]
    return model(nodes, [("x", [3, 32])], outputs, inits)


def _build(m, tactic, fusion=True):
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    if not fusion:
        cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    cfg.tactic_sources = {tactic}
    return Builder().build_graph(net, cfg)


@pytest.mark.parametrize("tactic", ["float64-stats", "welford", "lane-stats"])
@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_layernorm_and_activation_are_one_layer_with_the_pairs_floats(tactic, act):
    m = _model(act)
    fused, plain = _build(m, tactic), _build(m, tactic, fusion=False)
    assert kinds(fused) == ["Normalization"]
    node = fused.nodes[-1]
    assert node.tactic_name == tactic and node.params["post_ops"][0]["type"] == act.upper()
    assert node.source_nodes == ["ln", "act"]
    y, want = run(fused, {"x": X})[0], run(plain, {"x": X})[0]
    assert y.tobytes() == want.tobytes()
    assert (y >= 0).all() if act == "Relu" else (y.min() >= -0.25 and y.max() <= 0.5)


def test_lane_stats_relu_in_its_pass_keeps_the_pairs_floats_on_nan_and_signed_zero():
    """lane-stats applies a lone RELU inside its compiled row pass (with numba): NaN rows stay NaN, -0.0 becomes
    +0.0, exactly as the Relu layer after it does."""
    m = _model("Relu")
    fused, plain = _build(m, "lane-stats"), _build(m, "lane-stats", fusion=False)
    x = X.copy()
    x[0, 3] = np.nan
    x[1] = 0.0           # a constant row: (x - mean) * inv is 0 * inf -> NaN, or beta alone
    y, want = run(fused, {"x": x})[0], run(plain, {"x": x})[0]
    assert y.tobytes() == want.tobytes()


@pytest.mark.parametrize("kw", [{"act": "Sigmoid"}, {"second_reader": True}, {"stats": True}])
def test_what_the_fusion_leaves_as_two_layers(kw):
    assert kinds(_build(_model(**kw), "float64-stats")).count("Normalization") == 1
    assert len([k for k in kinds(_build(_model(**kw), "float64-stats")) if k != "Normalization"]) >= 1


def test_no_fusion_for_a_device_other_than_the_cpu(monkeypatch):
    from backends.engine.builder.passes import fusion_epilogue
    from native.logger import G_LOGGER
    net, _ = parse_onnx(_model())
    from backends.engine.builder.lower import lower
    graph = lower(net)

    class Cfg:
        device = type("D", (), {"name": "cuda"})()
    assert fusion_epilogue.fuse_norm_activation(graph, Cfg(), G_LOGGER) == 0


@pytest.mark.parametrize("act", ["Relu", "Clip"])
def test_fp16_builds_keep_the_pairs_result(act):
    """A reduced-precision layer rounds once, after the activation: RELU and CLIP commute with that rounding."""
    m = _model(act)
    graphs = []
    for fusion in (True, False):
        net, _ = parse_onnx(m)
        cfg = BuilderConfig()
        cfg.set_flag(BuilderFlag.FP16)
        if not fusion:
            cfg.set_flag(BuilderFlag.DISABLE_FUSION)
        cfg.tactic_sources = {"float64-stats"}
        graphs.append(Builder().build_graph(net, cfg))
    layers = [[k for k in kinds(g) if k != "Reformat"] for g in graphs]
    assert layers == [["Normalization"], ["Normalization", "Activation"]]
    assert [n.precision for n in graphs[0].nodes if n.kind == "Normalization"] == ["float16"]
    y, want = (run(g, {"x": X})[0] for g in graphs)
    assert y.tobytes() == want.tobytes()


def test_the_cpu_only_epilogue_fusions_are_device_capabilities():
    """The CLIP-from-max/min and LayerNorm post-op fusions ask the device (native/device.py), not its name: the CPU
    declares them, the DLA (a CpuDevice whose rules place each layer) and the base Device do not."""
    from backends.engine.builder.passes.fusion_epilogue import _device_can
    from native.device import Device, get_device

    class Cfg:
        def __init__(self, device):
            self.device = device
    for cap in ("fuses_bound_clip", "norm_post_ops"):
        assert _device_can(Cfg(get_device("cpu")), cap) and _device_can(Cfg(None), cap)
        assert not _device_can(Cfg(get_device("dla")), cap) and not getattr(Device, cap)
