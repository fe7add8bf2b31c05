"""What the CUDA tactics share: device operands, storage types and cached weight uploads."""
from __future__ import annotations

import numpy as np

from native import numerics
from native.cuda.array import GpuArray, to_device
from native.shared.int8_io import prepared_weights
from native.tactics import Tactic, TacticRefusal
from native.cuda.nvrtc import grid_for, kernel, launch

FLOAT_PRECISIONS = ("float32", "float16", "bfloat16")
FLOAT_STORAGE = frozenset(FLOAT_PRECISIONS)   # what float kernels read (Tactic.input_dtypes)

# The one table of element types the .cu kernels know: numpy dtype -> (kernel-name code, CUDA C storage type).
# Kernel names follow one scheme: `<base>_<code>` for a kernel typed by its values (`layernorm_f16`, `cast_f32_bf16`,
# `icmp_i64`; several codes in operand order), `<base>_<bytes>` for one that only moves bits (`copy_nd_2`,
# `gather_8`). FP16 and BF16 travel as their 16-bit patterns; the kernels convert through common.cuh's F16/BF16.
DTYPES = {"float32": ("f32", "float"), "float16": ("f16", "unsigned short"), "bfloat16": ("bf16", "unsigned short"),
          "float64": ("f64", "double"), "int64": ("i64", "long long"), "int32": ("i32", "int"),
          "int8": ("i8", "signed char"), "uint8": ("u8", "unsigned char"), "bool": ("b", "unsigned char"),
          "float8_e4m3fn": ("e4m3", "unsigned char")}


def code(dtype, kinds=None) -> str:
    """The kernel-name code of an element type (DTYPES); TacticRefusal where the kernel family has no variant
    for it (`kinds`: the dtype names it instantiates; the host runs the others)."""
    name = _name(dtype)
    if name not in DTYPES or (kinds is not None and name not in kinds):
        raise TacticRefusal(f"no GPU kernel for {name} values here")
    return DTYPES[name][0]


def c_type(dtype) -> str:
    """The CUDA C type that holds one element of `dtype` in a kernel's signature (generated sources)."""
    return DTYPES[_name(dtype)][1]


def _name(dtype) -> str:
    """A dtype's name ("bfloat16" as a string too: numpy knows it only through ml_dtypes' type)."""
    return dtype if isinstance(dtype, str) else np.dtype(dtype).name


def on_device(x):
    """x as a GpuArray (numpy values are uploaded; GpuArrays pass through)."""
    return x if isinstance(x, GpuArray) or x is None else to_device(np.asarray(x))


def suffix(dtype) -> str:
    """Kernel-name suffix (`_<code>`) of a float storage type; TacticRefusal for others (the host tactic runs
    those)."""
    name = np.dtype(dtype).name
    if name not in FLOAT_STORAGE:
        raise TacticRefusal(f"GPU float kernels store float32, float16 or bfloat16, got {name}")
    return "_" + DTYPES[name][0]


def storage(op) -> np.dtype:
    """The float storage type of the layer's outputs: float16 for an FP16 layer, bfloat16 for a BF16 one, else
    float32."""
    if op.precision in ("float16", "bfloat16"):
        return numerics.storage_numpy_dtype(op.precision)
    return np.dtype(np.float32)


def same_float(xs, dtype=None):
    """All of xs share one float storage type (dtype when given); TacticRefusal otherwise."""
    kinds = {np.dtype(x.dtype).name for x in xs if x is not None}
    if dtype is not None:
        kinds.add(np.dtype(dtype).name)
    if len(kinds) != 1 or not kinds <= FLOAT_STORAGE:
        raise TacticRefusal(f"GPU kernel needs one float storage type, got {sorted(kinds)}")
    return np.dtype(kinds.pop())


def as_storage(xs, op):
    """Operands of one float type pass as they are; mixed float32/float16/bfloat16 ones are converted to the layer's
    storage type (storage(op)), as the CPU's precision adapter does; other types raise TacticRefusal (a host layer takes
    them)."""
    kinds = {np.dtype(x.dtype).name for x in xs if x is not None}
    if len(kinds) == 1 and kinds <= FLOAT_STORAGE:
        return list(xs)
    dtype = storage(op)
    out = []
    for x in xs:
        if x is not None and np.dtype(x.dtype) != dtype:
            if np.dtype(x.dtype).name not in FLOAT_STORAGE:
                raise TacticRefusal(f"GPU float kernels store float32, float16 or bfloat16, got {np.dtype(x.dtype).name}")
            x = cast(x, dtype)
        out.append(x)
    return out


_W: dict = {}


def weight(host, dtype=None) -> GpuArray:
    """Upload a weight once per process (kept beside its host array), in `dtype` when given."""
    key = (id(host), None if dtype is None else np.dtype(dtype).name)
    hit = _W.get(key)
    if hit is None or hit[0] is not host:
        arr = np.asarray(host if dtype is None else np.asarray(host).astype(dtype))
        hit = _W[key] = (host, GpuArray.from_host(arr))
    return hit[1]


_UPLOADS: dict = {}   # (ptr, shape, dtype) of a weight upload -> its key in _W (rebuilt when _W grows)


def uploaded_from(x):
    """The host array a weight upload (`weight`) was made from, when `x` is one (a Constant layer's output), else
    None: shape-deciding inputs read their values here instead of downloading them."""
    if len(_UPLOADS) != len(_W):
        _UPLOADS.clear()
        _UPLOADS.update({(arr.ptr, arr.shape, arr.dtype.str): key for key, (_, arr) in _W.items()})
    hit = _W.get(_UPLOADS.get((x.ptr, x.shape, x.dtype.str)))
    return np.asarray(hit[0]) if hit is not None and hit[1] is x else None


def out_array(outputs, i, shape, dtype) -> GpuArray:
    """Output i of a layer: the planned arena view the runtime passed (`outputs[i]`, when it has this shape and
    type), else a new GpuArray from the stream-ordered pool. Tactics that use it for every output declare
    `writes_outputs = True`, so their outputs live in the engine's arena (runtime/arena.py)."""
    shape, dtype = tuple(int(d) for d in shape), np.dtype(dtype)
    given = outputs[i] if outputs is not None and i < len(outputs) else None
    if given is not None and tuple(given.shape) == shape and np.dtype(given.dtype) == dtype:
        return given
    return GpuArray(shape, dtype)


def ptr(x) -> np.uint64:
    return np.uint64(0 if x is None else x.ptr)


# storage casts, broadcast strides and shape values: what the kernels of several families need ---------------

CAST_SRC = "tensor.cu"
MAX_VALUES = 64            # a value input longer than this is not a shape: its layer runs on the host


def cast(x: GpuArray, to, outputs=None) -> GpuArray:
    """x stored as `to` (float32 / float16 / bfloat16, round to nearest even); x itself when it already is."""
    to = np.dtype(to)
    if x.dtype == to:
        return x
    if x.dtype.name not in FLOAT_STORAGE or to.name not in FLOAT_STORAGE:
        raise TacticRefusal(f"cast {x.dtype} -> {to} runs on the host")
    out = out_array(outputs, 0, x.shape, to)
    if x.size:
        launch(kernel(CAST_SRC, f"cast_{code(x.dtype)}_{code(to)}"), grid_for(x.size), (256, 1, 1),
               [np.uint64(out.ptr), np.uint64(x.ptr), np.int64(x.size)])
    return out


def bcast_strides(out_shape, shape) -> list:
    """Element strides of a contiguous `shape` read at `out_shape`'s indices (0 along broadcast dims)."""
    rank = len(out_shape)
    shape = (1,) * (rank - len(shape)) + tuple(shape)
    out, stride = [0] * rank, 1
    for d in range(rank - 1, -1, -1):
        out[d] = 0 if shape[d] == 1 else stride
        stride *= shape[d]
    return out


def _capturing() -> bool:
    from native.cuda.driver import _cu, check, context
    cu = _cu()
    status = check(cu.cuStreamIsCapturing(context().stream), "cuStreamIsCapturing")
    return status != cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE


def host_value(x, what: str):
    """The value of a small input as a numpy array: numpy passes; a device constant (Constant layers upload their
    weights once, common.weight) is looked up by address; another device value is downloaded, except during
    graph capture (TacticRefusal: the host twin runs the layer)."""
    if x is None or not isinstance(x, GpuArray):
        return None if x is None else np.asarray(x)
    host = uploaded_from(x)
    if host is not None:
        return host
    if x.size > MAX_VALUES:
        raise TacticRefusal(f"{what} with {x.size} values is not a shape; the host tactic runs it")
    if _capturing():
        raise TacticRefusal(f"{what} computed on the device cannot be read while a CUDA graph is captured")
    return x.get()


class Int8NhwcConv(Tactic):
    """What every INT8 convolution on int8 NHWC tensors declares (the tensors passes/int8_io.py stores int8 between
    such layers: `int8_io`), and its quantized KRSC kernel and epilogue scales, prepared once per layer
    (native/shared/int8_io.prepared_weights). cuDNN's graphs (cudnn_int8.py) and our kernels (conv_i8.py) are ones."""
    device = "cuda"
    kind = "ConvolutionNHWC"
    precisions = ("int8",)
    formats = ("nhwc",)
    honours = frozenset({"post_ops"})
    writes_outputs = True
    input_dtypes, dtype_inputs = frozenset({"int8"}), (0,)
    int8_io = True      # reads and writes int8 NHWC tensors (passes/int8_io.py looks for this)

    def prepare(self, op):
        return prepared_weights(op)

    def prepared(self, op) -> dict:
        """The layer's prepared weights (prepared now where the build did not)."""
        if "int8_krsc" not in op.weights:
            op.weights = prepared_weights(op)
        return op.weights
