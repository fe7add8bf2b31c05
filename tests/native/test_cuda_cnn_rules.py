"""The CPU-checkable rules of the CUDA device's CNN fast paths (no GPU needed): which convolutions run as one
cuBLASLt GEMM and what its epilogue fuses, when the NHWC pool applies its own ReLU, which transposes take the
few-channel kernel, and that the timed runs hold the GPU first. The kernels themselves: tests/native/cuda/
test_cuda_cnn_paths.py."""
import numpy as np
import pytest

from native.cuda.tactics.conv_lt import plan_epilogue, pointwise_conv

PLAIN = {"kernel_spatial": [1, 1], "strides": [1, 1], "pre_padding": [0, 0], "post_padding": [0, 0],
         "dilations": [1, 1], "groups": 1}


def test_only_plain_pointwise_convolutions_are_gemms():
    assert pointwise_conv(PLAIN) == ""
    for change, word in [({"kernel_spatial": [3, 3]}, "1x1"), ({"strides": [2, 2]}, "strided"),
                         ({"pre_padding": [1, 0]}, "padded"), ({"dilations": [2, 2]}, "dilated"),
                         ({"groups": 4}, "grouped")]:
        assert word in pointwise_conv({**PLAIN, **change}), change


@pytest.mark.parametrize("post,want", [
    ([], ("BIAS", None, [])),
    ([{"op": "activation", "type": "RELU"}], ("RELU_BIAS", None, [])),
    ([{"op": "add", "input": 3}, {"op": "activation", "type": "RELU"}], ("RELU_BIAS", 3, [])),
    ([{"op": "add", "input": 3}], ("BIAS", 3, [])),
    ([{"op": "add", "input": 3}, {"op": "activation", "type": "SIGMOID"}],
     ("BIAS", 3, [{"op": "activation", "type": "SIGMOID"}])),
    # an activation before the add cannot move past it: everything after the GEMM runs on our kernels
    ([{"op": "activation", "type": "RELU"}, {"op": "add", "input": 3}],
     ("RELU_BIAS", None, [{"op": "add", "input": 3}]))])
def test_epilogue_fuses_the_residual_then_relu(post, want):
    assert plan_epilogue(post) == want


def test_pool_fuses_exactly_one_relu():
    from native.cuda.tactics.pooling import _fused_relu
    from native.tactics import Op

    def op(steps):
        return Op("PoolingNHWC", "p", {"post_ops": steps}, {})
    relu = {"op": "activation", "type": "RELU"}
    assert _fused_relu(op([relu]))
    assert not _fused_relu(op([]))
    assert not _fused_relu(op([relu, relu]))
    assert not _fused_relu(op([{"op": "activation", "type": "SIGMOID"}]))


class _Fake:
    def __init__(self, shape, dtype):
        self.shape, self.ndim, self.dtype = tuple(shape), len(shape), np.dtype(dtype)


@pytest.mark.parametrize("shape,perm", [((2, 8, 5, 5), [0, 2, 3, 1]),     # 8 channels: the strided copy
                                        ((2, 5, 5, 8), [0, 3, 1, 2]),
                                        ((2, 3, 5, 5), [0, 1, 3, 2]),     # not a layout transpose
                                        ((2, 3, 5), [0, 2, 1]),
                                        ((0, 3, 5, 5), [0, 2, 3, 1])])     # empty: nothing to launch
def test_few_channel_kernel_takes_only_small_layout_transposes(shape, perm):
    from native.cuda.tactics.tensor import _few_channels
    assert _few_channels(_Fake(shape, np.float16), perm, None) is False


def test_timed_runs_hold_the_gpu_first(monkeypatch):
    """CudaDevice.time enqueues the hold kernel (TIMING_HOLD_MS) before the events around the run."""
    from native.cuda import device as cd
    calls = []

    class Ctx:
        def time_ms(self, fn):
            calls.append("events")
            fn()
            return 0.01
    monkeypatch.setattr(cd, "hold", lambda ms: calls.append(("hold", ms)))
    monkeypatch.setattr(cd, "context", lambda: Ctx())
    assert cd.CudaDevice().time(lambda: calls.append("run")) == 0.01
    assert calls == [("hold", cd.TIMING_HOLD_MS), "events", "run"]
    assert cd.TIMING_HOLD_MS >= 0.3
