"""Bounded cold builds on the GPU (issue 24): a cuDNN plan that failed to build is not built again for a
convolution of the same kind, a kind whose first plans all fail is given up after cudnn_conv.FAMILY_FAILURES
builds, and each kernel source is compiled once per build process (in the background). The engine still computes
what the CPU engine does. Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _silu_convnet():
    """yolov8n's pattern: conv + bias + SiLU (Sigmoid, Mul) at several sizes and channel counts."""
    rng = np.random.default_rng(31)
    inits, nodes, x, c = [], [], "x", 16
    for i, (co, stride) in enumerate([(32, 2), (32, 1), (64, 2), (64, 1), (128, 2)]):
        inits += [numpy_helper.from_array(rng.standard_normal((co, c, 3, 3)).astype(np.float32) * 0.1, f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(co).astype(np.float32) * 0.1, f"b{i}")]
        nodes += [helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1],
                                   strides=[stride, stride]),
                  helper.make_node("Sigmoid", [f"c{i}"], [f"s{i}"], name=f"sig{i}"),
                  helper.make_node("Mul", [f"c{i}", f"s{i}"], [f"y{i}"], name=f"silu{i}")]
        x, c = f"y{i}", co
    g = helper.make_graph(nodes, "silu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 64, 64])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_failed_cudnn_plans_are_not_built_twice_and_sources_compile_once(tmp_path, monkeypatch, fp16):
    import cudnn

    from backends.engine.builder import BuilderConfig, BuilderFlag
    from backends.runners import EngineRunner
    from native.cuda import nvrtc
    from native.cuda.tactics import cudnn_conv
    cudnn_conv.release()        # cold: no graph, plan or failure remembered from an earlier test
    builds, compiled = [], []
    real_build, real_compile = cudnn.pygraph.build_plan_at_index, nvrtc.compile_source

    def build(self, j):
        try:
            name = str(self.get_plan_name_at_index(j))
        except Exception:
            name = f"plan {j}"
        try:
            real_build(self, j)
        except Exception as e:
            builds.append((id(self), name, "eselect" in str(e) and "deselected" or "failed"))
            raise
        builds.append((id(self), name, "built"))
        return self
    monkeypatch.setattr(cudnn.pygraph, "build_plan_at_index", build)
    monkeypatch.setattr(nvrtc, "compile_source", lambda src, name, arch: compiled.append((name, hash(src))) or
                        real_compile(src, name, arch))
    fam = {}
    real_graph = cudnn_conv.ConvGraph.__init__

    def graph(self, key, *args):
        real_graph(self, key, *args)
        fam[id(self.g)] = cudnn_conv.family(key)
    monkeypatch.setattr(cudnn_conv.ConvGraph, "__init__", graph)
    path = tmp_path / "silu.onnx"
    onnx.save(_silu_convnet(), path)
    config = BuilderConfig()
    if fp16:
        config.set_flag(BuilderFlag.FP16)
    x = np.random.default_rng(32).standard_normal((1, 16, 64, 64)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", config=config) as gpu:
        y = list(gpu.infer({"x": x}).values())[0]
    with EngineRunner(str(path)) as cpu:
        ref = list(cpu.infer({"x": x}).values())[0]
    failed = [(fam[g], name) for g, name, how in builds if how == "failed"]
    assert len(failed) == len(set(failed)), f"a failed plan was built again for its kind: {failed}"
    for f in {f for f, _ in failed}:
        if not any(fam[g] == f and how == "built" for g, _, how in builds):
            assert sum(1 for ff, _ in failed if ff == f) <= cudnn_conv.FAMILY_FAILURES, (f, failed)
    assert len(compiled) == len(set(compiled)), f"a kernel source compiled twice: {compiled}"
    a, b = np.asarray(y, np.float64).ravel(), np.asarray(ref, np.float64).ravel()
    assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > (0.999 if fp16 else 0.99999)
