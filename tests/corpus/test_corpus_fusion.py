"""Fusions on real models: what the inspector shows for timm-resnet18 and bert_mini, and that outputs still match."""
import numpy as np

from backends.engine import Runtime, build_plan_from_onnx
from tests.corpus.corpus import compare, make_feeds, manifest, model_path, run_onnxrt


def _engine(name):
    entry = next(m for m in manifest() if m["name"] == name)
    path, feeds = model_path(entry), make_feeds(entry)
    engine = Runtime().deserialize_engine(build_plan_from_onnx(path, shapes={k: v.shape for k, v in feeds.items()}))
    return engine, path, feeds


def test_resnet18_has_no_standalone_bn_relu_or_residual_add():
    engine, path, feeds = _engine("timm-resnet18")
    layers = engine.create_engine_inspector().layers()
    kinds = [l["LayerType"] for l in layers]
    assert "Normalization" not in kinds and "Scale" not in kinds
    assert not [l for l in layers if l["LayerType"] in ("Activation", "ElementWise", "Pointwise")], \
        [l["Fused"] for l in layers if l["LayerType"] in ("Activation", "ElementWise", "Pointwise")]
    convs = [l for l in layers if l["LayerType"] == "Convolution"]
    # 20 ONNX convolutions; the 3 strided 1x1 shortcut convs ride in the GEMM of the conv they are added to
    assert len(convs) == 17
    merged = [l["Fused"] for l in convs if "downsample" in l["Fused"]]
    assert len(merged) == 3 and all("conv2/Conv" in f and "/Add" in f for f in merged)
    fused = [l["Fused"] for l in convs if "Relu" in l["Fused"]]
    residual = [f for f in fused if "/Add" in f]
    assert len(fused) == 16 and len(residual) == 8          # 16 conv+relu (8 of them with the residual add)
    # the stem's ReLU runs after the max pool, on a map 4x smaller (pool(relu(x)) == relu(pool(x)))
    pools = [l["Fused"] for l in layers if l["LayerType"] == "Pooling"]
    assert "/m/maxpool/MaxPool + /m/act1/Relu" in pools
    assert not compare(run_onnxrt(path, feeds), engine.create_execution_context().execute(feeds))


def test_bert_mini_attention_blocks_are_single_layers():
    engine, path, feeds = _engine("bert_mini")
    layers = engine.create_engine_inspector().layers()
    attention = [l for l in layers if l["LayerType"] == "Attention"]
    assert len(attention) == 4
    assert all("Softmax" in l["Fused"] for l in attention)
    assert not [l for l in layers if l["LayerType"] == "Softmax"]
    assert not compare(run_onnxrt(path, feeds), engine.create_execution_context().execute(feeds))
