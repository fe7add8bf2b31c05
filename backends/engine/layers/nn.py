"""Convolution, deconvolution, pooling, normalization, resize, recurrent, quantization."""
from backends.engine.layers.base import Layer

__all__ = ["ConvolutionLayer", "DeconvolutionLayer", "PoolingLayer", "NormalizationLayer", "ResizeLayer",
           "RNNLayer", "QuantizeLayer", "DequantizeLayer", "LRNLayer", "ScaleLayer"]


class ConvolutionLayer(Layer):
    """N-d cross-correlation. weights: 'kernel' [M, C/g, k...], optional 'bias' [M]. Params: num_output_maps,
    kernel_shape, strides, pre_padding, post_padding, dilations, groups. Input 1 / 2 may carry kernel / bias
    as tensors (Q/DQ or dynamic weights)."""
    kind = "Convolution"
    defaults = {"num_output_maps": 0, "kernel_shape": [], "strides": None, "pre_padding": None,
                "post_padding": None, "dilations": None, "groups": 1}


class DeconvolutionLayer(Layer):
    """N-d transposed convolution. weights: 'kernel' [C, M/g, k...], optional 'bias'. Params as Convolution plus
    output_padding."""
    kind = "Deconvolution"
    defaults = {"num_output_maps": 0, "kernel_shape": [], "strides": None, "pre_padding": None,
                "post_padding": None, "dilations": None, "groups": 1, "output_padding": None}


class PoolingLayer(Layer):
    """Pooling of `type` MAX, AVERAGE, LP over `window` with strides, pre/post padding, dilations, ceil_mode,
    average_count_excludes_padding, p (LP); `global` pools the whole spatial extent. MaxPool's optional second
    output holds int64 indices (`storage_order`)."""
    kind = "Pooling"
    defaults = {"type": "MAX", "window": [], "strides": None, "pre_padding": None, "post_padding": None,
                "dilations": None, "ceil_mode": False, "average_count_excludes_padding": True, "p": 2,
                "global": False, "storage_order": 0}


class NormalizationLayer(Layer):
    """(x - mean) / sqrt(var + epsilon) * scale + bias over `axes`; `num_groups` for GroupNorm; `mode` LAYER,
    INSTANCE, GROUP, BATCH (inference BatchNorm with weights mean/var), RMS. Inputs: x, scale, bias."""
    kind = "Normalization"
    defaults = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5, "num_groups": 1, "stash_type": 1}


class ScaleLayer(Layer):
    """y = (x * scale + shift) ** power per channel (`channel_axis`), TensorRT's IScaleLayer. weights: scale,
    shift, power (any may be absent)."""
    kind = "Scale"
    defaults = {"mode": "CHANNEL", "channel_axis": 1}


class LRNLayer(Layer):
    """Local response normalization across channels: window, alpha, beta, k."""
    kind = "LRN"
    defaults = {"window": 5, "alpha": 1e-4, "beta": 0.75, "k": 1.0}


class ResizeLayer(Layer):
    """Resize with `mode` NEAREST, LINEAR, CUBIC; coordinate_transformation, nearest_rounding, cubic_coeff,
    exclude_outside, extrapolation_value, axes, keep_aspect_ratio_policy, antialias. Inputs: x, roi, scales, sizes."""
    kind = "Resize"
    defaults = {"mode": "NEAREST", "coordinate_transformation": "half_pixel", "nearest_rounding": "round_prefer_floor",
                "cubic_coeff": -0.75, "exclude_outside": False, "extrapolation_value": 0.0, "axes": None,
                "keep_aspect_ratio_policy": "stretch", "antialias": False}


class RNNLayer(Layer):
    """Recurrent layer (TensorRT's RNNv2): `cell` LSTM, GRU, RNN; direction; hidden_size; activations;
    clip; linear_before_reset; layout; input_forget. Inputs follow ONNX's order (X, W, R, B, seq_lens, h0, c0, P)."""
    kind = "RNN"
    defaults = {"cell": "LSTM", "direction": "forward", "hidden_size": 0, "activations": None,
                "activation_alpha": None, "activation_beta": None, "clip": None, "linear_before_reset": 0,
                "layout": 0, "input_forget": 0}


class QuantizeLayer(Layer):
    """y = saturate(round(x / scale) + zero_point) to `output_dtype`; per-tensor, per-axis or blocked (`axis`,
    `block_size`). Inputs x, scale, zero_point."""
    kind = "Quantize"
    defaults = {"axis": 1, "block_size": 0, "output_dtype": None, "saturate": True}


class DequantizeLayer(Layer):
    """y = (x - zero_point) * scale; per-tensor, per-axis or blocked. Inputs x, scale, zero_point."""
    kind = "Dequantize"
    defaults = {"axis": 1, "block_size": 0, "output_dtype": None}
