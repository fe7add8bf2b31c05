"""The CUDA device's index, integer and detection tactics (native/cuda/tactics/index.py) against the CPU tactics
of the same layers, bit for bit: integer/boolean ElementWise and Unary, Gather in every mode, TopK, NonZero, NMS;
and a small detection-style ONNX model built for the GPU with none of these layers on the host, against ONNX
Runtime. Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from native.tactics import TacticRefusal

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(18)


def _op(kind, **params):
    from native.tactics import Op
    return Op(kind, "t", params, {})


def _gpu(kind, name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if t.name == name)


def _cpu(kind):
    from native.tactics import tactics_for
    return tactics_for(kind, "cpu")[0]


def _up(x):
    from native.cuda.array import GpuArray
    return None if x is None else GpuArray.from_host(np.asarray(x))    # (0-d stays 0-d)


def _both(kind, name, op, inputs):
    """(GPU outputs as numpy, CPU outputs) of one layer."""
    with np.errstate(all="ignore"):
        ref = _cpu(kind).run(op, [x for x in inputs])
    got = _gpu(kind, name).run(op, [_up(x) for x in inputs])
    return [g.get() for g in got], [np.asarray(r) for r in ref]


def _same(got, ref):
    """Equal dtypes, shapes and values; floats also equal in sign (-0.0) outside NaN (a GPU's NaN bits are
    canonical, the CPU's keep the input's payload and sign)."""
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype, (g.dtype, r.dtype)
        assert g.shape == r.shape, (g.shape, r.shape)
        np.testing.assert_array_equal(g, r)
        if r.dtype.kind == "f":
            keep = ~np.isnan(r.astype(np.float32))
            np.testing.assert_array_equal(np.signbit(g[keep]), np.signbit(r[keep]))


def _ints(dtype, shape):
    info = np.iinfo(dtype)
    special = np.array([0, 1, -1, 2, -2, 7, -7, 63, 64, info.min, info.max, 3, -3], dtype)
    x = RNG.integers(-50, 50, size=shape).astype(dtype)
    flat = x.reshape(-1)
    flat[:min(len(special), flat.size)] = special[:flat.size]
    return x


_INT_OPS = ["SUM", "SUB", "PROD", "DIV", "FLOOR_DIV", "MOD", "FMOD", "MAX", "MIN", "BITWISE_AND", "BITWISE_OR",
            "BITWISE_XOR", "BITSHIFT_LEFT", "BITSHIFT_RIGHT", "AND", "OR", "XOR", "EQUAL", "GREATER", "LESS",
            "GREATER_EQUAL", "LESS_EQUAL"]


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("op", _INT_OPS)
def test_integer_elementwise_matches_cpu(dtype, op):
    a = _ints(dtype, (3, 1, 13))
    b = _ints(dtype, (5, 13))[::-1].copy()        # zeros, -1 and INT_MIN meet in the broadcast
    _same(*_both("ElementWise", "nvrtc-int", _op("ElementWise", op=op), [a, b]))
    # same shapes (and an empty broadcast)
    _same(*_both("ElementWise", "nvrtc-int", _op("ElementWise", op=op), [a[0], a[1 % a.shape[0]]]))
    _same(*_both("ElementWise", "nvrtc-int", _op("ElementWise", op=op), [a[:, :, :0], b[:, :0]]))


@pytest.mark.parametrize("op", ["AND", "OR", "XOR", "EQUAL", "GREATER", "LESS", "GREATER_EQUAL", "LESS_EQUAL", "SUM",
                                "PROD", "MAX", "MIN", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR"])
def test_boolean_elementwise_matches_cpu(op):
    a, b = RNG.random((4, 1, 6)) > 0.5, RNG.random((3, 6)) > 0.5
    _same(*_both("ElementWise", "nvrtc-int", _op("ElementWise", op=op), [a, b]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("op", ["EQUAL", "GREATER", "LESS", "GREATER_EQUAL", "LESS_EQUAL", "AND", "OR", "XOR", "MOD",
                                "FMOD", "FLOOR_DIV"])
def test_float_comparisons_and_mod_match_cpu(dtype, op):
    a = (RNG.standard_normal((4, 1, 9)) * 5).astype(dtype)
    b = (RNG.standard_normal((7, 9)) * 3).astype(dtype)
    a.reshape(-1)[:6] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0]
    b.reshape(-1)[:9] = [1.0, np.nan, 2.0, 0.0, -0.0, -np.inf, 2.0, -2.0, 0.5]
    b[1] = a[1, 0]                                  # equal values
    _same(*_both("ElementWise", "nvrtc-int", _op("ElementWise", op=op), [a, b]))


def test_float_arithmetic_and_mixed_types_are_left_to_other_tactics():
    t = _gpu("ElementWise", "nvrtc-int")
    a = np.ones((3,), np.float32)
    with pytest.raises(TacticRefusal):
        t.run(_op("ElementWise", op="SUM"), [_up(a), _up(a)])
    with pytest.raises(TacticRefusal):
        t.run(_op("ElementWise", op="SUM"), [_up(a.astype(np.int64)), _up(a.astype(np.int32))])
    assert t.supports(_op("ElementWise", op="POW"), None) is not None


@pytest.mark.parametrize("op,dtypes", [("NOT", [np.bool_, np.int64, np.float32, np.float16]),
                                       ("ISNAN", [np.float32, np.float16, np.int64]),
                                       ("ISINF", [np.float32, np.float16]),
                                       ("ABS", [np.int64, np.int32]), ("NEG", [np.int64, np.int32]),
                                       ("SIGN", [np.int64, np.int32, np.float32, np.float16]),
                                       ("BITWISE_NOT", [np.int64, np.int32, np.bool_]),
                                       ("ROUND", [np.int64, np.float32, np.float16])])
def test_integer_and_predicate_unary_match_cpu(op, dtypes):
    for dtype in dtypes:
        if dtype == np.bool_:
            x = RNG.random((5, 7)) > 0.5
        elif np.issubdtype(dtype, np.integer):
            x = _ints(dtype, (5, 7))
        else:
            x = (RNG.standard_normal((5, 7)) * 3).astype(dtype)
            x.reshape(-1)[:8] = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, 1.5, -2.5]
        for flags in ([(True, True), (True, False), (False, True)] if op == "ISINF" else [(True, True)]):
            o = _op("Unary", op=op, detect_positive=flags[0], detect_negative=flags[1])
            _same(*_both("Unary", "nvrtc-int", o, [x]))


@pytest.mark.parametrize("dtype", [np.bool_, np.int64, np.float16, np.float32, np.int8])
@pytest.mark.parametrize("itype", [np.int64, np.int32])
def test_gather_default_every_element_size_and_index_type(dtype, itype):
    x = (RNG.standard_normal((4, 6, 3)) * 10).astype(dtype)
    for axis, idx in [(0, np.array([[3, -1], [0, 2]])), (-1, np.array([2, 0, -3, 1])), (1, np.array(5)),
                      (1, np.zeros((0, 2)))]:
        o = _op("Gather", axis=axis, mode="DEFAULT")
        _same(*_both("Gather", "nvrtc-index", o, [x, idx.astype(itype)]))


@pytest.mark.parametrize("xshape,ishape,axis", [((4, 5), (4, 3), 1), ((4, 5), (2, 5), 0), ((3, 4, 2), (3, 6, 2), -2),
                                                ((1, 5), (3, 2), 1), ((4, 5), (1, 7), -1)])
def test_gather_elements_matches_cpu(xshape, ishape, axis):
    x = RNG.integers(-100, 100, size=xshape).astype(np.int64)
    dim = xshape[axis]
    idx = RNG.integers(-dim, dim, size=ishape)
    _same(*_both("Gather", "nvrtc-index", _op("Gather", axis=axis, mode="ELEMENT"), [x, idx]))


@pytest.mark.parametrize("xshape,ishape,b", [((5, 4), (7, 1), 0), ((5, 4, 3), (2, 6, 2), 0), ((2, 5, 4), (2, 3, 1), 1),
                                             ((3234,), (40, 1), 0), ((3234, 4), (0, 1), 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.float16])
def test_gather_nd_matches_cpu(xshape, ishape, b, dtype):
    x = (RNG.standard_normal(xshape) * 10).astype(dtype)
    m = ishape[-1]
    hi = np.array(xshape[b:b + m])
    idx = (RNG.integers(0, 1 << 30, size=ishape) % hi) - (RNG.random(ishape) < 0.3) * hi    # some negative
    _same(*_both("Gather", "nvrtc-index", _op("Gather", mode="ND", batch_dims=b), [x, idx.astype(np.int64)]))


@pytest.mark.parametrize("op", ["MAX", "MIN"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32])
def test_topk_matches_cpu_with_ties_and_nans(op, dtype):
    x = RNG.integers(-4, 5, size=(3, 300, 2)).astype(dtype)        # many ties
    if np.issubdtype(dtype, np.floating):
        x[0, ::7, 0] = np.nan
        x[1, ::11, 1] = -0.0
    for axis, k in [(1, 17), (-2, 300), (1, 0), (0, 2), (-1, 1)]:
        o = _op("TopK", op=op, k=k, axis=axis)
        _same(*_both("TopK", "nvrtc-rank", o, [x]))
    # k as a tensor (ssdlite's TopK), a long row across many tiles
    y = RNG.standard_normal(3234).astype(np.float32)
    y[100:140] = y[5]
    o = _op("TopK", op=op, k=None, axis=-1)
    _same(*_both("TopK", "nvrtc-rank", o, [y, np.array([300], np.int64)]))


def test_topk_k_out_of_range_is_an_execution_error():
    from native.errors import ExecutionError
    with pytest.raises(ExecutionError, match="k=5"):
        _gpu("TopK", "nvrtc-rank").run(_op("TopK", op="MAX", k=None, axis=0), [_up(np.ones(4, np.float32)),
                                                                               _up(np.array([5]))])


@pytest.mark.parametrize("x", [
    RNG.random((3, 4, 5)) > 0.6,
    np.array([np.nan, -0.0, 0.0, 1.0, -2.0], np.float32),
    np.array([np.nan, -0.0, 0.0, 1.0], np.float16),
    RNG.integers(-1, 2, size=(2, 1000)).astype(np.int64),
    RNG.random(3234) > 0.99,
    np.zeros((4, 0, 3), bool), np.zeros((7, 9), bool), np.array(True), np.array(0.0, np.float32),
    RNG.integers(0, 2, size=(2, 3, 2, 2, 3, 2, 2, 5)).astype(np.int32)])
def test_nonzero_matches_cpu(x):
    _same(*_both("NonZero", "nvrtc-scan", _op("NonZero"), [x]))


def _nms_op(center=0):
    from native.tactics import Op
    return Op("Plugin", "nms", {"plugin_type": "NonMaxSuppression", "plugin_version": "1",
                                "fields": {"center_point_box": center}}, {})


def _boxes(b, n, spread=30.0):
    lo = RNG.random((b, n, 2)) * spread
    wh = RNG.random((b, n, 2)) * 8 + 0.5
    box = np.concatenate([lo, lo + wh], -1)
    flip = RNG.random((b, n)) < 0.3                    # corners in either order
    box[flip] = box[flip][:, [2, 3, 0, 1]]
    return box.astype(np.float32)


@pytest.mark.parametrize("b,c,n,max_out,iou,score,center", [
    (1, 1, 500, 1000, 0.5, None, 0), (2, 3, 300, 20, 0.3, 0.2, 0), (1, 2, 130, 5, 0.0, None, 1),
    (1, 1, 0, 10, 0.5, None, 0), (1, 1, 64, 0, 0.5, None, 0), (2, 1, 2000, 2000, 0.45, None, 0)])
def test_nms_matches_cpu_plugin(b, c, n, max_out, iou, score, center):
    boxes = _boxes(b, n)
    scores = RNG.random((b, c, n)).astype(np.float32)
    if n:
        scores[..., ::5] = scores[..., 1:2]             # tied scores: lower index first
        scores[..., 3] = np.nan
    ins = [boxes, scores, np.array([max_out], np.int64), np.array([iou], np.float32)]
    if score is not None:
        ins.append(np.array([score], np.float32))
    got, ref = _both("Plugin", "nvrtc-nms", _nms_op(center), ins)
    _same(got, ref)
    assert n == 0 or max_out == 0 or len(ref[0]) > 0


def test_nms_torchvision_style_offsets_27000_boxes():
    """ssdlite320's NMS: one class, 27000 boxes offset per class (as torchvision's batched_nms does)."""
    boxes = _boxes(1, 27000, 300.0)
    boxes += (np.arange(27000) % 90 * 400.0)[None, :, None].astype(np.float32)
    scores = RNG.random((1, 1, 27000)).astype(np.float32)
    ins = [boxes, scores, np.array([27000], np.int64), np.array([0.55], np.float32)]
    _same(*_both("Plugin", "nvrtc-nms", _nms_op(), ins))


def test_other_plugins_are_not_taken():
    assert _gpu("Plugin", "nvrtc-nms").supports(_op("Plugin", plugin_type="RoiAlign"), None) is not None


def _detection_model():
    """TopK -> GatherND of the kept scores, NonZero of a comparison, Where, integer Gather/arithmetic, NMS."""
    n = 64
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    inits = [numpy_helper.from_array(np.array([10], np.int64), "k"),
             numpy_helper.from_array(np.array(0.2, np.float32), "thr"),
             numpy_helper.from_array(np.array([1, 1, n], np.int64), "sshape"),
             numpy_helper.from_array(np.array([5], np.int64), "max_out"),
             numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
             numpy_helper.from_array(np.array(2, np.int64), "two"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero")]
    nodes = [helper.make_node("TopK", ["s", "k"], ["tv", "ti"], axis=-1),
             helper.make_node("Greater", ["s", "thr"], ["g"]),
             helper.make_node("Not", ["g"], ["ng"]),
             helper.make_node("NonZero", ["ng"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["nzt"], perm=[1, 0]),
             helper.make_node("GatherND", ["s", "nzt"], ["low"]),
             helper.make_node("Where", ["g", "s", "zero"], ["masked"]),
             helper.make_node("Reshape", ["s", "sshape"], ["s3"]),
             helper.make_node("NonMaxSuppression", ["boxes", "s3", "max_out", "iou"], ["sel"]),
             helper.make_node("Gather", ["sel", "two"], ["picked"], axis=1),
             helper.make_node("Gather", ["ti", "two"], ["ti_first"], axis=0),
             helper.make_node("Mul", ["picked", "ti_first"], ["prod"]),
             helper.make_node("Equal", ["ids", "ti_first"], ["hit"])]
    g = helper.make_graph(nodes, "det", [helper.make_tensor_value_info("s", f, [n]),
                                         helper.make_tensor_value_info("boxes", f, [1, n, 4]),
                                         helper.make_tensor_value_info("ids", i64, [n])],
                          [helper.make_tensor_value_info(v, t, None) for v, t in
                           [("tv", f), ("ti", i64), ("low", f), ("masked", f), ("sel", i64), ("prod", i64),
                            ("hit", TensorProto.BOOL)]], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_detection_model_runs_without_host_layers_and_matches_onnxruntime(tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from backends.runners import EngineRunner
    path = tmp_path / "det.onnx"
    onnx.save(_detection_model(), path)
    rng = np.random.default_rng(3)
    feeds = {"s": rng.random(64).astype(np.float32), "boxes": _boxes(1, 64, 20.0),
             "ids": rng.integers(0, 64, 64).astype(np.int64)}
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    ref = dict(zip(names, sess.run(None, feeds)))
    with EngineRunner(str(path), device="cuda") as gpu:
        got = gpu.infer(feeds)
        nodes = gpu.engine.graph.nodes
    host = [(n.kind, n.tactic_name) for n in nodes if (n.tactic_name or "").startswith("host:")]
    assert not host, host
    kinds = {n.kind for n in nodes}
    assert {"TopK", "NonZero", "Gather"} <= kinds, kinds
    for k in names:
        np.testing.assert_array_equal(np.asarray(got[k]), ref[k], err_msg=k)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32])
@pytest.mark.parametrize("op,last", [("MAX", False), ("MIN", False), ("MAX", True), ("MIN", True)])
def test_argreduce_matches_cpu_with_ties_and_nans(dtype, op, last):
    x = RNG.integers(-3, 4, size=(4, 37, 3)).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        x[1, 5, :] = np.nan
        x[1, 20, 0] = np.nan
        x[2, 0, 1] = np.nan
    for axis, keep in [(1, True), (-1, False), (0, True), (-3, False)]:
        o = _op("ArgReduce", op=op, axis=axis, keep_dims=keep, select_last_index=last)
        _same(*_both("ArgReduce", "nvrtc-scan", o, [x]))


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32])
@pytest.mark.parametrize("op", ["SUM", "PROD"])
def test_cumulative_matches_cpu_bit_for_bit(dtype, op):
    if np.issubdtype(dtype, np.floating):
        x = (RNG.standard_normal((3, 300, 2)) * (1 if op == "PROD" else 100)).astype(dtype)
        x[0, 0, 0] = -0.0
        x[2, 7, 1] = np.nan
    else:
        x = _ints(dtype, (3, 300, 2))
    for axis in (1, -1, 0):
        for exclusive in (False, True):
            for reverse in (False, True):
                o = _op("Cumulative", op=op, axis=axis, exclusive=exclusive, reverse=reverse)
                _same(*_both("Cumulative", "nvrtc-scan", o, [x]))
    o = _op("Cumulative", op=op, exclusive=False, reverse=False)
    _same(*_both("Cumulative", "nvrtc-scan", o, [x, np.array(-2, np.int64)]))     # axis as a tensor


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize("op", ["SUM", "PROD", "MAX", "MIN"])
def test_integer_reduce_matches_cpu(dtype, op):
    x = _ints(dtype, (3, 4, 5))
    for axes, keep in [([1], True), ([0, 1], False), (None, True), ([-1], False)]:
        o = _op("Reduce", op=op, axes=axes, keep_dims=keep)
        _same(*_both("Reduce", "nvrtc-int", o, [x]))
    o = _op("Reduce", op=op, axes=[1], keep_dims=True)
    _same(*_both("Reduce", "nvrtc-int", o, [x[:, :0]]))      # empty: the identity


@pytest.mark.parametrize("itype", [np.int64, np.int32, np.float32])
@pytest.mark.parametrize("vtype", [np.float32, np.int64, np.bool_, np.float16])
def test_onehot_matches_cpu(itype, vtype):
    idx = np.array([[0, 3, -1, 7], [9, -10, 2, 5]]).astype(itype)     # out-of-range ones are all "off"
    values = np.array([0, 1] if vtype == np.bool_ else [-2.5, 4], dtype=vtype)
    for axis in (-1, 0, 1):
        o = _op("OneHot", axis=axis)
        _same(*_both("OneHot", "nvrtc-index", o, [idx, np.array([8], np.int64), values]))


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_scatter_nd_matches_cpu_with_duplicates(reduction, dtype):
    data = (RNG.standard_normal((6, 5, 3)) * 10).astype(dtype)
    idx = np.array([[1, 2], [0, 0], [1, 2], [-1, 4], [5, -5], [1, 2]], np.int64)    # (1, 2) three times
    upd = (RNG.standard_normal((6, 3)) * 10).astype(dtype)
    if np.issubdtype(dtype, np.floating):
        upd[2, 1] = np.nan
    o = _op("Scatter", mode="ND", reduction=reduction)
    _same(*_both("Scatter", "nvrtc-ordered", o, [data, idx, upd]))
    o = _op("Scatter", mode="ND", reduction=reduction)                 # whole rows: m = 1
    _same(*_both("Scatter", "nvrtc-ordered", o, [data, np.array([[3], [-6], [3]], np.int32), upd[:3, None]
                                                 .repeat(5, 1)]))


@pytest.mark.parametrize("reduction", ["none", "add", "max"])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_])
def test_scatter_elements_matches_cpu(reduction, dtype):
    if dtype == np.bool_ and reduction != "none":
        return
    data = (RNG.standard_normal((4, 6)) * 10).astype(dtype)
    idx = RNG.integers(-6, 6, size=(4, 5))
    upd = (RNG.standard_normal((4, 5)) * 10).astype(dtype)
    for axis in (1, -1):
        o = _op("Scatter", mode="ELEMENT", axis=axis, reduction=reduction)
        _same(*_both("Scatter", "nvrtc-ordered", o, [data, idx, upd]))
    o = _op("Scatter", mode="ELEMENT", axis=0, reduction=reduction)
    _same(*_both("Scatter", "nvrtc-ordered", o, [data, RNG.integers(0, 4, size=(3, 6)), upd[:3, :1].repeat(6, 1)]))


def test_select_on_booleans_matches_cpu():
    c, a, b = RNG.random((3, 1, 5)) > 0.5, RNG.random((4, 5)) > 0.5, RNG.random((1, 5)) > 0.5
    _same(*_both("Select", "nvrtc-select1", _op("Select"), [c, a, b]))


def _e4m3(x):
    import ml_dtypes
    return np.asarray(x, np.float32).astype(ml_dtypes.float8_e4m3fn)


@pytest.mark.parametrize("out", ["int8", "uint8", "float8_e4m3fn"])
@pytest.mark.parametrize("xtype", [np.float32, np.float16])
@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("saturate", [True, False])
def test_quantize_matches_cpu(out, xtype, per_channel, saturate):
    import ml_dtypes
    if out != "float8_e4m3fn" and not saturate:
        return
    x = (RNG.standard_normal((2, 4, 7)) * 300).astype(xtype)
    flat = x.reshape(-1)
    with np.errstate(over="ignore"):
        flat[:10] = [0.5, 1.5, 2.5, -0.5, -2.5, 1e9, -1e9, np.inf, -np.inf, 0.0]
    if out == "float8_e4m3fn":   # the e4m3 rounding boundaries: 448, the tie 464, subnormal steps
        flat[10:22] = [448, 449, 464, 465, 479, 480, 2 ** -9, 1.5 * 2 ** -9, 2 ** -10, 0.0155, 0.015625, -300]
    scale = (np.array([0.5, 2.0, 1.0, 3.0], np.float32) if per_channel else np.array(1.5, np.float32))
    zp_dtype = np.dtype(getattr(ml_dtypes, out)) if out.startswith("float8") else np.dtype(out)
    zp = np.zeros(scale.shape, zp_dtype) if out.startswith("float8") else \
        (np.array([3, -7, 0, 100], np.int64) if per_channel else np.array(5, np.int64)).astype(np.int64) \
        .clip(0 if out == "uint8" else -128, 127).astype(zp_dtype)
    for ins in ([x, scale, zp], [x, scale]):
        if len(ins) == 2 and out == "uint8":
            o = _op("Quantize", axis=1, saturate=saturate)
        else:
            o = _op("Quantize", axis=1, saturate=saturate, output_dtype=out)
        got, ref = _both("Quantize", "nvrtc-quantize", o, ins)
        assert got[0].dtype == ref[0].dtype
        np.testing.assert_array_equal(got[0].view(np.uint8), ref[0].view(np.uint8))


@pytest.mark.parametrize("xtype", ["int8", "uint8", "float8_e4m3fn"])
@pytest.mark.parametrize("stype", [np.float32, np.float16])
@pytest.mark.parametrize("per_channel", [False, True])
def test_dequantize_matches_cpu(xtype, stype, per_channel):
    import ml_dtypes
    if xtype.startswith("float8"):
        x = (np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)).reshape(4, 64)
        zp = np.zeros(4 if per_channel else (), ml_dtypes.float8_e4m3fn)
    else:
        x = np.arange(256, dtype=np.uint8).view(np.dtype(xtype)).reshape(4, 64)
        zp = (np.array([3, -7, 0, 100]) if per_channel else np.array(-4)).clip(
            0 if xtype == "uint8" else -128, 127).astype(xtype)
    scale = (np.array([0.1, 2.5, 1.0, 3e-3]) if per_channel else np.array(0.37)).astype(stype)
    for ins in ([x, scale, zp], [x, scale]):
        _same(*_both("Dequantize", "nvrtc-quantize", _op("Dequantize", axis=0), ins))


@pytest.mark.parametrize("kind,axes,shape,tensor", [("Squeeze", [1], (4, 1, 3), False), ("Squeeze", None, (1, 5, 1), False),
                                                    ("Squeeze", [-1, 0], (1, 2, 1), True),
                                                    ("Unsqueeze", [0], (27, 4), False), ("Unsqueeze", [-1], (3, 2), True),
                                                    ("Unsqueeze", [1, 3], (5, 2), False)])
def test_squeeze_unsqueeze_plugins_are_views_matching_cpu(kind, axes, shape, tensor):
    from native.tactics import Op
    x = RNG.standard_normal(shape).astype(np.float32)
    fields = {} if tensor else {"axes": axes}
    op = Op("Plugin", "p", {"plugin_type": kind, "plugin_version": "1", "fields": fields}, {})
    ins = [x, np.array(axes, np.int64)] if tensor else [x]
    _same(*_both("Plugin", "device-view", op, ins))
    assert _gpu("Plugin", "device-view").supports(_nms_op(), None) is not None


def test_shape_is_a_cached_device_array_matching_cpu():
    x = RNG.standard_normal((2, 3, 4, 5)).astype(np.float32)
    for start, end in [(0, None), (1, 3), (-2, None), (0, -1)]:
        o = _op("Shape", start=start, end=end)
        _same(*_both("Shape", "device-shape", o, [x]))
    t = _gpu("Shape", "device-shape")
    a = t.run(_op("Shape", start=0, end=None), [_up(x)])[0]
    b = t.run(_op("Shape", start=0, end=None), [_up(x)])[0]
    assert a.ptr == b.ptr      # one upload per distinct shape


def test_integer_inputs_choose_the_integer_kernel_at_build_and_a_run_time_refusal_is_an_engine_bug():
    """Build decides: an ElementWise whose inputs are int64 is no candidate for the float kernel (input_dtypes),
    so the untimed pick is nvrtc-int; a float kernel handed integers anyway raises naming layer and tactic (no
    other tactic runs silently instead)."""
    from native.device import get_device
    from native.errors import ExecutionError
    from native.tactics import LayerContext, tactics_for, unsupported_reason
    op = _op("ElementWise", op="SUM")
    ctx = LayerContext([[3, 5], [5]], ["int64", "int64"])
    picks = [t.name for t in tactics_for("ElementWise", "cuda") if unsupported_reason(t, op, ctx) is None]
    assert picks[0] == "nvrtc-int" and "nvrtc-pointwise" not in picks
    fn, _ = get_device("cuda").bind(_gpu("ElementWise", "nvrtc-pointwise"))
    a, b = _ints(np.int64, (3, 5)), _ints(np.int64, (5,))
    with pytest.raises(ExecutionError, match=r"layer 't': tactic nvrtc-pointwise refused its inputs at run time"):
        fn(op, [_up(a), _up(b)])


_MINE = {"TopK", "NonZero", "Gather", "Plugin", "ElementWise", "Unary", "Select", "Reduce", "Shape", "ArgReduce",
         "Cumulative", "OneHot", "Scatter", "Quantize", "Dequantize"}


@pytest.mark.slow
def test_ssdlite320_detection_tail_runs_on_the_gpu_and_matches_onnxruntime():
    """The corpus detector's tail (NonMaxSuppression, TopK, NonZero, GatherND, integer and boolean math, shape
    plugins) builds with none of those layers on the host; detections match ONNX Runtime (count, labels, and
    scores / boxes compared in score order, where tied boxes may swap rows)."""
    from backends.runners import EngineRunner
    from tests.corpus import corpus
    e = corpus.entry("tv-ssdlite320_mobilenet_v3_large")
    path = corpus.model_path(e)
    feeds = corpus.make_feeds(e)
    ref = corpus.run_onnxrt(path, feeds)
    with EngineRunner(path, device="cuda") as gpu:
        got = gpu.infer(feeds)
        nodes = gpu.engine.graph.nodes
    host = sorted({n.kind for n in nodes if (n.tactic_name or "").startswith("host:") and n.kind in _MINE})
    assert not host, host
    names = list(ref)
    assert [np.asarray(got[k]).shape for k in names] == [ref[k].shape for k in names]
    for k in names:
        r, g = ref[k], np.asarray(got[k])
        if r.dtype.kind == "f" and r.ndim == 1:            # scores: sorted
            np.testing.assert_allclose(np.sort(g), np.sort(r), rtol=1e-3, atol=1e-4, err_msg=k)
        elif r.dtype.kind in "iu":                          # labels: the same multiset
            np.testing.assert_array_equal(np.sort(g, axis=None), np.sort(r, axis=None), err_msg=k)
        else:                                               # boxes: each coordinate's sorted values
            np.testing.assert_allclose(np.sort(g, axis=0), np.sort(r, axis=0), rtol=1e-3, atol=1e-2, err_msg=k)
