"""Control flow: if-conditionals and loops, with subnetworks in `layer.subgraphs`."""
from backends.engine.layers.base import Layer

__all__ = ["IfConditionalLayer", "LoopLayer", "ScanLayer"]


class IfConditionalLayer(Layer):
    """Runs subgraphs['then'] or subgraphs['else'] on a bool scalar condition (input 0). Further inputs are the
    outer values the branches read, passed by name."""
    kind = "If"


class LoopLayer(Layer):
    """ONNX Loop: inputs max_trip_count, cond, loop-carried values, then outer values read by the body
    (subgraphs['body']). Outputs: final carried values, then stacked scan outputs."""
    kind = "Loop"


class ScanLayer(Layer):
    """ONNX Scan: subgraphs['body'] over scan inputs; params num_scan_inputs, scan_input_axes,
    scan_input_directions, scan_output_axes, scan_output_directions."""
    kind = "Scan"
    defaults = {"num_scan_inputs": 0, "scan_input_axes": None, "scan_input_directions": None,
                "scan_output_axes": None, "scan_output_directions": None}
