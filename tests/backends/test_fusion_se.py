"""Squeeze-and-excitation blocks (mean over H, W → 1x1 conv + act → 1x1 conv + act → x * gate) become one
SqueezeExcite layer on the CPU (passes/fusion_se.py), computing the four layers' floats (native/cpu/kernels/
squeeze_excite.py); and stay four layers wherever that would change what runs."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, Runtime, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from backends.engine.plan import serialize_plan
from native.cpu.device import CpuDevice
from tests.backends.fusion_helpers import const, kinds, model, run

RNG = np.random.default_rng(26)
# the unfused layers' default tactics, so the four-layer build is the one the fused layer reproduces bit for bit
_PLAIN = {"1x1-gemm", "strided-taps", "numpy", "se-fused"}


class _Plain(AlgorithmSelector):
    def select_algorithms(self, context, choices):
        keep = [i for i, c in enumerate(choices) if getattr(c, "implementation", None) in _PLAIN]
        return keep or list(range(len(choices)))


def _se_model(pool="ReduceMean", c=12, m=4, gate="HardSigmoid", batch=1, extra_use=None):
    w1 = RNG.standard_normal((m, c, 1, 1)).astype(np.float32)
    b1 = RNG.standard_normal(m).astype(np.float32)
    w2 = RNG.standard_normal((c, m, 1, 1)).astype(np.float32)
    b2 = RNG.standard_normal(c).astype(np.float32)
    if pool == "ReduceMean":
        p = helper.make_node("ReduceMean", ["x"], ["s"], name="pool", axes=[2, 3], keepdims=1)
        inits = []
    else:
        p = helper.make_node("GlobalAveragePool", ["x"], ["s"], name="pool")
        inits = []
    gate_node = (helper.make_node("HardSigmoid", ["z"], ["g"], name="gate", alpha=1 / 6, beta=0.5)
                 if gate == "HardSigmoid" else helper.make_node("Sigmoid", ["z"], ["g"], name="gate"))
    nodes = [p, helper.make_node("Conv", ["s", "w1", "b1"], ["h0"], name="fc1"),
             helper.make_node("Relu", ["h0"], ["h"], name="act1"),
             helper.make_node("Conv", ["h", "w2", "b2"], ["z"], name="fc2"), gate_node,
             helper.make_node("Mul", ["x", "g"], ["y"], name="scale")]
    outputs = ["y"]
    if extra_use == "gate":   # the gate is also a model output: it must stay a tensor of its own
        outputs.append("g")
    mdl = model(nodes, [("x", [batch, c, 7, 5])], outputs,
                inits + [const("w1", w1), const("b1", b1), const("w2", w2), const("b2", b2)])
    return mdl, (w1.reshape(m, c), b1, w2.reshape(c, m), b2)


def _reference(x, params, gate="HardSigmoid"):
    w1, b1, w2, b2 = (p.astype(np.float64) for p in params)
    x = x.astype(np.float64)
    s = x.mean(axis=(2, 3))
    h = np.maximum(s @ w1.T + b1, 0)
    z = h @ w2.T + b2
    g = np.clip(z / 6 + 0.5, 0, 1) if gate == "HardSigmoid" else 1 / (1 + np.exp(-z))
    return x * g[:, :, None, None]


def _build(m, fp16=False, fuse=True, monkeypatch=None):
    if not fuse:
        monkeypatch.setattr(CpuDevice, "fuses_squeeze_excite", False)
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    if fp16:
        cfg.set_flag(BuilderFlag.FP16)
    cfg.algorithm_selector = _Plain()
    return Builder().build_graph(net, cfg)


@pytest.mark.parametrize("pool", ["ReduceMean", "GlobalAveragePool"])
@pytest.mark.parametrize("batch", [1, 3])
def test_squeeze_excite_is_one_layer_with_the_four_layers_floats(pool, batch, monkeypatch):
    m, params = _se_model(pool, batch=batch)
    x = RNG.standard_normal((batch, 12, 7, 5)).astype(np.float32)
    fused = _build(m)
    assert kinds(fused) == ["SqueezeExcite"]
    se = fused.nodes[-1]
    assert se.source_nodes == ["pool", "fc1", "act1", "fc2", "gate", "scale"]
    assert se.params["mean_dtype"] == ("float32" if pool == "ReduceMean" else "float64")
    y = run(fused, {"x": x})[0]
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-5, atol=1e-6)
    plain = _build(m, fuse=False, monkeypatch=monkeypatch)
    assert kinds(plain) == [("Reduce" if pool == "ReduceMean" else "Pooling"), "Convolution", "Convolution",
                            "ElementWise"]
    assert y.tobytes() == run(plain, {"x": x})[0].tobytes()


def test_squeeze_excite_plan_round_trip_and_planned_output_buffer():
    m, params = _se_model("ReduceMean", gate="Sigmoid")
    x = RNG.standard_normal((1, 12, 7, 5)).astype(np.float32)
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    graph = Builder().build_graph(net, cfg)
    assert kinds(graph) == ["SqueezeExcite"]
    ctx = Runtime().deserialize_engine(serialize_plan(graph, cfg)).create_execution_context()
    first = ctx.execute({"x": x})["y"]
    np.testing.assert_allclose(first, _reference(x, params, "Sigmoid"), rtol=1e-5, atol=1e-6)
    again = ctx.execute({"x": x * 2})["y"]     # the arena run (planned output) after the first run
    np.testing.assert_allclose(again, _reference(x * 2, params, "Sigmoid"), rtol=1e-5, atol=1e-6)
    assert first.tobytes() == ctx.execute({"x": x})["y"].tobytes()


def test_squeeze_excite_stays_four_layers_where_fusing_would_change_what_runs(monkeypatch):
    m, _ = _se_model("ReduceMean", extra_use="gate")       # the gate is read outside the block
    assert "SqueezeExcite" not in kinds(_build(m))
    m, _ = _se_model("ReduceMean")
    assert "SqueezeExcite" not in kinds(_build(m, fp16=True))   # FP32-only layer: reduced builds keep four
    assert "SqueezeExcite" not in kinds(_build(m, fuse=False, monkeypatch=monkeypatch))   # device without it


def test_squeeze_excite_needs_the_block_shape():
    # a pooled tensor scaled by something else than its input, or a strided 1x1: not a squeeze-excite block
    c, mm = 8, 2
    w1 = RNG.standard_normal((mm, c, 1, 1)).astype(np.float32)
    w2 = RNG.standard_normal((c, mm, 1, 1)).astype(np.float32)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["s"], name="pool"),
             helper.make_node("Conv", ["s", "w1"], ["h"], name="fc1"),
             helper.make_node("Conv", ["h", "w2"], ["g"], name="fc2"),
             helper.make_node("Mul", ["x2", "g"], ["y"], name="scale")]
    m = model(nodes, [("x", [1, c, 4, 4]), ("x2", [1, c, 4, 4])], ["y"], [const("w1", w1), const("w2", w2)])
    assert "SqueezeExcite" not in kinds(_build(m))
    nodes[-1] = helper.make_node("Mul", ["x", "g"], ["y"], name="scale")
    m = model(nodes, [("x", [1, c, 4, 4])], ["y"], [const("w1", w1), const("w2", w2)])
    g = _build(m)
    assert kinds(g) == ["SqueezeExcite"] and "squeeze_bias" not in g.nodes[-1].weights   # bias-free convs fuse too
    x = RNG.standard_normal((1, c, 4, 4)).astype(np.float32)
    ref = x * ((x.astype(np.float64).mean(axis=(2, 3)) @ w1.reshape(mm, c).T) @ w2.reshape(c, mm).T)[:, :, None, None]
    np.testing.assert_allclose(run(g, {"x": x})[0], ref, rtol=1e-5, atol=1e-5)


@pytest.mark.jit     # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says (its subject is the numba kernel)
@pytest.mark.parametrize("batch,hw,gate", [(1, (7, 5), "HARD_SIGMOID"), (2, (3, 37), "HARD_SWISH"),
                                           (1, (16, 16), "CLIP")])
def test_se_direct_tactic_computes_the_block(batch, hw, gate):
    """se-direct (one compiled call, numba extra): its own floats, within float32 rounding of the float64 block;
    sample by sample, tails of the 16-lane mean, every activation it takes; SIGMOID gates stay with se-fused."""
    pytest.importorskip("numba")
    from native.tactics import Op, tactics_for
    c, m = 24, 6
    x = (RNG.standard_normal((batch, c) + hw) * 3).astype(np.float32)
    w1, w2 = (RNG.standard_normal(s).astype(np.float32) * 0.5 for s in ((m, c), (c, m)))
    b1, b2 = RNG.standard_normal(m).astype(np.float32), RNG.standard_normal(c).astype(np.float32)
    step = {"HARD_SIGMOID": {"type": gate, "alpha": 0.2, "beta": 0.5}, "HARD_SWISH": {"type": gate},
            "CLIP": {"type": gate, "alpha": -0.5, "beta": 0.75}}[gate]
    params = {"squeeze_ops": [{"type": "RELU"}], "excite_ops": [step], "mean_dtype": "float64"}
    t = next(t for t in tactics_for("SqueezeExcite", "cpu") if t.name == "se-direct")
    op = Op("SqueezeExcite", "se", params, {"squeeze_kernel": w1, "excite_kernel": w2, "squeeze_bias": b1,
                                            "excite_bias": b2})
    assert t.supports(op, [list(x.shape)]) is None
    op.weights = t.prepare(op)
    dst = np.full(x.shape, np.nan, np.float32)
    y = t.run(op, [x], [dst])[0]
    assert y is dst
    z = np.maximum(x.astype(np.float64).mean(axis=(2, 3)) @ w1.T + b1, 0) @ w2.T + b2
    g = {"HARD_SIGMOID": np.clip(z * 0.2 + 0.5, 0, 1), "HARD_SWISH": z * np.clip(z / 6 + 0.5, 0, 1),
         "CLIP": np.clip(z, -0.5, 0.75)}[gate]
    np.testing.assert_allclose(y, x * g[:, :, None, None], rtol=2e-5, atol=2e-5)
    sig = Op("SqueezeExcite", "se", dict(params, excite_ops=[{"type": "SIGMOID"}]), op.weights)
    assert "activations" in t.supports(sig, [list(x.shape)])


@pytest.mark.jit
def test_se_direct_builds_and_round_trips_through_a_plan():
    pytest.importorskip("numba")

    class Direct(AlgorithmSelector):
        def select_algorithms(self, context, choices):
            keep = [i for i, c in enumerate(choices) if getattr(c, "implementation", None) == "se-direct"]
            return keep or list(range(len(choices)))
    m, params = _se_model("GlobalAveragePool", batch=2)
    x = RNG.standard_normal((2, 12, 7, 5)).astype(np.float32)
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    cfg.algorithm_selector = Direct()
    graph = Builder().build_graph(net, cfg)
    assert kinds(graph) == ["SqueezeExcite"] and graph.nodes[-1].tactic_name == "se-direct"
    ctx = Runtime().deserialize_engine(serialize_plan(graph, cfg)).create_execution_context()
    for scale in (1, 2, 1):    # the first run, then the arena's planned output
        np.testing.assert_allclose(ctx.execute({"x": x * scale})["y"], _reference(x * scale, params), rtol=2e-5,
                                   atol=2e-5)
