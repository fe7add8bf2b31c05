"""Small generated models that the fuzzer mutates: each exercises a family of importers, passes and kernels
(conv/BN/activation/pool fusion, MatMul/bias/GELU/LayerNorm, shape arithmetic, residuals and resizing, control
flow, attention)."""
from __future__ import annotations

import zlib

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

def _rng(name):
    """Values that depend on the tensor's name only: every call builds the same bytes."""
    return np.random.default_rng(zlib.crc32(name.encode()))


def _w(name, *shape, scale=0.5):
    return numpy_helper.from_array((_rng(name).standard_normal(shape) * scale).astype(np.float32), name)


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _model(name, nodes, inputs, outputs, inits, opset=17):
    g = h.make_graph(nodes, name, inputs, outputs, initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)], producer_name="debugkit-fuzz-seed")
    m.ir_version = 8
    return m


def _vi(name, shape, dtype=T.FLOAT):
    return h.make_tensor_value_info(name, dtype, shape)


def conv_net():
    nodes = [h.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             h.make_node("BatchNormalization", ["c1", "g", "be", "mu", "var"], ["bn"], name="bn1", epsilon=1e-5),
             h.make_node("Relu", ["bn"], ["r1"], name="relu1"),
             h.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         group=2),
             h.make_node("Add", ["c2", "p1"], ["res"], name="residual"),
             h.make_node("GlobalAveragePool", ["res"], ["gap"], name="gap"),
             h.make_node("Flatten", ["gap"], ["flat"], name="flatten", axis=1),
             h.make_node("Gemm", ["flat", "fc", "fcb"], ["logits"], name="fc", transB=1),
             h.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=-1)]
    inits = [_w("w1", 4, 3, 3, 3), _w("b1", 4), _w("g", 4), _w("be", 4), _w("mu", 4),
             numpy_helper.from_array(np.abs(_rng("var").standard_normal(4)).astype(np.float32) + 0.5, "var"),
             _w("w2", 4, 2, 3, 3), _w("fc", 5, 4), _w("fcb", 5)]
    return _model("conv_net", nodes, [_vi("x", [1, 3, 8, 8])], [_vi("y", [1, 5])], inits)


def transformer_block():
    nodes = [h.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
             h.make_node("Add", ["q", "bq"], ["qb"], name="q_bias"),
             h.make_node("Div", ["qb", "sqrt2"], ["d"], name="gelu_div"),
             h.make_node("Erf", ["d"], ["e"], name="gelu_erf"),
             h.make_node("Add", ["e", "one"], ["e1"], name="gelu_add"),
             h.make_node("Mul", ["qb", "e1"], ["m"], name="gelu_mul"),
             h.make_node("Mul", ["m", "half"], ["gelu"], name="gelu_half"),
             h.make_node("LayerNormalization", ["gelu", "ln_g", "ln_b"], ["ln"], name="ln", axis=-1, epsilon=1e-5),
             h.make_node("MatMul", ["ln", "wk"], ["k"], name="k_proj"),
             h.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
             h.make_node("MatMul", ["ln", "kt"], ["att"], name="scores"),
             h.make_node("Mul", ["att", "scale"], ["atts"], name="scale"),
             h.make_node("Softmax", ["atts"], ["probs"], name="attn_softmax", axis=-1),
             h.make_node("MatMul", ["probs", "ln"], ["ctx"], name="context"),
             h.make_node("Add", ["ctx", "x"], ["y"], name="residual")]
    inits = [_w("wq", 8, 8), _w("bq", 8), numpy_helper.from_array(np.array(1.4142135, np.float32), "sqrt2"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half"), _w("ln_g", 8), _w("ln_b", 8),
             _w("wk", 8, 8), numpy_helper.from_array(np.array(0.35, np.float32), "scale")]
    return _model("transformer_block", nodes, [_vi("x", [2, 4, 8])], [_vi("y", [2, 4, 8])], inits)


def shape_ops():
    nodes = [h.make_node("Shape", ["x"], ["s"], name="shape"),
             h.make_node("Gather", ["s", "i0"], ["n"], name="gather_n", axis=0),
             h.make_node("Unsqueeze", ["n", "ax0"], ["n1"], name="unsq"),
             h.make_node("Concat", ["n1", "m1"], ["newshape"], name="concat_shape", axis=0),
             h.make_node("Reshape", ["x", "newshape"], ["flat"], name="reshape"),
             h.make_node("Slice", ["flat", "st", "en", "ax1"], ["sl"], name="slice"),
             h.make_node("Split", ["sl", "sp"], ["a", "b"], name="split", axis=1),
             h.make_node("Concat", ["b", "a"], ["ba"], name="concat", axis=1),
             h.make_node("ReduceMean", ["ba", "ax1"], ["rm"], name="reduce_mean", keepdims=1),
             h.make_node("Sub", ["ba", "rm"], ["cent"], name="center"),
             h.make_node("Expand", ["cent", "exp"], ["ex"], name="expand"),
             h.make_node("Tile", ["ex", "reps"], ["ti"], name="tile"),
             h.make_node("Squeeze", ["ti", "ax0"], ["sq"], name="squeeze"),
             h.make_node("Cast", ["sq"], ["y"], name="cast", to=T.FLOAT)]
    inits = [_i64("i0", 0), _i64("ax0", [0]), _i64("m1", [-1]), _i64("st", [1]), _i64("en", [23]), _i64("ax1", [1]),
             _i64("sp", [10, 12]), _i64("exp", [1, 22]), _i64("reps", [1, 2])]
    return _model("shape_ops", nodes, [_vi("x", [1, 4, 6])], [_vi("y", None)], inits, opset=18)


def resize_residual():
    nodes = [h.make_node("Conv", ["x", "w1"], ["c1"], name="conv_s2", kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
             h.make_node("Sigmoid", ["c1"], ["sg"], name="sig"),
             h.make_node("Mul", ["c1", "sg"], ["silu"], name="silu"),
             h.make_node("Resize", ["silu", "", "scales"], ["up"], name="resize", mode="nearest"),
             h.make_node("ConvTranspose", ["silu", "wt"], ["ct"], name="deconv", kernel_shape=[2, 2], strides=[2, 2]),
             h.make_node("Add", ["up", "ct"], ["s"], name="sum"),
             h.make_node("Pad", ["s", "pads"], ["pd"], name="pad", mode="constant"),
             h.make_node("AveragePool", ["pd"], ["ap"], name="avgpool", kernel_shape=[3, 3], strides=[1, 1]),
             h.make_node("Clip", ["ap", "lo", "hi"], ["y"], name="clip")]
    inits = [_w("w1", 4, 2, 3, 3), numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             _w("wt", 4, 4, 2, 2), _i64("pads", [0, 0, 1, 1, 0, 0, 1, 1]),
             numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
             numpy_helper.from_array(np.array(1.0, np.float32), "hi")]
    return _model("resize_residual", nodes, [_vi("x", [1, 2, 8, 8])], [_vi("y", None)], inits)


def control_flow():
    then_g = h.make_graph([h.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [], [_vi("t", None)])
    else_g = h.make_graph([h.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [], [_vi("e", None)])
    nodes = [h.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             h.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
             h.make_node("If", ["c"], ["branch"], name="if", then_branch=then_g, else_branch=else_g),
             h.make_node("Where", ["mask", "branch", "x"], ["w"], name="where"),
             h.make_node("TopK", ["w", "k"], ["vals", "idx"], name="topk", axis=1),
             h.make_node("Cast", ["idx"], ["idxf"], name="cast_idx", to=T.FLOAT),
             h.make_node("Concat", ["vals", "idxf"], ["y"], name="concat", axis=1)]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array([[True, False, True, False, True, True]]), "mask"), _i64("k", [3])]
    return _model("control_flow", nodes, [_vi("x", [1, 6])], [_vi("y", None)], inits)


SEEDS = {"conv_net": conv_net, "transformer_block": transformer_block, "shape_ops": shape_ops,
         "resize_residual": resize_residual, "control_flow": control_flow}


def seed_models() -> dict[str, onnx.ModelProto]:
    return {name: make() for name, make in SEEDS.items()}
