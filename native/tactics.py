"""Tactics: the implementations a layer can run with, per (layer kind, device).

A tactic is a real alternative (im2col-GEMM vs direct convolution, BLAS vs blocked matmul) with a stable id.
The contract every tactic on every device keeps (docs/architecture.md, "Tactic"):

* `precisions`: the compute precisions it really computes in ("float32", "float16", ...). A layer asking for a
  precision no tactic declares runs in one that is declared, and the builder says so (tactic_selection.py).
* `formats`: the tensor formats it reads and writes ("linear" = row-major NCHW..., "nhwc" = channels last).
* `honours`: the fused params it implements (FUSED_PARAMS: post_ops, side, integer, col2im, program, emulate,
  residual_input). A layer
  carrying one of them is never given a tactic that would silently ignore it.
* `workspace_size(op, shapes)`: scratch bytes it needs; selection skips it when the workspace pool is too small
  and the device hands it that much scratch when it runs.
* `supports(op, ctx) -> None | reason`: None when it can run this layer as the runtime will call it, else a short
  reason that ends up in the build log. `ctx` is a LayerContext: the input shapes (it is their list, None where
  unknown), their storage types (`ctx.dtypes`) and the optimization profile's range (`ctx.min_shapes`,
  `ctx.max_shapes`). The builder filters candidates with it, so what the plan records is what runs; a refusal
  only the run can see raises TacticRefusal (an engine bug once built).
* `input_dtypes`: the storage types its data inputs may have (None: any), checked against ctx.dtypes before
  supports() is asked; `dtype_inputs` names which inputs are data (None: every input).
* `run(op, inputs, outputs, workspace, stream) -> list`: compute. `outputs` are device buffers planned for the
  results (None where the device has none: write-into tactics set `writes_outputs`), `workspace` the scratch,
  `stream` the device's queue (None on the synchronous CPU). The device calls it (native/device.py).

Tactics written in the older short style (`run(op, inputs)`, `supports` returning a bool) are adapted when they
are registered, so both styles keep working.

Kernels see an `Op`: the layer's kind, name, JSON-able params, packed weights and, for control flow,
callables that run its subgraphs. They never see ONNX.
"""
from __future__ import annotations

import functools
import inspect
import zlib
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from native.errors import BuildError

class TacticRefusal(Exception):
    """A tactic refuses, at run time, inputs its `supports()` could not see at build time (a value that only exists
    then: a data-dependent shape, a plan cuDNN will not build for these exact strides). The one exception of the
    refusal protocol: during the builder's timing it drops the candidate (the build decides); in a built engine it
    is an engine bug, raised as an ExecutionError naming the layer and the tactic (no silent fallback)."""


# params that carry fused meaning: a tactic that does not list one in `honours` must not run a layer that has it
FUSED_PARAMS = ("post_ops", "side", "integer", "col2im", "program", "emulate", "residual_input")


@dataclass
class Op:
    """What a tactic runs: one layer as the runtime knows it."""

    kind: str
    name: str
    params: dict
    weights: dict = field(default_factory=dict)
    subgraphs: dict = field(default_factory=dict)  # name -> callable(list_of_inputs) -> list_of_outputs
    precision: str = "float32"  # what the layer computes in: float32 | float16 | bfloat16 | fp8 | int8
    format: str = "linear"
    output_types: tuple = ()    # storage type per output where the precision pass set one (None: as computed)
    math: str = ""              # "tf32": a float32 conv/matmul whose GEMM operands are rounded to TF32
    config: str = ""            # what the build chose inside the tactic (Tactic.config: a cuDNN engine config)


class LayerContext(list):
    """What a tactic's supports() sees of a layer: the list of its input shapes (None where unknown: the list of
    old), plus their storage types and the profile's min/max shapes per input (None where unknown)."""

    def __init__(self, shapes=(), dtypes=None, min_shapes=None, max_shapes=None):
        super().__init__(shapes or ())
        self.dtypes = list(dtypes) if dtypes is not None else None
        self.min_shapes = min_shapes
        self.max_shapes = max_shapes

    @classmethod
    def of(cls, inputs):
        """The context of concrete input values (arrays on any device: shape and dtype attributes)."""
        return cls([list(x.shape) if hasattr(x, "shape") else None for x in inputs],
                   [np.dtype(x.dtype).name if hasattr(x, "dtype") else None for x in inputs])


class Tactic:
    """One implementation of one layer kind on one device.

    Subclasses set `kind`, `name` (unique per kind and device) and implement `run`; the id is derived from
    (device, kind, name) so it is stable across versions and machines.
    """

    kind: str = ""
    name: str = ""
    device: str = "cpu"
    precisions: tuple = ("float32",)
    formats: tuple = ("linear",)
    honours: frozenset = frozenset()
    writes_outputs: bool = False   # True: uses the `outputs` buffers the device passes to run()
    input_dtypes: frozenset | None = None   # storage types its data inputs may have (None: any)
    dtype_inputs: tuple | None = None       # which inputs input_dtypes applies to (None: all)
    host_layer: bool = False       # True: runs on the host for a device with its own memory (copies around it)
    constant: bool = False         # True: a Constant layer's value lives on the device (made once at load)
    subgraph_device: str | None = None   # the device its subgraphs run on (None: the layer's own)

    @property
    def id(self) -> int:
        return zlib.crc32(f"{self.device}:{self.kind}:{self.name}".encode()) & 0x7FFFFFFF

    def supports(self, op: Op, input_shapes) -> str | None:
        """None when this tactic can run `op` for inputs of these shapes (None where unknown), else why not."""
        return None

    def workspace_size(self, op: Op, input_shapes) -> int:
        return 0

    def prepare(self, op: Op) -> dict:
        """Pre-pack weights at build time; the returned arrays go into the plan and come back as `op.weights`."""
        return op.weights

    def config(self, op: Op, input_shapes) -> str:
        """The implementation's own name for what this tactic runs on these inputs ("" when it has none to give):
        a cuDNN engine config. The plan records it (layer meta `tactic_config`, Op.config at run time), so a loaded
        engine runs what the build timed, whatever order its library ranks things in that process."""
        return ""

    def ready(self, op: Op, input_shapes) -> bool:
        """Whether running `op` on inputs of these shapes now costs only the run: False where a first run compiles
        something (a cuDNN runtime-fusion plan). The builder's runs, which need a layer's values and not its
        speed, run a ready candidate first (GraphExecutor._first_accepting)."""
        return True

    def run(self, op: Op, inputs: list, outputs=None, workspace=None, stream=None) -> list:
        raise NotImplementedError

    def __repr__(self):
        return f"<Tactic {self.device}:{self.kind}:{self.name} id={self.id}>"


def unsupported_reason(tactic: Tactic, op: Op, input_shapes, *, workspace_limit=None) -> str | None:
    """Why `tactic` cannot run `op` as declared (precision, format, fused params, its own supports(), workspace),
    or None when it can. Selection, default picks and the interpreter all ask this one question."""
    missing = [p for p in FUSED_PARAMS if op.params.get(p) and p not in tactic.honours]
    if missing:
        return f"does not implement fused param(s) {missing}"
    if op.precision not in tactic.precisions:
        return f"computes in {'/'.join(tactic.precisions)}, not {op.precision}"
    if op.format not in tactic.formats:
        return f"reads/writes {'/'.join(tactic.formats)}, not {op.format}"
    dtypes = getattr(input_shapes, "dtypes", None)   # a LayerContext carries them; a plain shape list does not
    if dtypes and tactic.input_dtypes is not None:
        idx = range(len(dtypes)) if tactic.dtype_inputs is None else tactic.dtype_inputs
        bad = [(i, dtypes[i]) for i in idx if i < len(dtypes) and dtypes[i] is not None
               and dtypes[i] not in tactic.input_dtypes]
        if bad:
            return (f"reads {bad[0][1]} at input {bad[0][0]}; its kernels take "
                    f"{'/'.join(sorted(tactic.input_dtypes))}")
    reason = tactic.supports(op, input_shapes)
    if reason is not None:
        return reason
    if workspace_limit is not None:
        need = int(tactic.workspace_size(op, input_shapes) or 0)
        if need > workspace_limit:
            return f"needs {need} bytes of workspace, the workspace pool allows {workspace_limit}"
    return None


def accepting(tactics, op: Op, input_shapes, *, workspace_limit=None, refused=None):
    """(the tactics of `tactics` that can run `op` at `input_shapes`, the op they run, {tactic name: reason} for
    the rest). A layer asked a precision none of them computes runs in float32 where one does (TensorRT's
    fallback); the op returned then says float32. `refused`: {tactic name: why} of candidates already seen to
    refuse these inputs (the build's run), never accepted. Tactic selection, the default pick and the build's run
    all ask this one question, so they agree on what runs."""
    refused = refused or {}

    def why(t, o):
        if t.name in refused:
            return f"refused its inputs in the build's run ({refused[t.name]})"
        return unsupported_reason(t, o, input_shapes, workspace_limit=workspace_limit)
    reasons = {t.name: why(t, op) for t in tactics}
    ok = [t for t in tactics if reasons[t.name] is None]
    if ok or op.precision == "float32":
        return ok, op, reasons
    fp32 = replace(op, precision="float32")
    fallback = {t.name: why(t, fp32) for t in tactics}
    ok = [t for t in tactics if fallback[t.name] is None]
    return (ok, fp32, fallback) if ok else ([], op, reasons)


def _adapt(cls):
    """Bring a tactic class written in the short style up to the contract (see the module docstring)."""
    run = cls.run
    if not getattr(run, "_contract", False):
        params = [p for p in inspect.signature(run).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        has_var = any(p.kind == p.VAR_POSITIONAL for p in inspect.signature(run).parameters.values())
        if len(params) < 6 and not has_var:  # run(self, op, inputs): ignores outputs/workspace/stream
            legacy = run

            @functools.wraps(legacy)
            def run(self, op, inputs, outputs=None, workspace=None, stream=None):
                return legacy(self, op, inputs)
            cls._short_run = legacy    # the device may call it directly (Device.bind): no adapter frame
        run._contract = True
        cls.run = run
    sup = cls.supports
    if not getattr(sup, "_contract", False):
        legacy_sup = sup

        @functools.wraps(legacy_sup)
        def supports(self, op, input_shapes):
            r = legacy_sup(self, op, input_shapes)
            if r is None or r is True:
                return None
            if r is False:
                return f"not applicable ({self.name}.supports declined these params/shapes)"
            return str(r)
        supports._contract = True
        cls.supports = supports
    cls.honours = frozenset(cls.honours)
    bad = set(cls.honours) - set(FUSED_PARAMS)
    assert not bad, f"{cls.__name__}.honours names unknown fused params {bad}; known: {FUSED_PARAMS}"
    return cls


_REGISTRY: dict[tuple[str, str], list[Tactic]] = {}


def register_tactic(cls):
    """Class decorator: instantiate the tactic and add it to the registry."""
    tactic = _adapt(cls)()
    assert tactic.kind and tactic.name, f"{cls.__name__} needs kind and name"
    bucket = _REGISTRY.setdefault((tactic.device, tactic.kind), [])
    if any(t.name == tactic.name for t in bucket):
        raise ValueError(f"tactic {tactic.device}:{tactic.kind}:{tactic.name} registered twice")
    bucket.append(tactic)
    return cls


def simple_tactic(kind: str, name: str = "numpy", device: str = "cpu", *, honours=(), precisions=("float32",),
                  formats=("linear",), writes_outputs=False) -> Callable:
    """Decorator turning `fn(op, inputs) -> list` into a registered single tactic for `kind`.
    writes_outputs: `fn(op, inputs, outputs)`, where `outputs` is None or the planned buffers to write into."""

    def wrap(fn):
        if writes_outputs:
            def run(self, op, inputs, outputs=None, workspace=None, stream=None):
                return fn(op, inputs, outputs)
            run._contract = True
        else:
            def run(self, op, inputs):
                return fn(op, inputs)
            # (run, the kernel it forwards to): the compiled plan calls the kernel in its place, one frame less a
            # layer; a wrapper that copies run's attributes (functools.wraps: a tactics module's guard) is not run
            run._kernel = (run, fn)
        cls = type(f"{kind}_{name}", (Tactic,), {"kind": kind, "name": name, "device": device,
                                                  "honours": frozenset(honours), "precisions": tuple(precisions),
                                                  "formats": tuple(formats), "writes_outputs": bool(writes_outputs),
                                                  "run": run, "__doc__": fn.__doc__})
        register_tactic(cls)
        return fn

    return wrap


def register_twins(source: str, base: type, prefix: str, *, keep=lambda tactic: True, **declared):
    """Register, on `base.device`, a twin of every tactic registered on `source` so far (idempotent): a subclass of
    `base` named `<prefix><name>` with `inner` = the source tactic and its kind, fused params and formats
    (`declared` adds or overrides class attributes, each a function of the source tactic). How a device wraps
    another's kernels: the CUDA host layers (CPU kernels run from the GPU) and the DLA's rounding around them."""
    for (device, kind), bucket in list(_REGISTRY.items()):
        if device != source:
            continue
        have = {t.name for t in _REGISTRY.get((base.device, kind), [])}
        for t in bucket:
            if f"{prefix}{t.name}" in have or not keep(t):
                continue
            attrs = {"kind": kind, "name": f"{prefix}{t.name}", "inner": t, "honours": t.honours,
                     "formats": t.formats, "__doc__": f"{source} tactic {t.name} as a {base.device} tactic"}
            attrs.update({k: f(t) for k, f in declared.items()})
            register_tactic(type(f"{base.__name__}_{kind}_{t.name}", (base,), attrs))


def register_variants(base: type, count: int, name: str, doc: str, **attrs):
    """Register `count` tactics that differ only by `index` (the i-th plan or algorithm a library offers for the
    layer, each timed as a tactic of its own): subclasses of `base` named `name.format(i=i)`, documented
    `doc.format(i=i)`, with `attrs` on each. How cuDNN's execution plans and cuBLASLt's heuristic algorithms are
    registered (register_twins wraps another device's tactics)."""
    for i in range(count):
        cls_name = f"{base.__name__.lstrip('_')}{attrs.get('kind', '')}{i}"
        register_tactic(type(cls_name, (base,), {**attrs, "name": name.format(i=i), "index": i,
                                                 "__doc__": doc.format(i=i)}))


def tactics_for(kind: str, device: str = "cpu") -> list[Tactic]:
    device = str(device)   # a Device or its name
    _load_kernels(device)
    return list(_REGISTRY.get((device, kind), []))


def all_tactic_names(device: str = "cpu") -> set:
    """Every tactic name registered for `device` (any layer kind)."""
    device = str(device)   # a Device or its name
    _load_kernels(device)
    return {t.name for (d, _), ts in _REGISTRY.items() if d == device for t in ts}


def precisions_for(kind: str, device: str = "cpu") -> set:
    """The compute precisions some tactic of `kind` declares on `device` (what a precision pass may assign)."""
    device = str(device)   # a Device or its name
    return {p for t in tactics_for(kind, device) for p in t.precisions}


def tactic_by_id(kind: str, tactic_id: int, device: str = "cpu") -> Tactic:
    device = str(device)   # a Device or its name
    for tactic in tactics_for(kind, device):
        if tactic.id == tactic_id:
            return tactic
    raise BuildError(f"no tactic with id {tactic_id} for layer kind '{kind}' on device '{device}'; "
                     f"known: {[(t.name, t.id) for t in tactics_for(kind, device)]}")


def registered_tactics(device: str = "cpu") -> list[Tactic]:
    """Every tactic registered for a device so far (without loading its kernels)."""
    device = str(device)   # a Device or its name
    return [t for (d, _), bucket in _REGISTRY.items() if d == device for t in bucket]


def registered_kinds(device: str = "cpu") -> list[str]:
    device = str(device)   # a Device or its name
    _load_kernels(device)
    return sorted(k for (d, k) in _REGISTRY if d == device)


_LOADED = set()


def _load_kernels(device):
    """Let the device register its tactics (Device.load_tactics), once per process."""
    device = str(device)   # a Device or its name
    if device in _LOADED:
        return
    _LOADED.add(device)
    from native.device import get_device
    try:
        get_device(device).load_tactics()
    except BaseException:
        _LOADED.discard(device)
        raise


def as_array(x, dtype=None):
    a = np.asarray(x)
    return a.astype(dtype) if dtype is not None and a.dtype != dtype else a
