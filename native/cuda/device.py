"""The CUDA device: tensors are GpuArrays in device memory, tactics run on one stream, the builder times them
with CUDA events. Layers without a GPU kernel run as explicit host layers (tactics/host.py)."""
from __future__ import annotations

import platform

import numpy as np

from native.cuda import calibration
from native.cuda.array import GpuArray, to_device, to_host
from native.cuda.availability import available
from native.cuda.driver import EventTraceClock, Timeline, context
from native.cuda.nvrtc import kernel, launch
from native.device import Device
from native.errors import ExecutionError, UsageError
from native.tactics import TacticRefusal


# How long the GPU is held busy before a timed run (CudaDevice.time): longer than the host takes to enqueue a
# tactic's kernels (cuDNN plans and cuBLASLt GEMMs: 0.1-0.3 ms of Python), so the start event fires after they are
# queued. A tactic whose host work is longer (per-batch-item launch loops) is timed with the rest of its host time.
TIMING_HOLD_MS = 0.5


def hold(ms: float):
    """Keep the GPU busy for `ms` milliseconds (tensor.cu's hold_ns: one thread spinning on the global timer),
    enqueued on the context's stream."""
    launch(kernel("tensor.cu", "hold_ns"), (1, 1, 1), (1, 1, 1), [np.uint64(int(ms * 1e6))])


class CudaDevice(Device):
    name = "cuda"
    fingerprint_fields = ("device", "arch")
    host_memory = False
    prefers_nhwc = True          # the layout pass runs convolution regions channels-last (cuDNN's fast path)
    chooses_by_timing = True     # NHWC regions and per-layer precision by timing (builder/timed_choice.py)
    fuses_gemm_residual = True   # cuBLASLt adds a residual as its C (beta = 1): no add kernel after the GEMM
    attention_heads_as_strides = True   # cuDNN's SDPA reads the strides (cublas-softmax copies the heads itself)
    merges_shortcut_convs = False  # cuDNN fuses the residual add instead (fusion_shortcut.py's merge is CPU GEMM)
    supports_graphs = True
    has_timeline = True
    # one stream per process (driver.Context): contexts on host threads would share it and its staging buffer;
    # captured graphs replay on streams of their own instead (bench --streams N --use-cuda-graph)
    concurrent_contexts = False
    concurrent_graphs = True

    def available(self) -> bool:
        return available()

    def load_tactics(self):
        from native.tactics import tactics_for
        tactics_for("Convolution", "cpu")      # the CPU kernels first: the host layers wrap them
        import native.cuda.tactics.cudnn_conv  # noqa: F401  (first: the default pick of an untimed build)
        import native.cuda.tactics.conv  # noqa: F401
        import native.cuda.tactics.gemm  # noqa: F401
        import native.cuda.tactics.attention  # noqa: F401  (cuDNN SDPA first: the untimed FP16/BF16 pick)
        import native.cuda.tactics.gemm_lt  # noqa: F401
        import native.cuda.tactics.conv_lt  # noqa: F401  (after cudnn_conv: cuDNN stays the untimed pick)
        import native.cuda.tactics.int8  # noqa: F401
        import native.cuda.tactics.control  # noqa: F401
        import native.cuda.tactics.rnn  # noqa: F401
        import native.cuda.tactics.signal  # noqa: F401
        import native.cuda.tactics.norm  # noqa: F401
        import native.cuda.tactics.pooling  # noqa: F401
        import native.cuda.tactics.pointwise  # noqa: F401
        import native.cuda.tactics.tensor  # noqa: F401
        import native.cuda.tactics.index  # noqa: F401  (after tensor.py: its Gather is the untimed default)
        import native.cuda.tactics.reduce  # noqa: F401
        import native.cuda.tactics.elementwise  # noqa: F401  (after pointwise.py and tensor.py, as above)
        import native.cuda.tactics.plugins  # noqa: F401
        import native.cuda.tactics.geometry  # noqa: F401
        import native.cuda.tactics.resize  # noqa: F401
        import native.cuda.tactics.deconv  # noqa: F401
        import native.cuda.tactics.channel  # noqa: F401
        import native.cuda.tactics.einsum  # noqa: F401
        import native.cuda.tactics.quantize  # noqa: F401
        import native.cuda.tactics.cudnn_int8  # noqa: F401  (INT8 NHWC with int8 I/O: passes/int8_io.py)
        import native.cuda.tactics.conv_i8  # noqa: F401  (the same, our implicit-GEMM kernel)
        import native.cuda.tactics.conv_i8t  # noqa: F401  (the same, fed by the TMA)
        from native.cuda.tactics.host import wrap_cpu_tactics
        wrap_cpu_tactics()

    # INT8 calibration statistics, reduced on the device (native/cuda/calibration.py) ---------------------------
    def abs_max(self, x):
        if isinstance(x, GpuArray) and x.dtype == np.float32:
            return calibration.abs_max(x)
        return super().abs_max(to_host(x))

    def abs_histogram(self, x, amax, bins):
        if isinstance(x, GpuArray) and x.dtype == np.float32 and bins <= 4096:
            return calibration.abs_histogram(x, amax, bins)
        return super().abs_histogram(to_host(x), amax, bins)

    # memory -----------------------------------------------------------------------------------------------------
    def allocate(self, nbytes: int):
        return GpuArray((int(nbytes),), "uint8")

    def view(self, buffer, offset, shape, dtype):
        return GpuArray(shape, dtype, buffer.ptr + int(offset), base=buffer)

    def may_alias(self, a, b) -> bool:
        """Device buffers share memory when their byte ranges overlap (views keep their base's pointer)."""
        if not (isinstance(a, GpuArray) and isinstance(b, GpuArray)) or not a.nbytes or not b.nbytes:
            return False
        return a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes

    def duplicate(self, value):
        """A copy of a device tensor in its own memory (a tap must outlive its arena slot)."""
        if not isinstance(value, GpuArray):
            return super().duplicate(value)
        out = GpuArray(value.shape, value.dtype)
        context().copy(out.ptr, value.ptr, value.nbytes)
        return out

    def copy_to_device(self, host_array):
        return to_device(host_array)

    def copy_to_host(self, buffer):
        return to_host(buffer)

    # execution --------------------------------------------------------------------------------------------------
    def bind(self, tactic, op=None):
        """The tactic's run, with a refusal made an engine bug: the builder filtered the candidates by everything
        the runtime sees (tactic_selection: supports() and the timing run), so a GPU tactic that refuses its inputs
        here (TacticRefusal) raises an ExecutionError naming the layer and the tactic; nothing else runs instead."""
        if tactic.host_layer or tactic.device != "cuda":
            return tactic.run, True

        def run(op, inputs, outputs=None, workspace=None, stream=None):
            try:
                return tactic.run(op, inputs, outputs, workspace, stream)
            except TacticRefusal as e:
                raise ExecutionError(f"layer '{op.name}': tactic {tactic.name} refused its inputs at run time "
                                     f"({e}); the builder chose it, so this is an engine bug: rebuild with "
                                     f"--tactic-sources excluding {tactic.name} to work around it, and report "
                                     f"the layer") from e
        return run, True

    def warm_up(self):
        from native.cuda import nvrtc
        try:
            nvrtc.precompile(context().arch)
        except Exception:      # no usable GPU: the build says so where it first needs one
            pass

    def begin_build(self, notes=None):
        """The kernel sources (tactics/*.cu) compile in background threads while the build's first passes run
        (nvrtc.precompile): a cold build otherwise compiles them one after another as layers reach them. `notes`
        (build_notes() from the timing cache): the cuDNN plans known not to build are not tried."""
        from native.cuda import nvrtc
        from native.cuda.tactics import cudnn_conv
        cudnn_conv.bound_builds(True)     # a build: cuDNN plan builds bounded (cudnn_conv.FAMILY_FAILURES)
        if isinstance(notes, dict) and notes.get("cudnn_failed_plans"):
            cudnn_conv.remember_failed_plans(notes["cudnn_failed_plans"])
        if isinstance(notes, dict) and notes.get("cudnn_compile_seconds"):
            cudnn_conv.remember_compile_costs(notes["cudnn_compile_seconds"])
        if isinstance(notes, dict) and notes.get("cudnn_graphs"):
            cudnn_conv.remember_graphs(notes["cudnn_graphs"])
        try:
            arch = context().arch
        except Exception:      # no usable GPU: the build says so where it first needs one, as before
            return
        nvrtc.precompile(arch)

    def end_build(self):
        import sys
        conv = sys.modules.get("native.cuda.tactics.cudnn_conv")
        if conv is not None:
            conv.bound_builds(False)

    def build_notes(self) -> dict:
        import sys
        conv = sys.modules.get("native.cuda.tactics.cudnn_conv")     # (not imported: no convolution was built)
        failed = conv.failed_plans() if conv is not None else {}
        costs = conv.compile_costs() if conv is not None else {}
        graphs = conv.graph_notes() if conv is not None else {}
        return dict({"cudnn_failed_plans": failed} if failed else {},
                    **({"cudnn_compile_seconds": costs} if costs else {}),
                    **({"cudnn_graphs": graphs} if graphs else {}))

    def synchronize(self, stream=None):
        if stream is None:
            context().synchronize()
        else:
            context().synchronize_stream(stream)

    def new_stream(self):
        return context().new_stream()

    def plan_extras(self) -> dict:
        """The cubins NVRTC compiled in this process for this GPU's architecture: a loaded plan compiles nothing."""
        import base64

        from native.cuda import nvrtc
        arch = context().arch
        mods = nvrtc.cubins(arch)
        return {"cubins": {"arch": arch, "modules": {k: base64.b64encode(v).decode() for k, v in mods.items()}}} \
            if mods else {}

    def load_plan_extras(self, extras: dict):
        import base64
        import binascii

        from native.cuda import nvrtc
        from native.errors import PlanError
        c = extras.get("cubins") if isinstance(extras, dict) else None
        if c is None:
            return
        if not isinstance(c, dict) or not isinstance(c.get("arch"), str) or not isinstance(c.get("modules"), dict) \
                or not all(isinstance(k, str) and isinstance(v, str) for k, v in c["modules"].items()):
            raise PlanError("plan header 'device_extras.cubins' must be {arch: str, modules: {sha1: base64 str}}")
        try:
            table = {k: base64.b64decode(v, validate=True) for k, v in c["modules"].items()}
        except binascii.Error as e:
            raise PlanError(f"plan header 'device_extras.cubins.modules' holds invalid base64: {e}") from None
        nvrtc.preload(c["arch"], table)

    def preferred(self, tactics):
        return [t for t in tactics if not t.host_layer]

    def timeline(self):
        return Timeline(context())

    def trace_clock(self):
        return EventTraceClock(context())

    def capture(self, run, host_feeds, output_names):
        from native.cuda.graph import CapturedGraph
        return CapturedGraph(run, host_feeds, output_names)

    def time(self, fn, stream=None) -> float:
        """Milliseconds of the GPU's work for fn(), from events around it, the GPU held busy (hold()) while the
        host enqueues it: the events time the kernels, not the host's Python between them (a cuDNN plan's 26 us
        kernel timed 0.15-0.31 ms without it, and plans were chosen by their host overhead)."""
        hold(TIMING_HOLD_MS)
        return context().time_ms(fn)

    def check_stream(self, stream):
        if stream is not None:
            raise UsageError("the CUDA device runs on its own stream; user streams for execute_async_v3 are not "
                             "implemented yet: pass stream=None")

    # precision: host layers compute with the CPU's numerics emulation, so the CPU's answers hold -----------------
    def data_inputs(self, kind, n_inputs):
        from native.device import get_device
        return get_device("cpu").data_inputs(kind, n_inputs)

    def fp32_only_reason(self, kind):
        from native.device import get_device
        return get_device("cpu").fp32_only_reason(kind)

    def fingerprint(self) -> dict:
        ctx = context()
        return {"device": self.name, "machine": platform.machine(), "arch": ctx.arch, "gpu": ctx.name}
