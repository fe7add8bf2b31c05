"""Untrusted plans: a header with valid checksums but a defect of any class is a PlanError naming the field path."""
import copy

import pytest

from backends.engine import BuilderConfig, BuilderFlag, Runtime, build_plan_from_onnx
from backends.engine.plan import pack_plan, read_plan_header
from backends.engine.plan_schema import BUILD_CONFIG, Int, header_errors
from native.errors import PlanError

EXAMPLE = "examples/example.onnx"


@pytest.fixture(scope="module")
def plan():
    import os
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    # a fixed tactic choice (the heuristic, not timing): the weight names below ("b") belong to the tactic chosen,
    # and a timing race on a loaded machine picks another (packed-gemm-t keeps "bt_packed")
    config = BuilderConfig()
    config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
    return build_plan_from_onnx(os.path.join(repo, EXAMPLE), config=config)


def _crafted(plan, mutate):
    header, blob = read_plan_header(plan)
    header = copy.deepcopy(header)
    mutate(header)
    return pack_plan(header, bytes(blob))  # fresh, valid checksums


def _load_error(plan, mutate):
    with pytest.raises(PlanError) as e:
        Runtime().deserialize_engine(_crafted(plan, mutate))
    return str(e.value).splitlines()[0]


def _first_matmul(h):
    return next(i for i, n in enumerate(h["graph"]["nodes"]) if n["kind"] == "MatrixMultiply")


def test_the_unmodified_plan_loads_and_runs(plan):
    import numpy as np
    out = Runtime().deserialize_engine(_crafted(plan, lambda h: None)).create_execution_context().execute(
        {"x": np.ones((1, 8), np.float32)})
    assert out["y"].shape == (1, 1)


def set_(path, value):
    def mutate(h):
        *head, last = path
        node = h
        for k in head:
            node = node[k]
        node[last] = value
    return mutate


def delete(path):
    def mutate(h):
        *head, last = path
        node = h
        for k in head:
            node = node[k]
        del node[last]
    return mutate


@pytest.mark.parametrize("mutate,needle", [
    # wrong type
    (set_(["graph", "nodes", 0, "inputs"], "x"), "graph.nodes[0].inputs: must be a list, got a string"),
    (set_(["graph", "inputs", 0, "shape"], [1, "8"]), "graph.inputs[0].shape[1]: must be an integer, got a string"),
    (set_(["graph", "nodes", 0, "precision"], 32), "graph.nodes[0].precision: must be a string, got an integer"),
    # missing key
    (delete(["graph", "nodes", 0, "kind"]), "graph.nodes[0].kind: is required but missing"),
    (delete(["graph"]), "graph: is required but missing"),
    # a list where an object belongs
    (set_(["build_config"], []), "build_config: must be an object, got a list"),
    (set_(["graph", "nodes", 0, "weights"], []), "graph.nodes[0].weights: must be an object, got a list"),
    (set_(["build_config", "profiles"], [{"x": [[1, 8], [1, 8]]}]), "build_config.profiles[0].x: must have 3 items"),
    # unknown layer kind, unknown tactic id
    (set_(["graph", "nodes", 0, "kind"], "Teleport"), "graph.nodes[0].kind: 'Teleport' is not a layer kind"),
    (set_(["graph", "nodes", 0, "tactic_id"], 12345), "graph.nodes[0].tactic_id: no MatrixMultiply tactic has id "
                                                      "12345"),
    # weight references outside the blob, or inconsistent with their shape
    (set_(["graph", "nodes", 0, "weights", "b", "offset"], 10 ** 9), "graph.nodes[0].weights.b.offset: bytes "
                                                                     "1000000000..1000000128 lie outside"),
    (set_(["graph", "nodes", 0, "weights", "b", "shape"], [8, 400]), "graph.nodes[0].weights.b.nbytes: is 128, but "
                                                                     "shape [8, 400] of float32 needs 12800 bytes"),
    (set_(["graph", "nodes", 0, "params", "post_ops", 0, "weight"], "nope"),
     "graph.nodes[0].params.post_ops[0].weight: names weight 'nope'"),
    # tensor names that do not exist, cycles
    (set_(["graph", "nodes", 1, "inputs", 0], "ghost"), "graph.nodes[1].inputs[0]: tensor 'ghost' is not produced"),
    (lambda h: h["graph"]["nodes"].reverse(), "graph.nodes[0].inputs[0]: tensor 'squared' is not produced by an "
                                              "earlier layer or an input (a dangling reference or a cycle)"),
    (set_(["graph", "outputs", 0, "name"], "ghost"), "graph.outputs[0].name: output 'ghost' is not produced"),
    # params of a known kind
    (set_(["graph", "nodes", 2, "params", "axes"], "1"), "graph.nodes[2].params.axes: must be a list, got a string"),
    # unknown keys where the loader builds from the object
    (set_(["graph", "nodes", 0, "bogus"], 1), "graph.nodes[0].bogus: is not a known field here"),
])
def test_each_defect_class_is_a_plan_error_naming_the_field(plan, mutate, needle):
    h, _ = read_plan_header(plan)
    assert [n["kind"] for n in h["graph"]["nodes"]] == ["MatrixMultiply", "ElementWise", "Reduce"]
    assert h["graph"]["nodes"][0]["tactic_name"] == "blas"
    msg = _load_error(plan, mutate)
    assert msg.startswith("plan header is malformed: ") and needle in msg, msg


def test_extra_keys_are_tolerated_where_safe(plan):
    def mutate(h):
        h["provenance"] = {"anything": [1, 2]}
        h["device"]["gpu_name"] = "none"
        h["build_config"]["future_flag"] = True
    Runtime().deserialize_engine(_crafted(plan, mutate))


def test_the_schema_is_a_table_others_extend(plan):
    """A helper adding a header field adds one line; the loader then checks it."""
    BUILD_CONFIG.add("?calibration_batches", Int(0))
    try:
        msg = _load_error(plan, set_(["build_config", "calibration_batches"], -3))
        assert "build_config.calibration_batches: must be >= 0, got -3" in msg
    finally:
        del BUILD_CONFIG.fields["calibration_batches"]


def test_every_defect_is_listed(plan):
    h, blob = read_plan_header(plan)
    h = copy.deepcopy(h)
    h["graph"]["nodes"][0]["inputs"] = [1]
    h["graph"]["nodes"][1]["outputs"] = {}
    paths = [p for p, _ in header_errors(h, len(blob))]
    assert paths == ["graph.nodes[0].inputs[0]", "graph.nodes[1].outputs"]


def test_a_param_its_kind_does_not_declare_is_refused_by_name(plan):
    """The plan schema holds every layer's params to the same declarations as Graph.lint (backends/engine/params)."""
    def add_bogus(h):
        h["graph"]["nodes"][_first_matmul(h)]["params"]["bogus"] = 1
    msg = _load_error(plan, add_bogus)
    assert ".params.bogus" in msg and "not a known field" in msg


def test_a_declared_param_of_the_wrong_type_is_refused_by_name(plan):
    def mistype(h):
        h["graph"]["nodes"][_first_matmul(h)]["params"]["transpose_b"] = "yes"
    msg = _load_error(plan, mistype)
    assert ".params.transpose_b" in msg and "true or false" in msg
