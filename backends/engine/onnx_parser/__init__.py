"""ONNX → NetworkDefinition. `OnnxParser(network).parse(model)` returns a bool and collects `.errors`."""
from backends.engine.onnx_parser.parser import OnnxParser, ParserError, load_onnx  # noqa: F401
