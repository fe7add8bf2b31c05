"""CPU fast paths: float32 LayerNorm, the 4-pass SiLU, small convolutions run inline on the calling thread, and
the thread pool / BLAS setting being initialised before tactic timing. All compared against float64 references."""
import numpy as np
import pytest

from native.cpu import threads
from native.cpu.kernels import conv as conv_mod
from native.cpu.kernels.activations import activation, activation_inplace
from native.tactics import Op, tactics_for
from tests.native.test_nn_kernels import reference_conv

RNG = np.random.default_rng(1)


def _layernorm_ref(x, scale, bias, axis, eps):
    xf = x.astype(np.float64)
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = xf.mean(axis=axes, keepdims=True)
    var = ((xf - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    return (xf - mean) * inv * scale + bias, mean, inv


@pytest.mark.parametrize("shape,axis", [((2, 16, 256), -1), ((3, 4, 5, 6), 2), ((7, 33), 1)])
def test_layernorm_float32_matches_float64(shape, axis):
    x = (RNG.standard_normal(shape) * 3 + 100).astype(np.float32)  # large offset: the two-pass variance matters
    norm_shape = shape[axis % len(shape):]
    scale = RNG.standard_normal(norm_shape).astype(np.float32)
    bias = RNG.standard_normal(norm_shape).astype(np.float32)
    t = tactics_for("Normalization", "cpu")[0]
    y, mean, inv = t.run(Op("Normalization", "ln", {"mode": "LAYER", "axes": [axis], "epsilon": 1e-5}), [x, scale, bias])
    ry, rm, ri = _layernorm_ref(x, scale, bias, axis, 1e-5)
    assert y.dtype == np.float32 and y.shape == x.shape
    np.testing.assert_allclose(y, ry, rtol=1e-4, atol=2e-4)
    np.testing.assert_allclose(mean, rm, rtol=1e-6)
    np.testing.assert_allclose(inv, ri, rtol=1e-4)
    assert mean.shape == rm.shape and inv.shape == ri.shape


def test_layernorm_constant_rows_are_zero_not_nan():
    x = np.full((4, 8), 3.5, np.float32)
    t = tactics_for("Normalization", "cpu")[0]
    y = t.run(Op("Normalization", "ln", {"mode": "LAYER", "axes": [-1]}), [x, np.ones(8, np.float32), None])[0]
    np.testing.assert_array_equal(y, np.zeros_like(x))


def test_silu_values_and_in_place():
    x = np.concatenate([np.linspace(-30, 30, 1001), [0.0, 1e-8, -1e-8, 88.0, -88.0]]).astype(np.float32)
    ref = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
    np.testing.assert_allclose(activation(x, "SILU"), ref, rtol=2e-6, atol=1e-6)
    y = x.copy()
    out = activation_inplace(y, "SILU")
    assert out is y
    np.testing.assert_allclose(y, ref, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("c,m,h,k,stride", [(8, 6, 5, 3, 1), (16, 18, 10, 1, 1), (64, 64, 20, 3, 1), (4, 8, 17, 3, 2)])
def test_conv_small_inline_and_threaded_agree(monkeypatch, c, m, h, k, stride):
    """Layers under PARALLEL_MIN_MACS run on the caller; forcing the threshold to 0 / huge must give the same
    values as the reference (with a SiLU epilogue)."""
    x = RNG.standard_normal((1, c, h, h)).astype(np.float32)
    w = RNG.standard_normal((m, c, k, k)).astype(np.float32) * 0.2
    b = RNG.standard_normal(m).astype(np.float32)
    pad = k // 2
    ref = reference_conv(x, w, b, stride, pad, 1, 1)
    ref = ref / (1 + np.exp(-ref))
    params = {"kernel_shape": [k, k], "strides": [stride] * 2, "pre_padding": [pad] * 2, "post_padding": [pad] * 2,
              "groups": 1, "num_output_maps": m, "post_ops": [{"op": "activation", "type": "SILU"}]}
    for limit in (0, 1 << 40):
        monkeypatch.setattr(conv_mod.tuning, "PARALLEL_MIN_MACS", limit)
        monkeypatch.setattr(conv_mod.tuning, "PARALLEL_MIN_DW_MACS", limit)
        monkeypatch.setattr(conv_mod.tuning, "PARALLEL_MIN_DW_JIT_MACS", limit)
        monkeypatch.setattr(conv_mod.tuning, "PARALLEL_EPILOGUE_MIN", limit)
        for t in tactics_for("Convolution", "cpu"):
            op = Op("Convolution", "c", params, {"kernel": w, "bias": b})
            if t.supports(op, [list(x.shape)]) is not None:
                continue
            op.weights = t.prepare(op)
            np.testing.assert_allclose(t.run(op, [x])[0], ref, rtol=1e-4, atol=1e-4, err_msg=f"{t.name} {limit}")


def test_threads_init_starts_pool_once():
    threads.init()
    if threads.num_threads() > 1:
        pool = threads._STATE["pool"]
        assert pool is not None
        threads.init()
        assert threads._STATE["pool"] is pool
    assert threads.parallel_for(lambda i: i * i, range(5)) == [0, 1, 4, 9, 16]


@pytest.mark.timing
def test_time_candidates_interleaves_and_skips_failures(monkeypatch):
    import time
    from native.cpu.device import CpuDevice
    monkeypatch.setattr(CpuDevice, "timing_block", 1)   # one run a turn (the CPU without its pool)
    from native.cpu import threads
    monkeypatch.setattr(threads, "back_off_left", lambda: 0.0)   # (an earlier test's pool back-off: no wait here)
    from types import SimpleNamespace
    from backends.engine.builder.tactic_selection import time_candidates
    calls = []

    class T:
        def __init__(self, id_, delay, fail=False):
            self.id, self.name, self.delay, self.fail = id_, f"t{id_}", delay, fail

        def prepare(self, op):
            return op.weights

        def run(self, op, inputs):
            if self.fail:
                raise RuntimeError("unsupported")
            calls.append(self.id)
            time.sleep(self.delay)
            return [inputs[0]]

    node = SimpleNamespace(kind="Activation", name="a", params={}, weights={}, precision="float32")
    got = time_candidates(node, [T(1, 0.004), T(2, 0.0), T(3, 0.0, fail=True)], [np.zeros(2)], 3)
    assert set(got) == {1, 2} and got[2] < got[1] and got[1] >= 3.5
    assert calls == [1, 2] + [1, 2] * 3  # warm-ups, then round-robin


def test_pick_fastest_breaks_near_ties_by_registration_order():
    from types import SimpleNamespace
    from backends.engine.builder.tactic_selection import TIE_MARGIN, pick_fastest
    a, b, c = (SimpleNamespace(id=i) for i in (1, 2, 3))
    # b is fastest, but a (registered first) is within the margin: a wins, every build
    assert pick_fastest([a, b, c], {1: 1.0 + TIE_MARGIN / 2, 2: 1.0, 3: 2.0}) is a
    # a clear winner still wins
    assert pick_fastest([a, b, c], {1: 1.5, 2: 1.0, 3: 2.0}) is b
    assert pick_fastest([], {}) is None


def test_malloc_tuning_keeps_conv_buffers_mapped():
    """After engines start (threads.init), a warm convolution must not page-fault its buffers in again on every
    call (glibc returned them to the OS before allocator.tune: ~470 faults per 56x56x64 layer)."""
    import resource
    import sys
    from native.cpu import allocator
    threads.init()
    if not sys.platform.startswith("linux") or not allocator.tune():
        pytest.skip("glibc malloc tuning not available here")
    x = RNG.standard_normal((1, 64, 56, 56)).astype(np.float32)
    w = RNG.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.1
    params = {"kernel_shape": [3, 3], "pre_padding": [1, 1], "post_padding": [1, 1], "groups": 1,
              "num_output_maps": 64, "post_ops": []}
    t = [t for t in tactics_for("Convolution", "cpu") if t.name == "im2col-gemm"][0]
    op = Op("Convolution", "c", params, {"kernel": w, "bias": np.zeros(64, np.float32)})
    op.weights = t.prepare(op)
    for _ in range(3):
        t.run(op, [x])
    per_call = []     # the process's faults: the median call's, so another thread's burst in one call is not counted
    for _ in range(7):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t.run(op, [x])
        per_call.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    faults = float(np.median(per_call))
    assert faults < 150, f"{per_call} page faults per call"   # 879 without the tuning; ~50 seen under heavy load


def test_parallel_for_orders_results_propagates_errors_and_nests_inline():
    threads.init()
    assert threads.parallel_for(lambda i: i * 10, range(9)) == [i * 10 for i in range(9)]
    for bad in (0, 1, 4):   # the caller's share and a worker's share both surface their exception
        with pytest.raises(ZeroDivisionError):
            threads.parallel_for(lambda i, bad=bad: 1 / (i - bad), range(6))
    # the pool still works after a failure, and a nested call (from the caller or a worker) runs inline
    nested = threads.parallel_for(lambda i: threads.parallel_for(lambda j: (i, j), range(3)), range(4))
    assert nested == [[(i, j) for j in range(3)] for i in range(4)]
