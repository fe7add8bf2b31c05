"""Everything that runs a model behind one Runner interface: our engine and ONNX Runtime."""
