"""Importers: neural-network ops (convolution, pooling, normalization, resize, recurrent layers).

Attributes map onto the layer params documented in backends/engine/layers/nn.py. ONNX `pads` lists all begin
values then all end values; we split them into pre_padding / post_padding. `auto_pad` is kept as a param and
resolved by the kernel from the run-time input shape (dynamic shapes stay possible).
"""
from __future__ import annotations

import numpy as np

from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from backends.engine.onnx_parser.validate import conv_geometry_problem
from native.errors import ParseError


def split_pads(pads, nd):
    if not pads:
        return [0] * nd, [0] * nd
    pads = [int(p) for p in pads]
    return pads[:nd], pads[nd:]


def _spatial_rank(inputs, attrs, kernel=None):
    if attrs.get("kernel_shape"):
        return len(attrs["kernel_shape"])
    if kernel is not None:
        return kernel.ndim - 2
    shape = inputs[0].shape if inputs[0] is not None else None
    if shape is not None:
        return len(shape) - 2
    raise ParseError("cannot tell the number of spatial dims: give kernel_shape or a constant / shaped input")


def conv_params(attrs, nd, kernel_shape):
    pre, post = split_pads(attrs.get("pads"), nd)
    return {"kernel_shape": [int(k) for k in kernel_shape], "strides": list(attrs.get("strides") or [1] * nd),
            "pre_padding": pre, "post_padding": post, "dilations": list(attrs.get("dilations") or [1] * nd),
            "groups": int(attrs.get("group", 1)), "auto_pad": attrs.get("auto_pad", "NOTSET")}


@onnx_op("Conv")
class Conv(OpImporter):
    """Conv -> Convolution; constant W / B become weights 'kernel' / 'bias', others stay inputs 1 / 2."""

    def convert(self, ctx, node, inputs, attrs):
        x, w_t = inputs[0], inputs[1]
        b_t = inputs[2] if len(inputs) > 2 else None
        w = ctx.constant_value(w_t)
        b = ctx.constant_value(b_t) if b_t is not None else None
        shape = w.shape if w is not None else w_t.shape
        nd = len(attrs["kernel_shape"]) if attrs.get("kernel_shape") else (len(shape) - 2 if shape else None)
        if nd is None:
            raise ParseError("Conv weights have unknown rank and no kernel_shape")
        ks = attrs.get("kernel_shape") or list(shape[2:])
        params = conv_params(attrs, nd, ks)
        params["num_output_maps"] = int(shape[0]) if shape is not None and shape[0] >= 0 else 0
        bad = conv_geometry_problem(x.shape, shape, b.shape if b is not None else b_t.shape if b_t else None,
                                    params["groups"], ks)
        if bad:
            raise ParseError(bad)
        weights, layer_inputs = {}, [x]
        if w is not None and (b_t is None or b is not None):
            weights["kernel"] = w
            if b is not None:
                weights["bias"] = b
        else:
            layer_inputs = [x, w_t] + ([b_t] if b_t is not None else [])
        return ctx.add_layer("Convolution", layer_inputs, params, weights).outputs


@onnx_op("ConvInteger", since_version=10)
class ConvInteger(OpImporter):
    """ConvInteger -> Convolution with integer=True: exact int32 accumulation of (x - x_zp) * (w - w_zp)."""

    def convert(self, ctx, node, inputs, attrs):
        x, w_t = inputs[0], inputs[1]
        xz = inputs[2] if len(inputs) > 2 else None
        wz = inputs[3] if len(inputs) > 3 else None
        shape = w_t.shape
        nd = len(attrs["kernel_shape"]) if attrs.get("kernel_shape") else len(shape) - 2
        ks = attrs.get("kernel_shape") or list(shape[2:])
        params = conv_params(attrs, nd, ks)
        params.update(num_output_maps=int(shape[0]) if shape else 0, integer=True)
        return ctx.add_layer("Convolution", [x, w_t, None, xz, wz], params).outputs


@onnx_op("ConvTranspose")
class ConvTranspose(OpImporter):
    """ConvTranspose -> Deconvolution (kernel [C, M/g, k...]); output_shape overrides pads (resolved at run time)."""

    def convert(self, ctx, node, inputs, attrs):
        x, w_t = inputs[0], inputs[1]
        b_t = inputs[2] if len(inputs) > 2 else None
        w = ctx.constant_value(w_t)
        b = ctx.constant_value(b_t) if b_t is not None else None
        shape = w.shape if w is not None else w_t.shape
        nd = len(attrs["kernel_shape"]) if attrs.get("kernel_shape") else len(shape) - 2
        ks = attrs.get("kernel_shape") or list(shape[2:])
        params = conv_params(attrs, nd, ks)
        g = params["groups"]
        params["num_output_maps"] = int(shape[1]) * g if shape is not None else 0
        params["output_padding"] = list(attrs.get("output_padding") or [0] * nd)
        bad = conv_geometry_problem(x.shape, shape, b.shape if b is not None else b_t.shape if b_t else None,
                                    g, ks, transpose=True)
        if bad:
            raise ParseError(bad)
        if attrs.get("output_shape") is not None:
            params["output_shape"] = [int(v) for v in attrs["output_shape"]]
        weights, layer_inputs = {}, [x]
        if w is not None and (b_t is None or b is not None):
            weights["kernel"] = w
            if b is not None:
                weights["bias"] = b
        else:
            layer_inputs = [x, w_t] + ([b_t] if b_t is not None else [])
        return ctx.add_layer("Deconvolution", layer_inputs, params, weights).outputs


# pooling ------------------------------------------------------------------------------------------------------

def pool_params(attrs, nd, kind):
    pre, post = split_pads(attrs.get("pads"), nd)
    return {"type": kind, "window": [int(k) for k in attrs["kernel_shape"]],
            "strides": list(attrs.get("strides") or [1] * nd), "pre_padding": pre, "post_padding": post,
            "dilations": list(attrs.get("dilations") or [1] * nd), "ceil_mode": bool(attrs.get("ceil_mode", 0)),
            "auto_pad": attrs.get("auto_pad", "NOTSET")}


@onnx_op("MaxPool")
class MaxPool(OpImporter):
    """MaxPool -> Pooling MAX; the optional Indices output asks the kernel for flat argmax indices."""

    def convert(self, ctx, node, inputs, attrs):
        nd = len(attrs["kernel_shape"])
        params = pool_params(attrs, nd, "MAX")
        want = len(node.output) > 1 and node.output[1] != ""
        params.update(storage_order=int(attrs.get("storage_order", 0)), num_outputs=2 if want else 1)
        return ctx.add_layer("Pooling", [inputs[0]], params, num_outputs=2 if want else 1).outputs


@onnx_op("AveragePool")
class AveragePool(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = pool_params(attrs, len(attrs["kernel_shape"]), "AVERAGE")
        params["average_count_excludes_padding"] = not attrs.get("count_include_pad", 0)
        return ctx.add_layer("Pooling", [inputs[0]], params).outputs


@onnx_op("LpPool")
class LpPool(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = pool_params(attrs, len(attrs["kernel_shape"]), "LP")
        params["p"] = int(attrs.get("p", 2))
        return ctx.add_layer("Pooling", [inputs[0]], params).outputs


class _GlobalPool(OpImporter):
    pool_type = "MAX"

    def convert(self, ctx, node, inputs, attrs):
        params = {"type": self.pool_type, "global": True, "p": int(attrs.get("p", 2))}
        return ctx.add_layer("Pooling", [inputs[0]], params).outputs


@onnx_op("GlobalMaxPool")
class GlobalMaxPool(_GlobalPool):
    pool_type = "MAX"


@onnx_op("GlobalAveragePool")
class GlobalAveragePool(_GlobalPool):
    pool_type = "AVERAGE"


@onnx_op("GlobalLpPool")
class GlobalLpPool(_GlobalPool):
    pool_type = "LP"


@onnx_op("MaxUnpool", since_version=9)
class MaxUnpool(OpImporter):
    """MaxUnpool -> Pooling type MAX_UNPOOL: scatter X to the flat Indices of a zero tensor."""

    def convert(self, ctx, node, inputs, attrs):
        params = pool_params(attrs, len(attrs["kernel_shape"]), "MAX_UNPOOL")
        return ctx.add_layer("Pooling", list(inputs), params).outputs


@onnx_op("MaxRoiPool")
class MaxRoiPool(OpImporter):
    """MaxRoiPool -> Pooling type MAX_ROI over boxes (batch, x1, y1, x2, y2) scaled by spatial_scale."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"type": "MAX_ROI", "window": [int(v) for v in attrs["pooled_shape"]],
                  "spatial_scale": float(attrs.get("spatial_scale", 1.0))}
        return ctx.add_layer("Pooling", list(inputs), params).outputs


# normalization --------------------------------------------------------------------------------------------------

@onnx_op("BatchNormalization")
class BatchNormalization(OpImporter):
    """BatchNormalization -> Normalization BATCH with inputs (x, scale, B, mean, var); training_mode also
    returns the updated running mean / variance."""

    def convert(self, ctx, node, inputs, attrs):
        training = bool(attrs.get("training_mode", 0))
        n_out = 3 if training and len([o for o in node.output if o]) >= 3 else 1
        params = {"mode": "BATCH", "axes": [1], "epsilon": float(attrs.get("epsilon", 1e-5)),
                  "momentum": float(attrs.get("momentum", 0.9)), "training_mode": training}
        return ctx.add_layer("Normalization", list(inputs[:5]), params, num_outputs=n_out).outputs


@onnx_op("InstanceNormalization")
class InstanceNormalization(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "INSTANCE", "epsilon": float(attrs.get("epsilon", 1e-5))}
        return ctx.add_layer("Normalization", list(inputs[:3]), params).outputs


@onnx_op("LayerNormalization", since_version=17)
class LayerNormalization(OpImporter):
    """LayerNormalization -> Normalization LAYER over axes [axis, rank); outputs Y, Mean, InvStdDev."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "LAYER", "axes": [int(attrs.get("axis", -1))], "epsilon": float(attrs.get("epsilon", 1e-5)),
                  "stash_type": int(attrs.get("stash_type", 1))}
        return ctx.add_layer("Normalization", list(inputs[:3]), params, num_outputs=3).outputs


@onnx_op("GroupNormalization", since_version=18)
class GroupNormalization(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "GROUP", "num_groups": int(attrs["num_groups"]),
                  "epsilon": float(attrs.get("epsilon", 1e-5)), "stash_type": int(attrs.get("stash_type", 1))}
        return ctx.add_layer("Normalization", list(inputs[:3]), params).outputs


@onnx_op("RMSNormalization", since_version=23)
class RMSNormalization(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "RMS", "axes": [int(attrs.get("axis", -1))], "epsilon": float(attrs.get("epsilon", 1e-5)),
                  "stash_type": int(attrs.get("stash_type", 1))}
        return ctx.add_layer("Normalization", list(inputs[:2]), params).outputs


@onnx_op("LpNormalization")
class LpNormalization(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "LP", "axes": [int(attrs.get("axis", -1))], "p": int(attrs.get("p", 2))}
        return ctx.add_layer("Normalization", [inputs[0]], params).outputs


@onnx_op("MeanVarianceNormalization", since_version=9)
class MeanVarianceNormalization(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "MVN", "axes": [int(a) for a in attrs.get("axes", [0, 2, 3])], "epsilon": 1e-9}
        return ctx.add_layer("Normalization", [inputs[0]], params).outputs


@onnx_op("LRN")
class LRN(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        params = {"window": int(attrs["size"]), "alpha": float(attrs.get("alpha", 1e-4)),
                  "beta": float(attrs.get("beta", 0.75)), "k": float(attrs.get("bias", 1.0))}
        return ctx.add_layer("LRN", [inputs[0]], params).outputs


# resize -----------------------------------------------------------------------------------------------------------

@onnx_op("Resize", since_version=10)
class Resize(OpImporter):
    """Resize -> Resize with inputs (x, roi, scales, sizes). Opset 10 had only (x, scales) and asymmetric
    coordinates with floor rounding."""

    def convert(self, ctx, node, inputs, attrs):
        mode = attrs.get("mode", "nearest").upper()
        if ctx.opset < 11:
            params = {"mode": mode, "coordinate_transformation": "asymmetric", "nearest_rounding": "floor"}
            return ctx.add_layer("Resize", [inputs[0], None, inputs[1], None], params).outputs
        params = {"mode": mode,
                  "coordinate_transformation": attrs.get("coordinate_transformation_mode", "half_pixel"),
                  "nearest_rounding": attrs.get("nearest_mode", "round_prefer_floor"),
                  "cubic_coeff": float(attrs.get("cubic_coeff_a", -0.75)),
                  "exclude_outside": bool(attrs.get("exclude_outside", 0)),
                  "extrapolation_value": float(attrs.get("extrapolation_value", 0.0)),
                  "axes": [int(a) for a in attrs["axes"]] if attrs.get("axes") is not None else None,
                  "keep_aspect_ratio_policy": attrs.get("keep_aspect_ratio_policy", "stretch"),
                  "antialias": bool(attrs.get("antialias", 0))}
        ins = list(inputs) + [None] * (4 - len(inputs))
        return ctx.add_layer("Resize", ins[:4], params).outputs


@onnx_op("Upsample")
class Upsample(OpImporter):
    """Upsample (deprecated) -> Resize with asymmetric coordinates and floor rounding; scales attr or input."""

    def convert(self, ctx, node, inputs, attrs):
        mode = attrs.get("mode", "nearest").upper()
        if mode == "BILINEAR":
            mode = "LINEAR"
        params = {"mode": mode, "coordinate_transformation": "asymmetric", "nearest_rounding": "floor"}
        if len(inputs) > 1 and inputs[1] is not None:
            scales = inputs[1]
        else:
            scales = ctx.constant(np.asarray(attrs["scales"], np.float32))
        return ctx.add_layer("Resize", [inputs[0], None, scales, None], params).outputs


@onnx_op("GridSample", since_version=16)
class GridSample(OpImporter):
    """GridSample -> Resize mode GRID_SAMPLE with inputs (x, grid)."""

    def convert(self, ctx, node, inputs, attrs):
        params = {"mode": "GRID_SAMPLE", "grid_mode": attrs.get("mode", "linear"),
                  "padding_mode": attrs.get("padding_mode", "zeros"),
                  "align_corners": int(attrs.get("align_corners", 0))}
        return ctx.add_layer("Resize", [inputs[0], inputs[1]], params).outputs


# recurrent --------------------------------------------------------------------------------------------------------

class _Recurrent(OpImporter):
    """RNN / GRU / LSTM -> RNN layer with ONNX's input order; outputs Y, Y_h (and Y_c for LSTM)."""
    cell = "RNN"

    def convert(self, ctx, node, inputs, attrs):
        params = {"cell": self.cell, "direction": attrs.get("direction", "forward"),
                  "hidden_size": int(attrs.get("hidden_size", 0)), "activations": attrs.get("activations"),
                  "activation_alpha": attrs.get("activation_alpha"), "activation_beta": attrs.get("activation_beta"),
                  "clip": float(attrs["clip"]) if attrs.get("clip") is not None else None,
                  "linear_before_reset": int(attrs.get("linear_before_reset", 0)),
                  "layout": int(attrs.get("layout", 0)), "input_forget": int(attrs.get("input_forget", 0))}
        n_out = 3 if self.cell == "LSTM" else 2
        ins = list(inputs) + [None] * (8 - len(inputs))
        return ctx.add_layer("RNN", ins[:8], params, num_outputs=n_out).outputs


@onnx_op("RNN")
class RNN(_Recurrent):
    cell = "RNN"


@onnx_op("GRU")
class GRU(_Recurrent):
    cell = "GRU"


@onnx_op("LSTM")
class LSTM(_Recurrent):
    cell = "LSTM"


@onnx_op("Col2Im", since_version=18)
class Col2Im(OpImporter):
    """Col2Im -> Deconvolution with col2im=True: inputs (columns, image_shape, block_shape)."""

    def convert(self, ctx, node, inputs, attrs):
        block = ctx.constant_value(inputs[2])
        nd = len(block) if block is not None else (inputs[2].shape[0] if inputs[2].shape else None)
        if nd is None:
            raise ParseError("Col2Im needs a block_shape of known length")
        pre, post = split_pads(attrs.get("pads"), nd)
        params = {"col2im": True, "strides": list(attrs.get("strides") or [1] * nd), "pre_padding": pre,
                  "post_padding": post, "dilations": list(attrs.get("dilations") or [1] * nd),
                  "kernel_shape": [int(v) for v in block] if block is not None else []}
        return ctx.add_layer("Deconvolution", list(inputs[:3]), params).outputs
