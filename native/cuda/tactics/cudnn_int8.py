"""INT8 convolutions on the integer tensor cores through cuDNN's graph API: int8 NHWC image and KRSC kernel, int32
accumulation, and the whole epilogue fused into the same cuDNN graph: the int32 bias, the per-channel rescale
(s_x * s_w / s_y), a residual add (an int8 tensor rescaled by s_r / s_y, or a float one), ReLU, saturation to
[-128, 127] and the int8 output (requantized), or a float32 output where the layer has no output scale.

The int8 values travel between such layers as int8 NHWC tensors: the builder's INT8 I/O pass
(backends/engine/builder/passes/int8_io.py) decides which tensors are stored int8 and writes the scales the
tactic needs into params['int8'] ("io": {"input": "int8", "output": "int8" | "float32"}, "residual_scales":
{input index: scale}); Reformat layers (int8.py's int8-kernel) quantize and dequantize at the edges.

Not bit-equal to the CPU INT8 kernels: cuDNN's engine evaluates the float32 epilogue in its own order and rounds
to int8 itself (the CPU's requantization divides by s_y after adding the float residual). It is a tactic family of
its own, `cudnn-int8-plan-<i>`, for layers the INT8 I/O pass prepared (timed builds); the bit-equal NCHW path
(int8.py's im2col-cublaslt-int8) stays what untimed builds and explicit comparisons use."""
from __future__ import annotations

import threading

import numpy as np

from native.cuda.array import GpuArray
from native.cuda.availability import has_library, missing
from native.cuda.diagnostics import captured_stderr
from native.cuda.driver import CudaError
from native.cuda.nvrtc import grid_for, kernel, launch
from native.cuda.tactics import cudnn_conv
from native.cuda.tactics.common import Int8NhwcConv, cast, on_device, out_array, weight
from native.shared.int8_io import epilogue_plan, io_of, nhwc_geometry, prepared_reason, residual_storage
from native.tactics import TacticRefusal, register_variants

PLANS = 5                      # tactics per layer: the first PLANS execution plans cuDNN ranks for the graph
ALIGN = 4                      # int8 channel counts cuDNN's NHWC INT8 convolutions take: multiples of 4
_LOCK = threading.Lock()
_GRAPHS: dict = {}             # graph key -> Int8ConvGraph, or the str why cuDNN builds none


def _dtype(name):
    import cudnn
    return {"int8": cudnn.data_type.INT8, "float32": cudnn.data_type.FLOAT, "float16": cudnn.data_type.HALF,
            "int32": cudnn.data_type.INT32}[name]


def _nhwc(n, c, h, w):
    return [c * h * w, 1, w * c, c]


# the graph forms tried in order until cuDNN builds one: (bias before the scale, explicit clamp to the int8 range).
# The first is the CPU's order, (acc + bias_q) * scale; the second is cuDNN's own samples' order, acc * scale +
# bias_q * scale (one more float32 rounding); the last leaves saturation to cuDNN's int8 conversion.
FORMS = ((True, True), (False, True), (False, False))


class Int8ConvGraph:
    """One cuDNN graph: int8 conv -> + bias -> * scale [-> + residual * rs] -> clamp (ReLU) -> int8 / float32."""

    def __init__(self, x_nchw, w_nchw, y_nchw, geo, res_dtype, relu, out_dtype, form=FORMS[0]):
        import cudnn
        strides, dil, pre, post = geo
        f32 = cudnn.data_type.FLOAT
        m = w_nchw[0]
        self.g = g = cudnn.pygraph(io_data_type=cudnn.data_type.INT8, intermediate_data_type=f32,
                                   compute_data_type=f32, handle=cudnn_conv.handle())
        self.x = g.tensor(name="x", dim=list(x_nchw), stride=_nhwc(*x_nchw), data_type=cudnn.data_type.INT8)
        self.w = g.tensor(name="w", dim=list(w_nchw), stride=_nhwc(*w_nchw), data_type=cudnn.data_type.INT8)
        acc = g.conv_fprop(image=self.x, weight=self.w, pre_padding=list(pre), post_padding=list(post),
                           stride=list(strides), dilation=list(dil), compute_data_type=cudnn.data_type.INT32)
        acc.set_data_type(cudnn.data_type.INT32)
        chan = dict(dim=[1, m, 1, 1], stride=[m, 1, m, m], data_type=f32)
        self.b = g.tensor(name="b", **chan)
        self.s = g.tensor(name="s", **chan)
        self.bias_first, clamp = form
        if self.bias_first:
            y = g.mul(a=g.add(a=acc, b=self.b, compute_data_type=f32), b=self.s, compute_data_type=f32)
        else:     # the bias tensor then holds bias_q * scale (prepared_weights' int8_bias_scaled)
            y = g.add(a=g.mul(a=acc, b=self.s, compute_data_type=f32), b=self.b, compute_data_type=f32)
        self.r = self.rs = None
        if res_dtype is not None:
            self.r = g.tensor(name="r", dim=list(y_nchw), stride=_nhwc(*y_nchw), data_type=_dtype(res_dtype))
            self.rs = g.tensor(name="rs", **chan)
            y = g.add(a=y, b=g.mul(a=self.r, b=self.rs, compute_data_type=f32), compute_data_type=f32)
        if out_dtype == "int8" and clamp:
            y = g.relu(input=y, lower_clip=0.0 if relu else -128.0, upper_clip=127.0, compute_data_type=f32)
        elif relu:
            y = g.relu(input=y, compute_data_type=f32)
        y.set_output(True)
        y.set_data_type(_dtype(out_dtype))
        y.set_dim(list(y_nchw))
        y.set_stride(_nhwc(*y_nchw))
        self.y = y
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
        self.count = g.get_execution_plan_count()
        self.good, self.tried, self.workspace = [], 0, {}

    def plan(self, index):
        """(cuDNN's plan index, workspace bytes) of the index-th plan that builds; TacticRefusal when none."""
        while len(self.good) <= index and self.tried < self.count:
            j = self.tried
            self.tried += 1
            try:
                self.g.build_plan_at_index(j)
                self.workspace[j] = int(self.g.get_workspace_size_plan_at_index(j))
                self.good.append(j)
            except Exception:
                continue
        if index >= len(self.good):
            raise TacticRefusal(f"cuDNN has {len(self.good)} usable INT8 execution plan(s) for this convolution")
        j = self.good[index]
        return j, self.workspace[j]

    def execute(self, index, x, w, b, s, r, rs, y):
        j, ws_size = self.plan(index)
        ws = GpuArray((max(ws_size, 1),), np.uint8) if ws_size else None
        pack = {self.x: x.ptr, self.w: w.ptr, self.b: b.ptr, self.s: s.ptr, self.y: y.ptr}
        if self.r is not None:
            pack[self.r], pack[self.rs] = r.ptr, rs.ptr
        self.g.execute_plan_at_index(pack, ws.ptr if ws is not None else 0, j, handle=cudnn_conv.handle())


def _graph(key, args):
    """The graph of this signature (built once), or TacticRefusal with why cuDNN builds none."""
    with _LOCK:
        g = _GRAPHS.get(key)
        if g is None:
            said, first = [], None
            for form in FORMS:
                try:
                    with captured_stderr(said):
                        g = Int8ConvGraph(*args, form=form)
                    break
                except Exception as e:
                    first = first or (str(e).splitlines()[0] if str(e) else type(e).__name__)
                    g = f"cuDNN has no INT8 engine for this convolution graph: {first}"
            _GRAPHS[key] = g
    if isinstance(g, str):
        raise TacticRefusal(g)
    return g


def _built(key, args):
    """(graph, residual cast) for this signature: an int8 or float16 residual that cuDNN does not take as a graph
    input is handed over as float32 instead (converted by a kernel before the graph: `residual cast` True)."""
    try:
        return _graph(key, args), False
    except TacticRefusal:
        if args[4] in (None, "float32"):
            raise
    args = args[:4] + ("float32",) + args[5:]
    return _graph(key[:3] + ("float32",) + key[4:], args), True


def release():
    """Drop the graphs (cudnn_conv.release calls this before it destroys the handles)."""
    with _LOCK:
        _GRAPHS.clear()


cudnn_conv.on_release(release)


def as_float32(r: GpuArray) -> GpuArray:
    """A residual as float32 values (int8 ones unscaled: the graph's rs scales them)."""
    if r.dtype == np.int8:
        out = GpuArray(r.shape, np.float32)
        if r.size:
            launch(kernel("int8.cu", "dequantize_i8_f32"), grid_for(r.size), (256, 1, 1),
                   [np.uint64(out.ptr), np.uint64(r.ptr), np.int64(r.size), np.float32(1.0)])
        return out
    return cast(r, np.float32)


class _CudnnInt8Conv(Int8NhwcConv):
    index = 0

    def supports(self, op, input_shapes):
        if not has_library("cudnn"):
            return missing("cudnn")
        why = prepared_reason(op)
        if why:
            return why
        if input_shapes and input_shapes[0] is not None:
            try:
                key, args = self._signature(op, [list(s) if s is not None else None for s in input_shapes],
                                            getattr(input_shapes, "dtypes", None))
                if 0 not in args[2]:
                    g, _ = _built(key, args)
                    if self.index == 0:
                        g.plan(0)       # later plans are built when their tactic first runs (timing)
                    elif g.count <= self.index:
                        return f"cuDNN ranks {g.count} INT8 execution plan(s) for this convolution"
            except TacticRefusal as e:
                return str(e)
        return None

    def _signature(self, op, shapes, dtypes=None):
        x_shape = tuple(shapes[0])
        strides, pre, post, dil, (oh, ow) = nhwc_geometry(op, x_shape)
        n, h, wd, c = x_shape
        kh, kw = op.params["kernel_spatial"]
        m = int(op.params["num_output_maps"])
        if c % ALIGN or m % ALIGN:
            raise TacticRefusal(f"INT8 cuDNN convolutions need channels in multiples of {ALIGN} (C={c}, K={m})")
        res_idx, relu = epilogue_plan(op)
        res_dtype = residual_storage(op, res_idx, dtypes)
        if res_idx is not None:
            if res_dtype not in ("int8", "float32", "float16"):
                raise TacticRefusal(f"residual stored {res_dtype}")
            if res_idx < len(shapes) and shapes[res_idx] is not None and tuple(shapes[res_idx]) != (n, oh, ow, m):
                raise TacticRefusal(f"residual {tuple(shapes[res_idx])} does not match the output {(n, oh, ow, m)}")
        out = io_of(op)["output"]
        geo = (tuple(strides), tuple(dil), tuple(pre), tuple(post))
        key = ((n, c, h, wd), (m, c, kh, kw), geo, res_dtype, relu, out)
        return key, ((n, c, h, wd), (m, c, kh, kw), (n, m, oh, ow), geo, res_dtype, relu, out)

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        wts = self.prepared(op)
        x = on_device(inputs[0])
        if x.dtype != np.int8:
            raise TacticRefusal(f"the INT8 cuDNN convolution reads int8 NHWC input, got {x.dtype}")
        key, args = self._signature(op, [list(a.shape) if a is not None else None for a in inputs],
                                    [np.dtype(a.dtype).name if a is not None else None for a in inputs])
        n, m, oh, ow = args[2]
        y = out_array(outputs, 0, (n, oh, ow, m), np.dtype(args[6]))
        if y.size == 0:
            return [y]
        g, cast_residual = _built(key, args)
        res_idx, _ = epilogue_plan(op)
        r = on_device(inputs[res_idx]) if res_idx is not None else None
        if cast_residual:      # the int8 values (or float16 ones) as float32; rs still scales them
            r = as_float32(r)
        try:
            g.execute(self.index, x, weight(wts["int8_krsc"]),
                      weight(wts["int8_bias"] if g.bias_first else wts["int8_bias_scaled"]), weight(wts["int8_scale"]),
                      r, weight(wts["int8_res_scale"]), y)
        except TacticRefusal:
            raise
        except Exception as e:
            raise CudaError(f"cuDNN INT8 plan {self.index} failed: {e}") from e
        return [y]


register_variants(_CudnnInt8Conv, PLANS, "cudnn-int8-plan-{i}",
                  "cuDNN graph (INT8 NHWC conv, int32 accumulate, rescale / residual / ReLU / requantize fused), "
                  "execution plan {i}")
