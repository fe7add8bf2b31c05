"""A residual add folded into the LayerNorm after it (passes/fusion_residual_norm.py, native/cpu/kernels/norm_residual.py):
post-LN (the sum read only by the LayerNorm) and pre-LN (the sum also the next residual, kept as an output) blocks fold,
the engine's values are the unfused engine's; the tactics' floats are the Add's then their LayerNorm tactic's, bit for
bit, compiled or not; the other Normalization tactics refuse the fused layer; nothing folds in reduced precision, on a
device without the flag, or where the sum is read before the LayerNorm."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.passes.fusion_residual_norm import fuse_residual_norm
from native import config as native_config
from native.cpu.kernels.norm import LayerNormLaneStats, normalization
from native.device import get_device
from native.tactics import LayerContext, Op, tactics_for, unsupported_reason
from tests.backends.fusion_helpers import RNG, build, const, kinds, model, run

T, C = 7, 24


def _block(pre_ln):
    """x -> MatMul -> + x -> LayerNorm (post-LN: y) or, pre-LN, also -> + MatMul(y) (the sum read again)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="dense"),
             helper.make_node("Add", ["h", "x"], ["s"], name="residual"),
             helper.make_node("LayerNormalization", ["s", "g", "b"], ["y"], name="ln", axis=-1, epsilon=1e-5)]
    out = "y"
    if pre_ln:
        nodes += [helper.make_node("MatMul", ["y", "w2"], ["h2"], name="mlp"),
                  helper.make_node("Add", ["s", "h2"], ["z"], name="residual2")]
        out = "z"
    inits = [const("w", RNG.standard_normal((C, C)).astype(np.float32) / 5),
             const("w2", RNG.standard_normal((C, C)).astype(np.float32) / 5),
             const("g", RNG.standard_normal(C).astype(np.float32)), const("b", RNG.standard_normal(C).astype(np.float32))]
    return model(nodes, [("x", [2, T, C])], [out], inits)


@pytest.mark.parametrize("pre_ln", [False, True])
def test_the_add_folds_into_the_layernorm_and_the_values_stay(pre_ln):
    m = _block(pre_ln)
    feeds = {"x": RNG.standard_normal((2, T, C)).astype(np.float32)}
    g = build(m)
    norms = [n for n in g.nodes if n.kind == "Normalization"]
    assert len(norms) == 1 and norms[0].params["residual_input"] == 3 and len(norms[0].inputs) == 4
    assert len(norms[0].outputs) == (4 if pre_ln else 3)
    assert kinds(g).count("ElementWise") == (1 if pre_ln else 0)
    np.testing.assert_allclose(run(g, feeds)[0], run(build(m, fusion=False), feeds)[0], rtol=1e-5, atol=1e-5)


def _op(residual=3, post=()):
    params = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5, "stash_type": 1}
    if residual:
        params["residual_input"] = residual
    if post:
        params["post_ops"] = list(post)
    return Op("Normalization", "ln", params)


def _tactic(name):
    return next(t for t in tactics_for("Normalization") if t.name == name)


@pytest.mark.parametrize("jit", ["0", "1"])
@pytest.mark.parametrize("shape", [(2, 7, 24), (197, 192), (1, 5)])
@pytest.mark.parametrize("post", [(), ({"op": "activation", "type": "RELU"},)])
def test_tactics_are_the_add_then_the_layernorm_bit_for_bit(monkeypatch, jit, shape, post):
    if jit == "1":
        pytest.importorskip("numba")
    monkeypatch.setenv("DEBUGKIT_JIT", jit)
    native_config.reload()
    try:
        x, r = (RNG.standard_normal(shape).astype(np.float32) * 3 for _ in range(2))
        g, b = RNG.standard_normal(shape[-1]).astype(np.float32), RNG.standard_normal(shape[-1]).astype(np.float32)
        s = np.add(x, r)
        for fused, plain in (("lane-stats-residual", LayerNormLaneStats().run), ("float64-stats-residual",
                                                                                   normalization)):
            got = _tactic(fused).run(_op(post=post), [x, g, b, r])
            want = plain(_op(residual=None, post=post), [s, g, b])
            assert len(got) == 4 and got[3].tobytes() == s.tobytes()
            for a, w in zip(got[:3], want[:3]):
                assert a.shape == w.shape and a.tobytes() == w.tobytes()
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        native_config.reload()


def test_refusals():
    """The other Normalization tactics refuse the fused layer (its fused param), these two anything else."""
    shapes = LayerContext([[2, 7, 24], [24], [24], [2, 7, 24]], ["float32"] * 4)
    residual = [t for t in tactics_for("Normalization") if t.name.endswith("-residual")]
    assert sorted(t.name for t in residual) == ["float64-stats-residual", "lane-stats-residual"]
    for t in tactics_for("Normalization"):
        why = unsupported_reason(t, _op(), shapes)
        if t in residual:
            assert why is None
            assert "residual" in t.supports(_op(residual=None), shapes)
            assert "one shape" in t.supports(_op(), LayerContext([[2, 7, 24], [24], [24], [1, 7, 24]],
                                                                 ["float32"] * 4))
            assert "float32" in t.supports(_op(), LayerContext(list(shapes), ["float16"] * 4))
        else:
            assert why and "residual" in why


def test_no_fold_in_reduced_precision_without_the_flag_or_when_the_sum_is_read_first(monkeypatch):
    m = _block(False)
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.FP16)
    g = Builder().build_graph(net, cfg)
    assert not any(n.params.get("residual_input") for n in g.nodes if n.kind == "Normalization")
    monkeypatch.setattr(type(get_device("cpu")), "fuses_residual_norm", False)
    assert not any(n.params.get("residual_input") for n in build(m).nodes if n.kind == "Normalization")

    class Config:
        device = get_device("dla")

        def get_flag(self, flag):
            return False
    assert fuse_residual_norm(None, Config(), None) == 0
