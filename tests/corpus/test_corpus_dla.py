"""Acceptance of the emulated DLA on real CNNs: timm-resnet18 and mobilenetv3 build for the DLA in FP16 with
(nearly) every layer on it, and match ONNX Runtime with cosine >= 0.999 (skips when the corpus is absent)."""
import numpy as np
import pytest

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.builder import BuilderConfig, BuilderFlag
from backends.engine.builder.config import DeviceType
from tests.corpus.corpus import entry, make_feeds, model_path, run_onnxrt


@pytest.mark.parametrize("name", ["timm-resnet18", "timm-mobilenetv3_small_100"])
def test_dla_fp16_matches_onnxruntime(name):
    e = entry(name)
    path = model_path(e)
    feeds = make_feeds(e)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.FP16)
    config.set_flag(BuilderFlag.GPU_FALLBACK)
    config.default_device_type = DeviceType.DLA
    plan = build_plan_from_onnx(path, shapes={k: v.shape for k, v in feeds.items()}, config=config)
    engine = Runtime().deserialize_engine(plan)
    kinds = [n.kind for n in engine.graph.nodes if n.kind not in ("Constant", "DlaReformat")]
    on_dla = sum(len([b for b in n.subgraphs["body"].nodes if b.kind != "Constant"])
                 for n in engine.graph.nodes if n.kind == "DlaLoadable")
    on_host = len([k for k in kinds if k != "DlaLoadable"])
    assert on_dla >= 0.9 * (on_dla + on_host), (on_dla, on_host)
    ours = engine.create_execution_context().execute(feeds)
    ref = run_onnxrt(path, feeds)
    for k, r in ref.items():
        o, r = np.asarray(ours[k], np.float64).ravel(), np.asarray(r, np.float64).ravel()
        cos = o @ r / (np.linalg.norm(o) * np.linalg.norm(r))
        assert cos >= 0.999, f"{name} {k}: cosine {cos}"
        assert not np.array_equal(o, r)     # FP16 on the DLA really differs from FP32
