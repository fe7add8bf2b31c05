"""A convolution followed by a hand-written hard-swish (x + 3, clip to [0, 6], times x, / 6: a Pointwise chain)
carries the chain as its HARD_SWISH_RELU6 post-op on the CPU (passes/fusion_epilogue.fold_relu6_swish), with the
chain's floats under every convolution tactic; and stays two layers wherever that would change what runs."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from native import config
from native.cpu.device import CpuDevice
from tests.backends.fusion_helpers import const, kinds, model, run

RNG = np.random.default_rng(53)
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, -3.0, 3.0, 1e30]


def _model(c=6, m=6, k=3, group=1, three=3.0, six=6.0, reuse=False):
    w = RNG.standard_normal((m, c // group, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", group=group, pads=[k // 2] * 4),
             helper.make_node("Add", ["y", "three"], ["t"], name="add"),
             helper.make_node("Clip", ["t", "zero", "six"], ["r"], name="clip"),
             helper.make_node("Mul", ["y", "r"], ["p"], name="mul"),
             helper.make_node("Div", ["p", "six_d"], ["z"], name="div")]
    inits = [const("w", w), const("b", b), const("three", np.array(three, np.float32)),
             const("zero", np.array(0.0, np.float32)), const("six", np.array(6.0, np.float32)),
             const("six_d", np.array(six, np.float32))]
    return model(nodes, [("x", [1, c, 9, 11])], ["z", "y"] if reuse else ["z"], inits)


class _Only(AlgorithmSelector):
    def __init__(self, name):
        self.name = name

    def select_algorithms(self, context, choices):
        keep = [i for i, c in enumerate(choices) if getattr(c, "implementation", None) == self.name]
        return keep or list(range(len(choices)))


def _build(m, tactic=None, fold=True, fp16=False, monkeypatch=None):
    if not fold:
        monkeypatch.setattr(CpuDevice, "fuses_relu6_swish", False)
    try:
        net, _ = parse_onnx(m)
        cfg = BuilderConfig()
        if fp16:
            cfg.set_flag(BuilderFlag.FP16)
        if tactic:
            cfg.algorithm_selector = _Only(tactic)
        return Builder().build_graph(net, cfg)
    finally:
        if not fold:
            monkeypatch.setattr(CpuDevice, "fuses_relu6_swish", True)


def _x(c=6):
    x = (RNG.standard_normal((1, c, 9, 11)) * 4).astype(np.float32)
    x.reshape(-1)[:len(SPECIALS)] = SPECIALS
    return x


@pytest.mark.parametrize("jit_on", [True, False])
@pytest.mark.parametrize("tactic,k,group", [("depthwise", 5, 6), ("depthwise-cl", 3, 6), ("1x1-gemm", 1, 1),
                                            ("im2col-gemm", 3, 1), ("im2col-gemm", 3, 2), ("sliding-window", 3, 1)])
def test_hard_swish_chain_folds_into_the_conv_with_its_floats(monkeypatch, tactic, k, group, jit_on):
    if not jit_on:
        monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        m = _model(k=k, group=group)
        fused = _build(m, tactic)
        assert kinds(fused) == ["Convolution"]
        conv = fused.nodes[-1]
        assert conv.tactic_name == tactic
        assert conv.params["post_ops"][-1]["type"] == "HARD_SWISH_RELU6"
        assert conv.source_nodes == ["conv", "add", "clip", "mul", "div"]
        plain = _build(m, tactic, fold=False, monkeypatch=monkeypatch)
        assert kinds(plain) == ["Convolution", "Pointwise"]
        x = _x()
        with np.errstate(all="ignore"):
            got, want = run(fused, {"x": x})[0], run(plain, {"x": x})[0]
        assert got.tobytes() == want.tobytes()
        y = want.astype(np.float64)
        finite = np.isfinite(y)
        assert finite.sum() > y.size // 2 and np.all(y[finite] >= -0.375)   # x * relu6(x + 3) / 6 >= -3/8
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT", raising=False)
        config.reload()


def test_hard_swish_chain_stays_a_layer_of_its_own_where_folding_would_change_what_runs(monkeypatch):
    assert kinds(_build(_model(three=2.5))) == ["Convolution", "Pointwise"]       # not the hard-swish constants
    assert kinds(_build(_model(six=6.5))) == ["Convolution", "Pointwise"]
    assert kinds(_build(_model(reuse=True))) == ["Convolution", "Pointwise"]      # the conv output is read twice
    assert "Pointwise" in kinds(_build(_model(), fold=False, monkeypatch=monkeypatch))   # device without it
    assert len(kinds(_build(_model(), fp16=True))) >= 2    # FP32-only post-op: reduced builds keep the layers


def test_hard_swish_relu6_activation_compiled_and_numpy_agree(monkeypatch):
    """The activation's compiled pass (in place and not) and its numpy passes give the same floats."""
    pytest.importorskip("numba")
    from native.cpu.kernels.activations import activation, activation_inplace
    x = _x().reshape(-1)
    with np.errstate(all="ignore"):
        got = activation(x, "HARD_SWISH_RELU6")
        inplace = activation_inplace(x.copy(), "HARD_SWISH_RELU6")
        monkeypatch.setenv("DEBUGKIT_JIT", "0")
        config.reload()
        try:
            want = activation(x, "HARD_SWISH_RELU6")
        finally:
            monkeypatch.delenv("DEBUGKIT_JIT")
            config.reload()
        chain = np.clip(x + np.float32(3), np.float32(0), np.float32(6))
        chain = (x * chain) / np.float32(6)
    assert got.tobytes() == want.tobytes() == inplace.tobytes() == chain.tobytes()
