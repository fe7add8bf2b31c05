"""Data movement: shuffle, slice, concat, gather, scatter, padding, fill, topk, nonzero, onehot, tile, ..."""
from backends.engine.layers.base import Layer

__all__ = ["ShuffleLayer", "SliceLayer", "ConcatenationLayer", "GatherLayer", "ScatterLayer", "PaddingLayer",
           "FillLayer", "TopKLayer", "NonZeroLayer", "OneHotLayer", "TileLayer", "ExpandLayer", "SplitLayer",
           "RangeLayer", "SequenceLayer"]


class ShuffleLayer(Layer):
    """first_transpose, then reshape to `reshape_dims` (or input 1; 0 copies the input dim when
    zero_is_placeholder, -1 is inferred), then second_transpose."""
    kind = "Shuffle"
    defaults = {"first_transpose": None, "reshape_dims": None, "second_transpose": None, "zero_is_placeholder": True}


class SliceLayer(Layer):
    """ONNX-style slice: inputs data, starts, ends, axes, steps (or params of the same names), clamped."""
    kind = "Slice"
    defaults = {"starts": None, "ends": None, "axes": None, "steps": None}


class ConcatenationLayer(Layer):
    """Concatenate inputs along `axis`."""
    kind = "Concatenation"
    defaults = {"axis": 0}


class SplitLayer(Layer):
    """Split along `axis` into `split` sizes (or input 1); else `num_outputs` parts of ceil(n / parts), the last
    one smaller."""
    kind = "Split"
    defaults = {"axis": 0, "split": None}


class GatherLayer(Layer):
    """Gather with `mode` DEFAULT (np.take on `axis`), ELEMENT (GatherElements), ND (GatherND, `batch_dims`)."""
    kind = "Gather"
    defaults = {"mode": "DEFAULT", "axis": 0, "batch_dims": 0}


class ScatterLayer(Layer):
    """Scatter with `mode` ELEMENT (ScatterElements, `axis`) or ND (ScatterND); `reduction` none/add/mul/max/min."""
    kind = "Scatter"
    defaults = {"mode": "ND", "axis": 0, "reduction": "none"}


class PaddingLayer(Layer):
    """Pad with `mode` constant/reflect/edge/wrap; pads from params or input 1, value from input 2, axes input 3."""
    kind = "Padding"
    defaults = {"mode": "constant", "pads": None, "value": 0.0, "axes": None}


class FillLayer(Layer):
    """Generate a tensor: `op` CONSTANT (ConstantOfShape, weights 'value'), LINSPACE, RANDOM_UNIFORM, RANDOM_NORMAL,
    EYE_LIKE; shape from params or input 0."""
    kind = "Fill"
    defaults = {"op": "CONSTANT", "shape": None, "dtype": "float32", "alpha": 0.0, "beta": 1.0, "seed": None, "k": 0}


class TopKLayer(Layer):
    """Top-k values and int64 indices along `axis`; `op` MAX (largest) or MIN; `sorted`; k from param or input 1."""
    kind = "TopK"
    defaults = {"op": "MAX", "k": None, "axis": -1, "sorted": True}
    num_outputs_default = 2


class NonZeroLayer(Layer):
    """int64 indices [rank, n] of the non-zero elements."""
    kind = "NonZero"


class OneHotLayer(Layer):
    """One-hot along `axis`; inputs indices, depth, values [off, on]."""
    kind = "OneHot"
    defaults = {"axis": -1}


class TileLayer(Layer):
    """Repeat the input by the repeats of input 1."""
    kind = "Tile"


class ExpandLayer(Layer):
    """Broadcast the input to the shape of input 1 (numpy rules, both ways)."""
    kind = "Expand"


class RangeLayer(Layer):
    """arange(start, limit, delta) from inputs 0..2."""
    kind = "Range"


class SequenceLayer(Layer):
    """ONNX sequence and optional values: `op` CONSTRUCT, EMPTY, AT, INSERT, ERASE, LENGTH, SPLIT_TO, CONCAT_FROM,
    OPTIONAL, HAS_ELEMENT, GET_ELEMENT, MAP (SequenceMap: subgraphs['body'] per element); `axis`, `keepdims`,
    `new_axis`, `dtype`."""
    kind = "Sequence"
    defaults = {"op": "CONSTRUCT", "axis": 0, "keepdims": 1, "new_axis": 0, "dtype": None}
