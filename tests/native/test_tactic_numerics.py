"""Every alternative tactic is a different computation: not bit-identical to the default tactic on the same
inputs, yet within its own error bound of a float64 reference."""
import numpy as np
import pytest

from native.cpu import jit
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(7)
EPS32 = np.finfo(np.float32).eps


def _tactic(kind, name):
    return next(t for t in tactics_for(kind) if t.name == name)


def _run(kind, name, op, inputs, shapes=None):
    t = _tactic(kind, name)
    assert t.supports(op, shapes or [list(np.shape(i)) for i in inputs]) is None, name
    op.weights = t.prepare(op)
    return t.run(op, inputs)[0]


# name -> error bound relative to max |reference|: the transforms of F(4,3) scale values by up to ~10 and back
CONV = {"im2col-gemm": 4 * EPS32 * 16 * 9, "shifted-gemm": 4 * EPS32 * 16 * 9,
        "winograd-f2x3": 8 * EPS32 * 16 * 9, "winograd-f2x3-jit": 8 * EPS32 * 16 * 9,
        "winograd-f4x3": 100 * EPS32 * 16 * 9}


@pytest.mark.parametrize("name", ["shifted-gemm", "winograd-f2x3", "winograd-f4x3", "winograd-f2x3-jit"])
def test_conv_tactics_differ_and_stay_in_bound(name):
    if name.endswith("-jit") and not jit.available():
        pytest.skip("DEBUGKIT_JIT=0: the compiled tactic is not offered")
    x = RNG.standard_normal((2, 16, 13, 11)).astype(np.float32)
    w = (RNG.standard_normal((24, 16, 3, 3)) / 12).astype(np.float32)
    b = RNG.standard_normal(24).astype(np.float32)
    ref = reference_conv(x, w, b, 1, 1, 1, 1)
    params = {"kernel_shape": [3, 3], "strides": [1, 1], "pre_padding": [1, 1], "post_padding": [1, 1],
              "num_output_maps": 24, "groups": 1}
    base = _run("Convolution", "im2col-gemm", Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}), [x])
    y = _run("Convolution", name, Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}), [x])
    scale = np.abs(ref).max()
    assert np.abs(y - ref).max() <= CONV[name] * scale
    assert not np.array_equal(y, base)


def test_winograd_f4x3_rounds_worse_than_f2x3():
    """The bigger tile's transform has larger coefficients: its error is larger, as documented."""
    x = RNG.standard_normal((1, 32, 20, 20)).astype(np.float32)
    w = (RNG.standard_normal((32, 32, 3, 3)) / 17).astype(np.float32)
    b = np.zeros(32, np.float32)
    ref = reference_conv(x, w, b, 1, 1, 1, 1)
    params = {"kernel_shape": [3, 3], "pre_padding": [1, 1], "post_padding": [1, 1], "num_output_maps": 32}
    err = {n: np.abs(_run("Convolution", n, Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}),
                          [x]) - ref).max() for n in ("winograd-f2x3", "winograd-f4x3")}
    assert err["winograd-f4x3"] > 2 * err["winograd-f2x3"]


def test_winograd_honours_fused_epilogue():
    x = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    r = RNG.standard_normal((1, 8, 9, 9)).astype(np.float32)
    w = (RNG.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32)
    b = RNG.standard_normal(8).astype(np.float32)
    params = {"kernel_shape": [3, 3], "pre_padding": [1, 1], "post_padding": [1, 1], "num_output_maps": 8,
              "post_ops": [{"op": "add", "input": 1}, {"op": "activation", "type": "RELU"}]}
    y = _run("Convolution", "winograd-f2x3", Op("Convolution", "c", params, {"kernel": w, "bias": b}), [x, r],
             [list(x.shape), list(r.shape)])
    ref = np.maximum(reference_conv(x, w, b, 1, 1, 1, 1) + r, 0)
    assert np.abs(y - ref).max() < 1e-5


@pytest.mark.parametrize("precision,bound", [("float32", 64 * EPS32), ("float16", 2 ** -9)])
def test_split_k_partials_in_layer_precision(precision, bound):
    a = RNG.standard_normal((8, 1024)).astype(np.float32)
    b = RNG.standard_normal((1024, 64)).astype(np.float32)
    ref = a.astype(np.float64) @ b
    base = _run("MatrixMultiply", "blas", Op("MatrixMultiply", "m", {}, {"b": b}, precision=precision), [a])
    y = _run("MatrixMultiply", "split-k", Op("MatrixMultiply", "m", {}, {"b": b}, precision=precision), [a])
    scale = np.abs(a).astype(np.float64) @ np.abs(b)          # the sum of |products|: the rounding yardstick
    assert (np.abs(y - ref) <= bound * scale).all()
    assert not np.array_equal(y, base)
    if precision == "float16":   # the partials really were rounded to fp16: every value is an fp16 number
        assert np.array_equal(y.astype(np.float16).astype(np.float32), y)


def test_online_softmax_and_sequential_reduce_and_welford():
    x = (RNG.standard_normal((4, 16, 300)) * 10).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    e /= e.sum(-1, keepdims=True)
    two = _run("Softmax", "numpy", Op("Softmax", "s", {"axis": -1}), [x])
    one = _run("Softmax", "online", Op("Softmax", "s", {"axis": -1}), [x])
    assert np.abs(one - e).max() < 300 * EPS32 and not np.array_equal(one, two)

    xs = x.astype(np.float64).sum(2, keepdims=True)
    pair = _run("Reduce", "numpy", Op("Reduce", "r", {"op": "SUM", "axes": [2], "keep_dims": True}), [x])
    seq = _run("Reduce", "sequential", Op("Reduce", "r", {"op": "SUM", "axes": [2], "keep_dims": True}), [x])
    yard = np.abs(x).astype(np.float64).sum(2, keepdims=True)
    assert (np.abs(seq - xs) <= 300 * EPS32 * yard).all() and not np.array_equal(seq, pair)
    assert np.abs(seq - xs).max() > np.abs(pair - xs).max()      # the naive order rounds worse

    s, b = RNG.standard_normal(300).astype(np.float32), RNG.standard_normal(300).astype(np.float32)
    xn = x + 100   # an offset mean: E[x^2]-E[x]^2 would cancel; both tactics must not
    xf = xn.astype(np.float64)
    ref = (xf - xf.mean(-1, keepdims=True)) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * s + b
    p = {"mode": "LAYER", "axes": [-1], "epsilon": 1e-5}
    two = _run("Normalization", "float64-stats", Op("Normalization", "n", dict(p)), [xn, s, b])
    wel = _run("Normalization", "welford", Op("Normalization", "n", dict(p)), [xn, s, b])
    assert np.abs(wel - ref).max() < 1e-4 * np.abs(ref).max() and not np.array_equal(wel, two)


# --- sliding-window, nhwc-gemm, fft (conv) and the pooling variants ---------------------------------------------

def _conv_case(cin, cout, k, stride, hw=(13, 11), n=2):
    x = RNG.standard_normal((n, cin) + hw).astype(np.float32)
    w = (RNG.standard_normal((cout, cin, k, k)) / np.sqrt(cin * k * k)).astype(np.float32)
    b = RNG.standard_normal(cout).astype(np.float32)
    params = {"kernel_shape": [k, k], "strides": [stride, stride], "pre_padding": [k // 2] * 2,
              "post_padding": [k // 2] * 2, "num_output_maps": cout, "groups": 1}
    return x, w, b, params, reference_conv(x, w, b, stride, k // 2, 1, 1)


@pytest.mark.parametrize("name,k,stride", [("sliding-window", 3, 1), ("sliding-window", 3, 2),
                                           ("sliding-window", 7, 2), ("nhwc-gemm", 3, 1), ("nhwc-gemm", 3, 2),
                                           ("nhwc-gemm", 5, 2), ("fft", 5, 1), ("fft", 7, 1)])
def test_more_conv_tactics_differ_and_stay_in_bound(name, k, stride):
    """GEMM-order tactics stay within ~K eps of the scale; fft's error is relative to the whole plane (log2 of
    its size) -- and each rounds differently from im2col-gemm."""
    x, w, b, params, ref = _conv_case(16, 24, k, stride)
    base = _run("Convolution", "im2col-gemm", Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}), [x])
    y = _run("Convolution", name, Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}), [x])
    scale = np.abs(ref).max()
    plane = (x.shape[2] + 2 * (k // 2)) * (x.shape[3] + 2 * (k // 2))
    bound = 16 * EPS32 * np.log2(plane) if name == "fft" else 4 * EPS32 * 16 * k * k
    assert np.abs(y - ref).max() <= bound * scale
    assert not np.array_equal(y, base)


def test_more_conv_tactics_honour_fused_epilogue_and_shortcut():
    x, w, b, params, ref = _conv_case(8, 8, 5, 1, hw=(9, 9), n=1)
    r = RNG.standard_normal(ref.shape).astype(np.float32)
    params["post_ops"] = [{"op": "add", "input": 1}, {"op": "activation", "type": "RELU"}]
    for name in ("sliding-window", "nhwc-gemm", "fft"):
        y = _run("Convolution", name, Op("Convolution", "c", dict(params), {"kernel": w, "bias": b}), [x, r],
                 [list(x.shape), list(r.shape)])
        assert np.abs(y - np.maximum(ref + r, 0)).max() < 1e-5, name


def test_fft_only_for_large_stride1_kernels():
    t = _tactic("Convolution", "fft")
    for k, s in ((3, 1), (5, 2)):
        assert t.supports(Op("Convolution", "c", {"kernel_shape": [k, k], "strides": [s, s]}), None) is not None


@pytest.mark.parametrize("window,stride,pad,ceil,excl", [(3, 2, 1, 0, True), (2, 2, 0, 1, True), (3, 1, 1, 0, False),
                                                         (None, None, 0, 0, True)])
def test_pooling_tactics(window, stride, pad, ceil, excl):
    """AVERAGE: each tactic rounds differently, within its bound of a float64 reference (the strided-taps
    tactic's float64 divisor on the same sums); MAX is exact in every tactic."""
    x = (RNG.standard_normal((2, 16, 17, 15)) * 3 + 5).astype(np.float32)
    glob = window is None
    for typ in ("AVERAGE", "MAX"):
        p = {"type": typ, "global": True} if glob else {
            "type": typ, "window": [window] * 2, "strides": [stride] * 2, "pre_padding": [pad] * 2,
            "post_padding": [pad] * 2, "ceil_mode": ceil, "average_count_excludes_padding": excl}
        base = _run("Pooling", "strided-taps", Op("Pooling", "p", dict(p)), [x])
        ref = _run("Pooling", "strided-taps", Op("Pooling", "p", dict(p)), [x.astype(np.float64)])
        names = ["nhwc-window"] + (["separable-sum"] if typ == "AVERAGE" and not glob else [])
        for name in names:
            y = _run("Pooling", name, Op("Pooling", "p", dict(p)), [x])
            assert y.shape == base.shape and y.dtype == base.dtype
            if typ == "MAX":
                assert np.array_equal(y, base), name
            else:
                taps = x.shape[2] * x.shape[3] if glob else window * window
                assert np.abs(y - ref).max() <= 2 * taps * EPS32 * np.abs(x).max(), name
                assert not np.array_equal(y, base), name


def test_winograd_f4x3_is_offered_to_fp16_layers_only():
    """Its ~10x-a-GEMM rounding is invisible under FP16 but not at FP32 tolerances (declare_precisions must not
    widen it to every precision the other convolution tactics get)."""
    from native.tactics import unsupported_reason
    t = _tactic("Convolution", "winograd-f4x3")
    p = {"kernel_shape": [3, 3], "pre_padding": [1, 1], "post_padding": [1, 1], "num_output_maps": 8}
    assert "computes in float16" in unsupported_reason(t, Op("Convolution", "c", p, precision="float32"), None)
    assert unsupported_reason(t, Op("Convolution", "c", p, precision="float16"), None) is None
