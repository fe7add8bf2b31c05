"""OnnxrtRunner: the reference. Intermediate tensors are returned by adding them as graph outputs."""
from __future__ import annotations

import numpy as np
import onnx

from backends.runners.base import Runner, TensorMeta
from backends.runners.model import load_onnx, markable_onnx_tensors
from native.errors import ModelError, UsageError

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
            meta[i.name] = TensorMeta(i.name, np.dtype(_ORT_TYPES.get(i.type, np.float32)), shape)
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
        try:
            values = self.session.run(names, {k: np.asarray(v) for k, v in feeds.items()})
        except Exception as e:
            from native.errors import ExecutionError
            raise ExecutionError(f"ONNX Runtime failed: {str(e).splitlines()[0][:300]}") from None
        return dict(zip(names, values))
