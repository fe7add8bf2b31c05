"""The CNN fast paths of the CUDA device (issue 24, ResNet-50 at batch 128): the vectorised NHWC window pool
(bit-identical to the generic kernel, fused ReLU), the few-channel NCHW <-> NHWC transpose, 1x1 convolutions as one
cuBLASLt GEMM with the residual and ReLU in its epilogue, and tactic timing that measures the GPU, not the host.
Skipped without a GPU (the `cuda` marker)."""
import time

import ml_dtypes
import numpy as np
import pytest

from native.tactics import TacticRefusal

pytestmark = pytest.mark.cuda

RNG = np.random.default_rng(24)


def _up(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(np.ascontiguousarray(x))


def _op(kind, precision="float32", weights=None, **params):
    from native.tactics import Op
    return Op(kind, "t", params, dict(weights or {}), precision=precision)


def _gpu(kind, name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if t.name == name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, ml_dtypes.bfloat16])
@pytest.mark.parametrize("kind,window,strides,pads,exclude", [
    (0, [3, 3], [2, 2], [1, 1, 1, 1], True),      # ResNet's max pool
    (1, [2, 3], [1, 2], [0, 1, 1, 0], True),
    (1, [3, 3], [2, 2], [1, 1, 1, 1], False)])
def test_vector_nhwc_pool_is_bit_identical_to_the_generic_kernel(dtype, kind, window, strides, pads, exclude):
    from native.cuda.tactics import pooling
    x = (RNG.standard_normal((3, 11, 9, 24)) * 3).astype(dtype)
    if kind == 0:
        x[1, 4, 4, 5] = np.nan      # NaN propagates through max, as numpy's and the generic kernel's
    d = _up(x)
    args = (window, strides, [1, 1], pads[:2], pads[2:], kind, exclude, np.dtype(dtype))
    vec = pooling._pool2d_nhwc_vec(d, *args, None, False)
    assert vec is not None                                   # 24 channels: the vector kernel applies
    n, h, w, c = x.shape
    generic = pooling._pool2d(d, (n, c, h, w), (h * w * c, 1, w * c, c), *args, None, nhwc=True)
    np.testing.assert_array_equal(vec.get().view(np.uint8), generic.get().view(np.uint8))
    if kind == 0:
        assert np.isnan(vec.get().astype(np.float32)[1, 2, 2, 5])
        ref = np.full((n, 6, 5, c), -np.inf, np.float32)
        xp = np.pad(x.astype(np.float32), ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
        for ky in range(3):
            for kx in range(3):
                ref = np.maximum(ref, xp[:, ky:ky + 11:2, kx:kx + 9:2][:, :6, :5])
        np.testing.assert_array_equal(vec.get().astype(np.float32), ref)
    relu = pooling._pool2d_nhwc_vec(d, *args, None, True)
    want = generic.get().astype(np.float32)
    want = np.where(np.isnan(want) | (want > 0), want, 0)
    np.testing.assert_array_equal(relu.get().astype(np.float32), want)


def test_pooling_tactic_fuses_relu_and_falls_back_for_odd_channels():
    op = _op("PoolingNHWC", "float16", type="MAX", window=[3, 3], strides=[2, 2], pre_padding=[1, 1],
             post_padding=[1, 1], post_ops=[{"op": "activation", "type": "RELU"}])
    for c in (16, 5):      # 16: the vector kernel with its ReLU; 5: the generic kernel and the ReLU kernel
        x = RNG.standard_normal((2, 8, 8, c)).astype(np.float16)
        got = _gpu("PoolingNHWC", "window-kernel").run(op, [_up(x)])[0].get()
        xp = np.pad(x.astype(np.float32), ((0, 0), (1, 1), (1, 1), (0, 0)), constant_values=-np.inf)
        ref = np.max([xp[:, ky:ky + 8:2, kx:kx + 8:2] for ky in range(3) for kx in range(3)], axis=0)
        np.testing.assert_array_equal(got.astype(np.float32), np.maximum(ref, 0))


@pytest.mark.parametrize("dtype", [np.int8, np.float16, np.float32, np.int64])
@pytest.mark.parametrize("c", [1, 3, 4])
def test_few_channel_transposes_match_numpy(dtype, c):
    from native.cuda.tactics.tensor import transpose
    x = (RNG.standard_normal((3, c, 17, 13)) * 20).astype(dtype)
    nhwc = transpose(_up(x), [0, 2, 3, 1])
    np.testing.assert_array_equal(nhwc.get(), x.transpose(0, 2, 3, 1))
    back = transpose(nhwc, [0, 3, 1, 2])
    np.testing.assert_array_equal(back.get(), x)


@pytest.mark.parametrize("precision,tol", [("float32", 1e-4), ("float16", 2e-2)])
@pytest.mark.parametrize("post", [[], [{"op": "activation", "type": "RELU"}],
                                  [{"op": "add", "input": 3}, {"op": "activation", "type": "RELU"}],
                                  [{"op": "add", "input": 3}, {"op": "activation", "type": "SIGMOID"}]])
def test_pointwise_conv_on_cublaslt_matches_numpy(precision, tol, post):
    from native.cuda.tactics.gemm_lt import ALGOS
    from native.tactics import Op
    dt = np.float32 if precision == "float32" else np.float16
    x = RNG.standard_normal((2, 7, 5, 32)).astype(dt)
    w = (RNG.standard_normal((32, 48)) * 0.2).astype(np.float32)
    b = RNG.standard_normal(48).astype(np.float32)
    r = RNG.standard_normal((2, 7, 5, 48)).astype(dt)
    params = dict(kernel_spatial=[1, 1], strides=[1, 1], dilations=[1, 1], pre_padding=[0, 0], post_padding=[0, 0],
                  post_ops=post, num_output_maps=48)
    ref = x.astype(np.float64) @ w.astype(dt).astype(np.float64) + b.astype(dt).astype(np.float64)
    for st in post:
        if st["op"] == "add":
            ref = ref + r.astype(np.float64)
        elif st["type"] == "RELU":
            ref = np.maximum(ref, 0)
        else:
            ref = 1 / (1 + np.exp(-ref))
    ran = 0
    for i in range(ALGOS):
        o = Op("ConvolutionNHWC", "t", params, {"kernel_hwio": w, "bias": b}, precision=precision)
        try:
            got = _gpu("ConvolutionNHWC", f"cublaslt-1x1-{i}").run(o, [_up(x), None, None, _up(r)])[0]
        except TacticRefusal:
            continue
        ran += 1
        assert got.shape == (2, 7, 5, 48) and got.dtype == dt
        np.testing.assert_allclose(got.get().astype(np.float64), ref, rtol=tol, atol=tol)
    assert ran >= 1


def test_pointwise_conv_on_cublaslt_refuses_other_geometry():
    t = _gpu("ConvolutionNHWC", "cublaslt-1x1-0")
    w = {"kernel_hwio": np.zeros((9 * 4, 8), np.float32), "bias": np.zeros(8, np.float32)}
    op = _op("ConvolutionNHWC", weights=w, kernel_spatial=[3, 3], strides=[1, 1], pre_padding=[1, 1],
             post_padding=[1, 1])
    assert "1x1" in t.supports(op, [(1, 5, 5, 4)])


def test_tactic_timing_measures_the_gpu_not_the_host():
    """A run that spends 0.2 ms on the host before its (tiny) kernel times at the kernel's time: the GPU is held
    busy while the host enqueues it. Without the hold the events would span the host's 0.2 ms."""
    from native.cuda.tactics.pointwise import activate
    from native.device import get_device
    dev = get_device("cuda")
    y = _up(np.ones(256, np.float32))

    def run():
        t = time.perf_counter()
        while time.perf_counter() - t < 2e-4:
            pass
        activate(y, "RELU")
    dev.time(run)     # warm (the kernels' module loaded)
    assert min(dev.time(run) for _ in range(5)) < 0.1
