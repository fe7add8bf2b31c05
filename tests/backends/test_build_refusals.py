"""Build decides, runtime obeys: a candidate that refuses the inputs the build's own run hands it (TacticRefusal,
the run-time-only refusal) is passed over in that run and is no candidate for tactic selection, so the plan never
records a tactic that refuses what the runtime will give it — with timing and in heuristic mode alike."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx
from backends.engine.builder import Builder
from backends.engine.runtime.executor import GraphExecutor
from native import tactics as registry
from native.tactics import Tactic, TacticRefusal, tactics_for


class RefusesNegatives(Tactic):
    """Claims every Activation at build (supports() sees nothing wrong) but refuses inputs holding a negative value:
    a property only the values show, as a GPU kernel's data-dependent limit would be."""
    kind, name, device = "Activation", "refuses-negatives", "cpu"
    runs = 0

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        RefusesNegatives.runs += 1
        if (inputs[0] < 0).any():
            raise TacticRefusal("negative inputs need the other kernel")
        return [np.maximum(inputs[0], 0)]


@pytest.fixture
def refusing_first():
    """RefusesNegatives registered as the FIRST Activation tactic on the CPU (the default an untimed build takes)."""
    bucket = registry._REGISTRY.setdefault(("cpu", "Activation"), [])
    tactic = RefusesNegatives()
    bucket.insert(0, tactic)
    RefusesNegatives.runs = 0
    try:
        yield tactic
    finally:
        bucket.remove(tactic)


def relu_model(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize("heuristic", [False, True])
def test_a_candidate_refusing_the_builds_run_is_not_chosen(tmp_path, refusing_first, heuristic):
    assert tactics_for("Activation", "cpu")[0] is refusing_first
    relu_model(str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    config = BuilderConfig()
    if heuristic:
        config.set_flag("enable_tactic_heuristic")
    feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}
    graph = Builder().build_graph(net, config, timing_feeds=feeds)
    node = next(n for n in graph.nodes if n.kind == "Activation")
    assert RefusesNegatives.runs >= 1                    # the build's run tried it first ...
    assert node.tactic_name != "refuses-negatives"       # ... and the plan records another tactic
    assert "refused_at_build" not in node.meta           # build-time evidence stays out of the plan
    out = GraphExecutor(graph, "cpu").run(feeds)
    np.testing.assert_array_equal(out[graph.output_names[0]], np.maximum(feeds["x"], 0))


def test_a_candidate_that_accepts_the_builds_inputs_stays_the_default(tmp_path, refusing_first):
    relu_model(str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    config = BuilderConfig()
    config.set_flag("enable_tactic_heuristic")
    feeds = {"x": np.linspace(0, 1, 16, dtype=np.float32).reshape(2, 8)}    # nothing to refuse
    graph = Builder().build_graph(net, config, timing_feeds=feeds)
    node = next(n for n in graph.nodes if n.kind == "Activation")
    assert node.tactic_name == "refuses-negatives"


def test_the_builds_run_takes_a_float32_tactic_for_a_layer_asked_a_precision_none_computes(tmp_path):
    """A layer the precision pass put in FP16 whose kind has only FP32 tactics (an RNN on the CPU) runs its FP32
    tactic in the build's runs, as tactic selection will choose, instead of failing the run ("no implementation")."""
    from backends.engine.runtime.executor import default_tactic
    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("W", [1, 8, 4]), ("R", [1, 8, 2]))]
    g = helper.make_graph([helper.make_node("RNN", ["x", "W", "R"], ["y"], name="rnn", hidden_size=2)], "g", [x], [y],
                          inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    graph = Builder().build_graph(net, BuilderConfig(), timing_feeds={"x": np.ones((3, 1, 4), np.float32)})
    node = next(n for n in graph.nodes if n.kind == "RNN")
    node.tactic_id, node.precision = None, "float16"
    assert "float16" not in {p for t in tactics_for("RNN", "cpu") for p in t.precisions}
    assert default_tactic(node, "cpu").name == tactics_for("RNN", "cpu")[0].name


def test_the_gpu_stft_declares_the_float32_signal_it_needs(monkeypatch):
    """An FP16 build hands the STFT a float16 signal: supports() says so at build (the host plugin runs it), instead
    of the GPU tactic refusing at run time (asr_nemo80 / asr_whisper80 --fp16 on an H200, 2026-11-28)."""
    from native.cuda import availability
    from native.cuda.tactics.signal import GpuStft
    from native.tactics import LayerContext, Op, unsupported_reason
    monkeypatch.setitem(availability._FOUND, "cublasLt", True)   # its GEMM library, as on the GPU machine
    op = Op("Plugin", "stft", {"plugin_type": "STFT"})
    assert unsupported_reason(GpuStft(), op, LayerContext([[1, 16000], [1]], ["float16", "int64"])) == \
        "reads float16 at input 0; its kernels take float32"
    why = unsupported_reason(GpuStft(), op, LayerContext([[1, 16000], [1]], ["float32", "int64"]))
    assert why is None or "reads" not in why    # (here it may lack its GEMM library; the signal is not the reason)


class _Float32Only(Tactic):
    """A float32 kernel that reads float32 only (a GPU kernel's declared input dtypes), refusing anything else."""
    kind, name, device = "Activation", "f32-reads-f32", "cpu"
    input_dtypes = frozenset({"float32"})

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        if inputs[0].dtype != np.float32:
            raise TacticRefusal("reads float32 only")
        return [np.maximum(inputs[0], 0)]


class _Float32AnyInput(Tactic):
    """A float32 kernel that takes any float input (the host plugin's role)."""
    kind, name, device = "Activation", "f32-reads-any", "cpu"
    ran_with = None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        _Float32AnyInput.ran_with = op.precision
        return [np.maximum(inputs[0].astype(np.float32), 0)]


def test_one_fallback_rule_for_a_precision_no_tactic_computes(tmp_path):
    """A layer asked FP16 whose kind has only FP32 tactics, reading a float16 tensor: the default pick, the build's
    run and tactic selection all answer with the FP32 tactic that takes a float16 input (native.tactics.accepting);
    the build's run no longer runs the first FP32 tactic regardless of the dtypes and fails on its refusal (the GPU
    STFT in an FP16 build of asr_nemo80, 2026-11-28)."""
    from backends.engine.builder.config import BuilderConfig as Config
    from backends.engine.builder.tactic_selection import enumerate_candidates
    from backends.engine.runtime.executor import default_tactic
    from native.tactics import LayerContext, accepting
    bucket = registry._REGISTRY.setdefault(("cpu", "Activation"), [])
    saved = list(bucket)
    bucket[:] = [_Float32Only(), _Float32AnyInput()]
    try:
        relu_model(str(tmp_path / "m.onnx"))
        net, _ = parse_onnx(str(tmp_path / "m.onnx"))
        graph = Builder().build_graph(net, BuilderConfig(), timing_feeds={"x": np.ones((2, 8), np.float32)})
        node = next(n for n in graph.nodes if n.kind == "Activation")
        node.tactic_id, node.precision = None, "float16"
        ctx = LayerContext([[2, 8]], ["float16"])
        ok, ran, reasons = accepting(bucket, registry.Op("Activation", "relu", {}, precision="float16"), ctx)
        assert [t.name for t in ok] == ["f32-reads-any"] and ran.precision == "float32"
        assert reasons["f32-reads-f32"] == "reads float16 at input 0; its kernels take float32"
        found = enumerate_candidates(node, ctx, Config(), "cpu")
        assert [t.name for t in found.ok] == ["f32-reads-any"] and found.fp32_only
        assert default_tactic(node, "cpu").name == "f32-reads-f32"    # no dtypes known yet: the first FP32 one
        x = np.linspace(-1, 1, 16).astype(np.float16).reshape(2, 8)
        _Float32AnyInput.ran_with = None
        ex = GraphExecutor(graph, "cpu", keep_all=True)
        out = ex._first_accepting(node, default_tactic(node, "cpu"), registry.Op("Activation", "relu", {},
                                                                                 precision="float16"), [x], None, None)
        assert out[1].name == "f32-reads-any" and _Float32AnyInput.ran_with == "float32"
        np.testing.assert_array_equal(out[0][0], np.maximum(x.astype(np.float32), 0))
    finally:
        bucket[:] = saved


def if_relu_model(path):
    """y = If(c, then: Relu(x), else: x + x): the Relu in a subgraph body, reading the outer x."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    c = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    then_out = helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 8])
    else_out = helper.make_tensor_value_info("e", TensorProto.FLOAT, [2, 8])
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="body_relu")], "then", [], [then_out])
    else_g = helper.make_graph([helper.make_node("Add", ["x", "x"], ["e"], name="body_add")], "else", [], [else_out])
    node = helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g)
    g = helper.make_graph([node], "g", [x, c], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)


def _body_nodes(graph):
    for n in graph.nodes:
        for sub in n.subgraphs.values():
            yield from _body_nodes(sub)
            yield from sub.nodes


@pytest.mark.parametrize("heuristic", [False, True])
def test_a_body_layer_refusing_the_builds_run_gives_way_to_the_next_candidate_inside_the_body(
        tmp_path, refusing_first, heuristic):
    """A layer inside an If body whose bound tactic refuses the build's inputs runs the next candidate there (the
    host twin, on a GPU: NonMaxSuppression inputs the GPU kernel does not take, in tv-ssdlite320's If on CUDA,
    2026-11-28), instead of the refusal passing for the If's own and leaving the If no tactic at all."""
    if_relu_model(str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    config = BuilderConfig()
    if heuristic:
        config.set_flag("enable_tactic_heuristic")
    feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8), "c": np.array(True)}
    graph = Builder().build_graph(net, config, timing_feeds=feeds)
    relu = next(n for n in _body_nodes(graph) if n.kind == "Activation")
    assert RefusesNegatives.runs >= 1                    # the body's run tried it ...
    assert relu.tactic_name not in (None, "refuses-negatives")    # ... and the plan records the next one
    assert "refused_at_build" not in relu.meta
    branch = next(n for n in graph.nodes if n.kind == "If")
    assert branch.tactic_name is not None
    out = GraphExecutor(graph, "cpu").run(feeds)
    np.testing.assert_array_equal(out[graph.output_names[0]], np.maximum(feeds["x"], 0))
    out = GraphExecutor(graph, "cpu").run(dict(feeds, c=np.array(False)))
    np.testing.assert_array_equal(out[graph.output_names[0]], feeds["x"] * 2)


@pytest.mark.parametrize("fp16", [False, True])
def test_refusals_seen_in_another_precision_are_dropped_when_the_precision_pass_changes_it(tmp_path, fp16):
    """The precision pass's probe runs a layer in FP32 before choosing its precision: what refused that run (on a
    GPU: a strict-FP32 cuDNN plan that fails to build) may run the layer in FP16, so a layer whose precision the
    pass changes forgets the refusals; one that keeps its precision keeps them."""
    from backends.engine.builder.config import BuilderFlag
    from backends.engine.builder.lower import lower
    from backends.engine.builder.passes.precision import assign_precision
    from native.logger import G_LOGGER
    relu_model(str(tmp_path / "m.onnx"))
    net, _ = parse_onnx(str(tmp_path / "m.onnx"))
    graph = lower(net)
    node = next(n for n in graph.nodes if n.kind == "Activation")
    node.meta["refused_at_build"] = {"some-kernel": "failed to build in float32"}
    config = BuilderConfig()
    if fp16:
        config.set_flag(BuilderFlag.FP16)
    assign_precision(graph, config, G_LOGGER)
    assert node.precision == ("float16" if fp16 else "float32")
    assert ("refused_at_build" in node.meta) is not fp16


class CompilesFirst(Tactic):
    """An Activation tactic whose first run compiles (Tactic.ready False until it has run), as a cuDNN runtime-fusion
    plan: the builder's runs, which need the layer's values, run a ready candidate instead."""
    kind, name, device = "Activation", "compiles-first", "cpu"
    runs = 0

    def ready(self, op, input_shapes):
        return CompilesFirst.runs > 0

    def config(self, op, input_shapes):
        return "kernel-7"     # what it runs inside: recorded in the plan (a cuDNN engine config)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        CompilesFirst.runs += 1
        return [np.maximum(inputs[0], 0)]


def test_the_builds_runs_take_a_ready_candidate_before_one_that_compiles(tmp_path):
    bucket = registry._REGISTRY.setdefault(("cpu", "Activation"), [])
    tactic = CompilesFirst()
    bucket.insert(0, tactic)
    CompilesFirst.runs = 0
    try:
        relu_model(str(tmp_path / "m.onnx"))
        net, _ = parse_onnx(str(tmp_path / "m.onnx"))
        config = BuilderConfig()
        config.set_flag("enable_tactic_heuristic")
        feeds = {"x": np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)}
        graph = Builder().build_graph(net, config, timing_feeds=feeds)
        node = next(n for n in graph.nodes if n.kind == "Activation")
        assert CompilesFirst.runs == 0                 # the build's run took the ready one ...
        assert node.tactic_name == "compiles-first"    # ... and the untimed build still picks the default
        assert node.meta["tactic_config"] == "kernel-7"
        out = GraphExecutor(graph, "cpu").run(feeds)
        assert CompilesFirst.runs == 1
        np.testing.assert_array_equal(out[graph.output_names[0]], np.maximum(feeds["x"], 0))
    finally:
        bucket.remove(tactic)


def test_the_inspector_shows_what_a_tactic_runs_inside(tmp_path):
    from backends.engine.runtime.runtime import Runtime
    from backends.engine.plan import serialize_plan
    bucket = registry._REGISTRY.setdefault(("cpu", "Activation"), [])
    tactic = CompilesFirst()
    bucket.insert(0, tactic)
    try:
        relu_model(str(tmp_path / "m.onnx"))
        net, _ = parse_onnx(str(tmp_path / "m.onnx"))
        config = BuilderConfig()
        config.set_flag("enable_tactic_heuristic")
        graph = Builder().build_graph(net, config, timing_feeds={"x": np.ones((2, 8), np.float32)})
        engine = Runtime().deserialize_engine(serialize_plan(graph, config))
        (layer,) = [l for l in engine.create_engine_inspector().layers() if l["LayerType"] == "Activation"]
        assert layer["TacticName"] == "compiles-first" and layer["TacticConfig"] == "kernel-7"
    finally:
        bucket.remove(tactic)
