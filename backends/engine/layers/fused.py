"""Layers the builder's fusion passes create (never the parser)."""
from backends.engine.layers.base import Layer

__all__ = ["PointwiseLayer", "AttentionLayer", "ConvolutionNHWCLayer", "PoolingNHWCLayer", "SqueezeExciteLayer",
           "InvertedResidualLayer"]


class PointwiseLayer(Layer):
    """A chain of pointwise ops fused into one kernel. params['program'] is a list of steps
    {"op": kind/op, "args": [operand refs], "params": {...}} evaluated in order; operand refs are
    "in:<i>" (layer input), "w:<name>" (weight) or "s:<j>" (result of step j). The last step is the output."""
    kind = "Pointwise"
    defaults = {"program": []}


class AttentionLayer(Layer):
    """softmax(Q @ K^T * scale + mask) @ V as one layer. Inputs q, k, v, optional mask; params scale,
    mask_kind (none, add, bool), transpose_k (False: input 1 is already K^T), nan_to_zero (rows that are NaN after
    the softmax, i.e. fully masked, become 0). With `heads` H (passes/attention_heads.py, on devices that read
    strides): q, k, v are [B, S, C] tensors, operand i read at columns [columns[2i], columns[2i+1]) (one merged QKV
    projection's output passed three times) and split into H heads; k is never pre-transposed; the output is
    [B, S, H*Dv], heads merged."""
    kind = "Attention"
    defaults = {"scale": None, "mask_kind": "none", "transpose_k": True, "softmax_axis": -1, "heads": None,
                "columns": None}


class ConvolutionNHWCLayer(Layer):
    """The layout pass's NHWC twin of a 2-D Convolution: input [N,H,W,C], output [N,OH,OW,M]; weights
    'kernel_hwio' [KH*KW*C, M] (transposed at build time), optional 'bias'; params as Convolution plus
    kernel_spatial; post_ops as Convolution with bias axis -1 and residual inputs from index 3 on."""
    kind = "ConvolutionNHWC"
    defaults = {"kernel_spatial": [1, 1], "strides": None, "pre_padding": None, "post_padding": None,
                "dilations": None, "groups": 1}


class PoolingNHWCLayer(Layer):
    """The layout pass's NHWC twin of a 2-D MAX / AVERAGE / global Pooling (params as Pooling)."""
    kind = "PoolingNHWC"
    defaults = {"type": "MAX", "window": [], "strides": None, "pre_padding": None, "post_padding": None,
                "global": False, "average_count_excludes_padding": True}


class SqueezeExciteLayer(Layer):
    """A squeeze-and-excitation block as one layer (passes/fusion_se.py): y = x * act2(W2 @ act1(W1 @ mean_hw(x)
    + b1) + b2) for x [N, C, H, W]. Weights 'squeeze_kernel' [M, C], optional 'squeeze_bias' [M], 'excite_kernel'
    [C, M], optional 'excite_bias' [C]; params squeeze_ops / excite_ops: the activations after each product, in
    order ({"type", "alpha", "beta"}); mean_dtype: the mean's accumulator ("float32" as Reduce AVG, "float64" as
    global average Pooling)."""
    kind = "SqueezeExcite"
    defaults = {"squeeze_ops": [], "excite_ops": [], "mean_dtype": "float32"}


class InvertedResidualLayer(Layer):
    """An inverted-residual block as one layer (passes/fusion_ir.py): y = Wp @ se(act_d(dw(act_e(We @ x + be)) +
    bd)) + bp (+ x where `residual`) for x [N, C, H, W]. Weights 'expand_kernel' [E, C] (absent in a block without
    an expand stage: E = C, act_e(We @ x + be) is x), 'dw_kernel' [E, kh, kw], 'project_kernel' [M, E], optional biases 'expand_bias' / 'dw_bias' / 'project_bias', and where the block has a
    squeeze-excite stage SqueezeExcite's four weights; params: the depthwise kernel_shape / strides / pre_padding /
    post_padding, expand_ops / dw_ops (at most one activation each: {"type", "alpha", "beta"}), squeeze_ops /
    excite_ops (empty without squeeze-excite)."""
    kind = "InvertedResidual"
    defaults = {"expand_ops": [], "dw_ops": [], "squeeze_ops": [], "excite_ops": [], "residual": False}
