"""BuilderConfig and its parts: flags, optimization profiles, memory pools, timing cache, algorithm selector."""
from __future__ import annotations

import enum
import json

from backends.engine.builder.device_types import DeviceType, DeviceTypeMixin, EngineCapability  # noqa: F401
from backends.engine.profile import OptimizationProfile  # noqa: F401  (the runtime's too: engine-level)
from native.device import Device, get_device
from native.errors import PlanError, UsageError
from native.precision import enabled_by_flags


class BuilderFlag(enum.Enum):
    FP16 = "fp16"
    BF16 = "bf16"
    INT8 = "int8"
    TF32 = "tf32"
    FP8 = "fp8"            # E4M3 for conv/matmul, FP16 (its companion) for every other layer
    REFIT = "refit"
    SPARSE_WEIGHTS = "sparse_weights"
    GPU_FALLBACK = "gpu_fallback"
    DIRECT_IO = "direct_io"
    PREFER_PRECISION_CONSTRAINTS = "prefer_precision_constraints"
    OBEY_PRECISION_CONSTRAINTS = "obey_precision_constraints"
    REJECT_EMPTY_ALGORITHMS = "reject_empty_algorithms"
    DISABLE_TIMING_CACHE = "disable_timing_cache"
    ENABLE_TACTIC_HEURISTIC = "enable_tactic_heuristic"
    DISABLE_FUSION = "disable_fusion"          # ours: keep every layer as parsed
    DISABLE_LAYOUT = "disable_layout"          # ours: no NCHW→NHWC pass
    DISABLE_CONSTANT_FOLDING = "disable_constant_folding"
    REDUCED_PROBABILITY_OUTPUTS = "reduced_probability_outputs"  # ours: no FP32 rule for probability outputs


# flags accepted by name (TensorRT has them) but not implemented: setting one raises instead of being ignored.
# An issue that implements a flag removes it here.
NOT_IMPLEMENTED_FLAGS = {
    BuilderFlag.REFIT: "refittable engines (weights swapped in a built plan) are not implemented; rebuild the "
                       "engine from the updated ONNX model instead",
    BuilderFlag.SPARSE_WEIGHTS: "structured-sparsity tactics are not implemented on any device; build without it "
                                "(the dense tactics run)",
}


class MemoryPoolType(enum.Enum):
    WORKSPACE = "workspace"
    DLA_MANAGED_SRAM = "dla_managed_sram"
    DLA_LOCAL_DRAM = "dla_local_dram"
    DLA_GLOBAL_DRAM = "dla_global_dram"


class ProfilingVerbosity(enum.Enum):
    LAYER_NAMES_ONLY = "layer_names_only"
    DETAILED = "detailed"
    NONE = "none"


class TimingCache:
    """Tactic timings keyed by (device, layer kind, params, input shapes and dtypes); serialisable as JSON."""

    FORMAT = "debugkit-timing-cache/1"

    def __init__(self, entries=None):
        self.entries: dict[str, dict] = dict(entries or {})
        self.prepared = None   # tactic preparations reused across builds (builder/prep_cache.py)
        self.selections = None   # per-layer tactic selection reused across builds (builder/selection_memo.py)
        self.device_notes = {}   # what builds learnt about the device (Device.build_notes): kept in the file
        # (i, n): this process times only the variants in share i of n (in_share), the others left to other workers
        # (a search's base build spread over its GPU workers: debug/precision.py TimingShare); None: time all
        self.share = None
        # a TimingExchange shared with another process building at the same time (builder/timing_exchange.py):
        # a miss looks there before anything is timed, and what is timed here goes there too; None: off
        self.exchange = None
        self.hits = 0
        self.misses = 0

    def get(self, key):
        v = self.entries.get(key)
        if v is None and self.exchange is not None:
            v = self.exchange.get(key)
            if v is not None:
                self.entries[key] = v
        if v is None:
            self.misses += 1
        else:
            self.hits += 1
        return v

    def put(self, key, timings: dict):
        self.entries[key] = timings
        if self.exchange is not None:
            self.exchange.put(key, timings)

    def serialize(self) -> bytes:
        return json.dumps({"format": self.FORMAT, "entries": self.entries}, sort_keys=True).encode()

    @classmethod
    def deserialize(cls, data: bytes):
        try:
            d = json.loads(bytes(data).decode())
            if d.get("format") != cls.FORMAT:
                raise ValueError(f"format {d.get('format')!r}")
        except Exception as e:
            raise PlanError(f"not a debugkit timing cache ({e})") from None
        return cls(d["entries"])

    def combine(self, other: "TimingCache"):
        self.entries.update(other.entries)


class AlgorithmSelector:
    """TensorRT's IAlgorithmSelector: `select_algorithms(context, choices)` returns the indices to consider;
    `report_algorithms(contexts, choices)` receives the final pick per layer. Override either."""

    def select_algorithms(self, context: dict, choices: list) -> list:
        return list(range(len(choices)))

    def report_algorithms(self, contexts: list, choices: list):
        pass


class BuilderConfig(DeviceTypeMixin):
    def __init__(self):
        # TF32 is opt-in here (TensorRT sets it by default on tensor-core GPUs): with it, FP32 conv/matmul differ
        # from the framework by ~1e-3, and an FP32 build should compare as FP32 (Polygraphy's default too)
        self.flags: set[BuilderFlag] = set()
        self.profiles: list[OptimizationProfile] = []
        self.memory_pool_limits: dict[MemoryPoolType, int] = {}
        self._profiling_verbosity = ProfilingVerbosity.DETAILED
        self.avg_timing_iterations = 4
        self.timing_cache: TimingCache | None = None
        self.algorithm_selector: AlgorithmSelector | None = None
        self.int8_calibrator = None
        self.calibration_profile: OptimizationProfile | None = None   # shapes of the calibration batches
        self.device = "cpu"           # resolved to a native Device (the property below)
        self.default_device_type = DeviceType.GPU
        self.tactic_sources: set | None = None   # tactic names allowed; None means all
        self.prefer_nhwc: bool | None = None     # an order to the layout pass (None: the device decides)
        self.builder_optimization_level = 3
        # False: on a device that chooses precision by timing, every layer gets the device's rule instead (the
        # lowest enabled precision it implements), never a faster higher one: a precision search sets it so its
        # answer does not hang on which precision happened to be faster (debugkit/debug/precision.py)
        self.precision_by_timing = True
        # per-layer constraints by name, applied after lowering (builder/precision_spec.py): [(pattern, value)]
        self.layer_precisions: list = []
        self.layer_output_types: list = []
        self._qdq_emulation = None
        # the hash of the command-line options this config was made from (debugkit/options.py), recorded in the plan
        # so a plan says which options built it; None for configs made through the API
        self.options_fingerprint: str | None = None
        # False: this build neither copies from nor adds to the timing cache's per-layer selection memo
        # (builder/selection_memo.py): a one-off build whose layers no later build repeats (a precision search's
        # layers-alone engine, every layer renamed apart) would only pay for keys nobody reads. Not in the plan:
        # the choices are the same either way
        self.reuse_selections = True

    @property
    def device(self) -> Device:
        """The target device, resolved once: assign a name ("cuda") or a Device; reading gives the Device."""
        return self._device

    @device.setter
    def device(self, value):
        self._device = get_device(value or "cpu")

    def enabled_precisions(self) -> frozenset:
        """The reduced precisions the flags enable (FP16, BF16, FP8 with FP16 as its companion, INT8): every
        pass asks here."""
        return enabled_by_flags(f.value for f in self.flags)

    @property
    def qdq_emulation(self):
        """None (TensorRT's explicit quantization: every Q/DQ group that can be INT8 is) or "onnxruntime-x86": run
        a Q/DQ model as ONNX Runtime's x86-64 CPU EP does, for bit-for-bit comparisons with it
        (builder/passes/qdq_onnxruntime.py)."""
        return self._qdq_emulation

    @qdq_emulation.setter
    def qdq_emulation(self, value):
        if value not in (None, "onnxruntime-x86"):
            raise UsageError(f"qdq_emulation {value!r} is unknown; use None (TensorRT's Q/DQ fusion) or "
                             f"'onnxruntime-x86'")
        self._qdq_emulation = value

    @property
    def profiling_verbosity(self) -> ProfilingVerbosity:
        """What the engine inspector reports per layer. Only DETAILED is implemented (every plan records each
        layer's kind, tactic, precision, format and shapes); asking for less raises rather than being ignored."""
        return self._profiling_verbosity

    @profiling_verbosity.setter
    def profiling_verbosity(self, value):
        value = ProfilingVerbosity(value)
        if value is not ProfilingVerbosity.DETAILED:
            raise UsageError(f"profiling_verbosity {value.name} is not implemented: plans always record DETAILED "
                             f"layer information (the inspector reports it); leave the default")
        self._profiling_verbosity = value

    # flags
    def set_flag(self, flag: BuilderFlag):
        flag = BuilderFlag(flag)
        if flag in NOT_IMPLEMENTED_FLAGS:
            raise UsageError(f"BuilderFlag.{flag.name} is not implemented: {NOT_IMPLEMENTED_FLAGS[flag]}")
        self.flags.add(flag)

    def clear_flag(self, flag: BuilderFlag):
        self.flags.discard(BuilderFlag(flag))

    def get_flag(self, flag: BuilderFlag) -> bool:
        return BuilderFlag(flag) in self.flags

    # profiles and pools
    def add_optimization_profile(self, profile: OptimizationProfile) -> int:
        self.profiles.append(profile)
        return len(self.profiles) - 1

    def set_memory_pool_limit(self, pool: MemoryPoolType, nbytes: int):
        if nbytes < 0:
            raise UsageError(f"memory pool limit for {pool} must be >= 0, got {nbytes}")
        self.memory_pool_limits[MemoryPoolType(pool)] = int(nbytes)

    def get_memory_pool_limit(self, pool: MemoryPoolType):
        return self.memory_pool_limits.get(MemoryPoolType(pool))

    def set_calibration_profile(self, profile: OptimizationProfile) -> bool:
        """The profile calibration batches must fit (dynamic shapes); the first profile when unset."""
        self.calibration_profile = profile
        return True

    def get_calibration_profile(self):
        return self.calibration_profile

    def create_timing_cache(self, data: bytes = b"") -> TimingCache:
        return TimingCache.deserialize(data) if data else TimingCache()

    def set_timing_cache(self, cache: TimingCache, ignore_mismatch=False):
        self.timing_cache = cache

    def get_timing_cache(self):
        return self.timing_cache

    def to_json(self) -> dict:
        return {"flags": sorted(f.value for f in self.flags), "profiles": [p.to_json() for p in self.profiles],
                "memory_pool_limits": {k.value: v for k, v in self.memory_pool_limits.items()},
                "profiling_verbosity": self.profiling_verbosity.value,
                "avg_timing_iterations": self.avg_timing_iterations, "device": self.device.name,
                "tactic_sources": sorted(self.tactic_sources) if self.tactic_sources is not None else None,
                "layer_precisions": [list(p) for p in self.layer_precisions],
                "layer_output_types": [[k, list(v)] for k, v in self.layer_output_types],
                **({"dla": self.device_types_json()} if self.uses_dla() else {}),
                **({"options_fingerprint": self.options_fingerprint} if self.options_fingerprint else {}),
                **({} if self.precision_by_timing else {"precision_by_timing": False})}
