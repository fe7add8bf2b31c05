"""If and Loop on the GPU: the condition read back once per decision, the bodies' layers on the device, loop scan
outputs stacked there; results equal to the CPU engine's. Skipped without a GPU."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _model():
    """y = If(sum(x) > 0, x * 2, x - 1); then a Loop of 3 trips: acc = acc + y * i, scanning acc each trip."""
    f = TensorProto.FLOAT
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t"], name="then_mul")], "then", [],
                               [helper.make_tensor_value_info("t", f, [4, 8])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e"], name="else_sub")], "else", [],
                               [helper.make_tensor_value_info("e", f, [4, 8])])
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], name="cast_i", to=TensorProto.FLOAT),
         helper.make_node("Mul", ["y", "fi"], ["yi"], name="mul_i"),
         helper.make_node("Add", ["acc_in", "yi"], ["acc_out"], name="acc_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep_going"),
         helper.make_node("Identity", ["acc_out"], ["scan"], name="scan_id")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_in", f, [4, 8])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("acc_out", f, [4, 8]),
         helper.make_tensor_value_info("scan", f, [4, 8])])
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g, else_branch=else_g),
             helper.make_node("Loop", ["trips", "true", "acc0"], ["acc", "scans"], name="loop", body=body)]
    inits = [numpy_helper.from_array(np.float32(2), "two"), numpy_helper.from_array(np.float32(1), "one"),
             numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.int64(3), "trips"),
             numpy_helper.from_array(np.array(True), "true"),
             numpy_helper.from_array(np.zeros((4, 8), np.float32), "acc0")]
    g = helper.make_graph(nodes, "control", [helper.make_tensor_value_info("x", f, [4, 8])],
                          [helper.make_tensor_value_info("acc", f, [4, 8]),
                           helper.make_tensor_value_info("scans", f, [3, 4, 8])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_if_and_loop_run_on_the_device_and_match_the_cpu(sign):
    from backends.runners import EngineRunner
    model = _model()
    x = (np.abs(np.random.default_rng(0).standard_normal((4, 8))) * sign).astype(np.float32)
    with EngineRunner(model, device="cuda") as gpu, EngineRunner(model) as cpu:
        got, want = gpu.infer({"x": x}), cpu.infer({"x": x})
        tactics = {n.kind: n.tactic_name for n in gpu.engine.graph.nodes}
    assert tactics.get("If") == "device-branch" and tactics.get("Loop") == "device-body", tactics
    for k in ("acc", "scans"):
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    y = x * 2 if sign > 0 else x - 1
    np.testing.assert_allclose(got["acc"], y * 3, rtol=1e-6)       # 0 + 1 + 2 trips' weights


def _nms_in_if():
    """sel = If(sum(scores) > 0, NMS(boxes, scores, 5), NMS(boxes, scores, 2)): NonMaxSuppression inside If
    bodies, as tv-ssdlite320's postprocessing has it."""
    f = TensorProto.FLOAT

    def branch(name, cap):
        return helper.make_graph([helper.make_node("NonMaxSuppression", ["boxes", "scores", cap, "iou"],
                                                   ["sel_" + name[0]], name=f"{name}_nms")], name, [],
                                 [helper.make_tensor_value_info("sel_" + name[0], TensorProto.INT64, ["n", 3])])
    nodes = [helper.make_node("ReduceSum", ["scores"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["c"], name="gt"),
             helper.make_node("If", ["c"], ["sel"], name="branch", then_branch=branch("then", "five"),
                              else_branch=branch("else", "two"))]
    inits = [numpy_helper.from_array(np.float32(0), "zero"), numpy_helper.from_array(np.array([5], np.int64), "five"),
             numpy_helper.from_array(np.array([2], np.int64), "two"),
             numpy_helper.from_array(np.array([0.5], np.float32), "iou")]
    g = helper.make_graph(nodes, "nms_if", [helper.make_tensor_value_info("boxes", f, [1, 16, 4]),
                                            helper.make_tensor_value_info("scores", f, [1, 2, 16])],
                          [helper.make_tensor_value_info("sel", TensorProto.INT64, ["n", 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_a_body_layer_the_gpu_refuses_runs_its_host_twin_inside_the_body(monkeypatch):
    """The GPU NMS refusing its inputs inside an If body (tv-ssdlite320 --fp16, 2026-11-28: 'could not find any
    implementation for layer If_4330'): the body's NMS runs on its host twin and the If stays on the device."""
    from backends.runners import EngineRunner
    from native.cuda.tactics.plugins import GpuNonMaxSuppression
    from native.tactics import TacticRefusal

    def refuse(self, op, inputs, outputs=None, workspace=None, stream=None):
        raise TacticRefusal("NMS inputs outside what the GPU kernel takes (test)")
    monkeypatch.setattr(GpuNonMaxSuppression, "run", refuse)
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 10, (1, 16, 2)).astype(np.float32)
    feeds = {"boxes": np.concatenate([xy, xy + rng.uniform(1, 4, (1, 16, 2)).astype(np.float32)], axis=2),
             "scores": rng.uniform(0, 1, (1, 2, 16)).astype(np.float32)}
    model = _nms_in_if()
    with EngineRunner(model, device="cuda") as gpu, EngineRunner(model) as cpu:
        got, want = gpu.infer(feeds), cpu.infer(feeds)
        branch = next(n for n in gpu.engine.graph.nodes if n.kind == "If")
    # the branch the build's run took: its NMS on the host (the other branch did not run at build: its layers keep
    # their default tactics)
    body = [n.tactic_name for n in branch.subgraphs["then"].nodes if n.kind == "Plugin"]
    assert branch.tactic_name == "device-branch" and body and all(t.startswith("host:") for t in body), \
        (branch.tactic_name, body)
    np.testing.assert_array_equal(got["sel"], want["sel"])
    assert len(want["sel"]) == 10       # 5 per class, 2 classes: the then branch ran
