"""Importers: plugin-served ops whose attributes need converting before the generic plugin mapping.

Each one fills plugin fields that the kernel can read without knowing ONNX: dtype enums become numpy names,
opset-dependent defaults become explicit fields.
"""
from backends.engine.dtypes import DataType
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from backends.engine.onnx_parser.importers.plugins import import_as_plugin
from native.errors import ParseError


def _np_name(enum, default):
    """ONNX TensorProto data type enum -> numpy dtype name."""
    if enum is None:
        return default
    return DataType.from_onnx(int(enum)).numpy.name


class _DtypeAttrPlugin(OpImporter):
    """Turns the dtype attribute named `attr` (ONNX enum) into field `dtype` (numpy name)."""

    attr = "dtype"
    default = "float32"

    def convert(self, ctx, node, inputs, attrs):
        dtype = _np_name(attrs.get(self.attr), self.default_dtype(inputs))
        return import_as_plugin(ctx, node, inputs, attrs, {"dtype": dtype}, drop=(self.attr,))

    def default_dtype(self, inputs):
        return self.default


@onnx_op("HannWindow", since_version=17)
class HannWindow(_DtypeAttrPlugin):
    attr = "output_datatype"


@onnx_op("HammingWindow", since_version=17)
class HammingWindow(_DtypeAttrPlugin):
    attr = "output_datatype"


@onnx_op("BlackmanWindow", since_version=17)
class BlackmanWindow(_DtypeAttrPlugin):
    attr = "output_datatype"


@onnx_op("MelWeightMatrix", since_version=17)
class MelWeightMatrix(_DtypeAttrPlugin):
    attr = "output_datatype"


@onnx_op("RandomUniform", since_version=1)
class RandomUniform(_DtypeAttrPlugin):
    pass


@onnx_op("RandomNormal", since_version=1)
class RandomNormal(_DtypeAttrPlugin):
    pass


class _LikePlugin(_DtypeAttrPlugin):
    """dtype defaults to the input's dtype."""

    def default_dtype(self, inputs):
        dt = inputs[0].dtype if inputs and inputs[0] is not None else None
        return dt.numpy.name if dt is not None else None


@onnx_op("RandomUniformLike", since_version=1)
class RandomUniformLike(_LikePlugin):
    pass


@onnx_op("RandomNormalLike", since_version=1)
class RandomNormalLike(_LikePlugin):
    pass


@onnx_op("Bernoulli", since_version=15)
class Bernoulli(_LikePlugin):
    pass


@onnx_op("Multinomial", since_version=7)
class Multinomial(_DtypeAttrPlugin):
    default = "int32"


@onnx_op("DFT", since_version=17)
class DFT(OpImporter):
    """Opset 20 moved `axis` from an attribute (default 1) to input 2 (default -2)."""

    def convert(self, ctx, node, inputs, attrs):
        return import_as_plugin(ctx, node, inputs, attrs, {"axis_input": ctx.opset >= 20})


@onnx_op("RoiAlign", since_version=10)
class RoiAlign(OpImporter):
    """Before opset 16 there was no coordinate_transformation_mode and the behaviour was 'output_half_pixel'."""

    def convert(self, ctx, node, inputs, attrs):
        default = "half_pixel" if ctx.opset >= 16 else "output_half_pixel"
        mode = attrs.get("coordinate_transformation_mode", default)
        return import_as_plugin(ctx, node, inputs, attrs, {"coordinate_transformation_mode": mode})


@onnx_op("BitCast", since_version=26)
class BitCast(OpImporter):
    """`to` (ONNX enum) becomes field `dtype` (numpy name); the width check happens at run time."""

    def convert(self, ctx, node, inputs, attrs):
        if attrs.get("to") is None:
            raise ParseError("BitCast needs the 'to' attribute")
        return import_as_plugin(ctx, node, inputs, attrs, {"dtype": _np_name(attrs["to"], None)}, drop=("to",))
