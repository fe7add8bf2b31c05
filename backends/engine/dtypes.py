"""DataType: the engine's element types and their numpy and ONNX spellings."""
import enum

import numpy as np


class DataType(enum.Enum):
    FLOAT = "float32"
    HALF = "float16"
    INT8 = "int8"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"
    # Beyond TensorRT's set: ONNX models use them and numpy holds them natively.
    UINT8 = "uint8"
    INT16 = "int16"
    UINT16 = "uint16"
    UINT32 = "uint32"
    UINT64 = "uint64"
    DOUBLE = "float64"
    BFLOAT16 = "bfloat16"
    FP8 = "float8_e4m3fn"   # E4M3, saturating (TensorRT's kFP8)
    STRING = "object"

    @property
    def numpy(self):
        if self is DataType.BFLOAT16:
            import ml_dtypes
            return np.dtype(ml_dtypes.bfloat16)
        if self is DataType.FP8:
            import ml_dtypes
            return np.dtype(ml_dtypes.float8_e4m3fn)
        return np.dtype(self.value)

    @property
    def itemsize(self):
        return self.numpy.itemsize

    @classmethod
    def from_numpy(cls, dtype):
        dtype = np.dtype(dtype)
        if dtype.name == "bfloat16":
            return cls.BFLOAT16
        if dtype.name == "float8_e4m3fn":
            return cls.FP8
        if dtype.kind in "OUS":
            return cls.STRING
        return cls(dtype.name)

    @classmethod
    def from_onnx(cls, elem_type: int):
        from onnx import helper
        return cls.from_numpy(helper.tensor_dtype_to_np_dtype(elem_type))


float32 = DataType.FLOAT
float16 = DataType.HALF
bfloat16 = DataType.BFLOAT16
fp8 = DataType.FP8
int8 = DataType.INT8
int32 = DataType.INT32
int64 = DataType.INT64
bool_ = DataType.BOOL
