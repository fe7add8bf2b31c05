"""Sigmoid keeps float32's relative precision in its tail (the CPU kernel; the GPU kernels under the cuda marker):
a probability map's small values are what FP16 vs FP32 comparisons of detectors measure (docs/PRECISION.md)."""
import numpy as np
import pytest

Z = np.concatenate([np.linspace(-87, 87, 40001), [0.0, -0.0, 1e-30, -1e-30]]).astype(np.float32)


def truth(z):
    return 1.0 / (1.0 + np.exp(-np.asarray(z, np.float64)))


def rel_err(got, z):
    t = truth(z)
    ok = t > np.finfo(np.float32).tiny       # float32 normals: below, the answer is subnormal or 0
    return float(np.max(np.abs(np.asarray(got, np.float64)[ok] - t[ok]) / t[ok]))


def test_cpu_sigmoid_relative_error_in_both_tails():
    from native.cpu.kernels.activations import activation_inplace
    got = activation_inplace(Z.copy(), "SIGMOID", 0.0, 0.0)
    assert got.dtype == np.float32
    assert rel_err(got, Z) < 5e-7           # 0.5*tanh(x/2)+0.5 gives 1.0 here (0 for sigmoid(-20) = 2e-9)
    special = activation_inplace(np.array([np.inf, -np.inf, np.nan, 0.0, -200.0], np.float32), "SIGMOID", 0, 0)
    np.testing.assert_array_equal(special, np.array([1.0, 0.0, np.nan, 0.5, 0.0], np.float32))
    x64 = np.linspace(-700, 700, 5001)
    np.testing.assert_allclose(activation_inplace(x64.copy(), "SIGMOID", 0, 0), truth(x64), rtol=1e-14, atol=0)


@pytest.mark.cuda
@pytest.mark.parametrize("fused", [False, True])
def test_gpu_sigmoid_relative_error_in_both_tails(fused):
    """The NVRTC kernels: the Activation kernel and a generated pointwise program ((x + 0) -> Sigmoid)."""
    from native.cuda.array import GpuArray
    from native.tactics import Op, tactics_for
    if fused:
        prog = [{"op": "ElementWise", "args": ["in:0", "w:c0"], "params": {"op": "SUM"}},
                {"op": "Activation", "args": ["s:0"], "params": {"type": "SIGMOID"}}]
        op, name = Op("Pointwise", "t", {"program": prog}, {"c0": np.zeros(1, np.float32)}), "nvrtc-fused"
    else:
        op, name = Op("Activation", "t", {"type": "SIGMOID"}), "nvrtc-pointwise"
    tactic = next(t for t in tactics_for(op.kind, "cuda") if t.name == name)
    got = tactic.run(op, [GpuArray.from_host(Z)])[0].get()
    assert rel_err(got, Z) < 2e-6
