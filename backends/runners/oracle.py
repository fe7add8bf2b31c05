"""Fp64OracleRunner: our engine on the model converted to float64, fusion off — a third opinion that is closer to the
exact result than either float32 side, so `run --reference fp64` can say which side is wrong.

`to_float64(model)` rewrites every float32 of the model to float64: initializers, Constant / ConstantOfShape values,
graph inputs, outputs and value_info, `Cast(to=float)`, bodies of If/Loop/Scan. The engine is built without fusion
and without TF32 so each ONNX node runs as its own float64 layer; float32 feeds are widened on the way in. Outputs
stay float64 (comparisons widen the other side).
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from backends.engine.builder import BuilderConfig, BuilderFlag
from backends.runners.base import Runner, TensorMeta
from backends.runners.engine import EngineRunner
from backends.runners.model import load_onnx, onnx_input_metadata

_F32, _F64 = TensorProto.FLOAT, TensorProto.DOUBLE


def _widen_tensor(t: onnx.TensorProto) -> onnx.TensorProto:
    if t.data_type != _F32:
        return t
    out = numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name)
    return out


def _widen_type(tp: onnx.TypeProto):
    which = tp.WhichOneof("value")
    if which == "tensor_type" and tp.tensor_type.elem_type == _F32:
        tp.tensor_type.elem_type = _F64
    elif which == "sequence_type":
        _widen_type(tp.sequence_type.elem_type)
    elif which == "optional_type":
        _widen_type(tp.optional_type.elem_type)


def _widen_graph(g: onnx.GraphProto):
    for vi in list(g.input) + list(g.output) + list(g.value_info):
        _widen_type(vi.type)
    inits = [_widen_tensor(t) for t in g.initializer]
    del g.initializer[:]
    g.initializer.extend(inits)
    for node in g.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR and a.t.data_type == _F32:
                a.t.CopyFrom(_widen_tensor(a.t))
            elif a.type == onnx.AttributeProto.GRAPH:
                _widen_graph(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for sub in a.graphs:
                    _widen_graph(sub)
        if node.op_type == "Constant":
            for a in list(node.attribute):
                if a.name in ("value_float", "value_floats"):
                    vals = np.array(a.f if a.name == "value_float" else list(a.floats), np.float64)
                    node.attribute.remove(a)
                    node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(vals)))
        if node.op_type in ("Cast", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                            "EyeLike", "Bernoulli"):
            for a in node.attribute:
                if a.name in ("to", "dtype") and a.i == _F32:
                    a.i = _F64


def to_float64(model) -> onnx.ModelProto:
    """A copy of the model computing in float64 wherever it computed in float32."""
    m = onnx.ModelProto()
    m.CopyFrom(load_onnx(model))
    _widen_graph(m.graph)
    return m


class Fp64OracleRunner(Runner):
    """Our engine built in float64 with fusion and TF32 off: the reference that tells which side is wrong. Tactics
    are the first listed for each layer, not timed: several faster ones compute in float32 inside (Winograd
    convolution, online softmax, Welford layer norm), and the oracle's answer must not depend on which tactic won
    the timing on a loaded machine."""

    prefix = "fp64-oracle"

    def __init__(self, model, shapes=None, name=None):
        super().__init__(name)
        self.model_source = model
        self.shapes = dict(shapes or {})
        self.inner = None
        self._meta = None

    def _activate(self):
        original = load_onnx(self.model_source)
        self._meta = onnx_input_metadata(original)
        config = BuilderConfig()
        config.clear_flag(BuilderFlag.TF32)
        config.set_flag(BuilderFlag("disable_fusion"))
        config.set_flag(BuilderFlag.ENABLE_TACTIC_HEURISTIC)
        self.inner = EngineRunner(to_float64(original), shapes=self.shapes, config=config, name=self.name)
        self.inner.activate()

    def _deactivate(self):
        if self.inner is not None:
            self.inner.deactivate()
        self.inner = None

    def _input_metadata(self):
        return {k: TensorMeta(k, m.dtype, m.shape) for k, m in self._meta.items()}

    def output_names(self):
        return self.inner.output_names()

    def observable_tensors(self):
        return self.inner.observable_tensors()

    def check_feeds(self, feeds):
        super().check_feeds(feeds)

    def _infer(self, feeds, taps):
        wide = {k: (np.asarray(v).astype(np.float64) if np.asarray(v).dtype == np.float32 else np.asarray(v))
                for k, v in feeds.items()}
        return self.inner.infer(wide, taps=taps, check_inputs=False)
