"""Inverted-residual blocks (1x1 conv + act -> depthwise conv + act -> [squeeze-excite] -> 1x1 conv [+ x]) become one
InvertedResidual layer on the CPU (passes/fusion_ir.py); each of its tactics (native/cpu/kernels/inverted_residual.py)
computes the unfused layers' result within float32 rounding; the block stays unfused wherever fusing would change
what runs."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, OptimizationProfile, Runtime, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from backends.engine.plan import serialize_plan
from native.cpu.device import CpuDevice
from tests.backends.fusion_helpers import const, kinds, model, run

RNG = np.random.default_rng(69)
_ACTS = {"HardSwish": lambda i, o: helper.make_node("HardSwish", [i], [o]),
         "Relu": lambda i, o: helper.make_node("Relu", [i], [o])}


def _ir_model(c=8, e=24, k=3, stride=(1, 1), se=True, residual=True, act_e="HardSwish", act_d="HardSwish",
              hw=(9, 11), batch=1, extra_output=None, expand=True):
    p = k // 2
    e = e if expand else c
    m = max(2, e // 4)
    f32 = lambda *s: (RNG.standard_normal(s) * 0.5).astype(np.float32)   # noqa: E731
    inits = [const("wd", f32(e, 1, k, k)), const("bd", f32(e)),
             const("wp", f32(c if residual else c + 4, e, 1, 1)), const("bp", f32(c if residual else c + 4))]
    nodes = []
    if expand:
        inits += [const("we", f32(e, c, 1, 1)), const("be", f32(e))]
        nodes += [helper.make_node("Conv", ["x", "we", "be"], ["e0"], name="expand"), _ACTS[act_e]("e0", "e1")]
    nodes += [helper.make_node("Conv", ["e1" if expand else "x", "wd", "bd"], ["d0"], name="dw", group=e,
                               kernel_shape=[k, k], strides=list(stride), pads=[p, p, p, p]),
              _ACTS[act_d]("d0", "d1")]
    last = "d1"
    if se:
        inits += [const("w1", f32(m, e, 1, 1)), const("b1", f32(m)), const("w2", f32(e, m, 1, 1)),
                  const("b2", f32(e))]
        nodes += [helper.make_node("GlobalAveragePool", ["d1"], ["s"], name="pool"),
                  helper.make_node("Conv", ["s", "w1", "b1"], ["h0"], name="fc1"),
                  helper.make_node("Relu", ["h0"], ["h"], name="act1"),
                  helper.make_node("Conv", ["h", "w2", "b2"], ["z"], name="fc2"),
                  helper.make_node("HardSigmoid", ["z"], ["g"], name="gate", alpha=1 / 6, beta=0.5),
                  helper.make_node("Mul", ["d1", "g"], ["d2"], name="scale")]
        last = "d2"
    nodes.append(helper.make_node("Conv", [last, "wp", "bp"], ["p0" if residual else "y"], name="project"))
    if residual:
        nodes.append(helper.make_node("Add", ["p0", "x"], ["y"], name="shortcut"))
    outputs = ["y"] + ([extra_output] if extra_output else [])
    return model(nodes, [("x", [batch, c, *hw])], outputs, inits)


class _Only(AlgorithmSelector):
    """The InvertedResidual layer on one tactic; everything else on exact-order convolutions (no Winograd)."""

    def __init__(self, tactic=None):
        self.tactic = tactic

    def select_algorithms(self, context, choices):
        names = [str(getattr(c, "implementation", c)) for c in choices]
        if self.tactic is not None and self.tactic in names:
            return [names.index(self.tactic)]
        keep = [i for i, n in enumerate(names) if "winograd" not in n]
        return keep or list(range(len(choices)))


def _build(m, tactic=None, fusion=True, fp16=False, profile=None):
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    if profile is not None:          # {input: (min, opt, max)}
        p = OptimizationProfile()
        for name, shapes in profile.items():
            p.set_shape(name, *shapes)
        cfg.add_optimization_profile(p)
    if not fusion:
        cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    if fp16:
        cfg.set_flag(BuilderFlag.FP16)
    cfg.algorithm_selector = _Only(tactic)
    return Builder().build_graph(net, cfg), cfg


CASES = [dict(k=3, stride=(1, 1), se=True, residual=True),
         dict(k=3, stride=(2, 2), se=True, residual=False, expand=False, hw=(12, 12)),
         dict(k=5, stride=(1, 1), se=False, residual=True, expand=False),
         dict(k=5, stride=(2, 2), se=True, residual=False, act_e="Relu", act_d="Relu", hw=(14, 14)),
         dict(k=3, stride=(2, 1), se=False, residual=False, hw=(6, 20)),
         dict(k=5, stride=(1, 1), se=False, residual=True, batch=2, hw=(3, 17), act_d="Relu"),
         dict(k=7, stride=(1, 1), se=True, residual=True, hw=(8, 8), e=40)]


@pytest.mark.jit
@pytest.mark.parametrize("tactic", ["ir-direct", "ir-planes", "ir-numpy"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_inverted_residual_is_one_layer_with_the_unfused_result(tactic, case):
    if tactic != "ir-numpy":
        pytest.importorskip("numba")
    kw = CASES[case]
    if tactic == "ir-direct" and not kw.get("expand", True):
        pytest.skip("ir-direct refuses blocks without an expand stage (test_inverted_residual_without_expand)")
    m = _ir_model(**kw)
    x = RNG.standard_normal((kw.get("batch", 1), 8, *kw.get("hw", (9, 11)))).astype(np.float32)
    fused, _ = _build(m, tactic)
    assert kinds(fused) == ["InvertedResidual"]
    node = fused.nodes[-1]
    assert node.tactic_name == tactic
    assert node.source_nodes[0] == ("expand" if kw.get("expand", True) else "dw")
    assert node.source_nodes[-1] == ("shortcut" if kw["residual"] else "project")
    assert ("expand_kernel" in node.weights) is kw.get("expand", True)
    assert node.params["residual"] is kw["residual"] and ("squeeze_kernel" in node.weights) is kw["se"]
    plain, _ = _build(m, fusion=False)
    assert "InvertedResidual" not in kinds(plain)
    y, want = run(fused, {"x": x})[0], run(plain, {"x": x})[0]
    assert y.shape == want.shape and y.dtype == np.float32
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


@pytest.mark.jit
def test_inverted_residual_plan_round_trip_and_planned_output_buffer():
    m = _ir_model(k=5, se=True, residual=True)
    x = RNG.standard_normal((1, 8, 9, 11)).astype(np.float32)
    graph, cfg = _build(m)
    assert kinds(graph) == ["InvertedResidual"]
    want = run(_build(m, fusion=False)[0], {"x": x})[0]
    ctx = Runtime().deserialize_engine(serialize_plan(graph, cfg)).create_execution_context()
    first = ctx.execute({"x": x})["y"]
    np.testing.assert_allclose(first, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))
    again = ctx.execute({"x": x * 2})["y"]       # the arena run (planned output) after the first run
    want2 = run(_build(m, fusion=False)[0], {"x": x * 2})[0]
    np.testing.assert_allclose(again, want2, rtol=2e-5, atol=2e-5 * float(np.abs(want2).max()))
    assert first.tobytes() == ctx.execute({"x": x})["y"].tobytes()


def test_inverted_residual_without_numba_runs_the_numpy_tactic(monkeypatch):
    from native import config
    m = _ir_model(k=3, se=True, residual=True)
    x = RNG.standard_normal((1, 8, 9, 11)).astype(np.float32)
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        graph, _ = _build(m)
        assert kinds(graph) == ["InvertedResidual"] and graph.nodes[-1].tactic_name == "ir-numpy"
        y = run(graph, {"x": x})[0]
        want = run(_build(m, fusion=False)[0], {"x": x})[0]
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()
    np.testing.assert_allclose(y, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


def test_inverted_residual_stays_unfused_where_fusing_would_change_what_runs(monkeypatch):
    assert "InvertedResidual" not in kinds(_build(_ir_model(extra_output="e1"))[0])   # expanded tensor read outside
    assert "InvertedResidual" not in kinds(_build(_ir_model(extra_output="d1", se=False))[0])
    assert "InvertedResidual" not in kinds(_build(_ir_model(), fp16=True)[0])          # FP32-only layer
    monkeypatch.setattr(CpuDevice, "fuses_inverted_residual", False)
    assert "InvertedResidual" not in kinds(_build(_ir_model())[0])                     # a device without it


def test_inverted_residual_needs_a_depthwise_middle():
    # a grouped (not depthwise) middle convolution: the three convolutions stay
    c, e = 8, 16
    f32 = lambda *s: RNG.standard_normal(s).astype(np.float32)   # noqa: E731
    nodes = [helper.make_node("Conv", ["x", "we"], ["e0"], name="expand"),
             helper.make_node("Relu", ["e0"], ["e1"]),
             helper.make_node("Conv", ["e1", "wd"], ["d0"], name="grouped", group=e // 2, kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d0", "wp"], ["y"], name="project")]
    m = model(nodes, [("x", [1, c, 6, 6])], ["y"],
              [const("we", f32(e, c, 1, 1)), const("wd", f32(e, 2, 3, 3)), const("wp", f32(c, e, 1, 1))])
    assert "InvertedResidual" not in kinds(_build(m)[0])


@pytest.mark.jit
@pytest.mark.parametrize("tactic,expand", [("ir-direct", True), ("ir-planes", True), ("ir-planes", False)])
@pytest.mark.parametrize("se", [True, False])
def test_inverted_residual_split_over_the_pool_computes_the_same(monkeypatch, tactic, expand, se):
    """With two pool threads, each stage split in two (expanded channels, then output channels): the channel split
    leaves every float as it was; the project GEMM's row split within float32 rounding."""
    pytest.importorskip("numba")
    from native import config
    from native.cpu import threads
    from native.cpu.kernels import inverted_residual as ir
    c = 8 if expand else 32
    m = _ir_model(k=5, se=se, residual=True, e=32, c=c, expand=expand)
    x = RNG.standard_normal((2, c, 9, 11)).astype(np.float32)
    graph, _ = _build(m, tactic)
    whole = run(graph, {"x": x})[0]
    calls = []
    real = ir.parallel_for
    monkeypatch.setattr(ir, "SPLIT_MIN_MACS", 0)
    monkeypatch.setattr(ir, "parallel_for", lambda fn, items: calls.append(list(items)) or real(fn, calls[-1]))
    monkeypatch.setenv("DEBUGKIT_THREADS", "2")
    config.reload()
    changed = threads.tune()
    try:
        split = run(graph, {"x": x})[0]
    finally:
        if changed:
            threads.untune()
        monkeypatch.delenv("DEBUGKIT_THREADS")
        config.reload()
    # per sample: 32 expanded channels (16-channel cuts), then the output channels
    assert calls[:2] == [[(0, 16), (16, 32)], [(0, c // 2), (c // 2, c)]]
    assert len(calls) == 4
    np.testing.assert_allclose(split, whole, rtol=1e-6, atol=1e-6 * float(np.abs(whole).max()))


def test_inverted_residual_leaves_large_maps_to_the_layers(monkeypatch):
    from backends.engine.builder.passes import fusion_ir
    m = _ir_model()                                   # 24 expanded channels of 9 x 11
    assert kinds(_build(m)[0]) == ["InvertedResidual"]
    monkeypatch.setattr(fusion_ir, "MAX_EXPANDED", 24 * 9 * 11 - 1)
    assert "InvertedResidual" not in kinds(_build(m)[0])
    monkeypatch.setattr(fusion_ir, "MAX_EXPANDED", 1 << 20)
    monkeypatch.setattr(fusion_ir, "MAX_LAYER_MACS", 24 * 9 * 11 * 9)    # the 3x3 depthwise layer's multiply-adds
    assert "InvertedResidual" not in kinds(_build(m)[0])
    monkeypatch.setattr(fusion_ir, "MAX_LAYER_MACS", 24 * 9 * 11 * 9 + 1)
    assert kinds(_build(m)[0]) == ["InvertedResidual"]


@pytest.mark.jit     # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says (it asks the compiled tactics)
def test_inverted_residual_without_expand():
    """A block whose depthwise layer reads its input directly (MobileNetV3's first) fuses too; ir-direct, whose
    channels-last buffer would then be a transpose of the input, refuses it and the timing picks another."""
    pytest.importorskip("numba")
    from native.tactics import LayerContext, Op, tactics_for
    m = _ir_model(expand=False, se=True, residual=True)
    graph, _ = _build(m)
    node = graph.nodes[-1]
    assert kinds(graph) == ["InvertedResidual"] and node.tactic_name in ("ir-planes", "ir-numpy")
    op = Op(kind=node.kind, name=node.name, params=node.params, weights=node.weights)
    ctx = LayerContext([[1, 8, 9, 11]], ["float32"])
    why = {t.name: t.supports(op, ctx) for t in tactics_for("InvertedResidual", "cpu")}
    assert "no expand stage" in why["ir-direct"] and why["ir-planes"] is None and why["ir-numpy"] is None


@pytest.mark.jit
@pytest.mark.parametrize("k,stride,hw", [(5, 1, (2, 9)), (5, 2, (3, 7)), (3, 1, (1, 5)), (7, 1, (3, 4))])
def test_depthwise_taps_skip_padding_rows_exactly(k, stride, hw):
    """jit_ir.depthwise_nhwc skipping the kernel rows that read only zero-padding rows gives the sums of all taps
    (finite weights); non-finite weights are passed the whole padded range, so a NaN from inf * 0 stays."""
    pytest.importorskip("numba")
    from native.cpu import jit_ir
    from native.cpu.kernels.inverted_residual import aligned
    c, p = 32, k // 2
    h, w = hw
    xp = aligned((h + 2 * p, w + 2 * p, c))
    xp[...] = 0
    xp[p:p + h, p:p + w] = RNG.standard_normal((h, w, c)).astype(np.float32)
    taps = RNG.standard_normal((k, k, c)).astype(np.float32)
    ho, wo = (h + 2 * p - k) // stride + 1, (w + 2 * p - k) // stride + 1
    bias = np.zeros(c, np.float32)
    ys = []
    for lo, hi in ((p, p + h), (0, h + 2 * p)):
        y = aligned((ho, wo, c))
        jit_ir.depthwise_nhwc(xp, taps, bias, 0, y, stride, stride, np.empty(0), 0, lo, hi)
        ys.append(y)
    assert ys[0].tobytes() == ys[1].tobytes()
    taps[0, 0, 3] = np.inf      # row 0 of the kernel reads padding for output row 0: inf * 0 = NaN there
    y = aligned((ho, wo, c))
    jit_ir.depthwise_nhwc(xp, taps, bias, 0, y, stride, stride, np.empty(0), 0, 0, h + 2 * p)
    assert np.isnan(y[0, 0, 3])


def test_inverted_residual_leaves_maps_of_unknown_size_to_the_layers():
    m = _ir_model(hw=("h", "w"))                      # a detector's dynamic H, W: the map may be large
    shapes = ((1, 8, 5, 5), (1, 8, 9, 11), (1, 8, 32, 32))
    assert "InvertedResidual" not in kinds(_build(m, profile={"x": shapes})[0])
    m = _ir_model(batch="n")                          # only the batch unknown: counted as 1
    shapes = ((1, 8, 9, 11), (2, 8, 9, 11), (4, 8, 9, 11))
    assert kinds(_build(m, profile={"x": shapes})[0]) == ["InvertedResidual"]
