"""CPU device: buffers are numpy arrays, execution is synchronous, timing is a wall clock.

It is also the reference device: constant and shape folding evaluate on it whatever device the engine targets.
"""
import time
import types

import numpy as np

from native.cpu import precision, threads
from native.device import Device
from native.errors import UsageError


class CpuDevice(Device):
    name = "cpu"
    # a CPU plan holds numpy arrays and tactic ids of numpy kernels: it runs wherever the architecture matches
    fingerprint_fields = ("device", "machine")
    fuses_bound_clip = True       # numpy's clip: NaN kept, the bound returned on ties, as maximum(t, c) / minimum
    norm_post_ops = True          # the LayerNorm kernels apply RELU / CLIP post-ops in their row pass
    fuses_squeeze_excite = True   # native/cpu/kernels/squeeze_excite.py: four tiny layers' dispatch and epilogues as one
    fuses_relu6_swish = True      # activations.py HARD_SWISH_RELU6: the hard-swish chain's floats as a conv post-op
    fuses_inverted_residual = True   # kernels/inverted_residual.py: 1x1 -> depthwise -> [SE] -> 1x1 channels-last inside
    merges_stft_convs = True      # conv1d-dft-shared: one FFT a frame for an STFT's cosine and sine rows
    # the Attention kernels read q, k, v as views of the projections (fused.split_heads) and merge the heads in
    # their one output copy: bert_mini's Split + 3 head-split + 2 merge Shuffles a block fold in (103 -> 79 layers,
    # the same floats: the views have the strides the Shuffles' did)
    attention_heads_as_strides = True
    fuses_residual_norm = True    # kernels/norm_residual.py: a residual Add and the LayerNorm after it as one layer

    @property
    def timing_block(self):
        """3 while the CPU pool is on: a tactic that splits over it is timed as the engine runs it, right after
        itself (one run a turn read the column-split GEMM 1.3-1.8x packed-gemm, its worker asleep again each turn,
        where the engine runs it at 0.8x). 1 without the pool: nothing carries over from run to run but the caches,
        which round-robin leaves as cold as the engine does (blocks made single-thread bert_mini 4% slower)."""
        return 3 if threads.num_threads() > 1 else 1

    # what one build may wait, in all, for the pool to stop backing off before its timed runs (`before_timed_run`):
    # on a quiet machine a few 20 ms back-offs (yolov8n: 0-3 waits, <= 0.06 s); on a loaded one they come every few
    # layers (180 waits in one build), and past this a build times as it comes (yolov8n's build: ~2.1 s warm-cached)
    TIMING_WAIT_S = 0.5

    def begin_build(self, notes=None):
        self._timing_wait_left = self.TIMING_WAIT_S
        self.timing_waited = []     # this build's waits (s), for tools/build_spread.py

    def before_timed_run(self) -> bool:
        """Before one of the builder's timed runs: while the pool backs off (a worker lately seen without a CPU:
        until then kernel shares and parallel_for run on the caller alone, threads._back_off, up to 0.25 s), wait
        it out, from the build's TIMING_WAIT_S, so a tactic that splits over the pool is timed split, as the engine
        runs it on a quiet machine. Without the wait, every candidate timed inside the window read its one-core time
        and the ones after it split: yolov8n's 1x1-gemm-shares read 0.10 or 0.26 ms from build to build, and builds
        took the single-thread 1x1-gemm (0.19) where it lost in the engine (h84). True when it waited (the worker
        has gone to sleep meanwhile: the next run wakes it, and is not one to score)."""
        if threads.num_threads() < 2:
            return False
        left = threads.back_off_left()
        budget = getattr(self, "_timing_wait_left", self.TIMING_WAIT_S)
        if left <= 0 or budget <= 0:
            return False
        wait = min(left, budget)
        self._timing_wait_left = budget - wait
        getattr(self, "timing_waited", []).append(wait)
        time.sleep(wait)
        return True

    def load_tactics(self):
        import native.cpu.kernels  # noqa: F401  (registers the CPU tactics)
        import native.dla.tactics  # noqa: F401  (DLA loadables and reformats are launched from the host)

    def allocate(self, nbytes: int):
        return np.empty(int(nbytes), dtype=np.uint8)

    def view(self, buffer, offset, shape, dtype):
        dtype = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        return buffer[offset:offset + n].view(dtype).reshape(shape)

    def output_buffer_reason(self, tactic, op):
        if op is not None and precision.needs_adapter(op):
            return "reduced-precision emulation allocates its outputs"
        return super().output_buffer_reason(tactic, op)

    def copy_to_device(self, host_array):
        return np.ascontiguousarray(host_array)

    def copy_to_host(self, buffer):
        return buffer

    def run(self, tactic, op, inputs, outputs=None, workspace=None, stream=None):
        """Run a tactic; a reduced-precision op through native/cpu/precision.py's emulation of GPU numerics."""
        return precision.run(tactic, op, inputs, outputs, workspace, stream)

    def prepare(self, tactic, op) -> dict:
        return precision.prepare(tactic, op)

    def data_inputs(self, kind: str, n_inputs: int):
        return precision.data_inputs(kind, n_inputs)

    def fp32_only_reason(self, kind: str) -> str:
        return precision.fp32_only_reason(kind)

    def bind(self, tactic, op=None):
        if op is not None and precision.needs_adapter(op):  # a reduced-precision layer: emulate its numerics
            def call(op, inputs, outputs=None, workspace=None, stream=None):
                return precision.run(tactic, op, inputs, outputs, workspace, stream)
            return call, True
        short = getattr(type(tactic), "_short_run", None)
        if short is not None and getattr(tactic.run, "_contract", False):
            return types.MethodType(short, tactic), False   # run(op, inputs): no adapter frame per call
        if getattr(tactic.run, "_contract", False):
            return tactic.run, True
        return tactic.run, False   # an unregistered object in the short style

    def tune_process(self) -> bool:
        from native.cpu import threads
        return threads.tune()

    def untune_process(self) -> bool:
        from native.cpu import threads
        return threads.untune()

    def check_stream(self, stream):
        if stream not in (None, 0):
            raise UsageError(f"the CPU device executes synchronously and has no streams; execute_async_v3 got "
                             f"stream={stream!r}: pass stream=None (or 0), or build the engine for a device with "
                             f"streams (cuda)")

    def fingerprint(self) -> dict:
        fp = super().fingerprint()
        fp["numpy"] = np.__version__
        return fp
