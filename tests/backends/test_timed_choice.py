"""Precision and layout chosen by timing (builder/timed_choice.py), on the CPU device with `chooses_by_timing`
switched on for the test and a planted timer: each layer variant's time is what the test says, so the choices
are known in advance."""
import numpy as np
import pytest
from onnx import helper

from backends.engine import BuilderConfig, BuilderFlag, parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.config import TimingCache
from backends.engine.builder.passes.layout import count_transposes
from native.device import get_device
from tests.backends.fusion_helpers import RNG, const, model, run


def _convs(n=3, between=None):
    """x[1,3,8,8] → conv1 → relu1 → conv2 → relu2 → ... → y, each conv with its own channel count (identical
    layers share their timing-cache entry); `between` puts a layout-sensitive op (Softmax over channels) after
    every conv but the last, so each conv is its own NHWC region."""
    nodes, inits, src, c_in = [], [], "x", 3
    for i in range(1, n + 1):
        channels = 3 + i
        w = RNG.standard_normal((channels, c_in, 3, 3)).astype(np.float32) * 0.3
        inits.append(const(f"w{i}", w))
        nodes.append(helper.make_node("Conv", [src, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"))
        src, c_in = f"r{i}", channels
        if between and i < n:
            nodes.append(helper.make_node("Softmax", [src], [f"s{i}"], name=f"soft{i}", axis=1))
            src = f"s{i}"
    nodes[-1].output[0] = "y"
    return model(nodes, [("x", [1, 3, 8, 8])], ["y"], inits)


class Planted:
    """The device's clock in this test: ms per (layer, kind, precision[, tactic]) from `costs` (first matching
    entry: `(name_part, kind, precision[, tactic name]) -> ms`, None matching anything), 1.0 otherwise; every call
    is counted."""

    def __init__(self, costs, default=1.0):
        self.costs, self.default, self.calls, self.last = costs, default, 0, None

    def ms(self, op, tactic):
        for key, v in self.costs.items():
            name, kind, prec, tname = (key + (None,))[:4]
            if (name is None or name in op.name) and (kind is None or kind == op.kind) and \
                    (prec is None or prec == op.precision) and (tname is None or tname == tactic.name):
                return v
        return self.default


@pytest.fixture
def timed_cpu(monkeypatch):
    """The CPU device choosing by timing, its clock planted; yields a function installing the costs."""
    dev = get_device("cpu")
    real_run = type(dev).run
    state = {}

    def run_(self, tactic, op, inputs, outputs=None, workspace=None, stream=None):
        state["last"] = (op, tactic)
        return real_run(self, tactic, op, inputs, outputs, workspace, stream)

    def time_(self, fn, stream=None):
        fn()
        state["clock"].calls += 1
        return state["clock"].ms(*state["last"])

    monkeypatch.setattr(type(dev), "chooses_by_timing", True, raising=False)
    # on the class: monkeypatch's undo of an instance attribute leaves a bound method on the shared CPU device,
    # which would shadow every later test's class-level patch (test_profiler's device clock failed so in CI)
    monkeypatch.setattr(type(dev), "run", run_)
    monkeypatch.setattr(type(dev), "time", time_)

    def install(costs, default=1.0):
        state["clock"] = Planted(costs, default)
        return state["clock"]
    return install


def build(m, *flags, cache=None, nhwc=None, selector=None):
    net, _ = parse_onnx(m)
    cfg = BuilderConfig()
    for f in flags:
        cfg.set_flag(f)
    cfg.prefer_nhwc = nhwc
    cfg.timing_cache = cache
    cfg.algorithm_selector = selector
    return Builder().build_graph(net, cfg)


def precisions(graph):
    return {n.name: n.precision for n in graph.nodes if n.kind not in ("Constant", "Reformat")}


def _named(graph, part):
    return next(n for n in graph.nodes if part in n.name and n.kind not in ("Reformat", "Shuffle"))


# reduced precision 4x faster everywhere, except conv2's FP16 tactics: 10x slower than its FP32 ones
FP16_FAST_BUT_CONV2 = {("conv2", None, "float16"): 10.0, (None, "Reformat", None): 0.01,
                       (None, None, "float16"): 0.25}


def test_a_layer_whose_fp16_tactics_are_slower_stays_fp32(timed_cpu):
    clock = timed_cpu(FP16_FAST_BUT_CONV2)
    m = _convs()
    g = build(m, BuilderFlag.FP16)
    assert clock.calls > 0
    conv1, conv2, conv3 = (_named(g, f"conv{i}") for i in (1, 2, 3))
    assert (conv1.precision, conv2.precision, conv3.precision) == ("float16", "float32", "float16")
    assert conv2.meta["precision_ms"]["float32"] == pytest.approx(1.0, abs=0.05)   # 1.0 + reformats of 0.01
    assert conv2.meta["precision_ms"]["float16"] >= 10.0
    assert set(conv1.meta["precision_ms"]) == {"float16", "float32"}
    # the storage types follow: Reformat layers around the FP32 layer, and the values stay right
    assert sum(1 for n in g.nodes if n.kind == "Reformat") >= 2
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = run(build(m), {"x": x})[0]
    np.testing.assert_allclose(run(g, {"x": x})[0], ref, rtol=2e-2, atol=2e-2)


def test_reformat_costs_count_in_the_choice(timed_cpu):
    """FP16 a little faster per layer, but each FP32<->FP16 reformat costs more than it saves: all stay FP32."""
    timed_cpu({(None, "Reformat", None): 5.0, (None, None, "float16"): 0.9})
    g = build(_convs(n=2), BuilderFlag.FP16)
    assert set(precisions(g).values()) == {"float32"}
    assert not any(n.kind == "Reformat" for n in g.nodes)


def test_the_timing_cache_reproduces_the_choices_without_timing(timed_cpu):
    clock = timed_cpu(FP16_FAST_BUT_CONV2)
    cache, m = TimingCache(), _convs()
    first = build(m, BuilderFlag.FP16, cache=cache)
    assert clock.calls > 0
    clock = timed_cpu({(None, None, "float16"): 99.0})   # a different clock: any timing would change the choice
    again = build(m, BuilderFlag.FP16, cache=cache)
    assert clock.calls == 0
    assert precisions(again) == precisions(first)
    assert _named(again, "conv2").precision == "float32"


def test_the_cpu_device_keeps_its_rule():
    """Without chooses_by_timing (the CPU's default), every layer with an FP16 implementation runs in FP16 and no
    precision timing happens."""
    assert get_device("cpu").chooses_by_timing is False
    g = build(_convs(), BuilderFlag.FP16)
    assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"float16"}
    assert not any("precision_ms" in n.meta for n in g.nodes)


# NHWC convolutions 10x faster than NCHW ones, except conv2's; transposes cheap
NHWC_FAST_BUT_CONV2 = {("conv2", "ConvolutionNHWC", None): 10.0, (None, "ConvolutionNHWC", None): 0.1,
                       (None, "Shuffle", None): 0.01}


def test_a_region_whose_nhwc_tactics_are_slower_stays_nchw(timed_cpu, monkeypatch):
    from backends.engine.builder import timed_choice
    runs, init = [], timed_choice.Probe.__init__
    monkeypatch.setattr(timed_choice.Probe, "__init__", lambda self, g, ctx: runs.append(g) or init(self, g, ctx))
    clock = timed_cpu(NHWC_FAST_BUT_CONV2)
    m = _convs(n=2, between=True)
    g = build(m)
    assert clock.calls > 0
    assert len(runs) == 1          # one run of the converted copy; the NCHW inputs are transposed back from it
    conv1, conv2 = _named(g, "conv1"), _named(g, "conv2")
    assert (conv1.kind, conv2.kind) == ("ConvolutionNHWC", "Convolution")
    assert count_transposes(g) == 2                      # into and out of conv1's region only
    assert conv1.meta["layout_ms"]["nhwc"] == pytest.approx(0.12, abs=1e-3)    # 0.1 + two transposes
    assert conv1.meta["layout_ms"]["nchw"] == pytest.approx(1.0)
    assert conv2.meta["layout_ms"] == {"nhwc": pytest.approx(10.02, abs=1e-3), "nchw": pytest.approx(1.0)}
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(run(g, {"x": x})[0], run(build(m, nhwc=False), {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_transposes_count_against_nhwc(timed_cpu):
    """NHWC a little faster per convolution, but the transposes at the region's edges cost more: NCHW."""
    timed_cpu({(None, "ConvolutionNHWC", None): 0.9, (None, "Shuffle", None): 0.5})
    g = build(_convs(n=2))
    assert "ConvolutionNHWC" not in [n.kind for n in g.nodes] and count_transposes(g) == 0
    assert _named(g, "conv1").meta["layout_ms"] == {"nhwc": pytest.approx(2.8), "nchw": pytest.approx(2.0)}
    timed_cpu({(None, "ConvolutionNHWC", None): 0.2, (None, "Shuffle", None): 0.5})   # now NHWC pays for them
    g = build(_convs(n=2))
    assert [n.kind for n in g.nodes if n.kind.startswith("Conv")] == ["ConvolutionNHWC"] * 2
    assert count_transposes(g) == 2


def test_the_timing_cache_reproduces_the_layout_without_timing(timed_cpu):
    timed_cpu(NHWC_FAST_BUT_CONV2)
    cache, m = TimingCache(), _convs(n=2, between=True)
    first = build(m, BuilderFlag.FP16, cache=cache)
    clock = timed_cpu({(None, "Convolution", None): 0.01})   # a different clock: timing would choose NCHW
    again = build(m, BuilderFlag.FP16, cache=cache)
    assert clock.calls == 0
    assert [(n.name, n.kind, n.precision) for n in again.nodes] == [(n.name, n.kind, n.precision) for n in first.nodes]
    assert _named(again, "conv1").kind == "ConvolutionNHWC" and _named(again, "conv2").kind == "Convolution"


def test_a_replay_file_restores_layout_and_precision_without_timing(timed_cpu, tmp_path):
    from backends.engine.builder.tactic_replay import TacticRecorder, TacticReplayer
    timed_cpu({("conv2", "ConvolutionNHWC", None): 10.0, ("conv2", "Convolution", "float16"): 5.0,
               (None, "ConvolutionNHWC", None): 0.1, (None, "Shuffle", None): 0.01, (None, "Reformat", None): 0.01,
               (None, None, "float16"): 0.25})
    m = _convs(n=2, between=True)
    rec = TacticRecorder(tmp_path / "tactics.json")
    first = build(m, BuilderFlag.FP16, selector=rec)
    doc = rec.document
    assert doc["layers"][_named(first, "conv2").name]["precision"] == "float32"
    assert _named(first, "conv1").kind == "ConvolutionNHWC" and _named(first, "conv2").kind == "Convolution"
    clock = timed_cpu({(None, "Convolution", None): 0.01, (None, None, "float32"): 0.01})  # would flip everything
    again = build(m, BuilderFlag.FP16, selector=TacticReplayer(tmp_path / "tactics.json"))
    assert [(n.name, n.kind, n.precision, n.tactic_name) for n in again.nodes] == \
        [(n.name, n.kind, n.precision, n.tactic_name) for n in first.nodes]
    assert not any("precision_ms" in n.meta or "layout_ms" in n.meta for n in again.nodes)
    assert clock.calls == 0


def test_the_inspector_shows_what_was_timed(timed_cpu, capsys):
    from backends.engine.runtime import Runtime
    timed_cpu(FP16_FAST_BUT_CONV2)
    net, _ = parse_onnx(_convs())
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.FP16)
    engine = Runtime().deserialize_engine(Builder().build_serialized_network(net, cfg))
    layers = {l["Name"]: l for l in engine.create_engine_inspector().layers()}
    conv2 = next(l for k, l in layers.items() if "conv2" in k and l["LayerType"].startswith("Convolution"))
    assert conv2["Precision"] == "float32" and conv2["PrecisionTimings_ms"]["float16"] >= 10.0
    assert conv2["LayoutTimings_ms"]["nchw"] < conv2["LayoutTimings_ms"]["nhwc"]


def test_reformats_towards_fp32_only_readers_count_too(timed_cpu):
    """conv → Cast (FP32 only): FP16 saves 0.8 ms on the conv, but needs a reformat in (0.6) and one towards the
    Cast (0.6): FP32. With a cheaper conversion FP16 wins."""
    from onnx import TensorProto
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["c"], ["i"], name="to_int", to=TensorProto.INT32),
             helper.make_node("Cast", ["i"], ["y"], name="to_float", to=TensorProto.FLOAT)]
    m = model(nodes, [("x", [1, 3, 8, 8])], ["y"], [const("w", w)])
    timed_cpu({("conv", "Convolution", "float16"): 0.2, (None, "Reformat", None): 0.6}, default=1.0)
    g = build(m, BuilderFlag.FP16, nhwc=False)
    conv = _named(g, "conv")
    assert conv.precision == "float32"
    assert conv.meta["precision_ms"]["float16"] == pytest.approx(0.2 + 2 * 0.6)
    timed_cpu({("conv", "Convolution", "float16"): 0.2, (None, "Reformat", None): 0.3}, default=1.0)
    assert _named(build(m, BuilderFlag.FP16, nhwc=False), "conv").precision == "float16"


def test_fp16_stays_unless_fp32_is_clearly_faster(timed_cpu):
    """FP32 must beat FP16 (reformats included) by 10% and by 0.02 ms to replace it: 5% faster, or 50% faster
    but only by 0.01 ms, keeps FP16."""
    for fp16, fp32 in ((1.0, 0.95), (0.02, 0.01)):
        timed_cpu({(None, "Reformat", None): 0.0, (None, None, "float16"): fp16, (None, None, "float32"): fp32})
        g = build(_convs(), BuilderFlag.FP16, nhwc=False)
        assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"float16"}, (fp16, fp32)
    timed_cpu({(None, "Reformat", None): 0.0, (None, None, "float16"): 1.0, (None, None, "float32"): 0.85})
    g = build(_convs(), BuilderFlag.FP16, nhwc=False)
    assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"float32"}


def test_tactic_heuristic_builds_keep_the_rules(timed_cpu):
    """ENABLE_TACTIC_HEURISTIC times nothing: layout and precision follow the device's rules too."""
    clock = timed_cpu(FP16_FAST_BUT_CONV2)
    g = build(_convs(), BuilderFlag.FP16, BuilderFlag.ENABLE_TACTIC_HEURISTIC)
    assert clock.calls == 0
    assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"float16"}


def test_a_user_selector_narrows_what_is_timed(timed_cpu):
    """conv2's FP16 is fast only with winograd-f4x3; a selector that forbids that tactic leaves it FP32."""
    from backends.engine.builder.config import AlgorithmSelector

    class NoF4x3(AlgorithmSelector):
        def select_algorithms(self, context, choices):
            return [i for i, c in enumerate(choices) if c.implementation != "winograd-f4x3"]

    costs = {("conv2", None, "float16", "winograd-f4x3"): 0.1, ("conv2", None, "float16"): 5.0,
             (None, "Reformat", None): 0.01, (None, None, "float16"): 0.25}
    timed_cpu(costs)
    assert _named(build(_convs(), BuilderFlag.FP16, nhwc=False), "conv2").precision == "float16"
    timed_cpu(costs)
    g = build(_convs(), BuilderFlag.FP16, nhwc=False, selector=NoF4x3())
    assert _named(g, "conv2").precision == "float32"
    assert _named(g, "conv2").meta["precision_ms"]["float16"] == pytest.approx(5.0, abs=0.05)


def test_a_conversion_two_readers_share_is_paid_once(timed_cpu):
    """x feeds conv_a and conv_b. conv_a goes FP16 (0.1 + 1.0 for converting x, against 2.0); conv_b's FP16 (1.0)
    then reads the same converted x and beats its FP32 (1.5), though 1.0 + another conversion would not."""
    wa = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    wb = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ya"], name="conv_a", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "wb"], ["yb"], name="conv_b", pads=[1, 1, 1, 1])]
    m = model(nodes, [("x", [1, 3, 8, 8])], ["ya", "yb"], [const("wa", wa), const("wb", wb)])
    timed_cpu({("float32->float16", "Reformat", None): 1.0, (None, "Reformat", None): 0.0,
               ("conv_a", None, "float16"): 0.1, ("conv_a", None, "float32"): 2.0,
               ("conv_b", None, "float16"): 1.0, ("conv_b", None, "float32"): 1.5})
    g = build(m, BuilderFlag.FP16, nhwc=False)
    assert (_named(g, "conv_a").precision, _named(g, "conv_b").precision) == ("float16", "float16")
    assert _named(g, "conv_b").meta["precision_ms"]["float16"] == pytest.approx(1.0)
    assert sum(1 for n in g.nodes if n.kind == "Reformat" and "x" in n.inputs) == 1


def test_only_compute_bound_layers_are_timed(timed_cpu):
    """A pooling layer whose FP16 'times' 10x slower keeps the rule (FP16): small and memory-bound layers time
    launch gaps, not work; the convolutions around it are timed."""
    w = RNG.standard_normal((4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("MaxPool", ["c"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    m = model(nodes, [("x", [1, 3, 8, 8])], ["y"], [const("w", w)])
    clock = timed_cpu({("pool", None, "float16"): 10.0, (None, "Reformat", None): 0.0, (None, None, "float16"): 0.5})
    g = build(m, BuilderFlag.FP16, nhwc=False)
    assert clock.calls > 0
    pool, conv = _named(g, "pool"), _named(g, "conv")
    assert (pool.kind, pool.precision, "precision_ms" in pool.meta) == ("Pooling", "float16", False)
    assert conv.precision == "float16" and set(conv.meta["precision_ms"]) == {"float16", "float32"}


def _constrained(*flags):
    from backends.engine.builder.precision_spec import parse_layer_precisions
    net, _ = parse_onnx(_convs())
    cfg = BuilderConfig()
    for f in (BuilderFlag.FP16,) + flags:
        cfg.set_flag(f)
    cfg.prefer_nhwc = False
    cfg.layer_precisions = parse_layer_precisions(["conv2:fp32"])
    return Builder().build_graph(net, cfg)


def test_constraints_under_obey_are_not_timed(timed_cpu):
    timed_cpu({(None, "Reformat", None): 0.0, (None, None, "float16"): 0.25})
    g = _constrained(BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    conv2 = _named(g, "conv2")
    assert conv2.precision == "float32" and "precision_ms" not in conv2.meta
    assert _named(g, "conv1").precision == "float16" and "precision_ms" in _named(g, "conv1").meta


def test_a_constraint_without_flags_is_honoured_where_timing_does_not_beat_it(timed_cpu):
    """Without PREFER/OBEY a constraint is a hint (TensorRT): conv2 pinned to FP32 keeps it where FP32 times faster,
    and runs FP16 (with a warning) where FP16 is clearly faster."""
    timed_cpu({("conv2", None, "float16"): 10.0, (None, "Reformat", None): 0.0, (None, None, "float16"): 0.25})
    assert _named(_constrained(), "conv2").precision == "float32"
    timed_cpu({(None, "Reformat", None): 0.0, (None, None, "float16"): 0.25})
    conv2 = _named(_constrained(), "conv2")
    assert conv2.precision == "float16" and set(conv2.meta["precision_ms"]) == {"float16", "float32"}


def _int8_build(m, *flags, ranges=8.0, nhwc=False):
    """An implicit INT8 build of `m`: every tensor's dynamic range +-ranges (no calibration)."""
    net, _ = parse_onnx(m)
    for t in net.tensors.values():
        t.set_dynamic_range(-ranges, ranges)
    cfg = BuilderConfig()
    for f in (BuilderFlag.INT8,) + flags:
        cfg.set_flag(f)
    cfg.prefer_nhwc = nhwc
    return Builder().build_graph(net, cfg)


def test_int8_is_a_permission_a_slower_int8_layer_runs_fp16(timed_cpu):
    """INT8 + FP16: conv2's INT8 tactics are slower than its FP16 ones (reformats included): it runs FP16 and says
    why; conv1 and conv3, where INT8 is fastest, stay INT8."""
    timed_cpu({("conv2", None, "int8"): 5.0, (None, None, "int8"): 0.1, (None, "Reformat", None): 0.01,
               (None, None, "float16"): 0.5})
    m = _convs()
    g = _int8_build(m, BuilderFlag.FP16)
    conv1, conv2, conv3 = (_named(g, f"conv{i}") for i in (1, 2, 3))
    assert (conv1.precision, conv2.precision, conv3.precision) == ("int8", "float16", "int8")
    assert "int8" not in conv2.params and conv2.meta["int8_note"].startswith("not INT8: float16 is faster")
    assert conv2.meta["precision_ms"]["int8"] >= 5.0 and conv2.meta["precision_ms"]["float16"] < 1.0
    assert conv1.meta["int8_note"].startswith("INT8 in")
    # the values: conv2 in FP16 on conv1's INT8 output, close to the all-FP32 engine
    x = RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)
    ref = run(build(m), {"x": x})[0]
    got = run(g, {"x": x})[0]
    assert np.corrcoef(got.ravel(), ref.ravel())[0, 1] > 0.99


def test_int8_reformat_costs_keep_an_fp16_chain_fp16(timed_cpu):
    """INT8 a little faster than FP16 per layer, but the FP16->FP32 reformat at its input costs more than it saves:
    behind an FP16 conv1 (its INT8 is slow), conv2 runs FP16; conv3 feeds the FP32 network output, where FP16
    would pay the reformat instead: INT8."""
    timed_cpu({("conv1", None, "int8"): 5.0, (None, None, "int8"): 0.9, (None, "Reformat", None): 0.5,
               (None, None, "float16"): 1.0}, default=3.0)
    g = _int8_build(_convs(), BuilderFlag.FP16)
    assert [_named(g, f"conv{i}").precision for i in (1, 2, 3)] == ["float16", "float16", "int8"]
    assert _named(g, "conv2").meta["precision_ms"]["int8"] == pytest.approx(0.9 + 0.5)
    assert _named(g, "conv3").meta["precision_ms"]["float16"] == pytest.approx(1.0 + 0.5)


def test_a_layer_leaving_int8_is_decided_before_the_layout_pass(timed_cpu):
    """INT8 kernels take NCHW; a layer whose INT8 is slower leaves INT8 before the layout pass, so it gets the NHWC
    layout an FP16 build gives it (here forced) instead of staying NCHW between transposes."""
    timed_cpu({("conv2", None, "int8"): 5.0, (None, None, "int8"): 0.1, (None, "Reformat", None): 0.01,
               (None, None, "float16"): 0.5})
    g = _int8_build(_convs(), BuilderFlag.FP16, nhwc=True)
    conv1, conv2, conv3 = (_named(g, f"conv{i}") for i in (1, 2, 3))
    assert [(c.kind, c.precision) for c in (conv1, conv2, conv3)] == \
        [("Convolution", "int8"), ("ConvolutionNHWC", "float16"), ("Convolution", "int8")]
    assert conv2.meta["precision_ms"]["int8"] >= 5.0 and "float16" in conv2.meta["precision_ms"]


def test_int8_alone_is_timed_against_fp32_and_ties_go_to_int8(timed_cpu):
    timed_cpu({(None, None, "int8"): 1.02, (None, "Reformat", None): 0.0}, default=1.0)
    g = _int8_build(_convs())
    assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"int8"}
    timed_cpu({(None, None, "int8"): 2.0}, default=1.0)
    g = _int8_build(_convs())
    assert {_named(g, f"conv{i}").precision for i in (1, 2, 3)} == {"float32"}
    assert all("int8" not in _named(g, f"conv{i}").params for i in (1, 2, 3))


def test_a_tf32_build_times_its_layout_in_tf32(timed_cpu):
    """Layout timing runs each convolution in the math it will run with: TF32 NHWC is fast here, strict FP32 NHWC
    slow, NCHW in between. Timed in strict FP32 (the old way) NCHW would win, and TF32 would then run NCHW."""
    clock = timed_cpu({})
    seen = []

    def ms(op, tactic):
        if op.kind == "ConvolutionNHWC":
            seen.append(op.math)
            return 0.1 if op.math == "tf32" else 10.0
        return 0.01 if op.kind == "Shuffle" else 1.0
    clock.ms = ms
    g = build(_convs(n=2), BuilderFlag.TF32)
    assert "tf32" in seen and "" not in seen and None not in seen
    assert [n.kind for n in g.nodes if n.kind.startswith("Conv")] == ["ConvolutionNHWC"] * 2
    assert all(n.meta.get("math") == "tf32" for n in g.nodes if n.kind.startswith("Conv"))
    assert _named(g, "conv1").meta["layout_ms"] == {"nhwc": pytest.approx(0.22), "nchw": pytest.approx(2.0)}
    seen.clear()
    strict = build(_convs(n=2))          # no TF32 flag: strict FP32 is timed, and here it is slower in NHWC
    assert seen and set(seen) == {""}
    assert [n.kind for n in strict.nodes if n.kind.startswith("Conv")] == ["Convolution"] * 2


class _T:
    def __init__(self, name, host=False):
        self.name, self.host_layer = name, host

    def __repr__(self):
        return self.name


def test_probes_time_the_first_plan_of_each_family():
    """Layout/precision probes time cuDNN's first plan and cuBLASLt's first algorithm, every distinct kernel, and
    fall back to the other plans, then host layers, only when none of those runs."""
    from backends.engine.builder import timed_choice as tc
    cands = [_T(n) for n in ("cudnn-plan-0", "cudnn-plan-1", "cudnn-plan-2", "im2col-cublas", "winograd-f4x3",
                             "cublaslt-algo-0", "cublaslt-algo-1")] + [_T("host", host=True)]

    class Dev:
        @staticmethod
        def preferred(ts):
            return [t for t in ts if not t.host_layer]
    groups = [[t.name for t in g] for g in tc._probe_groups(cands, Dev)]
    assert groups == [["cudnn-plan-0", "im2col-cublas", "winograd-f4x3", "cublaslt-algo-0"],
                      ["cudnn-plan-1", "cudnn-plan-2", "cublaslt-algo-1"], ["host"]]
    assert tc.family("cudnn-plan-12") == "cudnn-plan" and tc.family("winograd-f4x3") == "winograd-f4x3"
