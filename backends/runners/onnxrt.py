"""OnnxrtRunner: the reference. Intermediate tensors are returned by adding them as graph outputs."""
from __future__ import annotations

import numpy as np
import onnx

from backends.runners.base import Runner, TensorMeta
from backends.runners.model import load_onnx, markable_onnx_tensors, onnx_input_metadata
from native.cpu import threads
from native.errors import FeedError, ModelError, UsageError

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(float16)": np.float16,
              "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int16)": np.int16,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8, "tensor(uint16)": np.uint16,
              "tensor(uint32)": np.uint32, "tensor(uint64)": np.uint64, "tensor(bool)": np.bool_,
              "tensor(string)": np.object_}


class OnnxrtRunner(Runner):
    """Runs an ONNX model (path, bytes or ModelProto) on ONNX Runtime's CPU provider.

    `mark`: tensors to make observable through `infer(..., taps=...)`: a list of ONNX tensor names, or "all"
    (every node output of the main graph). Marking adds graph outputs, so ORT keeps those values.
    """

    prefix = "onnxrt-runner"

    def __init__(self, model, mark=None, name=None, providers=("CPUExecutionProvider",)):
        super().__init__(name)
        self.model_source = model
        self.mark = mark
        self.providers = list(providers)
        self.session = None
        self._outputs = []
        self._marked = []
        self._declared, self._declared_out = {}, {}

    def _activate(self):
        import onnxruntime as ort
        model = load_onnx(self.model_source)
        self._outputs = [o.name for o in model.graph.output]
        self._all = markable_onnx_tensors(model)
        marked = self._all if self.mark == "all" else list(self.mark or [])
        unknown = [t for t in marked if t not in set(self._all) | set(self._outputs)
                   and t not in {i.name for i in model.graph.input}]
        if unknown:
            raise UsageError(f"tensor(s) {unknown[:5]} are not produced by any node of the model")
        if marked:
            model = onnx.ModelProto.FromString(model.SerializeToString()) if model is self.model_source else model
            present = set(self._outputs)
            for t in marked:
                if t not in present:
                    model.graph.output.append(onnx.ValueInfoProto(name=t))
                    present.add(t)
        self._marked = list(dict.fromkeys(marked))
        self._declared = onnx_input_metadata(model)   # the model's own input types (int4, float8, ... included)
        self._declared_out = _declared_outputs(model)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=self.providers)
        except Exception as e:
            raise ModelError(f"ONNX Runtime cannot load the model: {str(e).splitlines()[0][:300]}") from None
        del model

    def _deactivate(self):
        self.session = None

    def _input_metadata(self):
        meta = {}
        for i in self.session.get_inputs():
            shape = None if i.shape is None else tuple(d if isinstance(d, int) else (d or -1) for d in i.shape)
            declared = getattr(self, "_declared", {}).get(i.name)
            dtype = _ORT_TYPES.get(i.type) or (declared.dtype if declared is not None else np.float32)
            meta[i.name] = TensorMeta(i.name, np.dtype(dtype), shape)
        return meta

    def output_names(self):
        return list(self._outputs)

    def observable_tensors(self):
        return list(self._marked)

    def _infer(self, feeds, taps):
        missing = [t for t in taps if t not in self._marked and t not in self._outputs]
        if missing:
            raise UsageError(f"{self.name}: tensor(s) {missing[:5]} were not marked; pass mark=[...] or mark='all'")
        names = list(self._outputs) + [t for t in taps if t not in self._outputs]
        ort_feeds = {k: _ort_feed(k, np.asarray(v)) for k, v in feeds.items()}
        threads.rest()   # our CPU pool's worker sleeps rather than doze beside ONNX Runtime's threads
        try:
            values = self.session.run(names, ort_feeds)
        except Exception as e:
            from native.errors import ExecutionError
            raise ExecutionError(f"ONNX Runtime failed: {str(e).splitlines()[0][:300]}") from None
        out = {}
        for name, v in zip(names, values):   # float8 outputs come back as their bytes: their own dtype again
            want = self._declared_out.get(name)
            if want is not None and isinstance(v, np.ndarray) and v.dtype != want and v.dtype.kind == "u" \
                    and v.dtype.itemsize == want.itemsize and want.kind == "V":
                v = v.view(want)
            out[name] = v
        return out


_SUBBYTE = ("int4", "uint4", "float4_e2m1fn", "int2", "uint2")


def _ort_feed(name, a):
    """A feed ONNX Runtime's Python API takes: ml_dtypes' bfloat16/float8 arrays as an OrtValue of their ONNX type
    (numpy arrays of them are not accepted); sub-byte types (stored two per byte) are refused, naming the input."""
    if a.dtype.kind != "V" and a.dtype.name != "float8_e5m2":
        return a
    if a.dtype.name in _SUBBYTE:
        raise FeedError(f"input '{name}' is {a.dtype.name}: ONNX Runtime's Python API cannot take {a.dtype.name} "
                        f"feeds (packed two per byte), so it cannot be the reference for this input")
    import onnxruntime as ort
    from onnx import helper
    try:
        onnx_type = helper.np_dtype_to_tensor_dtype(a.dtype)
    except Exception:
        raise FeedError(f"input '{name}' has dtype {a.dtype.name}, which has no ONNX type") from None
    raw = np.ascontiguousarray(a).view(np.uint8 if a.dtype.itemsize == 1 else np.uint16)
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(raw, onnx_type)


def _declared_outputs(model) -> dict:
    """{output: numpy dtype} of the model's declared outputs whose type numpy only knows through ml_dtypes."""
    from onnx import helper
    out = {}
    for vi in model.graph.output:
        et = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        if et:
            try:
                dt = np.dtype(helper.tensor_dtype_to_np_dtype(et))
            except Exception:
                continue
            if dt.kind == "V":
                out[vi.name] = dt
    return out
