"""Zero-size tensors through every CPU layer kind (issue 22/25): a batch of 0, an empty axis, an empty attention
map (ppocr_v4_rec's Softmax over a (1, 8, 0, 0) tensor). Each case is one ONNX node run by the engine and by ONNX
Runtime on the same empty input: same output shapes, same values (Shape's output is not empty)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from backends.engine import Runtime
from backends.engine.build import build_plan_from_onnx


def f32(*s):
    return np.random.default_rng(0).standard_normal(s).astype(np.float32)


def I(name, v):  # noqa: E743
    return nh.from_array(np.array(v, np.int64), name)


def W(name, a):
    return nh.from_array(a, name)


# name: (node spec, input shape with a 0, initializers)
CASES = {
    "Softmax": (dict(op="Softmax", attrs=dict(axis=-1)), (1, 8, 0, 0), []),
    "Softmax_axis1": (dict(op="Softmax", attrs=dict(axis=1)), (1, 8, 0, 5), []),
    "LogSoftmax": (dict(op="LogSoftmax", attrs=dict(axis=-1)), (0, 4), []),
    "Relu": (dict(op="Relu"), (0, 3), []),
    "Sigmoid": (dict(op="Sigmoid"), (2, 0), []),
    "Conv": (dict(op="Conv", inputs=["x", "w", "b"], attrs=dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1])),
        (0, 3, 8, 8), [W("w", f32(4, 3, 3, 3)), W("b", f32(4))]),
    "Conv_1x1": (dict(op="Conv", inputs=["x", "w"], attrs=dict(kernel_shape=[1, 1])),
        (0, 3, 4, 4), [W("w", f32(4, 3, 1, 1))]),
    "Conv_dw": (dict(op="Conv", inputs=["x", "w"], attrs=dict(kernel_shape=[3, 3], group=3, pads=[1,1,1,1])),
        (0, 3, 4, 4), [W("w", f32(3, 1, 3, 3))]),
    "ConvTranspose": (dict(op="ConvTranspose", inputs=["x", "w"], attrs=dict(kernel_shape=[2, 2], strides=[2,2])),
        (0, 3, 4, 4), [W("w", f32(3, 2, 2, 2))]),
    "MatMul": (dict(op="MatMul", inputs=["x", "w"]), (0, 4), [W("w", f32(4, 5))]),
    "MatMul_k0": (dict(op="MatMul", inputs=["x", "w"]), (3, 0), [W("w", f32(0, 5))]),
    "Gemm": (dict(op="Gemm", inputs=["x", "w", "b"], attrs=dict(transB=1)), (0, 4),
             [W("w", f32(5, 4)), W("b", f32(5))]),
    "BatchNormalization": (dict(op="BatchNormalization", inputs=["x", "s", "b", "m", "v"]),
        (0, 3, 2, 2), [W("s", f32(3)), W("b", f32(3)), W("m", f32(3)), W("v", np.abs(f32(3)) + 1)]),
    "InstanceNormalization": (dict(op="InstanceNormalization", inputs=["x", "s", "b"]),
        (0, 3, 2, 2), [W("s", f32(3)), W("b", f32(3))]),
    "LayerNormalization": (dict(op="LayerNormalization", inputs=["x", "s", "b"], attrs=dict(axis=-1)),
        (0, 4), [W("s", f32(4)), W("b", f32(4))]),
    "MaxPool": (dict(op="MaxPool", attrs=dict(kernel_shape=[2, 2], strides=[2,2])), (0, 3, 4, 4), []),
    "AveragePool": (dict(op="AveragePool", attrs=dict(kernel_shape=[2, 2], strides=[2,2])), (0, 3, 4, 4), []),
    "GlobalAveragePool": (dict(op="GlobalAveragePool"), (0, 3, 4, 4), []),
    "ReduceMean": (dict(op="ReduceMean", inputs=["x", "ax"], attrs=dict(keepdims=1)), (0, 4), [I("ax", [1])]),
    "ReduceSum_empty_axis": (dict(op="ReduceSum", inputs=["x", "ax"], attrs=dict(keepdims=1)), (3, 0), [I("ax", [1])]),
    "ReduceMax_rows": (dict(op="ReduceMax", inputs=["x", "ax"], attrs=dict(keepdims=0)), (0, 4), [I("ax", [1])]),
    "Transpose": (dict(op="Transpose", attrs=dict(perm=[1, 0])), (0, 4), []),
    "Reshape": (dict(op="Reshape", inputs=["x", "s"]), (0, 4), [I("s", [-1, 2, 2])]),
    "Concat": (dict(op="Concat", inputs=["x", "x"], attrs=dict(axis=0)), (0, 4), []),
    "Slice": (dict(op="Slice", inputs=["x", "st", "en"]), (0, 4), [I("st", [0]), I("en", [2])]),
    "Gather": (dict(op="Gather", inputs=["x", "i"], attrs=dict(axis=1)), (0, 4), [I("i", [0, 2])]),
    "Add": (dict(op="Add", inputs=["x", "b"]), (0, 4), [W("b", f32(4))]),
    "Mul_bcast": (dict(op="Mul", inputs=["x", "b"]), (2, 0, 4), [W("b", f32(1, 1, 4))]),
    "Where": (dict(op="Where", inputs=["c", "x", "b"]),
        (0, 4), [nh.from_array(np.array([True, False, True, True]), "c"), W("b", f32(4))]),
    "Resize": (dict(op="Resize", inputs=["x", "", "sc"], attrs=dict(mode="nearest")),
        (0, 3, 2, 2), [W("sc", np.array([1, 1, 2, 2], np.float32))]),
    "Pad": (dict(op="Pad", inputs=["x", "p"]), (0, 3), [I("p", [0, 1, 0, 1])]),
    "Tile": (dict(op="Tile", inputs=["x", "r"]), (0, 3), [I("r", [2, 2])]),
    "Expand": (dict(op="Expand", inputs=["x", "s"]), (0, 1), [I("s", [0, 4])]),
    "Split": (dict(op="Split", inputs=["x", "sp"], attrs=dict(axis=1), outputs=["y", "y2"]), (0, 4), [I("sp", [2, 2])]),
    "TopK": (dict(op="TopK", inputs=["x", "k"], attrs=dict(axis=1), outputs=["y", "y2"]), (0, 4), [I("k", [2])]),
    "ArgMax": (dict(op="ArgMax", attrs=dict(axis=1)), (0, 4), []),
    "CumSum": (dict(op="CumSum", inputs=["x", "a"]), (0, 4), [I("a", 1)]),
    "Erf": (dict(op="Erf"), (0, 4), []),
    "Clip": (dict(op="Clip", inputs=["x", "lo", "hi"]), (0, 4), [W("lo", np.float32(0)), W("hi", np.float32(1))]),
    "Einsum": (dict(op="Einsum", inputs=["x", "w"], attrs=dict(equation="ij,jk->ik")), (0, 4), [W("w", f32(4, 3))]),
    "LRN": (dict(op="LRN", attrs=dict(size=3)), (0, 4, 2, 2), []),
    "Flatten": (dict(op="Flatten"), (0, 4, 2), []),
    "Shape": (dict(op="Shape"), (0, 4), []),
    "Cast": (dict(op="Cast", attrs=dict(to=T.FLOAT16)), (0, 4), []),
    "HardSwish": (dict(op="HardSwish"), (0, 4), []),
    "PRelu": (dict(op="PRelu", inputs=["x", "sl"]), (0, 4), [W("sl", f32(4))]),
    "MatMul_batched": (dict(op="MatMul", inputs=["x", "w"]), (2, 0, 4), [W("w", f32(4, 5))]),
    "Conv1d": (dict(op="Conv", inputs=["x", "w"], attrs=dict(kernel_shape=[3])), (0, 2, 5), [W("w", f32(3, 2, 3))]),
    "NonZero": (dict(op="NonZero"), (0, 4), []),
}

CASES["DepthToSpace"] = (dict(op="DepthToSpace", attrs=dict(blocksize=2)), (0, 4, 2, 2), [])
CASES["SpaceToDepth"] = (dict(op="SpaceToDepth", attrs=dict(blocksize=2)), (0, 2, 4, 4), [])
CASES.update({
    "Gather_empty_indices": (dict(op="Gather", inputs=["x", "i"], attrs=dict(axis=0)), (3, 4),
                             [nh.from_array(np.zeros((0,), np.int64), "i")]),
    "TopK_k0": (dict(op="TopK", inputs=["x", "k"], attrs=dict(axis=1), outputs=["y", "y2"]), (2, 4), [I("k", [0])]),
    "NonMaxSuppression_no_boxes": (dict(op="NonMaxSuppression", inputs=["x", "sc"]), (1, 0, 4),
                                   [W("sc", np.zeros((1, 1, 0), np.float32))]),
    "RoiAlign_no_rois": (dict(op="RoiAlign", inputs=["x", "r", "bi"], attrs=dict(output_height=2, output_width=2)),
                         (1, 3, 4, 4), [W("r", np.zeros((0, 4), np.float32)),
                                        nh.from_array(np.zeros((0,), np.int64), "bi")]),
    "ReduceProd_empty_axis": (dict(op="ReduceProd", inputs=["x", "ax"], attrs=dict(keepdims=0)), (2, 0),
                              [I("ax", [1])]),
    "Conv_5x5": (dict(op="Conv", inputs=["x", "w"], attrs=dict(kernel_shape=[5, 5], pads=[2, 2, 2, 2])),
                 (0, 2, 8, 8), [W("w", f32(2, 2, 5, 5))]),
    "AveragePool_1d": (dict(op="AveragePool", attrs=dict(kernel_shape=[2])), (0, 3, 4), []),
    "MeanVarianceNormalization": (dict(op="MeanVarianceNormalization"), (0, 3, 2, 2), []),
    "Hardmax": (dict(op="Hardmax", attrs=dict(axis=-1)), (0, 4), []),
    "Trilu": (dict(op="Trilu"), (0, 3, 3), []),
    "ScatterND_no_updates": (dict(op="ScatterND", inputs=["x", "i", "u"]), (3, 4),
                             [nh.from_array(np.zeros((0, 1), np.int64), "i"), W("u", np.zeros((0, 4), np.float32))]),
    "InstanceNormalization_empty_plane": (dict(op="InstanceNormalization", inputs=["x", "s", "b"]), (1, 3, 0, 2),
                                          [W("s", f32(3)), W("b", f32(3))]),
    "Attention_scores_empty": (dict(op="MatMul", inputs=["x", "w"]), (1, 8, 0, 16), [W("w", f32(16, 0))]),
    "Compress_nothing": (dict(op="Compress", inputs=["x", "c"], attrs=dict(axis=0)), (0, 4),
                         [nh.from_array(np.zeros((0,), bool), "c")]),
    "Resize_linear": (dict(op="Resize", inputs=["x", "", "sc"], attrs=dict(mode="linear")), (0, 3, 2, 2),
                      [W("sc", np.array([1, 1, 2, 2], np.float32))]),
    "GridSample": (dict(op="GridSample", inputs=["x", "g"]), (0, 1, 4, 4),
                   [W("g", np.zeros((0, 2, 2, 2), np.float32))]),
})
STATIC = {"DepthToSpace", "SpaceToDepth"}   # their importers need static C, H, W


def _model(spec, shape, inits, static):
    outs = spec.get("outputs", ["y"])
    node = h.make_node(spec["op"], spec.get("inputs", ["x"]), outs, name="n", **spec.get("attrs", {}))
    dims = list(shape) if static else ["d0"] + list(shape[1:])
    g = h.make_graph([node], "g", [h.make_tensor_value_info("x", T.FLOAT, dims)],
                     [onnx.ValueInfoProto(name=o) for o in outs], initializer=inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("name", sorted(CASES))
def test_zero_size_input_matches_onnxruntime(name):
    ort = pytest.importorskip("onnxruntime")
    spec, shape, inits = CASES[name]
    m = _model(spec, shape, inits, static=name in STATIC)
    x = np.zeros(shape, np.float32)
    if name == "TopK" and tuple(int(v) for v in ort.__version__.split(".")[:2]) < (1, 32):
        # ONNX Runtime before 1.32 aborts the process on a zero-row TopK (seen with 1.30.0): the ONNX definition's
        # empty outputs stand in for its answer
        ref = [np.zeros((0, 2), np.float32), np.zeros((0, 2), np.int64)]
    else:
        ref = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    plan = build_plan_from_onnx(m.SerializeToString(), shapes={"x": shape})
    out = Runtime().deserialize_engine(plan).create_execution_context().execute({"x": x})
    for o, want in zip(spec.get("outputs", ["y"]), ref):
        got = np.asarray(out[o])
        assert got.shape == want.shape, (o, got.shape, want.shape)
        np.testing.assert_array_equal(got, want.astype(got.dtype))


@pytest.mark.parametrize("op,hidden", [("LSTM", 4), ("GRU", 3)])
def test_recurrent_layers_take_a_batch_of_0(op, hidden):
    """ONNX Runtime 1.32 aborts the process on these (so no comparison): Y is [seq, dirs, 0, hidden], Y_h [dirs, 0,
    hidden]."""
    gates = {"LSTM": 4, "GRU": 3}[op]
    spec = dict(op=op, inputs=["x", "W", "R"], attrs=dict(hidden_size=hidden), outputs=["y", "h"])
    inits = [W("W", f32(1, gates * hidden, 4)), W("R", f32(1, gates * hidden, hidden))]
    m = _model(spec, (5, 0, 4), inits, static=False)
    plan = build_plan_from_onnx(m.SerializeToString(), shapes={"x": (5, 0, 4)})
    out = Runtime().deserialize_engine(plan).create_execution_context().execute({"x": np.zeros((5, 0, 4), np.float32)})
    assert np.asarray(out["y"]).shape == (5, 1, 0, hidden) and np.asarray(out["h"]).shape == (1, 0, hidden)
