"""conv2d_gemm's patch copy from the stride phases of a large strided kernel (7x7 / 5x5 stride 2: resnet18's stem),
compiled (native/cpu/jit_patches.py): the same patch matrix as numpy's per-tap copies, so im2col-gemm's output is
bit for bit the same with and without numba, whatever the band height, pool size, padding or dilation."""
import numpy as np
import pytest

from native.cpu import jit, threads
from native.cpu.kernels.conv import gemm2d, tuning
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(7070)
pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says


def _im2col():
    return next(t for t in tactics_for("Convolution", "cpu") if t.name == "im2col-gemm")


@pytest.mark.parametrize("pool,cols_bytes", [(1, 1 << 20), (2, 1 << 20), (1, 1), (2, 5000)])
@pytest.mark.parametrize("n,c,m,h,w,k,s,d,pad,dtype", [
    (1, 3, 8, 30, 30, 7, 2, 1, 3, np.float32),
    (2, 3, 5, 17, 23, 7, 2, 1, (2, 3), np.float32),
    (1, 4, 6, 19, 16, 5, 2, 1, 2, np.float64),
    (1, 2, 4, 21, 21, 5, 2, 2, 4, np.float32),
    (1, 3, 4, 26, 27, 7, 3, 1, 0, np.float32),
], ids=lambda v: str(v))
def test_compiled_phase_copies_give_numpys_floats(monkeypatch, pool, cols_bytes, n, c, m, h, w, k, s, d, pad, dtype):
    if not jit.available():
        pytest.skip("DEBUGKIT_JIT=0: only numpy's copies run (the default tests cover them)")
    monkeypatch.setattr(gemm2d, "num_threads", lambda: pool)
    monkeypatch.setattr(threads, "num_threads", lambda: pool)
    monkeypatch.setattr(tuning, "PARALLEL_MIN_MACS", 1)
    monkeypatch.setattr(tuning, "COLS_BYTES", cols_bytes)
    pre = post = list(pad) if isinstance(pad, tuple) else [pad, pad]
    params = {"num_output_maps": m, "kernel_shape": [k, k], "strides": [s, s], "pre_padding": pre,
              "post_padding": post, "dilations": [d, d], "groups": 1,
              "post_ops": [{"op": "activation", "type": "RELU", "alpha": 0.0, "beta": 0.0}]}
    x = RNG.standard_normal((n, c, h, w)).astype(dtype)
    kern = RNG.standard_normal((m, c, k, k)).astype(dtype)
    b = RNG.standard_normal(m).astype(dtype)
    t = _im2col()
    op = Op("Convolution", "c", params, t.prepare(Op("Convolution", "c", params, {"kernel": kern, "bias": b})))
    calls, compiled = [], gemm2d._from_phases(np.dtype(dtype))
    monkeypatch.setattr(gemm2d, "_from_phases", lambda dt: lambda *a: calls.append(compiled(*a)))
    got = t.run(op, [x])[0]
    assert calls                                          # the compiled copy ran
    monkeypatch.setattr(gemm2d, "_from_phases", lambda dt: None)
    want = t.run(op, [x])[0]
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    ref = t.run(Op("Convolution", "c", dict(params, post_ops=[]), {"kernel": kern.astype(np.float64),
                                                                   "bias": b.astype(np.float64)}),
                [x.astype(np.float64)])[0]
    np.testing.assert_allclose(got, np.maximum(ref, 0), rtol=1e-4, atol=1e-4 * np.abs(ref).max())
