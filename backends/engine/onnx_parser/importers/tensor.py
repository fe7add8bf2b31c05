"""Importers: data movement (reshape family, slicing, gathers/scatters, padding, generators, top-k, ...).

Layer choices:
- Reshape/Flatten/Squeeze/Unsqueeze/Transpose/DepthToSpace/SpaceToDepth -> Shuffle. Where the output dims are
  known at import they become `reshape_dims`; otherwise a small Shape -> Gather (-> Concatenation) chain computes
  them at run time and feeds Shuffle's input 1 (TensorRT's way; constant folding removes it for static shapes).
- ConstantOfShape, EyeLike -> Fill (CONSTANT, EYE_LIKE); Dropout -> Identity (+ an all-True Fill for the mask).
- Compress -> NonZero + Shuffle + Gather; Size -> Shape + Reduce(PROD).
- Squeeze/Unsqueeze with axes known only at run time, and Dropout in training mode -> built-in plugins.
- Trilu, Unique, ReverseSequence, CenterCropPad -> Plugin layers served by built-in plugins (no TensorRT layer
  matches them; the plugins live in native/cpu/kernels/tensor.py).
"""
from __future__ import annotations

import numpy as np
from onnx import numpy_helper

from backends.engine.dtypes import DataType
from backends.engine.onnx_parser.importers.registry import OpImporter, onnx_op
from native.errors import ParseError


def _input(inputs, i):
    return inputs[i] if len(inputs) > i else None


def _const_list(ctx, t):
    v = ctx.constant_value(t) if t is not None else None
    return None if v is None else [int(a) for a in np.asarray(v).reshape(-1)]


def _rank(t):
    return len(t.shape) if t is not None and t.shape is not None else None


def _shuffle(ctx, x, **params):
    return ctx.add_layer("Shuffle", [x], params).outputs[0]


def reshape_by_spec(ctx, x, spec):
    """Reshape x to dims given per output position as ("in", i) = input dim i or ("const", v).

    Static where at most one output dim is unknown at import; otherwise the dims are gathered from Shape(x)
    at run time."""
    shape = x.shape
    dims, unknown, placeholder = [], 0, False
    for pos, (kind, v) in enumerate(spec):
        if kind == "const":
            dims.append(int(v))
            continue
        d = shape[v] if shape is not None and v < len(shape) else -1
        if d >= 0:
            dims.append(int(d))
        elif v == pos:
            dims.append(0)
            placeholder = True
        else:
            dims.append(-1)
            unknown += 1
    zero_sizes = any((k == "const" and v == 0) or (k == "in" and shape is not None and shape[v] == 0)
                     for k, v in spec)
    if unknown <= 1 and not ((placeholder or unknown) and zero_sizes):
        return _shuffle(ctx, x, reshape_dims=dims, zero_is_placeholder=placeholder)
    consts = [v for k, v in spec if k == "const"]
    rank = _rank(x)
    if rank is None:
        raise ParseError("the input's rank is unknown, so its reshaped dims cannot be computed")
    s = ctx.add_layer("Shape", [x]).outputs[0]
    if consts:
        s = ctx.add_layer("Concatenation", [s, ctx.constant(np.array(consts, np.int64))], {"axis": 0}).outputs[0]
    idx, c = [], 0
    for k, v in spec:
        if k == "in":
            idx.append(v)
        else:
            idx.append(rank + c)
            c += 1
    d = ctx.add_layer("Gather", [s, ctx.constant(np.array(idx, np.int64))], {"mode": "DEFAULT", "axis": 0}).outputs[0]
    return ctx.add_layer("Shuffle", [x, d], {"zero_is_placeholder": False}).outputs[0]


@onnx_op("Constant")
class Constant(OpImporter):
    """Constant node -> Constant layer (value, value_float(s), value_int(s), value_string(s), sparse_value)."""

    def convert(self, ctx, node, inputs, attrs):
        if "value" in attrs:
            arr = np.asarray(attrs["value"])
        elif "value_float" in attrs:
            arr = np.array(attrs["value_float"], np.float32)
        elif "value_floats" in attrs:
            arr = np.array(attrs["value_floats"], np.float32)
        elif "value_int" in attrs:
            arr = np.array(attrs["value_int"], np.int64)
        elif "value_ints" in attrs:
            arr = np.array(attrs["value_ints"], np.int64)
        elif "value_string" in attrs:
            arr = np.array(attrs["value_string"], dtype=object)
        elif "value_strings" in attrs:
            arr = np.array(list(attrs["value_strings"]), dtype=object)
        elif "sparse_value" in attrs:
            sp = attrs["sparse_value"]
            vals = numpy_helper.to_array(sp.values)
            idx = numpy_helper.to_array(sp.indices)
            arr = np.zeros(tuple(sp.dims), dtype=vals.dtype)
            if idx.ndim == 1:
                arr.reshape(-1)[idx] = vals
            else:
                arr[tuple(idx.T)] = vals
        else:
            raise ParseError(f"Constant has no value attribute (has {sorted(attrs)})")
        layer = ctx.add_layer("Constant", [], {"shape": list(arr.shape)}, {"value": arr})
        out = layer.outputs[0]
        out.dtype, out.shape = DataType.from_numpy(arr.dtype), arr.shape
        return [out]


@onnx_op("ConstantOfShape", 9)
class ConstantOfShape(OpImporter):
    """Fill CONSTANT: shape from input 0, weights 'value' a 1-element array (default float32 0)."""

    def convert(self, ctx, node, inputs, attrs):
        value = np.asarray(attrs.get("value", np.zeros(1, np.float32))).reshape(-1)[:1]
        return ctx.add_layer("Fill", [inputs[0]], {"op": "CONSTANT", "dtype": str(value.dtype)},
                             {"value": value}).outputs


@onnx_op("Identity")
class Identity(OpImporter):
    """Identity layer; works for tensors, sequences and optionals alike."""

    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Identity", [inputs[0]]).outputs


@onnx_op("Dropout")
class Dropout(OpImporter):
    """Inference Dropout: identity; the optional mask output is all True (Fill CONSTANT over Shape(x))."""

    def convert(self, ctx, node, inputs, attrs):
        training = _input(inputs, 2)
        tv = ctx.constant_value(training) if training is not None else None
        if training is not None and (tv is None or bool(np.asarray(tv).reshape(-1)[0])):
            # training mode set at run time: built-in plugin 'Dropout' (identity when off or ratio 0)
            return _plugin(ctx, node, inputs, "Dropout", {"seed": attrs.get("seed")}, 2)
        if attrs.get("is_test", 1) == 0 and ctx.opset < 7:
            raise ParseError("Dropout with is_test=0 (training mode) is not supported")
        out = ctx.add_layer("Identity", [inputs[0]]).outputs[0]
        if len(node.output) > 1 and node.output[1]:
            s = ctx.add_layer("Shape", [inputs[0]]).outputs[0]
            mask = ctx.add_layer("Fill", [s], {"op": "CONSTANT", "dtype": "bool"},
                                 {"value": np.ones(1, bool)}).outputs[0]
            return [out, mask]
        return [out]


@onnx_op("Reshape")
class Reshape1(OpImporter):
    """Reshape-1: `shape` attribute -> static Shuffle."""

    def convert(self, ctx, node, inputs, attrs):
        return [_shuffle(ctx, inputs[0], reshape_dims=list(attrs["shape"]), zero_is_placeholder=True)]


@onnx_op("Reshape", 5)
class Reshape(OpImporter):
    """Shuffle; a constant shape becomes reshape_dims, else the shape tensor is input 1. allowzero -> no placeholder."""

    def convert(self, ctx, node, inputs, attrs):
        allowzero = bool(attrs.get("allowzero", 0))
        dims = _const_list(ctx, inputs[1])
        if dims is not None:
            return [_shuffle(ctx, inputs[0], reshape_dims=dims, zero_is_placeholder=not allowzero)]
        return ctx.add_layer("Shuffle", [inputs[0], inputs[1]], {"zero_is_placeholder": not allowzero}).outputs


@onnx_op("Flatten")
class Flatten(OpImporter):
    """Shuffle to 2-D [prod(d[:axis]), prod(d[axis:])]; static where either side is known."""

    def convert(self, ctx, node, inputs, attrs):
        x = inputs[0]
        r = _rank(x)
        axis = attrs.get("axis", 1)
        if axis < 0:
            if r is None:
                raise ParseError("Flatten with a negative axis needs the input rank")
            axis += r
        if axis == 0:
            return [_shuffle(ctx, x, reshape_dims=[1, -1], zero_is_placeholder=False)]
        if axis == 1:
            return [_shuffle(ctx, x, reshape_dims=[0, -1], zero_is_placeholder=True)]
        shape = x.shape
        if shape is not None and all(d >= 0 for d in shape[:axis]) and (0 not in shape[axis:]):
            return [_shuffle(ctx, x, reshape_dims=[int(np.prod(shape[:axis])), -1], zero_is_placeholder=False)]
        if shape is not None and all(d >= 0 for d in shape[axis:]) and 0 not in shape[:axis]:
            return [_shuffle(ctx, x, reshape_dims=[-1, int(np.prod(shape[axis:]))], zero_is_placeholder=False)]
        s = ctx.add_layer("Shape", [x], {"start": 0, "end": axis}).outputs[0]
        p = ctx.add_layer("Reduce", [s], {"op": "PROD", "axes": [0], "keep_dims": True}).outputs[0]
        d = ctx.add_layer("Concatenation", [p, ctx.constant(np.array([-1], np.int64))], {"axis": 0}).outputs[0]
        return ctx.add_layer("Shuffle", [x, d], {"zero_is_placeholder": False}).outputs


def _runtime_axes(ctx, inputs, attrs):
    """(axes list or None, True when the axes are only known at run time)."""
    if "axes" in attrs:
        return list(attrs["axes"]), False
    t = _input(inputs, 1)
    if t is None:
        return None, False
    v = _const_list(ctx, t)
    return v, v is None


@onnx_op("Squeeze")
class Squeeze(OpImporter):
    """Shuffle dropping size-1 `axes` (attribute before opset 13, input after); no axes: all 1-dims.
    Axes known only at run time, an unknown rank, or no axes on a dynamic shape: built-in plugin 'Squeeze'."""

    def convert(self, ctx, node, inputs, attrs):
        x = inputs[0]
        axes, dynamic = _runtime_axes(ctx, inputs, attrs)
        r = _rank(x)
        if dynamic or r is None or (axes is None and any(d < 0 for d in x.shape)):
            ins = [x, inputs[1]] if dynamic else [x]
            return _plugin(ctx, node, ins, "Squeeze", {"axes": axes if not dynamic else None}, 1)
        if axes is None:
            axes = [i for i, d in enumerate(x.shape) if d == 1]
        axes = {a + r if a < 0 else a for a in axes}
        return [reshape_by_spec(ctx, x, [("in", i) for i in range(r) if i not in axes])]


@onnx_op("Unsqueeze")
class Unsqueeze(OpImporter):
    """Shuffle inserting size-1 dims at `axes` of the output (attribute before opset 13, input after).
    Axes known only at run time or an unknown rank: built-in plugin 'Unsqueeze'."""

    def convert(self, ctx, node, inputs, attrs):
        x = inputs[0]
        axes, dynamic = _runtime_axes(ctx, inputs, attrs)
        r = _rank(x)
        if dynamic or r is None:
            ins = [x, inputs[1]] if dynamic else [x]
            return _plugin(ctx, node, ins, "Unsqueeze", {"axes": axes if not dynamic else None}, 1)
        out_rank = r + len(axes)
        axes = {a + out_rank if a < 0 else a for a in axes}
        spec, i = [], 0
        for pos in range(out_rank):
            if pos in axes:
                spec.append(("const", 1))
            else:
                spec.append(("in", i))
                i += 1
        return [reshape_by_spec(ctx, x, spec)]


@onnx_op("Transpose")
class Transpose(OpImporter):
    """Shuffle first_transpose = perm (default: reversed dims)."""

    def convert(self, ctx, node, inputs, attrs):
        perm = attrs.get("perm")
        if perm is None:
            r = _rank(inputs[0])
            if r is None:
                raise ParseError("Transpose without perm needs the input rank")
            perm = list(range(r))[::-1]
        return [_shuffle(ctx, inputs[0], first_transpose=list(perm))]


@onnx_op("Slice")
class Slice1(OpImporter):
    """Slice-1: starts/ends/axes attributes -> Slice params."""

    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Slice", [inputs[0]], {"starts": list(attrs["starts"]), "ends": list(attrs["ends"]),
                                                    "axes": list(attrs["axes"]) if "axes" in attrs else None}).outputs


@onnx_op("Slice", 10)
class Slice(OpImporter):
    """Slice with starts/ends/axes/steps inputs passed through (clamped at run time)."""

    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Slice", list(inputs)).outputs


@onnx_op("Concat")
class Concat(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Concatenation", [t for t in inputs if t is not None],
                             {"axis": attrs.get("axis", 1 if ctx.opset < 4 else 0)}).outputs


@onnx_op("Split")
class Split(OpImporter):
    """Split: sizes from the `split` attribute (<13) or input 1; else equal parts (ceil-sized for num_outputs)."""

    def convert(self, ctx, node, inputs, attrs):
        n = len(node.output)
        params = {"axis": attrs.get("axis", 0), "split": list(attrs["split"]) if "split" in attrs else None,
                  "num_outputs": n}
        ins = [inputs[0]]
        s = _input(inputs, 1)
        if s is not None:
            v = _const_list(ctx, s)
            if v is not None:
                params["split"] = v
            else:
                ins.append(s)
        return ctx.add_layer("Split", ins, params, num_outputs=n).outputs


@onnx_op("Gather")
class Gather(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Gather", inputs[:2], {"mode": "DEFAULT", "axis": attrs.get("axis", 0)}).outputs


@onnx_op("GatherElements", 11)
class GatherElements(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Gather", inputs[:2], {"mode": "ELEMENT", "axis": attrs.get("axis", 0)}).outputs


@onnx_op("GatherND", 11)
class GatherND(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Gather", inputs[:2], {"mode": "ND", "batch_dims": attrs.get("batch_dims", 0)}).outputs


@onnx_op("ScatterElements", 11)
class ScatterElements(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Scatter", inputs[:3], {"mode": "ELEMENT", "axis": attrs.get("axis", 0),
                                                     "reduction": attrs.get("reduction", "none")}).outputs


@onnx_op("Scatter", 9)
class Scatter(OpImporter):
    """Deprecated Scatter == ScatterElements without reduction."""

    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Scatter", inputs[:3], {"mode": "ELEMENT", "axis": attrs.get("axis", 0)}).outputs


@onnx_op("ScatterND", 11)
class ScatterND(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Scatter", inputs[:3], {"mode": "ND", "reduction": attrs.get("reduction", "none")}).outputs


@onnx_op("Pad")
class Pad2(OpImporter):
    """Pad-2: `pads` (or `paddings` in Pad-1) and `value` attributes."""

    def convert(self, ctx, node, inputs, attrs):
        pads = attrs.get("pads", attrs.get("paddings"))
        return ctx.add_layer("Padding", [inputs[0]], {"mode": attrs.get("mode", "constant"), "pads": list(pads),
                                                      "value": float(attrs.get("value", 0.0))}).outputs


@onnx_op("Pad", 11)
class Pad(OpImporter):
    """Padding with inputs data, pads, constant_value, axes passed through."""

    def convert(self, ctx, node, inputs, attrs):
        mode = attrs.get("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise ParseError(f"Pad mode '{mode}' is not supported")
        return ctx.add_layer("Padding", list(inputs), {"mode": mode}).outputs


@onnx_op("Tile")
class Tile(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        if len(inputs) == 3:  # Tile-1: tiles, axis
            raise ParseError("Tile-1 (tiles/axis inputs) is not supported")
        return ctx.add_layer("Tile", inputs[:2]).outputs


@onnx_op("Expand", 8)
class Expand(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Expand", inputs[:2]).outputs


@onnx_op("Shape")
class Shape(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("Shape", [inputs[0]], {"start": attrs.get("start", 0), "end": attrs.get("end")}).outputs


@onnx_op("Size")
class Size(OpImporter):
    """Shape -> Reduce(PROD) to an int64 scalar."""

    def convert(self, ctx, node, inputs, attrs):
        s = ctx.add_layer("Shape", [inputs[0]]).outputs[0]
        return ctx.add_layer("Reduce", [s], {"op": "PROD", "axes": [0], "keep_dims": False}).outputs


@onnx_op("Range", 11)
class Range(OpImporter):
    """Opset 27's stash_type (float16/bfloat16: the type of the arithmetic, float32 by default) rides along only
    when the model sets another one."""

    def convert(self, ctx, node, inputs, attrs):
        stash = int(attrs.get("stash_type", 1))
        return ctx.add_layer("Range", inputs[:3], {"stash_type": stash} if stash != 1 else None).outputs


@onnx_op("TopK")
class TopK1(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("TopK", [inputs[0]], {"k": int(attrs["k"]), "axis": attrs.get("axis", -1)},
                             num_outputs=2).outputs


@onnx_op("TopK", 10)
class TopK(OpImporter):
    """TopK: k from input 1; `largest` -> op MAX/MIN; ties keep the smaller index first."""

    def convert(self, ctx, node, inputs, attrs):
        op = "MAX" if attrs.get("largest", 1) else "MIN"
        return ctx.add_layer("TopK", inputs[:2], {"op": op, "axis": attrs.get("axis", -1),
                                                  "sorted": bool(attrs.get("sorted", 1))}, num_outputs=2).outputs


@onnx_op("NonZero", 9)
class NonZero(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("NonZero", [inputs[0]]).outputs


@onnx_op("OneHot", 9)
class OneHot(OpImporter):
    def convert(self, ctx, node, inputs, attrs):
        return ctx.add_layer("OneHot", inputs[:3], {"axis": attrs.get("axis", -1)}).outputs


@onnx_op("EyeLike", 9)
class EyeLike(OpImporter):
    """Fill EYE_LIKE over input 0's 2-D shape; `k` diagonal offset; dtype from attribute or input."""

    def convert(self, ctx, node, inputs, attrs):
        dtype = None
        if "dtype" in attrs:
            dtype = DataType.from_onnx(attrs["dtype"]).value
        return ctx.add_layer("Fill", [inputs[0]], {"op": "EYE_LIKE", "k": attrs.get("k", 0), "dtype": dtype}).outputs


@onnx_op("DepthToSpace")
class DepthToSpace(OpImporter):
    """Shuffle: reshape to 6-D, transpose (DCR or CRD order), reshape back. Needs static C, H, W."""

    def convert(self, ctx, node, inputs, attrs):
        x, b = inputs[0], int(attrs["blocksize"])
        if x.shape is None or len(x.shape) != 4 or any(d < 0 for d in x.shape[1:]):
            raise ParseError("DepthToSpace needs a 4-D input with static C, H, W")
        _, c, h, w = x.shape
        if attrs.get("mode", "DCR") == "CRD":
            first, perm = [0, c // (b * b), b, b, h, w], [0, 1, 4, 2, 5, 3]
        else:
            first, perm = [0, b, b, c // (b * b), h, w], [0, 3, 4, 1, 5, 2]
        y = _shuffle(ctx, x, reshape_dims=first, second_transpose=perm, zero_is_placeholder=True)
        return [_shuffle(ctx, y, reshape_dims=[0, c // (b * b), h * b, w * b], zero_is_placeholder=True)]


@onnx_op("SpaceToDepth")
class SpaceToDepth(OpImporter):
    """Shuffle: reshape to 6-D, transpose (DCR, or CRD from opset 28), reshape back. Needs static C, H, W."""

    def convert(self, ctx, node, inputs, attrs):
        x, b = inputs[0], int(attrs["blocksize"])
        if x.shape is None or len(x.shape) != 4 or any(d < 0 for d in x.shape[1:]):
            raise ParseError("SpaceToDepth needs a 4-D input with static C, H, W")
        _, c, h, w = x.shape
        mode = attrs.get("mode", "DCR")   # opset 28; earlier opsets: DCR
        if mode not in ("DCR", "CRD"):
            raise ParseError(f"SpaceToDepth mode must be DCR or CRD, got {mode!r}")
        # DCR: the block's row, column, then the channel vary slowest to fastest in the output depth; CRD: channel first
        perm = [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4]
        y = _shuffle(ctx, x, reshape_dims=[0, c, h // b, b, w // b, b], second_transpose=perm,
                     zero_is_placeholder=True)
        return [_shuffle(ctx, y, reshape_dims=[0, c * b * b, h // b, w // b], zero_is_placeholder=True)]


@onnx_op("Compress", 9)
class Compress(OpImporter):
    """NonZero(condition) -> flatten -> Gather along `axis` (input flattened first when no axis)."""

    def convert(self, ctx, node, inputs, attrs):
        x, cond = inputs[0], inputs[1]
        axis = attrs.get("axis")
        if axis is None:
            x = _shuffle(ctx, x, reshape_dims=[-1], zero_is_placeholder=False)
            axis = 0
        nz = ctx.add_layer("NonZero", [cond]).outputs[0]
        idx = _shuffle(ctx, nz, reshape_dims=[-1], zero_is_placeholder=False)
        return ctx.add_layer("Gather", [x, idx], {"mode": "DEFAULT", "axis": axis}).outputs


def _plugin(ctx, node, inputs, name, fields, n=None):
    return ctx.add_layer("Plugin", list(inputs), {"plugin_type": name, "plugin_version": "1", "fields": fields},
                         num_outputs=n or len(node.output)).outputs


@onnx_op("Trilu", 14)
class Trilu(OpImporter):
    """Built-in plugin 'Trilu' (`upper`; k from input 1)."""

    def convert(self, ctx, node, inputs, attrs):
        return _plugin(ctx, node, inputs, "Trilu", {"upper": int(attrs.get("upper", 1))}, 1)


@onnx_op("Unique", 11)
class Unique(OpImporter):
    """Built-in plugin 'Unique' (`sorted`, `axis`); four outputs: values, indices, inverse, counts."""

    def convert(self, ctx, node, inputs, attrs):
        return _plugin(ctx, node, inputs, "Unique", {"sorted": int(attrs.get("sorted", 1)), "axis": attrs.get("axis")}, 4)


@onnx_op("ReverseSequence", 10)
class ReverseSequence(OpImporter):
    """Built-in plugin 'ReverseSequence' (`batch_axis`, `time_axis`)."""

    def convert(self, ctx, node, inputs, attrs):
        return _plugin(ctx, node, inputs, "ReverseSequence",
                       {"batch_axis": attrs.get("batch_axis", 1), "time_axis": attrs.get("time_axis", 0)}, 1)


@onnx_op("CenterCropPad", 18)
class CenterCropPad(OpImporter):
    """Built-in plugin 'CenterCropPad' (`axes`; target sizes from input 1)."""

    def convert(self, ctx, node, inputs, attrs):
        return _plugin(ctx, node, inputs, "CenterCropPad", {"axes": attrs.get("axes")}, 1)
