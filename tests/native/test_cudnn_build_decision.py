"""The cuDNN convolution tactic decides at build time (supports()), with a fake cuDNN frontend on the CPU: a graph
cuDNN declines (conv + residual add + sigmoid here) and a plan index past the graph's plans are refusals with
cuDNN's reason, decided once per signature; what it accepts runs. On the GPU the same decision is made by the real
frontend (tests/native/cuda/test_cuda_device.py::test_gpu_convolution_with_fused_epilogue_matches_cpu)."""
import sys
import types

import numpy as np
import pytest

from native.tactics import LayerContext, Op, registered_tactics, unsupported_reason

cudnn_conv = pytest.importorskip("native.cuda.tactics.cudnn_conv")


def _fake_frontend(declines=("add", "sigmoid"), plans=2):
    """A cudnn module whose graphs record their ops; check_support() declines a graph holding every op of
    `declines`, as cuDNN frontend 1.x does for some NCHW epilogues."""
    built = []

    class Tensor:
        def __getattr__(self, name):     # set_output, set_data_type, set_dim, set_stride
            return lambda *a, **k: self

    class Graph:
        def __init__(self, **kw):
            self.ops = []
            built.append(self)

        def tensor(self, **kw):
            return Tensor()

        def _op(self, name):
            def op(**kw):
                self.ops.append(name)
                return Tensor()
            return op

        def __getattr__(self, name):     # conv_fprop, bias, add, relu, sigmoid, ...
            if name in ("validate", "build_operation_graph", "deselect_numeric_notes", "create_execution_plans",
                        "build_plan_at_index"):
                return lambda *a, **k: None
            return self._op(name)

        def check_support(self):
            if all(d in self.ops for d in declines):
                raise RuntimeError("[cudnn_frontend] Error: No execution plans support the graph.")

        def get_execution_plan_count(self):
            return plans

        def get_workspace_size_plan_at_index(self, j):
            return 0

    ns = types.SimpleNamespace
    mod = types.ModuleType("cudnn")
    mod.pygraph = Graph
    mod.data_type = ns(FLOAT="f", HALF="h", BFLOAT16="b")
    mod.numerical_note = ns(DOWN_CONVERT_INPUTS=1, TENSOR_CORE=2)
    mod.heur_mode = ns(A="a", FALLBACK="fb")
    return mod, built


@pytest.fixture
def fake(monkeypatch):
    mod, built = _fake_frontend()
    monkeypatch.setitem(sys.modules, "cudnn", mod)
    monkeypatch.setattr(cudnn_conv, "available", lambda: True)
    monkeypatch.setattr(cudnn_conv, "handle", lambda: None)
    monkeypatch.setattr(cudnn_conv, "_GRAPHS", {})
    monkeypatch.setattr(cudnn_conv, "_DECIDED", {})
    monkeypatch.setattr(cudnn_conv, "_FAILED", {})
    monkeypatch.setattr(cudnn_conv, "_FAMILY", {})
    monkeypatch.setattr(cudnn_conv, "_BUILT", {})
    monkeypatch.setattr(cudnn_conv, "_BUILT_AT", {})
    monkeypatch.setattr(cudnn_conv, "_BOUNDED", True)      # as in a build (Device.begin_build)
    return built


def _tactic(index, kind="Convolution"):
    return next(t for t in registered_tactics("cuda") if t.kind == kind and t.name == f"cudnn-plan-{index}")


def _conv(post_ops=()):
    rng = np.random.default_rng(0)
    return Op("Convolution", "conv2", {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "group": 1,
                                       "post_ops": list(post_ops)},
              {"kernel": rng.standard_normal((24, 24, 1, 1)).astype(np.float32),
               "bias": np.zeros(24, np.float32)})


RESIDUAL_SIGMOID = [{"op": "add", "input": 1}, {"op": "activation", "type": "SIGMOID"}]


def test_a_graph_cudnn_declines_is_refused_at_build_with_its_reason(fake):
    ctx = LayerContext([[2, 24, 15, 11], [2, 24, 15, 11]], ["float32", "float32"])
    why = unsupported_reason(_tactic(0), _conv(RESIDUAL_SIGMOID), ctx)
    assert why is not None and "cuDNN has no engine for this convolution graph" in why
    assert "No execution plans support the graph" in why
    assert len(fake) == 1 and fake[0].ops == ["conv_fprop", "bias", "add", "sigmoid"]
    # decided once per signature and plan: asking again builds nothing
    assert unsupported_reason(_tactic(0), _conv(RESIDUAL_SIGMOID), ctx) == why and len(fake) == 1


def test_what_cudnn_accepts_is_a_candidate_and_plans_past_its_count_are_not(fake):
    ctx = LayerContext([[2, 24, 15, 11], [2, 24, 15, 11]], ["float32", "float32"])
    relu = [{"op": "add", "input": 1}, {"op": "activation", "type": "RELU"}]
    assert unsupported_reason(_tactic(0), _conv(relu), ctx) is None
    assert unsupported_reason(_tactic(1), _conv(relu), ctx) is None
    assert len(fake) == 1                      # one graph for the signature, shared by its plans
    why = unsupported_reason(_tactic(2), _conv(relu), ctx)
    assert why == "cuDNN has 2 usable execution plan(s) for this convolution"


def test_the_profile_shapes_and_the_storage_type_decide_too(fake):
    # cuDNN declines the graph only at the profile's max shapes: refused, naming those shapes
    mod, built = _fake_frontend(declines=("conv_fprop",))
    calls = []

    class OnlySmall(mod.pygraph):
        def check_support(self):
            calls.append(1)
            if len(calls) > 1:
                raise RuntimeError("not at this size")
    mod.pygraph = OnlySmall
    sys.modules["cudnn"] = mod     # (the fixture's monkeypatch restores the module table)
    ctx = LayerContext([[1, 24, 8, 8]], ["float32"], min_shapes=[[1, 24, 8, 8]], max_shapes=[[8, 24, 64, 64]])
    why = unsupported_reason(_tactic(0), _conv(), ctx)
    assert why is not None and "not at this size" in why and "[8, 24, 64, 64]" in why
    # an FP32 layer handed float16 storage: refused at build, not at run time
    half = LayerContext([[1, 24, 8, 8]], ["float16"])
    assert "one float storage type" in unsupported_reason(_tactic(0), _conv(), half)
    # a residual of another shape than the output
    bad = LayerContext([[1, 24, 8, 8], [1, 24, 4, 4]], ["float32", "float32"])
    assert "does not match the output" in unsupported_reason(_tactic(0), _conv([{"op": "add", "input": 1}]), bad)


def test_release_drops_graphs_decisions_and_handles(fake, monkeypatch):
    """What the atexit hook does (so nanobind finds no frontend object alive at interpreter exit)."""
    destroyed = []
    monkeypatch.setattr(sys.modules["cudnn"], "destroy_handle", destroyed.append, raising=False)
    monkeypatch.setattr(cudnn_conv, "_HANDLE", {1: "h1"})
    ctx = LayerContext([[2, 24, 15, 11], [2, 24, 15, 11]], ["float32", "float32"])
    assert unsupported_reason(_tactic(0), _conv(), ctx) is None
    assert cudnn_conv._GRAPHS and cudnn_conv._DECIDED
    cudnn_conv.release()
    assert not cudnn_conv._GRAPHS and not cudnn_conv._DECIDED and not cudnn_conv._HANDLE and destroyed == ["h1"]


def test_asking_a_tactic_builds_no_plan(fake):
    """A probe asks every cudnn-plan-<i> whether it supports a layer but times only plan 0: asking builds the
    graph (cuDNN's heuristics) and no plan; a plan (a kernel compile each on cuDNN's runtime-fusion engines) is
    built when its tactic first runs."""
    mod = sys.modules["cudnn"]
    builds = []
    mod.pygraph.build_plan_at_index = lambda self, j: builds.append(j)
    ctx = LayerContext([[2, 24, 15, 11]], ["float32"])
    assert unsupported_reason(_tactic(1), _conv(), ctx) is None
    assert unsupported_reason(_tactic(0), _conv(), ctx) is None
    assert builds == [] and len(fake) == 1          # the graph (cuDNN's heuristics) only
    (g,) = cudnn_conv._GRAPHS.values()
    assert g.plan(0) == (0, 0) and builds == [0]
    assert g.plan(1) == (1, 0) and builds == [0, 1]
    assert g.plan(0) == (0, 0) and builds == [0, 1]      # built once


def test_a_plan_that_fails_to_build_is_passed_over(fake):
    mod = sys.modules["cudnn"]
    builds = _ranked(mod, fails={1}, count=4)
    ctx = LayerContext([[2, 24, 15, 11]], ["float32"])
    assert unsupported_reason(_tactic(1), _conv(), ctx) is None      # offered by cuDNN, not built yet
    (g,) = cudnn_conv._GRAPHS.values()
    assert g.plan(0) == (0, 0) and g.plan(1) == (2, 0) and g.plan(2) == (3, 0)
    with pytest.raises(cudnn_conv.TacticRefusal, match=r"3 usable execution plan"):
        g.plan(3)
    assert builds == [0, 1, 2, 3] and g.built == 3 and g.failed == 1
    assert unsupported_reason(_tactic(3), _conv(), ctx).startswith("cuDNN has 3 usable execution plan(s)")


def _ranked(mod, fails, count=12, deselected=()):
    """The fake graphs rank `count` plans named cfg<j>; those in `fails` fail to build (a compile failure), those
    in `deselected` are refused by the note filters. Returns the list of builds attempted."""
    builds = []

    def build(self, j):
        if j in deselected:
            raise RuntimeError("[cudnn_frontend] Error: Deselecting execution plan")
        builds.append(j)
        if j in fails:
            raise RuntimeError(f"cfg{j} does not build")
    mod.pygraph.build_plan_at_index = build
    mod.pygraph.get_plan_name_at_index = lambda self, j: f"cfg{j}"
    mod.pygraph.get_execution_plan_count = lambda self: count
    return builds


def _conv_at(h, w, channels=24):
    return LayerContext([[1, channels, h, w]], ["float32"])


def _conv_c(channels):
    rng = np.random.default_rng(0)
    return Op("Convolution", "conv", {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "group": 1},
              {"kernel": rng.standard_normal((channels, channels, 3, 3)).astype(np.float32),
               "bias": np.zeros(channels, np.float32)})


def _plan0(h, w, channels=24):
    """Ask cudnn-plan-0 about a convolution at this size (builds its graph), then run its plan walk: (cuDNN's plan
    index) or the refusal's text."""
    why = unsupported_reason(_tactic(0), _conv_c(channels), _conv_at(h, w, channels))
    if why:
        return why
    g = next(g for k, g in cudnn_conv._GRAPHS.items() if k[0][1:] == (channels, h, w))
    try:
        return g.plan(0)[0]
    except cudnn_conv.TacticRefusal as e:
        return str(e)


def test_a_plan_that_failed_to_build_is_not_built_again_for_the_same_kind_of_convolution(fake):
    builds = _ranked(sys.modules["cudnn"], fails={0, 1, 2})
    assert _plan0(15, 11) == 3 and builds == [0, 1, 2, 3]
    # another size, same kind: the config that built is tried first, the ones that failed are passed over unbuilt
    assert _plan0(30, 22) == 3 and builds == [0, 1, 2, 3, 3]
    g = cudnn_conv._GRAPHS[next(k for k in cudnn_conv._GRAPHS if k[0][2] == 30)]
    assert g.failed == 0 and g.built == 1
    # another kind (channels aligned to 4, not 8): its own walk
    assert _plan0(15, 11, 12) == 3 and builds[5:] == [0, 1, 2, 3]


def test_a_family_starts_where_its_plans_built_even_when_cuDNN_names_them_apart(fake):
    """A strict-FP32 conv + bias + SiLU graph on Hopper fails a dozen ranked configs before one builds: the next
    graph of the kind starts at the rank where one built, by name or (names differing per size) by position."""
    mod = sys.modules["cudnn"]
    builds = _ranked(mod, fails=set(range(11)))
    mod.pygraph.get_plan_name_at_index = lambda self, j: f"cfg{j}-{id(self)}"    # a name per graph
    assert _plan0(15, 11) == 11 and len(builds) == 12
    del builds[:]
    assert _plan0(30, 22) == 11 and builds == [11]


def test_a_kind_of_convolution_cudnn_builds_nothing_for_is_given_up(fake):
    builds = _ranked(sys.modules["cudnn"], fails=set(range(12)))
    for i in range(4):
        assert "cuDNN has 0 usable" in _plan0(15 + i, 11)
    assert len(builds) == 12      # the first graph walks them all; the next ones pass the failed configs over
    # the kind has had FAMILY_FAILURES graphs with no plan: the next convolution builds nothing, not even its graph
    graphs = len(fake)
    why = unsupported_reason(_tactic(0), _conv_c(24), _conv_at(30, 22))
    assert len(builds) == 12 and "cuDNN has 0 usable" in why and "given up" in why
    assert len(fake) == graphs


def test_deselected_plans_cost_nothing_and_do_not_count_as_failed_builds(fake):
    builds = _ranked(sys.modules["cudnn"], fails=set(), deselected=set(range(6)))
    assert _plan0(15, 11) == 6
    assert builds == [6]
    (g,) = cudnn_conv._GRAPHS.values()
    assert g.failed == 0 and g.plan(1) == (7, 0)


def test_what_failed_goes_into_the_timing_cache_and_spares_the_next_process_the_builds(fake, monkeypatch):
    import json
    builds = _ranked(sys.modules["cudnn"], fails=set(range(12)))
    for i in range(4):
        _plan0(15 + i, 11)
    assert len(builds) == 12
    notes = json.loads(json.dumps(cudnn_conv.failed_plans()))        # what the timing cache file holds
    (entry,) = notes.values()
    assert entry == {"failed": sorted(f"cfg{j}" for j in range(12)), "built": 0, "failures": 4}
    # a new process (empty memo) with the cache: the kind is given up without a build
    monkeypatch.setattr(cudnn_conv, "_FAILED", {})
    monkeypatch.setattr(cudnn_conv, "_FAMILY", {})
    monkeypatch.setattr(cudnn_conv, "_BUILT", {})
    monkeypatch.setattr(cudnn_conv, "_BUILT_AT", {})
    monkeypatch.setattr(cudnn_conv, "_GRAPHS", {})
    monkeypatch.setattr(cudnn_conv, "_DECIDED", {})
    assert cudnn_conv.remember_failed_plans({**notes, "bad": {"failed": "x"}, "worse": [1]}) == 1
    why = unsupported_reason(_tactic(0), _conv_c(24), _conv_at(30, 22))
    assert len(builds) == 12 and "given up" in why


def test_a_plan_that_built_for_one_size_is_tried_again_where_it_failed(fake):
    mod = sys.modules["cudnn"]
    builds = _ranked(mod, fails=set())
    assert _plan0(15, 11) == 0     # cfg0 builds
    real = mod.pygraph.build_plan_at_index

    def fail_cfg0_once(self, j):
        if j == 0 and builds.count(0) == 1:
            builds.append(j)
            raise RuntimeError("cfg0 does not build at this size")
        return real(self, j)
    mod.pygraph.build_plan_at_index = fail_cfg0_once
    assert _plan0(30, 22) == 1      # cfg0 fails at this size, cfg1 builds
    assert _plan0(60, 44) == 0
    assert builds == [0, 0, 1, 0]       # cfg0 built once for the kind: tried again, not skipped


def test_a_loaded_engine_walks_the_ranked_plans_past_failures(fake, monkeypatch):
    """Outside a build the bounds are off: the plan a build timed is found even where this process never learnt
    what the build passed over (a failed config, a given-up kind), so the engine never refuses its own choice."""
    builds = _ranked(sys.modules["cudnn"], fails={0, 1})
    for i in range(2):
        _plan0(15 + i, 11)                          # the build: cfg0 and cfg1 failed, for two sizes
    monkeypatch.setattr(cudnn_conv, "_BOUNDED", False)
    del builds[:]
    assert _plan0(40, 11) == 2 and builds == [0, 1, 2]     # every ranked config in turn, none skipped


def test_a_deselected_refusal_that_compiled_first_counts_as_a_failed_build(fake, monkeypatch):
    """The frontend refuses a deselected engine name only after building the plan (a compile): such a refusal
    costs what a failed build costs and counts as one."""
    builds = _ranked(sys.modules["cudnn"], fails=set(), deselected={0})
    monkeypatch.setattr(cudnn_conv, "DESELECT_SECONDS", -1.0)      # every refusal "took longer" than the bound
    assert _plan0(15, 11) == 1
    (g,) = cudnn_conv._GRAPHS.values()
    assert g.failed == 1 and g.good == [1] and builds == [1]


def _costed(mod, monkeypatch, seconds, precompiled=(), count=6):
    """The fake graphs rank `count` configs cfg<j>, each built in `seconds` of a fake clock; those in `precompiled`
    carry no RUNTIME_COMPILATION note (and cost nothing). Returns the list of builds attempted."""
    now = [0.0]
    builds = []

    def build(self, j):
        builds.append(j)
        now[0] += 0.0 if j in precompiled else seconds
    mod.pygraph.build_plan_at_index = build
    mod.pygraph.get_plan_name_at_index = lambda self, j: f"cfg{j}"
    mod.pygraph.get_execution_plan_count = lambda self: count
    mod.pygraph.get_behavior_notes_for_plan_at_index = \
        lambda self, j: [] if j in precompiled else ["behavior_note.RUNTIME_COMPILATION"]
    monkeypatch.setattr(cudnn_conv, "_clock", lambda: now[0])
    monkeypatch.setattr(cudnn_conv, "_COMPILES", {})
    monkeypatch.setattr(cudnn_conv, "_SETTLED", set())
    return builds


def test_a_kind_whose_plans_compile_slowly_is_not_compiled_for_its_other_sizes(fake, monkeypatch):
    """yolov8n's strict-FP32 NHWC conv + bias + SiLU plans compiled at ~1.5 s each on an H200, once per size (47
    sizes): after SLOW_COMPILE_BUILDS such compiles the kind builds no more runtime-compiled plans, and the ones
    that built are not offered either (a warm build, which compiles none, makes the same choice)."""
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=1.5)
    assert _plan0(15, 11) == 0 and builds == [0]             # one compile: not yet known to be slow
    why = _plan0(30, 22)                                      # the second compile makes the kind slow
    assert builds == [0, 0] and "not built in this build" in why and "1.50 s each" in why
    why = _plan0(60, 44)                                      # a third size: nothing built, refused
    assert builds == [0, 0] and "runtime-compiled not built" in why
    # the size whose plan built is refused too (unsupported_reason asks may_have)
    assert "not built in this build" in unsupported_reason(_tactic(0), _conv_c(24), _conv_at(15, 11))
    # another compile class (FP16 storage would be one; here the fused steps differ: no bias) is not affected
    other = Op("Convolution", "conv", {"strides": [1, 1], "dilations": [1, 1], "pads": [0, 0, 0, 0], "group": 1},
               {"kernel": np.ones((24, 24, 3, 3), np.float32)})
    assert unsupported_reason(_tactic(0), other, _conv_at(15, 11)) is None


def test_a_slow_kind_still_builds_its_precompiled_configs(fake, monkeypatch):
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=1.5, precompiled={4})
    _plan0(15, 11), _plan0(30, 22)
    assert builds == [0, 0]
    assert _plan0(60, 44) == 4 and builds == [0, 0, 4]       # cfg0..3 compile: passed over unbuilt


def test_plans_past_the_first_are_compiled_only_while_compiles_are_cheap(fake, monkeypatch):
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=0.3)       # FP16 runtime fusion: ~0.05-0.4 s
    assert _plan0(15, 11) == 0
    (g,) = cudnn_conv._GRAPHS.values()
    with pytest.raises(cudnn_conv.TacticRefusal, match="past the first plan"):
        g.plan(1)
    assert builds == [0]
    assert "past the first plan" in unsupported_reason(_tactic(1), _conv_c(24), _conv_at(15, 11))
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=0.05)
    assert _plan0(30, 22) == 0
    g = next(g for k, g in cudnn_conv._GRAPHS.items() if k[0][2] == 30)
    assert g.plan(1) == (1, 0) and builds == [0, 1]


def test_compile_costs_go_into_the_timing_cache_so_a_warm_build_compiles_nothing_to_find_out(fake, monkeypatch):
    import json
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=1.5)
    _plan0(15, 11), _plan0(30, 22)
    notes = json.loads(json.dumps(cudnn_conv.compile_costs()))
    (entry,) = notes.values()
    assert entry == [2, 3.0, 1.5]
    for name in ("_FAILED", "_FAMILY", "_BUILT", "_BUILT_AT", "_GRAPHS", "_DECIDED", "_COMPILES"):
        monkeypatch.setattr(cudnn_conv, name, {})
    monkeypatch.setattr(cudnn_conv, "_SETTLED", set())
    assert cudnn_conv.remember_compile_costs({**notes, "bad": [1, "x", 2], "worse": 3, "neg": [1, -1.0, 0]}) == 1
    assert "not built in this build" in _plan0(15, 11) and builds == [0, 0]


def test_a_warm_build_decides_as_the_cold_one_ended(fake, monkeypatch):
    """yolov8n's FP16 compiles averaged 0.154 s in its cold build and 0.129 s in the warm one: a warm build whose
    own compiles moved the average offered plans the cold one held back, and timed them (24 s warm). The class's
    cost is settled by the cache's notes (and in a build after SETTLE_BUILDS compiles)."""
    _costed(sys.modules["cudnn"], monkeypatch, seconds=0.02)
    assert _plan0(15, 11) == 0
    (cls,) = cudnn_conv._COMPILES
    cudnn_conv._COMPILES.clear()
    assert cudnn_conv.remember_compile_costs({cls: [4, 0.6, 0.3]}) == 1     # the cold build ended at 0.15 s each
    for h in (30, 60, 90, 120):
        assert _plan0(h, 22) == 0
    assert cudnn_conv._COMPILES[cls] == [4, 0.6, 0.3]     # the warm build's cheap compiles do not move it
    g = next(g for k, g in cudnn_conv._GRAPHS.items() if k[0][2] == 30)
    with pytest.raises(cudnn_conv.TacticRefusal, match="past the first plan"):
        g.plan(1)


def test_a_loaded_engine_compiles_what_it_needs_whatever_a_build_learnt(fake, monkeypatch):
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=1.5)
    _plan0(15, 11), _plan0(30, 22)
    monkeypatch.setattr(cudnn_conv, "_BOUNDED", False)
    assert _plan0(60, 44) == 0 and builds == [0, 0, 0]


def test_the_plan_records_the_config_the_build_chose_and_a_loaded_engine_builds_that_one(fake, monkeypatch):
    """A build passed cfg0..3 over (their kind compiles slowly) and timed cfg4 as cudnn-plan-0: the tactic names
    cfg4 (Tactic.config, kept in the plan as the layer's `tactic_config`), and a loaded engine's graph builds cfg4
    by that name instead of walking cuDNN's ranked list from cfg0 (another kernel than the one timed, and a
    1.5 s compile)."""
    builds = _costed(sys.modules["cudnn"], monkeypatch, seconds=1.5, precompiled={4})
    _plan0(15, 11), _plan0(30, 22)
    assert _plan0(60, 44) == 4
    ctx = _conv_at(60, 44)
    assert _tactic(0).config(_conv_c(24), ctx) == "cfg4"
    assert _tactic(1).config(_conv_c(24), ctx) == ""            # no second plan built
    # a fresh process loading the engine (no build bounds, nothing learnt)
    for name in ("_FAILED", "_FAMILY", "_BUILT", "_BUILT_AT", "_GRAPHS", "_DECIDED", "_COMPILES"):
        monkeypatch.setattr(cudnn_conv, name, {})
    monkeypatch.setattr(cudnn_conv, "_BOUNDED", False)
    del builds[:]
    assert unsupported_reason(_tactic(0), _conv_c(24), ctx) is None
    g = next(iter(cudnn_conv._GRAPHS.values()))
    assert g.plan_named("cfg4") == (4, 0) and builds == [4]
    assert g.plan_named("cfg4") == (4, 0) and builds == [4]       # once
    assert g.plan_named("no-such-config") is None                 # (the run then walks the ranked list)


def test_the_chosen_config_travels_in_the_plan_to_the_op_a_loaded_engine_runs():
    from backends.engine.engine_graph import Graph, Node, TensorInfo, node_op
    from backends.engine.plan import _graph_from_json, _graph_to_json, _BlobWriter
    n = Node(name="c", kind="Activation", inputs=["x"], outputs=["y"], params={"type": "RELU"},
             meta={"tactic_config": "eng4_k24=3"})
    g = Graph(name="g", inputs=[TensorInfo("x", "float32", [1, 4])], outputs=[TensorInfo("y", "float32", [1, 4])])
    g.set_nodes([n])
    blob = _BlobWriter()
    back = _graph_from_json(_graph_to_json(g, blob), memoryview(b"".join(blob.parts)))
    assert node_op(back.nodes[0]).config == "eng4_k24=3"
    assert node_op(Node(name="d", kind="Activation", inputs=["x"], outputs=["y"])).config == ""


def test_a_warm_build_answers_from_the_graphs_the_cold_one_built_without_building_them(fake, monkeypatch):
    """cuDNN's heuristics and support check cost ~10-50 ms a signature (yolov8n FP16 asks 88, ssdlite 218): the
    timing cache's notes say per signature whether cuDNN declined it, which plans built (name, compiled) and why
    no further plan would be offered; a warm build answers from them and builds a graph only for what they do
    not say."""
    import json
    _costed(sys.modules["cudnn"], monkeypatch, seconds=0.3)         # compiles too slow for plans past the first
    assert _plan0(15, 11) == 0
    declined = LayerContext([[2, 24, 15, 11]] * 2, ["float32"] * 2)
    why = unsupported_reason(_tactic(0), _conv(RESIDUAL_SIGMOID), declined)
    assert "No execution plans support the graph" in why
    notes = json.loads(json.dumps(cudnn_conv.graph_notes()))
    assert len(notes) == 2
    entry = next(v for v in notes.values() if v[1])
    assert entry[0] == "" and entry[1] == [["cfg0", True]] and "past the first plan" in entry[2]
    # the warm build: a new process with the notes (and the compile costs) of the cold one
    costs = cudnn_conv.compile_costs()
    for name in ("_FAILED", "_FAMILY", "_BUILT", "_BUILT_AT", "_GRAPHS", "_DECIDED", "_COMPILES", "_REMEMBERED"):
        monkeypatch.setattr(cudnn_conv, name, {})
    monkeypatch.setattr(cudnn_conv, "_SETTLED", set())
    del fake[:]
    cudnn_conv.remember_compile_costs(costs)
    assert cudnn_conv.remember_graphs({**notes, "bad": ["", [["x"]], ""], "worse": 1}) == 2
    ctx = _conv_at(15, 11)
    assert unsupported_reason(_tactic(0), _conv_c(24), ctx) is None
    assert "past the first plan" in unsupported_reason(_tactic(1), _conv_c(24), ctx)
    assert _tactic(0).config(_conv_c(24), ctx) == "cfg0"
    assert not _tactic(0).ready(_conv_c(24), ctx)
    assert unsupported_reason(_tactic(0), _conv(RESIDUAL_SIGMOID), declined) == why
    assert fake == []                                   # no graph built
    assert unsupported_reason(_tactic(0), _conv_c(24), _conv_at(30, 22)) is None and len(fake) == 1   # not known
    # the notes the warm build writes keep what it did not rebuild
    again = cudnn_conv.graph_notes()
    assert all(again[k] == v for k, v in notes.items())
