"""GPU tensors are recognised by the CUDA Array Interface without a GPU library: their shape and dtype are read from
the interface (never copied), and an engine in host memory refuses them with a message naming the input."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from native.device_arrays import is_device_array, shape_and_dtype


class FakeCudaTensor:
    """What torch/cupy expose for a CUDA tensor; touching its data on the host would be a bug."""

    def __init__(self, shape, typestr):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (0xdead0000, False),
                                         "version": 3, "strides": None, "stream": None}

    def __array__(self, *a, **k):
        raise AssertionError("copied to the host")


def test_shape_and_dtype_come_from_the_interface():
    t = FakeCudaTensor((2, 3), "<f2")
    assert is_device_array(t) and not is_device_array(np.zeros(2))
    assert shape_and_dtype(t) == ((2, 3), np.dtype(np.float16))
    assert shape_and_dtype(np.zeros((4, 1), np.int8)) == ((4, 1), np.dtype(np.int8))


def test_cpu_engine_refuses_a_gpu_tensor_naming_the_input(tmp_path):
    from backends.runners import EngineRunner
    from native.errors import FeedError
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    path = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), path)
    with EngineRunner(str(path)) as r:
        with pytest.raises(FeedError, match="input 'x' is a GPU tensor.*'cpu'"):
            r.infer({"x": FakeCudaTensor((2, 3), "<f4")})
