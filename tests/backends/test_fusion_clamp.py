"""A max / min with a one-element constant after a convolution becomes a CLIP post-op of the convolution (on the
CPU): one layer less and the same bits as the ElementWise layer it replaces (numpy's maximum / minimum: NaN kept,
the bound on ties)."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from tests.backends.fusion_helpers import const, kinds, model, run

RNG = np.random.default_rng(4)


class _Im2col(AlgorithmSelector):
    """Both builds run the convolution with one tactic, so the comparison is bit for bit."""

    def select_algorithms(self, context, choices):
        keep = [i for i, c in enumerate(choices) if getattr(c, "implementation", None) == "im2col-gemm"]
        return keep or list(range(len(choices)))


def _build(m, fusion):
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    if not fusion:
        cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    cfg.algorithm_selector = _Im2col()
    return Builder().build_graph(net, cfg)


@pytest.mark.parametrize("op,value,const_first,fuses", [
    ("Max", -0.4, False, True), ("Min", 0.7, False, True), ("Max", 0.0, False, True), ("Max", 0.25, True, True),
    ("Max", 0.0, True, False), ("Min", -0.0, True, False)])
def test_scalar_clamp_after_conv_is_a_clip_epilogue(op, value, const_first, fuses):
    w = RNG.standard_normal((6, 4, 3, 3)).astype(np.float32)
    c = np.full((1, 1, 1, 1), value, np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("LeakyRelu", ["c"], ["l"], name="leaky", alpha=0.2),
             helper.make_node(op, ["k", "l"] if const_first else ["l", "k"], ["y"], name="clamp")]
    m = model(nodes, [("x", [1, 4, 8, 8])], ["y"], [const("w", w), const("k", c)])
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    x[0, 0, :2, :2] = [[np.nan, -np.nan], [0.0, -0.0]]
    fused, plain = _build(m, True), _build(m, False)
    assert kinds(fused) == (["Convolution"] if fuses else ["Convolution", "ElementWise"])
    a, b = run(fused, {"x": x})[0], run(plain, {"x": x})[0]
    assert a.dtype == b.dtype == np.float32 and a.tobytes() == b.tobytes()
    assert np.isnan(a).any() and ((a >= value) if op == "Max" else (a <= value))[~np.isnan(a)].all()
