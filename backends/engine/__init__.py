"""Our builder/runtime core: network IR, ONNX parser, builder + passes, plan file, runtime.

TensorRT's nouns with Python spelling:

    network = NetworkDefinition()
    OnnxParser(network).parse("model.onnx")
    config = BuilderConfig(); config.add_optimization_profile(profile)
    plan = Builder().build_serialized_network(network, config)
    context = Runtime().deserialize_engine(plan).create_execution_context()
    outputs = context.execute({"x": x})
"""
from backends.engine.dtypes import DataType  # noqa: F401
from backends.engine.network import Layer, NetworkDefinition, Tensor  # noqa: F401
from backends.engine.onnx_parser import OnnxParser  # noqa: F401
from backends.engine.builder import (  # noqa: F401
    AlgorithmSelector, Builder, BuilderConfig, BuilderFlag, MemoryPoolType, OptimizationProfile, TimingCache)
from backends.engine.runtime import Engine, EngineInspector, ExecutionContext, Runtime  # noqa: F401
from backends.engine.build import build_plan_from_onnx, parse_onnx  # noqa: F401
from backends.engine.calibration import (  # noqa: F401
    CalibrationAlgoType, Calibrator, IInt8EntropyCalibrator, IInt8EntropyCalibrator2, IInt8LegacyCalibrator,
    IInt8MinMaxCalibrator)
