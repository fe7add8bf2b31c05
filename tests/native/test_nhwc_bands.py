"""nhwc-gemm-bands: nhwc-gemm cut into bands of output rows over the CPU pool, each band's epilogue (bias,
activations, residual add) run channel-last: the values of a float64 reference convolution, whatever the pool size
and sub-band height; offered only with more than one pool thread."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels.activations import activation
from native.cpu.kernels.conv import nhwc_bands, tuning
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(11)


def _tactic():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "nhwc-gemm-bands")


@pytest.mark.parametrize("pool,cols_bytes", [(2, 1 << 20), (3, 4096), (2, 1)])
@pytest.mark.parametrize("c,m,hw,k,stride,pad,post", [
    (8, 6, 11, 3, 1, 1, ["SILU", "add"]), (5, 7, 12, 5, 2, 2, ["bias", "HARD_SWISH"]), (4, 4, 9, 3, 2, 1, []),
    (6, 3, 10, 3, 1, 0, ["add", "RELU"])])
def test_banded_nhwc_gemm_matches_the_reference(monkeypatch, pool, cols_bytes, c, m, hw, k, stride, pad, post):
    monkeypatch.setattr(nhwc_bands, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "COLS_BYTES", cols_bytes)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)   # parallel_for really splits
    x = RNG.standard_normal((2, c, hw, hw)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32)
    b = RNG.standard_normal(m).astype(np.float32)
    want = reference_conv(x, w, b, stride, pad, 1, 1)
    inputs, post_ops, weights = [x, None, None], [], {"kernel": w, "bias": b}
    for p in post:
        if p == "add":
            r = RNG.standard_normal(want.shape).astype(np.float32)
            post_ops.append({"op": "add", "input": len(inputs)})
            inputs.append(r)
            want = want + r
        elif p == "bias":
            weights["extra"] = RNG.standard_normal(m).astype(np.float32)
            post_ops.append({"op": "bias", "weight": "extra", "axis": 1})
            want = want + weights["extra"].reshape(1, -1, 1, 1)
        else:
            post_ops.append({"op": "activation", "type": p, "alpha": 0.0, "beta": 0.0})
            want = activation(want, p)
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2,
              "post_padding": [pad] * 2, "dilations": [1, 1], "groups": 1, "post_ops": post_ops}
    t = _tactic()
    op = Op("Convolution", "c", params, dict(weights))
    assert t.supports(op, [list(x.shape)]) is None
    for ws in (op.weights, t.prepare(op)):
        got = t.run(Op("Convolution", "c", params, ws), inputs)[0]
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_one_thread_is_not_offered(monkeypatch):
    monkeypatch.setattr(nhwc_bands, "num_threads", lambda: 1)
    op = Op("Convolution", "c", {"kernel_shape": [3, 3], "groups": 1}, {})
    assert "one CPU thread" in _tactic().supports(op, [[1, 4, 8, 8]])
    monkeypatch.setattr(nhwc_bands, "num_threads", lambda: 2)
    assert _tactic().supports(op, [[1, 4, 8, 8]]) is None
    assert "pointwise" in _tactic().supports(Op("Convolution", "c", {"kernel_shape": [1, 1]}, {}), [[1, 4, 8, 8]])


@pytest.mark.parametrize("pre,post", [([1, 2], [1, 0]), ([0, 0], [0, 0]), ([-1, 1], [2, -2])])
@pytest.mark.parametrize("threads_n", [1, 2, 3])
def test_the_padded_channel_last_input_is_the_same_split_or_not(monkeypatch, pre, post, threads_n):
    """nhwc_padded: zeros around the transposed input (negative pads crop), the same array whether the copy is
    split into bands of rows over the pool or not."""
    from native.cpu.kernels.conv import nhwc_gemm
    monkeypatch.setattr(nhwc_gemm, "NHWC_SPLIT_MIN", 1)
    monkeypatch.setattr(threads, "num_threads", lambda: threads_n)
    x = RNG.standard_normal((2, 5, 7, 6)).astype(np.float32)
    want = np.pad(x, [(0, 0), (0, 0), (max(pre[0], 0), max(post[0], 0)), (max(pre[1], 0), max(post[1], 0))])
    want = want[:, :, max(-pre[0], 0):want.shape[2] - max(-post[0], 0),
                max(-pre[1], 0):want.shape[3] - max(-post[1], 0)].transpose(0, 2, 3, 1)
    got = nhwc_gemm.nhwc_padded(x, pre, post, threads_n)
    assert got.shape == want.shape and got.tobytes() == np.ascontiguousarray(want).tobytes()
