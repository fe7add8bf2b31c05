"""Importers: optimiser steps of the ai.onnx.preview.training domain (Momentum, Adagrad, Adam).

Each imports onto its built-in plugin in native/cpu/kernels/training.py with every attribute default made
explicit, so the kernel never needs the ONNX schema.
"""
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from backends.engine.onnx_parser.importers.plugins import import_as_plugin
from native.errors import ParseError

_DOMAIN = "ai.onnx.preview.training"


class _Optimizer(OpImporter):
    defaults: dict = {}
    required: tuple = ()

    def convert(self, ctx, node, inputs, attrs):
        missing = [a for a in self.required if a not in attrs]
        if missing:
            raise ParseError(f"missing required attribute(s) {', '.join(missing)}")
        fields = {k: attrs.get(k, v) for k, v in self.defaults.items()}
        fields = {k: v.decode() if isinstance(v, bytes) else v for k, v in fields.items()}
        return import_as_plugin(ctx, node, inputs, {}, fields)


@onnx_op("Momentum", since_version=1, domain=_DOMAIN)
class Momentum(_Optimizer):
    required = ("alpha", "beta", "mode", "norm_coefficient")
    defaults = {"alpha": None, "beta": None, "mode": "standard", "norm_coefficient": None}

    def convert(self, ctx, node, inputs, attrs):
        mode = attrs.get("mode", "standard")
        if (mode.decode() if isinstance(mode, bytes) else mode) not in ("standard", "nesterov"):
            raise ParseError(f"Momentum mode '{mode}' is not 'standard' or 'nesterov'")
        return super().convert(ctx, node, inputs, attrs)


@onnx_op("Adagrad", since_version=1, domain=_DOMAIN)
class Adagrad(_Optimizer):
    defaults = {"decay_factor": 0.0, "epsilon": 1e-6, "norm_coefficient": 0.0}


@onnx_op("Adam", since_version=1, domain=_DOMAIN)
class Adam(_Optimizer):
    defaults = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0, "norm_coefficient_post": 0.0}
