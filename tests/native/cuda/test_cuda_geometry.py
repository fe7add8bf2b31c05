"""The CUDA device's geometry / data-movement tactics (Padding, Expand, Tile, Identity, Resize, Deconvolution,
Scale, LRN, Einsum, Fill, Range) against the CPU tactics on the same op and inputs, and a small ONNX model of
these kinds built for the GPU with no host layers, against ONNX Runtime. Skipped without a GPU (`cuda` marker)."""
import itertools

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from native.tactics import TacticRefusal

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(17)
BF16 = np.dtype(ml_dtypes.bfloat16)
BF16_TOL = {"rtol": 8e-3, "atol": 1e-6}   # one bfloat16 rounding (ml_dtypes may round float64 in one step)


def _precision(dtype):
    return {np.dtype(np.float16): "float16", BF16: "bfloat16"}.get(np.dtype(dtype), "float32")


def _op(kind, precision="float32", weights=None, **params):
    from native.tactics import Op
    return Op(kind, "t", params, dict(weights or {}), precision=precision)


def _gpu(kind):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if not getattr(t, "host_layer", False))


def _cpu(kind, op=None):
    """The CPU tactic that runs `op` (the first one of the kind without one)."""
    from native.tactics import tactics_for, unsupported_reason
    return next(t for t in tactics_for(kind, "cpu") if op is None or unsupported_reason(t, op, None) is None)


def _up(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(np.asarray(x))   # (keeps 0-d arrays 0-d; np.ascontiguousarray would not)


def _run_gpu(kind, op, inputs):
    """The GPU tactic on uploaded inputs (numpy values of value inputs uploaded too), results on the host."""
    outs = _gpu(kind).run(op, [None if x is None else _up(x) for x in inputs])
    return [o.get() for o in outs]


def _same(kind, op, inputs, cpu_inputs=None, **tol):
    got = _run_gpu(kind, op, inputs)
    ref = _cpu(kind, op).run(op, list(inputs if cpu_inputs is None else cpu_inputs))
    assert len(got) == len(ref)
    for g, r in zip(got, ref):
        r = np.asarray(r)
        assert g.shape == r.shape and g.dtype == r.dtype, (g.shape, g.dtype, r.shape, r.dtype)
        if tol:
            np.testing.assert_allclose(g.astype(np.float64), r.astype(np.float64), **tol)
        else:
            np.testing.assert_array_equal(g, r)
    return got


def _data(shape, dtype):
    x = RNG.standard_normal(shape) * 10
    return (x > 0) if dtype == np.bool_ else x.astype(dtype)


# padding, expand, tile, identity ------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("pads,axes", [([1, 2, 0, 3, 1, 0], None), ([0, 7, 0, 0, 9, 0], None),
                                       ([2, -1, 0, -1, 3, 1], None), ([3, 5], [-1]), ([0, 0, 0, 0, 0, 0], None)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int8])
def test_padding_matches_cpu(mode, pads, axes, dtype):
    x = _data((2, 3, 4), dtype)
    _same("Padding", _op("Padding", mode=mode, pads=pads, axes=axes, value=-2.5), [x])


def test_padding_value_inputs_and_empty():
    x = _data((3, 1, 5), np.float32)
    op = _op("Padding", mode="constant")
    _same("Padding", op, [x, np.array([0, 2, 1, 1, 0, 3], np.int64), np.array(7.5, np.float32)])
    _same("Padding", _op("Padding", mode="constant", pads=[1, 0, 2, 0]), [np.zeros((0, 4), np.float32)])
    _same("Padding", _op("Padding", mode="reflect", pads=[0, 0, 0, 0, 0, 6]), [x])   # width-1 axis reflects as edge


@pytest.mark.parametrize("xshape,shape", [((3, 1), (2, 3, 4)), ((1,), (5,)), ((2, 1, 3), (1, 4, 1)), ((), (2, 2)),
                                          ((4, 5), (4, 5)), ((0, 3), (2, 0, 3))])
@pytest.mark.parametrize("dtype", [np.float16, np.int64, np.bool_])
def test_expand_matches_cpu(xshape, shape, dtype):
    _same("Expand", _op("Expand"), [_data(xshape, dtype), np.array(shape, np.int64)])


@pytest.mark.parametrize("xshape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((1, 3, 2), (4, 2, 3)), ((3,), (2, 2)),
                                         ((2, 3, 4), (2,)), ((2, 0), (3, 1)), ((2, 3), (0, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32])
def test_tile_matches_cpu(xshape, reps, dtype):
    _same("Tile", _op("Tile"), [_data(xshape, dtype), np.array(reps, np.int64)])


def test_identity_returns_its_input_and_leaves_sequences_to_the_host():
    x = _up(_data((3, 4), np.float16))
    assert _gpu("Identity").run(_op("Identity"), [x])[0] is x
    for value in ([_up(_data((2,), np.float32)), _up(_data((3,), np.float32))], None):
        with pytest.raises(TacticRefusal):
            _gpu("Identity").run(_op("Identity"), [value])


# resize ---------------------------------------------------------------------------------------------------------

_CTM = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]
_ROUND = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


def _resize(x, mode, scales=None, sizes=None, roi=None, **params):
    op = _op("Resize", precision=_precision(x.dtype), mode=mode, **params)
    ins = [x, None if roi is None else np.array(roi, np.float32),
           None if scales is None else np.array(scales, np.float32),
           None if sizes is None else np.array(sizes, np.int64)]
    return _same("Resize", op, ins, **(BF16_TOL if x.dtype == BF16 and mode != "NEAREST" else {}))


@pytest.mark.parametrize("ctm,rounding", list(itertools.product(_CTM, _ROUND)))
@pytest.mark.parametrize("scales", [(1, 1, 2, 2), (1, 1, 0.6, 1.7), (1, 1, 3, 1)])
def test_resize_nearest_matches_cpu(ctm, rounding, scales):
    for dtype in (np.float32, np.int64, np.uint8):
        _resize(_data((2, 3, 5, 4), dtype), "NEAREST", scales=scales, coordinate_transformation=ctm,
                nearest_rounding=rounding)


@pytest.mark.parametrize("mode", ["LINEAR", "CUBIC"])
@pytest.mark.parametrize("ctm", _CTM)
@pytest.mark.parametrize("scales,antialias,exclude", [((1, 1, 2, 2), False, False), ((1, 1, 0.5, 0.75), False, False),
                                                      ((1, 1, 0.4, 0.6), True, False), ((1, 1, 1.5, 2.5), False, True),
                                                      ((1, 1, 0.5, 0.5), True, True), ((1, 1, 1, 3), False, False)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_resize_interpolating_matches_cpu_exactly(mode, ctm, scales, antialias, exclude, dtype):
    """Same taps and weights as the CPU kernel, sums in float64 axis by axis: bit-identical results (BF16: within
    its one rounding)."""
    _resize(_data((2, 3, 6, 5), dtype), mode, scales=scales, coordinate_transformation=ctm, antialias=antialias,
            exclude_outside=exclude, cubic_coeff=-0.5 if exclude else -0.75)


def test_resize_sizes_axes_policy_roi_and_extrapolation():
    x = _data((1, 2, 7, 9), np.float32)
    _resize(x, "LINEAR", sizes=(1, 2, 11, 4))
    for policy in ("not_larger", "not_smaller"):
        _resize(x, "CUBIC", sizes=(12, 5), axes=[2, 3], keep_aspect_ratio_policy=policy)
    _resize(x, "LINEAR", scales=(3.0,), axes=[-1])
    roi = [0, 0, 0.2, 0.1, 1, 1, 1.3, 0.8]
    for mode in ("NEAREST", "LINEAR", "CUBIC"):
        _resize(x, mode, sizes=(1, 2, 6, 8), roi=roi, coordinate_transformation="tf_crop_and_resize",
                extrapolation_value=-3.25)
    _resize(_data((2, 4, 3), np.float16), "LINEAR", scales=(2.0, 1.0, 0.5))   # 3 axes, one unchanged
    _resize(_data((3, 4, 5), np.float32), "LINEAR", scales=(1.0, 1.0, 1.0))   # nothing resized: a copy
    _resize(np.zeros((1, 2, 0, 3), np.float32), "LINEAR", scales=(1, 1, 2, 2))


def test_resize_grid_sample_is_left_to_the_host():
    assert _gpu("Resize").supports(_op("Resize", mode="GRID_SAMPLE"), [[1, 1, 4, 4], [1, 4, 4, 2]])


# deconvolution --------------------------------------------------------------------------------------------------

_DECONV = [  # (input spatial, kernel spatial, groups, params)
    ((5, 6), (3, 3), 1, {}),
    ((5, 6), (2, 2), 1, {"strides": [2, 2]}),
    ((4, 7), (3, 2), 2, {"strides": [2, 3], "pre_padding": [1, 0], "post_padding": [0, 1]}),
    ((5, 5), (3, 3), 4, {"strides": [2, 2], "dilations": [2, 1], "output_padding": [1, 0], "pre_padding": [1, 1],
                         "post_padding": [1, 1]}),
    ((6,), (4,), 1, {"strides": [3], "auto_pad": "SAME_UPPER"}),
    ((3, 4, 5), (2, 3, 2), 1, {"strides": [1, 2, 2], "output_shape": [5, 9, 10], "auto_pad": "SAME_LOWER"}),
    ((4, 4), (4, 4), 1, {"strides": [2, 2], "pre_padding": [1, 1], "post_padding": [1, 1]}),
]


@pytest.mark.parametrize("spatial,ks,groups,params", _DECONV)
@pytest.mark.parametrize("batch", [1, 3])
def test_deconvolution_matches_cpu(spatial, ks, groups, params, batch):
    c, mg = 4, 3
    x = RNG.standard_normal((batch, c) + spatial).astype(np.float32)
    w = RNG.standard_normal((c, mg) + ks).astype(np.float32)
    b = RNG.standard_normal(groups * mg).astype(np.float32)
    op = _op("Deconvolution", weights={"kernel": w, "bias": b}, groups=groups, kernel_shape=list(ks), **params)
    _same("Deconvolution", op, [x], rtol=1e-5, atol=1e-5)


def test_deconvolution_fp16_epilogue_and_bias_input():
    x = RNG.standard_normal((2, 6, 5, 5)).astype(np.float32)
    w = (RNG.standard_normal((6, 4, 3, 3)) * 0.3).astype(np.float32)
    b = RNG.standard_normal(4).astype(np.float32)
    post = [{"op": "activation", "type": "RELU"}]
    op = _op("Deconvolution", weights={"kernel": w}, strides=[2, 2], pre_padding=[1, 1], post_padding=[0, 0],
             post_ops=post)
    ref = _cpu("Deconvolution", op).run(op, [x, None, b])[0]
    got = _gpu("Deconvolution").run(op, [_up(x), None, _up(b)])[0].get()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    assert (ref == 0).any() and (ref > 0).any()
    for dtype, tol in ((np.float16, 2e-3), (BF16, 1.6e-2)):
        op16 = _op("Deconvolution", _precision(dtype), weights={"kernel": w, "bias": b}, strides=[2, 2],
                   post_ops=post)
        got16 = _gpu("Deconvolution").run(op16, [_up(x.astype(dtype))])[0].get()
        r16 = {k: v.astype(dtype).astype(np.float32) for k, v in op16.weights.items()}   # the weights it stores
        ref32 = _cpu("Deconvolution", op).run(_op("Deconvolution", weights=r16, strides=[2, 2], post_ops=post),
                                              [x.astype(dtype).astype(np.float32)])[0]
        assert got16.dtype == dtype
        np.testing.assert_allclose(got16.astype(np.float32), ref32, rtol=tol, atol=tol)


def test_fp16_deconvolution_keeps_logits_in_fp32_up_to_a_fused_sigmoid():
    """ppocr_v4_det's head: ConvTranspose + Sigmoid on logits near -6. Rounding the logits to FP16 (spacing 2^-8
    there) would move the probabilities by up to 0.2%; one rounding of the probability moves them by <= 0.05%."""
    rng = np.random.default_rng(23)
    x = (rng.standard_normal((1, 24, 12, 12)) * 0.5).astype(np.float16)
    w = (rng.standard_normal((24, 1, 2, 2)) * 0.3).astype(np.float16).astype(np.float32)
    b = np.array([-6.0], np.float32)
    post = [{"op": "activation", "type": "SIGMOID"}]
    op = _op("Deconvolution", "float16", weights={"kernel": w, "bias": b}, strides=[2, 2], post_ops=post)
    got = _gpu("Deconvolution").run(op, [_up(x)])[0].get()
    ref = _cpu("Deconvolution", op).run(_op("Deconvolution", weights={"kernel": w, "bias": b}, strides=[2, 2],
                                             post_ops=post), [x.astype(np.float32)])[0]
    assert got.dtype == np.float16 and 2 ** -14 < ref.min() and ref.max() < 0.2   # normal FP16 probabilities
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=6e-4, atol=0)


def test_deconvolution_kernel_and_bias_as_tensors():
    x = RNG.standard_normal((2, 4, 5, 3)).astype(np.float32)
    w = RNG.standard_normal((4, 3, 3, 2)).astype(np.float32)
    b = RNG.standard_normal(6).astype(np.float32)
    op = _op("Deconvolution", groups=2, strides=[2, 1], pre_padding=[1, 0], post_padding=[0, 1])
    assert _gpu("Deconvolution").supports(op, [[2, 4, 5, 3], [4, 3, 3, 2], [6]]) is None
    _same("Deconvolution", op, [x, w, b], rtol=1e-5, atol=1e-5)
    assert _gpu("Deconvolution").supports(_op("Deconvolution", col2im=True), [[1, 4, 6], [2], [2]])


# scale, LRN ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode,wshape", [("CHANNEL", (3,)), ("ELEMENTWISE", (3, 4, 5)), ("UNIFORM", (1,)),
                                         ("CHANNEL", (1,))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_scale_matches_cpu(mode, wshape, dtype):
    x = (np.abs(_data((2, 3, 4, 5), np.float32)) + 0.5).astype(dtype)
    weights = {"scale": RNG.uniform(0.5, 2, wshape).astype(np.float32),
               "shift": RNG.uniform(0, 1, wshape).astype(np.float32)}
    op = _op("Scale", _precision(dtype), weights=weights, mode=mode)
    _same("Scale", op, [x], **(BF16_TOL if dtype == BF16 else {}))
    weights["power"] = np.full(wshape, 1.5, np.float32)
    tol = {np.dtype(np.float32): 2e-6, np.dtype(np.float16): 1e-3}.get(np.dtype(dtype), 8e-3)
    _same("Scale", op, [x], rtol=tol, atol=0)


@pytest.mark.parametrize("size", [1, 2, 5])
@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-6), (np.float16, 1e-3), (BF16, 8e-3)])
def test_lrn_matches_cpu(size, dtype, tol):
    x = _data((2, 7, 3, 4), dtype)
    op = _op("LRN", _precision(dtype), window=size, alpha=2e-2, beta=0.75, k=1.5)
    _same("LRN", op, [x], rtol=tol, atol=0)


# einsum -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("eq,shapes", [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
                                       ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 7, 8)]),
                                       ("ij,kj", [(3, 4), (5, 4)]), ("i,j->ij", [(3,), (4,)]),
                                       ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 2)]),
                                       ("abc,cd->dba", [(2, 3, 4), (4, 5)]), ("ijk->kij", [(2, 3, 4)]),
                                       ("ij,ij->i", [(3, 4), (3, 4)]), ("ij,jk->ik", [(3, 0), (0, 5)])])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16])
def test_einsum_matches_cpu(eq, shapes, dtype):
    xs = [RNG.standard_normal(s).astype(dtype) for s in shapes]   # unit scale: FP32 sums differ by ~1e-7 only
    tol = {np.dtype(np.float32): 1e-5, np.dtype(np.float16): 2e-3}.get(np.dtype(dtype), 1.6e-2)
    _same("Einsum", _op("Einsum", _precision(dtype), equation=eq), xs, rtol=tol, atol=tol)


@pytest.mark.parametrize("eq,shapes", [("ii->i", [(3, 3)]), ("ij->i", [(3, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4),
                                                                                                    (4, 5)]),
                                       ("ij,jk->ik", [(3, 4), (1, 5)])])
def test_einsum_outside_matmul_raises_typeerror(eq, shapes):
    with pytest.raises(TacticRefusal):
        _gpu("Einsum").run(_op("Einsum", equation=eq), [_up(_data(s, np.float32)) for s in shapes])


# fill, range, value inputs ------------------------------------------------------------------------------------

@pytest.mark.parametrize("params,value,inputs", [
    ({"op": "CONSTANT", "shape": [2, 3]}, np.array([1.5], np.float32), []),
    ({"op": "CONSTANT"}, np.array([7], np.int64), [np.array([4, 0, 2], np.int64)]),
    ({"op": "CONSTANT"}, np.array([True]), [np.array([3, 2], np.int64)]),
    ({"op": "LINSPACE", "shape": [3, 5], "alpha": 0.1, "beta": 0.7, "dtype": "float32"}, None, []),
    ({"op": "LINSPACE", "shape": [9], "alpha": -3.3, "beta": 0.9, "dtype": "int64"}, None, []),
    ({"op": "LINSPACE", "shape": [40], "alpha": 0.1, "beta": 1.1, "dtype": "float16"}, None, []),
    ({"op": "EYE_LIKE", "k": 1}, None, [np.zeros((4, 6), np.float32)]),
    ({"op": "EYE_LIKE", "k": -2, "dtype": "int32"}, None, [np.zeros((5, 3), np.float16)]),
])
def test_fill_matches_cpu(params, value, inputs):
    weights = {} if value is None else {"value": value}
    _same("Fill", _op("Fill", weights=weights, **params), inputs)


def test_random_fill_is_left_to_the_host():
    assert _gpu("Fill").supports(_op("Fill", op="RANDOM_UNIFORM", shape=[3]), [])


_INT_RANGES = [(0, 10, 3), (5, -7, -2), (4, 4, 1)]
_FLOAT_RANGES = _INT_RANGES + [(0.5, 3.3, 0.25), (2.0, -1e3, -0.7)]


@pytest.mark.parametrize("dtype,bounds", [(d, b) for d in (np.float32, np.float64) for b in _FLOAT_RANGES]
                         + [(d, b) for d in (np.int64, np.int32) for b in _INT_RANGES])
def test_range_matches_cpu(dtype, bounds):
    _same("Range", _op("Range"), [np.array(v, dtype) for v in bounds])


def test_value_inputs_read_from_device_constants_without_a_download(monkeypatch):
    """A Constant layer's upload (common.weight) is recognised by address: its host copy gives the shape values."""
    from native.cuda.tactics import geometry
    from native.cuda.tactics.common import weight
    reps = np.array([2, 3], np.int64)
    dev = weight(reps)
    x = _data((2, 2), np.float32)

    def refuse(*a, **k):
        raise AssertionError("downloaded a constant")
    monkeypatch.setattr(type(dev), "get", refuse)
    got = _gpu("Tile").run(_op("Tile"), [_up(x), dev])[0]
    monkeypatch.undo()
    np.testing.assert_array_equal(got.get(), np.tile(x, (2, 3)))
    assert geometry.host_value(dev, "t") is reps


# a model of these kinds on the GPU -------------------------------------------------------------------------------

def _geometry_model():
    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array((rng.standard_normal((8, 4, 4, 4)) * 0.2).astype(np.float32), "wt"),
             numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "bt"),
             numpy_helper.from_array(np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64), "pads"),
             numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales"),
             numpy_helper.from_array(np.array([1, 2, 1, 1], np.int64), "reps"),
             numpy_helper.from_array(np.array([2, 8, 3, 2], np.int64), "eshape"),
             numpy_helper.from_array(rng.standard_normal((8, 6)).astype(np.float32), "wm")]
    nodes = [helper.make_node("ConvTranspose", ["x", "wt", "bt"], ["d"], name="up", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["d", "pads"], ["p"], name="pad", mode="reflect"),
             helper.make_node("Resize", ["p", "", "scales"], ["r"], name="resize", mode="linear"),
             helper.make_node("LRN", ["r"], ["l"], name="lrn", size=3),
             helper.make_node("Tile", ["l", "reps"], ["t"], name="tile"),
             helper.make_node("ReduceMean", ["t"], ["m"], name="gap", axes=[2, 3], keepdims=1),
             helper.make_node("Expand", ["m", "eshape"], ["e"], name="expand"),
             helper.make_node("Einsum", ["e", "wm"], ["y"], name="einsum", equation="nchw,cd->nhwd")]
    g = helper.make_graph(nodes, "geometry", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 6, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("flags", [(), ("fp16",)])
def test_geometry_model_runs_without_host_layers_and_matches_onnxruntime(tmp_path, flags):
    from backends.runners import EngineRunner, OnnxrtRunner
    path = tmp_path / "geometry.onnx"
    onnx.save(_geometry_model(), path)
    x = np.random.default_rng(4).standard_normal((2, 8, 6, 5)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", flags=flags) as gpu, OnnxrtRunner(str(path)) as ort:
        got, ref = gpu.infer({"x": x}), ort.infer({"x": x})
        nodes = gpu.engine.graph.nodes
    tactics = {n.kind: n.tactic_name for n in nodes}
    host = [(n.kind, n.tactic_name) for n in nodes if (n.tactic_name or "").startswith("host:")]
    assert not host, host
    for kind in ("Deconvolution", "Padding", "Resize", "LRN", "Tile", "Expand", "Einsum"):
        assert kind in tactics, tactics
    for name in ("y", "r"):
        if flags:
            a, b = got[name].astype(np.float64).ravel(), ref[name].astype(np.float64).ravel()
            assert a @ b / (np.linalg.norm(a) * np.linalg.norm(b)) > 0.999
        else:
            np.testing.assert_allclose(got[name], ref[name], rtol=1e-3, atol=1e-4)


def test_geometry_model_replays_in_a_cuda_graph(tmp_path):
    """Shape inputs come from the constants' host copies: nothing synchronizes, so the whole model captures, and
    the replay equals plain execution."""
    from backends.runners import EngineRunner
    path = tmp_path / "geometry.onnx"
    onnx.save(_geometry_model(), path)
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal((2, 8, 6, 5)).astype(np.float32) for _ in range(2)]
    with EngineRunner(str(path), device="cuda") as r:
        plain = [r.infer({"x": x}) for x in xs]
        r.context.enable_cuda_graph()
        graphed = [r.context.execute({"x": x}) for x in xs]
    for a, b in zip(plain, graphed):
        for name in ("y", "r"):
            np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(graphed[0]["y"], graphed[1]["y"])
