"""Issue 14, stage 2: the Graph mutation API and lint, the pass manager and its instruments, one interpreter."""
import os

import numpy as np
import pytest

from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx
from backends.engine.builder import Builder
from backends.engine.builder.pass_manager import (DumpInstrument, Pass, PassContext, PassManager, PassResult,
                                                  TimingInstrument, VerifyInstrument)
from backends.engine.builder.pipeline import constant_folding, pipeline
from backends.engine.engine_graph import Graph, Node, TensorInfo
from backends.engine.runtime.executor import GraphExecutor, Skipped
from native.errors import BuildError, GraphError
from tests.backends.test_engine_core import mlp_model


def chain():
    """x -> a (Activation) -> b (Activation) -> y"""
    g = Graph(name="g", inputs=[TensorInfo("x", "float32", [2])], outputs=[TensorInfo("y", "float32", [2])])
    a = Node("a", "Activation", ["x"], ["t"], {"type": "RELU"})
    b = Node("b", "Activation", ["t"], ["y"], {"type": "RELU"})
    g.set_nodes([a, b])
    return g, a, b


# mutation API ---------------------------------------------------------------------------------------------

def test_erase_refuses_while_users_remain():
    g, a, b = chain()
    with pytest.raises(GraphError, match=r"cannot erase 'a'.*'t' is read by \['b'\]"):
        g.erase(a)
    with pytest.raises(GraphError, match="graph outputs"):
        g.erase(b)
    assert g.nodes == [a, b]


def test_mutations_keep_use_def_current():
    g, a, b = chain()
    assert g.producer("t") is a and g.users("t") == [b]
    c = g.insert_after(a, Node("c", "Activation", ["t"], ["u"], {"type": "RELU"}))
    assert g.nodes == [a, c, b] and g.users("t") == [b, c] and g.producer("u") is c
    assert g.replace_all_uses_with("t", "u") == 1          # b now reads u; c still reads t
    assert b.inputs == ["u"] and g.users("u") == [b] and g.users("t") == [c]
    d = g.insert_before(a, Node("d", "Activation", ["x"], ["v"], {"type": "RELU"}))
    g.lint()
    with pytest.raises(GraphError, match="already have a producer"):
        g.insert_after(d, Node("e", "Activation", ["x"], ["u"]))
    g.erase(d)                                            # no users: goes
    assert d not in g.nodes and g.producer("v") is None
    g.replace_all_uses_with("y", "u")                     # the graph output moves too, its old name an alias
    assert g.output_names == ["u"] and g.aliases["y"] == "u"
    g.erase(b)
    g.lint()


def test_replace_all_uses_with_refuses_a_value_defined_later():
    g, a, b = chain()
    g.append(Node("late", "Activation", ["y"], ["z"]))
    with pytest.raises(GraphError, match="comes before"):
        g.replace_all_uses_with("x", "z")


# lint ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("breakage,message", [
    (lambda g, a, b: setattr(a, "inputs", ["nowhere"]), "reads 'nowhere', which is never produced"),
    (lambda g, a, b: g.set_nodes([b, a]), "reads 't', which is produced later"),
    (lambda g, a, b: setattr(b, "outputs", ["t"]), "produced twice"),
    (lambda g, a, b: setattr(b, "outputs", ["w"]), "graph output 'y' is never produced"),
    (lambda g, a, b: a.params.update(post_ops=[{"op": "activation", "type": "RELU"}]),
     "fused param 'post_ops' on a Activation layer"),
])
def test_lint_names_each_broken_invariant(breakage, message):
    g, a, b = chain()
    g.lint()
    breakage(g, a, b)
    with pytest.raises(GraphError, match=message):
        g.lint()


def test_lint_checks_fused_param_schema_and_the_tactics_that_must_honour_them():
    g = Graph(name="m", inputs=[TensorInfo("x")], outputs=[TensorInfo("y")])
    mm = Node("mm", "MatrixMultiply", ["x"], ["y"], {"post_ops": [{"op": "add", "input": 3}]},
              weights={"b": np.ones((2, 2), np.float32)})
    g.set_nodes([mm])
    with pytest.raises(GraphError, match=r"step 0 \(add\) reads input 3"):
        g.lint()
    mm.params = {"post_ops": [{"op": "activation", "type": "RELU"}]}
    g.lint()
    from native.tactics import Tactic, register_tactic, tactics_for

    @register_tactic
    class Ignorant(Tactic):       # a MatrixMultiply tactic that would drop the epilogue
        kind, name = "MatrixMultiply", "test-ignores-post-ops"

        def run(self, op, inputs):
            return [inputs[0]]

    try:
        mm.tactic_id, mm.tactic_name = Ignorant().id, "test-ignores-post-ops"
        with pytest.raises(GraphError, match=r"does not implement fused param\(s\) \['post_ops'\]"):
            g.lint()
    finally:
        from native.tactics import _REGISTRY
        _REGISTRY[("cpu", "MatrixMultiply")] = [t for t in tactics_for("MatrixMultiply")
                                               if t.name != "test-ignores-post-ops"]


def test_stale_use_def_index_is_caught():
    g, a, b = chain()
    assert g.users("t") == [b]              # index built
    b.inputs = ["x"]                        # a direct edit, not through set_inputs: the index still says b reads t
    with pytest.raises(GraphError, match="stale"):
        g.lint()
    g.touch()
    g.lint()
    g.set_inputs(b, ["t"])                  # through the API: the index follows
    assert g.users("t") == [b] and g.users("x") == [a]
    g.lint()


def test_graph_nodes_is_read_only_while_a_pass_runs():
    g, a, b = chain()
    extra = Node("c", "Activation", ["t"], ["q"], {"type": "RELU"})
    edits = (lambda: setattr(g, "nodes", [a]), lambda: g.nodes.append(extra), lambda: g.nodes.insert(0, extra),
             lambda: g.nodes.remove(a), lambda: g.nodes.__setitem__(0, extra), lambda: g.nodes.pop(),
             lambda: g.nodes.__delitem__(0), lambda: g.nodes.reverse())

    def direct(graph, ctx):
        for edit in edits:
            with pytest.raises(GraphError, match="pass 'direct' edits the node list directly"):
                edit()
        return PassResult(0)

    PassManager([Pass("direct", direct)]).run(g, PassContext(BuilderConfig()))
    assert g.nodes == [a, b] and g.producer("q") is None
    g.nodes.append(extra)                   # outside passes (building a graph by hand) an edit goes through ...
    assert g.producer("q") is extra and g.users("t") == [b, extra]    # ... and the index follows
    g.nodes = [a, b]
    assert g.producer("q") is None and g.users("t") == [b]


def test_replace_nodes_refuses_to_lose_a_read_tensor():
    g, a, b = chain()
    with pytest.raises(GraphError, match=r"\['t'\] would lose their producer"):
        g.replace_nodes([a], Node("a2", "Activation", ["x"], ["t2"], {"type": "RELU"}))
    fused = g.replace_nodes([a, b], Node("a + b", "Activation", ["x"], ["y"], {"type": "RELU"}))
    assert g.nodes == [fused] and g.producer("y") is fused and g.users("x") == [fused] and g.users("t") == []
    g.lint()


def test_no_builder_pass_replaces_the_node_list():
    """Passes change graphs through the mutation API only (Graph.nodes is read-only; set_nodes is for code that
    builds a whole graph): no module under builder/passes assigns `.nodes` or calls set_nodes."""
    import pathlib
    import re
    import backends.engine.builder.passes as passes
    offenders = []
    for path in sorted(pathlib.Path(passes.__file__).parent.glob("*.py")):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(r"(?<!body)\.set_nodes\(|\.nodes\s*=[^=]|\.nodes\[[^]]*\]\s*=[^=]", code):
                offenders.append(f"{path.name}:{i}: {line.strip()}")
    assert not offenders, offenders


# pass manager ----------------------------------------------------------------------------------------------

def _net():
    net, _ = parse_onnx(mlp_model(dynamic=False).SerializeToString())
    return net


def test_pipeline_is_a_declared_list_and_every_pass_is_timed_and_verified():
    verify, timing = VerifyInstrument(), TimingInstrument()
    config = BuilderConfig()
    Builder().build_graph(_net(), config, instruments=[timing, verify])
    names = [p.name for p in pipeline()]
    assert names[:4] == ["constant folding", "dead-layer elimination", "shape folding", "weight absorption"]
    assert names[-3:] == ["timing run", "tactic selection", "memory plan"] or \
        names[-4:] == ["timing run", "DLA placement", "tactic selection", "memory plan"]
    assert names.index("fusion") < names.index("layout") < names.index("precision") < names.index("timing run")
    assert verify.verified == [p.name for p in pipeline() if p.enabled(config)]
    assert list(timing.ms) == verify.verified and all(ms >= 0 for ms in timing.ms.values())


def test_a_pass_that_breaks_the_graph_is_named_by_the_verifier():
    g, a, b = chain()

    def breaks(graph, ctx):
        graph.move_before(b, a)          # the API moves what it is told; the verifier catches the broken order
        return PassResult(1)

    pm = PassManager([Pass("fine", lambda g_, c: PassResult(0)), Pass("reorder", breaks)], [VerifyInstrument()])
    with pytest.raises(GraphError, match="after pass 'reorder'.*produced later"):
        pm.run(g, PassContext(BuilderConfig()))


def test_a_pass_that_edits_the_node_list_directly_is_refused_and_named():
    g, a, b = chain()

    def direct(graph, ctx):
        graph.nodes = [b, a]
        return PassResult(1)

    with pytest.raises(GraphError, match="builder pass 'direct': pass 'direct' edits the node list directly"):
        PassManager([Pass("direct", direct)]).run(g, PassContext(BuilderConfig()))
    assert g.nodes == [a, b]


def test_graphs_copy_and_pickle_with_their_own_node_list():
    import copy
    import pickle
    g, a, b = chain()
    for clone in (copy.copy(g), copy.deepcopy(g), pickle.loads(pickle.dumps(g))):
        assert clone.nodes.graph is clone and [n.name for n in clone.nodes] == ["a", "b"]
        clone.nodes.pop()
        assert len(g.nodes) == 2


def test_errors_name_the_pass_that_raised():
    g, _, _ = chain()

    def boom(graph, ctx):
        raise KeyError("shape")

    with pytest.raises(BuildError, match=r"builder pass 'exploding' failed on graph 'g': KeyError"):
        PassManager([Pass("exploding", boom)]).run(g, PassContext(BuilderConfig()))


def test_dump_instrument_writes_the_graph_before_and_after_each_pass(tmp_path):
    g, _, _ = chain()
    PassManager([Pass("noop", lambda g_, c: 0)], [DumpInstrument(str(tmp_path))]).run(g, PassContext(BuilderConfig()))
    files = sorted(os.listdir(tmp_path))
    assert files == ["01-noop-after.txt", "01-noop-before.txt"]
    assert "a (Activation, float32): ['x'] -> ['t']" in (tmp_path / files[1]).read_text()


def test_constant_folding_evaluates_on_the_cpu_reference_device():
    g = Graph(name="f", inputs=[TensorInfo("x", "float32", [2])], outputs=[TensorInfo("y", "float32", [2])])
    g.set_nodes([Node("c", "Constant", [], ["k"], {"shape": [2]}, {"value": np.array([-1.0, 2.0], np.float32)}),
               Node("r", "Activation", ["k"], ["kr"], {"type": "RELU", "alpha": 0.0, "beta": 0.0}),
               Node("add", "ElementWise", ["x", "kr"], ["y"], {"op": "SUM"})])
    from native.device import Device

    class Unusable(Device):   # a target that runs nothing: folding must not touch it
        name = "unusable"

        def run(self, *args, **kwargs):
            raise AssertionError("constant folding ran a layer on the target device")
    ctx = PassContext(BuilderConfig(), device=Unusable())   # the target is irrelevant to folding
    result = constant_folding(g, ctx)
    assert result.changed == 1
    folded = next(n for n in g.nodes if n.outputs == ["kr"])
    assert folded.kind == "Constant" and folded.weights["value"].tolist() == [0.0, 2.0]


# the interpreter -----------------------------------------------------------------------------------------------

def test_interpreter_on_error_reports_failures_and_skips_only_dependents():
    g = Graph(name="t", inputs=[TensorInfo("x", "float32", [2])], outputs=[TensorInfo("z"), TensorInfo("w")])
    g.set_nodes([Node("bad", "Plugin", ["x"], ["y"], {"plugin_type": "NoSuchPlugin"}),
               Node("after", "Activation", ["y"], ["z"], {"type": "RELU", "alpha": 0.0, "beta": 0.0}),
               Node("fine", "Activation", ["x"], ["w"], {"type": "RELU", "alpha": 0.0, "beta": 0.0})])
    seen = []
    env = GraphExecutor(g, lazy_tactics=True).run({"x": np.array([-1.0, 1.0], np.float32)},
                                                  on_error=lambda node, e: seen.append((node.name, type(e))))
    assert seen[0][0] == "bad" and seen[1] == ("after", Skipped)
    assert env["w"].tolist() == [0.0, 1.0] and "z" not in env


# params schema ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("params,message", [
    ({"type": "RELU", "bogus": 1}, r"param 'bogus' is not declared for Activation"),
    ({"type": 3}, r"param 'type' must be a string, got an integer"),
    ({"type": "RELU", "alpha": "0.1"}, r"param 'alpha' must be a number, got a string"),
    ({"type": "RELU", "int8": {"input_scale": 1.0}}, r"param 'int8' is not declared for Activation"),
])
def test_lint_rejects_undeclared_and_mistyped_params(params, message):
    g, a, b = chain()
    a.params = params
    with pytest.raises(GraphError, match=message):
        g.lint()


def test_every_layer_kind_declares_its_params_with_types():
    """Each layer class's defaults are declared for its kind and have the declared type; every kind that exists
    (layer classes and the builder's own kinds) has a declaration."""
    from backends.engine.network import LAYER_KINDS
    from backends.engine.params import DECLARED, param_types
    import backends.engine.layers  # noqa: F401  (registers every layer class)
    assert set(LAYER_KINDS) <= set(DECLARED)
    for kind, cls in LAYER_KINDS.items():
        types = param_types(kind)
        for name, default in (getattr(cls, "defaults", {}) or {}).items():
            assert name in types, f"{kind}.{name} has a default but no declaration"
            errors = []
            types[name].check(default, name, errors)
            assert not errors, f"{kind}.{name}: default {default!r}: {errors}"
    for kind in ("ConvolutionNHWC", "PoolingNHWC", "Reformat", "DlaLoadable", "DlaReformat", "Pointwise"):
        assert param_types(kind) is not None, kind


def test_a_kind_without_a_declaration_may_carry_no_params():
    g, a, b = chain()
    a.kind, a.params = "NoSuchKind", {"x": 1}
    with pytest.raises(GraphError, match="layer kind 'NoSuchKind' declares no params"):
        g.lint()
