"""Runners: one interface over every way of running a model (our engine, ONNX Runtime).

    with EngineRunner("model.onnx") as engine, OnnxrtRunner("model.onnx") as ort:
        a, b = engine.infer(feeds), ort.infer(feeds)

Runner names are stable ("engine-runner", "onnxrt-runner"), so logs and saved files diff cleanly.
"""
from backends.runners.base import Runner, TensorMeta  # noqa: F401
from backends.runners.engine import EngineRunner  # noqa: F401
from backends.runners.model import load_onnx, markable_onnx_tensors, model_sha256  # noqa: F401
from backends.runners.onnxrt import OnnxrtRunner  # noqa: F401
