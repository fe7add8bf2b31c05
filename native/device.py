"""The device contract every backend device implements (CPU now; CUDA and DLA slot in beside it).

A device owns execution: it allocates buffers (the memory plan's arena and tactic workspaces), runs tactics
(`run(tactic, op, inputs, outputs, workspace, stream)`), times them for the builder (the CPU with a clock, CUDA
with events) and says which machine it is (`fingerprint`, recorded in every plan and checked on load).

A new device adds itself without touching the builder or the runtime: its package `native/<name>/` calls
`register_device("<name>", DeviceClass)` when imported, and its `load_tactics()` imports the modules that
register its tactics (native/tactics.py). `get_device(name)` imports `native.<name>` on first use.
"""
from __future__ import annotations

import importlib
import os
import platform
import time

import numpy as np

from native.errors import PlanError, UsageError
from native.precision import LADDER, Precision
from native.trace_clock import HostTraceClock


class Device:
    """allocate / run / time / synchronize, plus a fingerprint recorded in plans.

    Resolved once (`get_device`) and passed down: the builder config, the pass context, the runtime, the runners
    and the CLI hold the instance. What a device can do is declared by its class (the capabilities below), read
    as plain attributes; code outside native/<device>/ never compares device names."""

    name = "abstract"
    # capabilities ------------------------------------------------------------------------------------------
    precisions = frozenset(LADDER)  # the compute precisions its tactics may implement (tactics declare their own)
    formats = ("linear", "nhwc")  # tensor formats its tactics read and write
    prefers_nhwc = False          # the layout pass asks this (passes/layout.py)
    # True: the builder decides layout (NHWC regions) and precision per layer by timing the options on this device
    # (builder/timed_choice.py); False: the rules hold (the layout preference above, choose_precision below)
    chooses_by_timing = False
    host_memory = True            # tensors are numpy arrays in host memory (False: the runtime copies in and out)
    # the builder times each candidate in blocks of this many runs back to back, the first not scored
    # (tactic_selection.time_candidates); 1: one run per turn, the candidates alternating run by run
    timing_block = 1
    supports_graphs = False       # a whole execution can be captured and replayed (capture())
    has_timeline = False          # per-layer device timings of an execution (timeline())
    concurrent_contexts = True    # several execution contexts may run at once, one per host thread (bench --streams)
    concurrent_graphs = False     # captured executions replay at once on streams of their own (new_stream())
    merges_shortcut_convs = True  # fusion_shortcut.py merges a residual's 1x1 conv into its GEMM (a CPU GEMM win)
    # attention reads q, k, v as strided views of the [B, S, C] projections and writes [B, S, H*D]: the head
    # split / merge copies fold into the Attention layer (passes/attention_heads.py)
    attention_heads_as_strides = False
    fuses_gemm_residual = False   # a residual add after a GEMM becomes its post-op (passes/fusion_epilogue.py)
    fuses_residual_norm = False   # a residual add before a LayerNorm folds into it (passes/fusion_residual_norm.py)
    fuses_squeeze_excite = False  # pool → 1x1 conv → 1x1 conv → scale becomes one layer (passes/fusion_se.py)
    fuses_inverted_residual = False   # 1x1 → depthwise → [SE] → 1x1 becomes one layer (passes/fusion_ir.py)
    merges_stft_convs = False     # sibling STFT convolutions of one signal become one (passes/fusion_stft.py)
    # a convolution's hand-written hard-swish (x + 3, clip to [0, 6], times x, / 6) becomes its HARD_SWISH_RELU6
    # post-op, with the Pointwise chain's bits (passes/fusion_epilogue.py)
    fuses_relu6_swish = False
    # max / min with a one-element constant after a convolution becomes its CLIP post-op, with the ElementWise
    # layer's bits (passes/fusion_epilogue.py: the device's clip keeps NaN and returns the bound on ties)
    fuses_bound_clip = False
    norm_post_ops = False         # a LAYER Normalization carries a following RELU / CLIP as its post-op
    int8_rounding = "half_even"   # how FP32 -> INT8 rounds ties (passes/int8.py)
    calibrates_on = None          # the device name INT8 calibration runs on (None: this one)
    # fingerprint fields that must match for a plan built elsewhere to run here (see check_fingerprint)
    fingerprint_fields = ("device", "machine")

    def __str__(self):
        return self.name

    def __repr__(self):   # as the name's repr: messages and generated code that showed the name keep working
        return repr(self.name)

    def __reduce__(self):   # a worker process unpickles the same registered instance (get_device), not a copy
        return (get_device, (self.name,))

    # tactics ---------------------------------------------------------------------------------------------
    def load_tactics(self):
        """Import the modules that register this device's tactics."""

    # memory ----------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int):
        raise NotImplementedError

    def view(self, buffer, offset: int, shape, dtype):
        """A tensor of `shape`/`dtype` at byte `offset` of an allocation (the memory plan's arena)."""
        raise NotImplementedError

    def may_alias(self, a, b) -> bool:
        """Whether tensors `a` and `b` may share memory (the arena planner extends a tensor's lifetime over the
        views other layers take of it). Host arrays: numpy's bounds check; a device whose tactics write into arena
        views of its own buffers must override it (a missed alias lets a later tensor overwrite a live view)."""
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and bool(np.may_share_memory(a, b))

    def duplicate(self, value):
        """A copy of `value` in memory of its own (the arena detaches taps and outputs with it)."""
        return value.copy() if isinstance(value, np.ndarray) else value

    def output_buffer_reason(self, tactic, op) -> str | None:
        """None when the interpreter may hand `tactic` planned arena views as `outputs` for `op`; else why the
        layer allocates its own outputs (the arena's verbose log and the inspector say it)."""
        if not tactic.writes_outputs:
            return "tactic allocates its outputs"
        if type(self).view is Device.view:
            return f"device '{self.name}' has no arena views (Device.view)"
        return None

    def copy_to_device(self, host_array):
        raise NotImplementedError

    def copy_to_host(self, buffer):
        raise NotImplementedError

    # execution -------------------------------------------------------------------------------------------
    def run(self, tactic, op, inputs, outputs=None, workspace=None, stream=None) -> list:
        """Run one tactic; returns its output tensors."""
        return call_tactic(tactic, op, inputs, outputs, workspace, stream)

    def bind(self, tactic, op=None):
        """How the interpreter calls `tactic` here: (fn, full). full: `fn(op, inputs, outputs, workspace, stream)`;
        not full: `fn(op, inputs)` (a tactic that needs none of the three). Bound once per layer at load, so the
        per-call path is as short as the device can make it; the default goes through `run`. `op`, when given, is
        the layer it is bound for (its precision may need another path)."""
        def call(op, inputs, outputs=None, workspace=None, stream=None):
            return self.run(tactic, op, inputs, outputs, workspace, stream)
        return call, True

    def timeline(self):
        """A timeline of one execution's device phases (a device that declares `has_timeline`)."""
        raise UsageError(f"device '{self.name}' keeps no device timeline")

    def trace_clock(self):
        """The clock a timeline of executions is recorded with (native/trace_clock.py): host marks by default, as
        a device that computes synchronously runs work exactly when the host does it."""
        return HostTraceClock()

    def capture(self, run, host_feeds, output_names):
        """A captured whole execution to replay (a device that declares `supports_graphs`)."""
        raise UsageError(f"device '{self.name}' cannot capture an execution as a graph")

    def check_stream(self, stream):
        """Validate a user-supplied stream for execute_async_v3; raise UsageError if this device cannot use it."""
        if stream is not None:
            raise UsageError(f"device '{self.name}' has no streams; pass stream=None")

    def synchronize(self, stream=None):
        pass

    def new_stream(self):
        """A stream of its own for replaying a captured execution beside others (a device that declares
        `concurrent_graphs`)."""
        raise UsageError(f"device '{self.name}' has no streams")

    def time(self, fn, stream=None) -> float:
        """Milliseconds one call of `fn()` takes on this device (the builder's tactic timing)."""
        t0 = time.perf_counter()
        fn()
        self.synchronize(stream)
        return (time.perf_counter() - t0) * 1e3

    def warm_up(self):
        """Start, beside what the caller does next, what this process's first build will need (the CUDA device: its
        context, and its kernel sources compiling in background threads). A search calls it before its reference
        run; nothing else depends on it."""

    def begin_build(self, notes=None):
        """A build for this device starts (builder.build_graph): start work the build will need that can run beside
        it (the CUDA device compiles its kernel sources in background threads), and take `notes`, the build_notes()
        of an earlier build kept in its timing cache. Loading a plan never calls it."""

    def end_build(self):
        """The build begin_build announced has ended (or failed): undo what begin_build set for it."""

    def build_notes(self) -> dict:
        """What builds in this process learnt about this device that a later build can reuse, JSON-able (the timing
        cache file keeps it beside the timings: the CUDA device's cuDNN plans that do not build); {}: nothing."""
        return {}

    # process-wide tuning (explicit and reversible; never a side effect of loading an engine) ---------------
    def tune_process(self) -> bool:
        """Apply the process-wide settings this device runs fastest with; True when something changed."""
        return False

    def untune_process(self) -> bool:
        """Undo tune_process()."""
        return False

    # identity --------------------------------------------------------------------------------------------
    def available(self) -> bool:
        return True

    def plan_extras(self) -> dict:
        """Device data a plan carries beside the layers (CUDA: the compiled kernels), JSON-able; {} for none."""
        return {}

    def load_plan_extras(self, extras: dict):
        """Take back what plan_extras() stored (called when an engine is loaded)."""

    def preferred(self, tactics: list) -> list:
        """Of the tactics that ran in timing, those the device chooses among (all, by default). A device with its
        own memory ranks host layers below any of its own kernels that ran: a host layer synchronizes the stream
        and breaks graph capture, costs that timing one layer alone does not show."""
        return tactics

    def prepare(self, tactic, op) -> dict:
        """Pre-pack the op's weights for `tactic` at build time (in the op's precision)."""
        return tactic.prepare(op)

    # Which precision a layer runs in. The one place that decides it: the builder's precision pass asks here.
    def choose_precision(self, kind: str, implemented, enabled) -> Precision:
        """The precision a layer of `kind` runs in, given the precisions its tactics implement and those the
        builder flags enable (a constraint, when there is one, is applied by the caller).

        The rule (a model of a GPU builder's choice; a device with `chooses_by_timing` times the options instead,
        builder/timed_choice.py, and uses this only where timing cannot run): every
        layer that has an implementation in an enabled reduced precision runs in the lowest such precision of
        int8 < fp8 < float16 < bfloat16; a layer with none runs in the next precision up, float32 at the top.
        """
        for p in LADDER:
            if p in implemented and (p in enabled or p is Precision.FP32):
                return p
        return Precision.FP32

    def data_inputs(self, kind: str, n_inputs: int):
        """Indices of the inputs of a `kind` layer that carry float data in its compute precision (the others are
        shapes, indices or parameters that keep their type)."""
        return range(n_inputs)

    def fp32_only_reason(self, kind: str) -> str:
        """Why layers of `kind` have no reduced-precision implementation on this device (for the verbose log)."""
        return f"no reduced-precision implementation on device '{self.name}'"

    # INT8 calibration statistics (backends/engine/calibration/histogram.py) of a tensor of this device: a device
    # with its own memory computes them there instead of downloading every activation of every batch
    def abs_max(self, x):
        """The largest |x| of a float tensor (NaN or inf where it has one: the batch then adds nothing)."""
        return float(np.max(np.abs(np.asarray(x))))

    def abs_histogram(self, x, amax: float, bins: int) -> np.ndarray:
        """Counts of the finite non-zero |x| in `bins` bins over [0, amax] (the last takes everything above)."""
        a = np.abs(np.asarray(x).astype(np.float32, copy=False).ravel())
        a = a[np.isfinite(a) & (a != 0)]
        return np.bincount(np.minimum((a * (bins / amax)).astype(np.int64), bins - 1), minlength=bins)

    def fingerprint(self) -> dict:
        return {"device": self.name, "machine": platform.machine()}

    def check_fingerprint(self, recorded: dict) -> str | None:
        """None when a plan whose header recorded `recorded` runs correctly here, else what differs."""
        here = self.fingerprint()
        diffs = [f"{k}: plan {recorded.get(k)!r}, here {here.get(k)!r}"
                 for k in self.fingerprint_fields if k in recorded and recorded.get(k) != here.get(k)]
        return "; ".join(diffs) or None


def call_tactic(tactic, op, inputs, outputs=None, workspace=None, stream=None):
    """tactic.run with the full contract, or run(op, inputs) for an unregistered object in the short style."""
    if getattr(tactic.run, "_contract", False):
        return tactic.run(op, inputs, outputs, workspace, stream)
    return tactic.run(op, inputs)


_DEVICES: dict[str, type] = {}
_INSTANCES: dict[str, Device] = {}


def register_device(name: str, cls: type):
    """Called by a device package when it is imported: makes `get_device(name)` return an instance of `cls`."""
    _DEVICES[name] = cls
    _INSTANCES.pop(name, None)


def registered_devices() -> list[str]:
    return sorted(_DEVICES)


def get_device(name) -> Device:
    """The device called `name` (a Device passes through), importing its package `native.<name>` on first use."""
    if isinstance(name, Device):
        return name
    if name in _INSTANCES:
        return _INSTANCES[name]
    if name not in _DEVICES and isinstance(name, str) and name.isidentifier():
        try:
            importlib.import_module(f"native.{name}")
        except ModuleNotFoundError as e:
            if e.name not in (f"native.{name}",):
                raise
    if name not in _DEVICES:
        here = os.path.dirname(os.path.abspath(__file__))
        known = sorted(set(_DEVICES) | {d for d in os.listdir(here)
                                        if os.path.exists(os.path.join(here, d, "device.py"))})
        raise UsageError(f"device '{name}' is not available in this installation (registered devices: "
                         f"{', '.join(known)}); a device registers itself from its package native/<name>/")
    dev = _DEVICES[name]()
    _INSTANCES[name] = dev
    return dev


def device_for_plan(name: str) -> Device:
    """The device a plan names, as a PlanError when it cannot run here."""
    try:
        dev = get_device(name)
    except UsageError as e:
        raise PlanError(f"plan was built for device '{name}', which is not available here ({e}); rebuild for the "
                        f"CPU or run on a machine with that device") from None
    if not dev.available():
        raise PlanError(f"plan was built for device '{name}', but no {name} device is available here; rebuild "
                        f"for the CPU or run on a machine with that device")
    return dev
