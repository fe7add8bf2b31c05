"""A seeded, bounded mutational fuzzer for the ONNX front door and the plan loader.

Targets:
    onnx-bytes       serialized seed models with bytes flipped, inserted, deleted, duplicated or truncated
    onnx-structure   seed models with one to three structural mutations: attribute values and lengths, tensor
                     dims and data types, op types, node inputs, value_info shapes, opsets, nodes dropped
    plan-bytes       plans built from the seeds with bytes mutated (checksums recomputed on half of the cases, so
                     the mutants reach the header parser instead of stopping at the CRC)
    plan-structure   plan headers with one to three leaf or container mutations, repacked with valid checksums

Each case runs the whole pipeline it feeds (ONNX: load + validate + parse + build + load the plan + execute; plan:
load + execute) in a worker process under RLIMIT_AS, with a per-case time limit: a crash (signal), a hang or a
runaway allocation is counted and the worker replaced, never fatal. Outcomes:
    ok / rejected (a DebugkitError subclass: the expected answer to bad input) /
    bug (any other exception: file:line and type) / crash (the worker died: a signal) /
    hang (past the RLIMIT_CPU backstop, 3x the case limit, or the wall limit, 6x and at least 60 s) /
    slow (over the case limit in CPU seconds of the worker: wall time on a shared machine counts other processes).
Cases are a pure function of (target, seed, index) (plan cases: given the seed plans, which this process builds),
so every finding can be regenerated; --save keeps the exact bytes.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import json
import multiprocessing as mp
import os
import random
import signal
import sys
import tempfile
import time
import traceback
import zlib

TARGETS = ("onnx-bytes", "onnx-structure", "plan-bytes", "plan-structure", "hdf5-structure")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

INTERESTING_INTS = [0, 1, -1, 2, -2, 3, 7, 64, 255, 256, 1023, 2 ** 15, 2 ** 16, 2 ** 31 - 1, -2 ** 31, 2 ** 32,
                    2 ** 62, -2 ** 63, 2 ** 63 - 1]
INTERESTING_FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, float("inf"), float("-inf"), float("nan"), 0.5]


# ---------------------------------------------------------------------------------------------------------------
# case generation (in the parent; pure functions of the rng)

def _mutate_bytes(data: bytes, rng: random.Random, n=None) -> bytes:
    b = bytearray(data)
    for _ in range(n or rng.randint(1, 4)):
        if not b:
            b = bytearray(rng.randbytes(8))
        op = rng.randrange(7)
        i = rng.randrange(len(b))
        if op == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif op == 1:
            b[i] = rng.choice([0, 1, 0x7F, 0x80, 0xFF])
        elif op == 2:
            j = min(len(b), i + rng.randint(1, 16))
            del b[i:j]
        elif op == 3:
            b[i:i] = rng.randbytes(rng.randint(1, 8))
        elif op == 4:
            j = min(len(b), i + rng.randint(1, 32))
            b[i:i] = b[i:j]
        elif op == 5:
            b = b[:i]
        else:  # a varint field value replaced with an interesting one
            v = rng.choice(INTERESTING_INTS) & (2 ** 64 - 1)
            enc = bytearray()
            while True:
                enc.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
                v >>= 7
                if not enc[-1] & 0x80:
                    break
            b[i:i + 1] = enc
    return bytes(b)


def _mutate_attribute(node, rng):
    from onnx import AttributeProto, helper
    if not node.attribute or rng.random() < 0.15:
        name = rng.choice(["axis", "axes", "strides", "pads", "kernel_shape", "dilations", "group", "perm", "to",
                           "keepdims", "epsilon", "mode", "transB", "alpha", "split", "num_outputs"])
        value = rng.choice([rng.choice(INTERESTING_INTS), [rng.choice(INTERESTING_INTS) for _ in range(rng.randint(0, 5))],
                            rng.choice(INTERESTING_FLOATS), "constant", [1.5, 2.0]])
        try:
            node.attribute.append(helper.make_attribute(name, value))
        except Exception:
            pass
        return
    a = rng.choice(node.attribute)
    if rng.random() < 0.1:
        node.attribute.remove(a)
    elif a.type == AttributeProto.INT:
        a.i = max(-2 ** 63, min(2 ** 63 - 1, rng.choice(INTERESTING_INTS + [a.i + 1, a.i - 1, -a.i])))
    elif a.type == AttributeProto.INTS:
        vals = list(a.ints)
        r = rng.random()
        if vals and r < 0.5:
            vals[rng.randrange(len(vals))] = rng.choice(INTERESTING_INTS + [v + 1 for v in vals] + [v - 1 for v in vals])
        elif r < 0.7 and vals:
            del vals[rng.randrange(len(vals))]
        elif r < 0.85:
            vals.append(rng.choice(INTERESTING_INTS))
        else:
            rng.shuffle(vals)
        del a.ints[:]
        a.ints.extend(max(-2 ** 63, min(2 ** 63 - 1, v)) for v in vals)
    elif a.type == AttributeProto.FLOAT:
        a.f = rng.choice(INTERESTING_FLOATS)
    elif a.type == AttributeProto.STRING:
        a.s = rng.choice([b"", b"nearest", b"linear", b"reflect", b"edge", b"constant", b"bogus", b"NOTSET", b"SAME_UPPER",
                          b"VALID"])
    elif a.type == AttributeProto.GRAPH and a.g.node:
        _mutate_node(a.g, rng)
    elif a.type == AttributeProto.TENSOR:
        _mutate_tensor(a.t, rng)
    else:
        a.type = rng.choice([AttributeProto.INT, AttributeProto.FLOATS, AttributeProto.STRING, AttributeProto.INTS])


def _mutate_tensor(t, rng):
    from onnx import TensorProto
    r = rng.random()
    dims = list(t.dims)
    if r < 0.45 and dims:
        i = rng.randrange(len(dims))
        dims[i] = rng.choice([0, 1, 2, -1, dims[i] + 1, dims[i] * 2, 2 ** 20, 2 ** 31, 2 ** 40])
    elif r < 0.6:
        dims.append(rng.choice([1, 2, 3]))
    elif r < 0.75 and dims:
        dims.pop(rng.randrange(len(dims)))
    elif r < 0.9:
        t.data_type = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.FLOAT16,
                                  TensorProto.BOOL, TensorProto.UINT8, TensorProto.DOUBLE, TensorProto.STRING, 0, 99])
        return
    else:
        if t.raw_data:
            t.raw_data = t.raw_data[:rng.randrange(len(t.raw_data) + 1)]
        return
    del t.dims[:]
    t.dims.extend(dims)


def _mutate_node(graph, rng):
    node = rng.choice(graph.node)
    _mutate_attribute(node, rng)


OPS = ["Relu", "Add", "Mul", "MatMul", "Conv", "MaxPool", "AveragePool", "Softmax", "Transpose", "Reshape", "Concat",
       "Gather", "Slice", "Split", "Squeeze", "Unsqueeze", "ReduceMean", "ReduceSum", "Gemm", "Flatten", "Sigmoid",
       "Tanh", "Sub", "Div", "Pow", "Expand", "Tile", "Pad", "Resize", "Cast", "Where", "TopK", "Identity",
       "LayerNormalization", "BatchNormalization", "ConvTranspose", "GlobalAveragePool", "Erf", "Clip", "Shape",
       "ConstantOfShape", "Range", "Einsum", "CumSum", "ArgMax", "Neg", "Sqrt", "NonZero", "If"]


def _value_names(model):
    g = model.graph
    names = [i.name for i in g.input] + [i.name for i in g.initializer]
    for n in g.node:
        names.extend(o for o in n.output if o)
    return names


def mutate_model(model, rng: random.Random):
    """One to three structural mutations of a ModelProto, in place."""
    from onnx import TensorProto
    g = model.graph
    for _ in range(rng.randint(1, 3)):
        r = rng.random()
        if r < 0.4 and g.node:
            _mutate_node(g, rng)
        elif r < 0.52 and g.initializer:
            _mutate_tensor(rng.choice(g.initializer), rng)
        elif r < 0.6 and g.node:
            rng.choice(g.node).op_type = rng.choice(OPS)
        elif r < 0.72 and g.node:
            node = rng.choice(g.node)
            names = _value_names(model)
            k = rng.random()
            if node.input and k < 0.5:
                node.input[rng.randrange(len(node.input))] = rng.choice(names + ["", "missing"])
            elif node.input and k < 0.7:
                del node.input[rng.randrange(len(node.input))]
            else:
                node.input.append(rng.choice(names + [""]))
        elif r < 0.82:
            vis = list(g.input) + list(g.output)
            vi = rng.choice(vis)
            tt = vi.type.tensor_type
            if tt.HasField("shape") and tt.shape.dim and rng.random() < 0.7:
                d = rng.choice(tt.shape.dim)
                choice = rng.choice([0, 1, 3, -1, -5, 2 ** 20, 2 ** 33, "N"])
                if isinstance(choice, str):
                    d.dim_param = choice
                else:
                    d.dim_value = choice
            elif tt.HasField("shape") and rng.random() < 0.5:
                tt.shape.dim.add().dim_value = rng.choice([1, 2, 7])
            else:
                tt.elem_type = rng.choice([TensorProto.FLOAT, TensorProto.INT64, TensorProto.FLOAT16, TensorProto.BOOL,
                                           TensorProto.STRING, 0, 77])
        elif r < 0.88 and g.node:
            i = rng.randrange(len(g.node))
            if rng.random() < 0.5:
                del g.node[i]
            else:
                g.node.insert(rng.randrange(len(g.node) + 1), copy.deepcopy(g.node[i]))
        elif r < 0.93:
            model.opset_import[0].version = rng.choice([1, 6, 7, 9, 11, 13, 17, 18, 21, 23, 30, 0, -1])
        elif g.node:  # swap two nodes: order and cycles
            i, j = rng.randrange(len(g.node)), rng.randrange(len(g.node))
            a, b = copy.deepcopy(g.node[i]), copy.deepcopy(g.node[j])
            g.node[i].CopyFrom(b)
            g.node[j].CopyFrom(a)
    return model


_LEAVES = [0, 1, -1, 2, 2 ** 31, -2 ** 63, 2 ** 64, 1.5, float("nan"), float("inf"), "", "x", "float32", "cpu",
           "Convolution", True, False, None, [], {}, [1, 2], {"a": 1}, "y", [[1, 2]]]


def _paths(obj, path=()):
    yield path, obj
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, path + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, path + (i,))


def mutate_header(header: dict, rng: random.Random) -> dict:
    """One to three mutations of a plan header: leaves replaced (other types, boundary numbers, names taken from
    elsewhere in the header), keys deleted or added, containers emptied, lists reordered."""
    header = copy.deepcopy(header)
    strings = [v for _, v in _paths(header) if isinstance(v, str)]
    for _ in range(rng.randint(1, 3)):
        paths = [p for p, _ in _paths(header) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent = header
        for k in path[:-1]:
            parent = parent[k]
        key, value = path[-1], parent[path[-1]]
        r = rng.random()
        if r < 0.35:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                parent[key] = copy.deepcopy(rng.choice(_LEAVES + strings[:50]))
            else:
                parent[key] = copy.deepcopy(rng.choice([value + 1, value - 1, -value, 0, value * 2 ** 20] + _LEAVES[:8]))
        elif r < 0.5 and isinstance(value, str) and strings:
            parent[key] = rng.choice(strings)
        elif r < 0.62:
            if isinstance(parent, dict):
                del parent[key]
            else:
                parent.pop(key)
        elif r < 0.72 and isinstance(value, list) and value:
            if rng.random() < 0.5:
                rng.shuffle(value)
            else:
                value.append(copy.deepcopy(rng.choice(value)))
        elif r < 0.8 and isinstance(value, dict):
            value[rng.choice(["extra", "name", "kind", "offset", "shape", "weights", "inputs"])] = \
                copy.deepcopy(rng.choice(_LEAVES))
        else:
            parent[key] = rng.choice([[], {}, None, "", [value], {"v": value}])
    return header


def _repack(header: dict, blob: bytes) -> bytes:
    from backends.engine.plan import pack_plan
    try:
        return pack_plan(header, blob)
    except (TypeError, ValueError):  # a NaN or huge int json cannot encode the same way: encode it leniently
        head = json.dumps(header, default=str).encode()
        from backends.engine.plan import _HEAD, ALIGN, FORMAT_VERSION, MAGIC
        pre = _HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(head), len(blob), zlib.crc32(head), zlib.crc32(blob))
        return pre + head + b"\0" * ((-(len(pre) + len(head))) % ALIGN) + blob


def _fix_checksums(plan: bytes) -> bytes:
    """Recompute the preamble's lengths-consistent CRCs after a byte mutation (if the preamble still parses)."""
    from backends.engine.plan import _HEAD, ALIGN
    if len(plan) < _HEAD.size:
        return plan
    magic, version, res, head_len, blob_len, _, _ = _HEAD.unpack(plan[:_HEAD.size])
    head_end = _HEAD.size + head_len
    blob_start = head_end + (-head_end) % ALIGN
    if head_end > len(plan):
        return plan
    head = plan[_HEAD.size:head_end]
    blob = plan[blob_start:blob_start + blob_len]
    return _HEAD.pack(magic, version, res, head_len, blob_len, zlib.crc32(head), zlib.crc32(blob)) + plan[_HEAD.size:]


class CaseMaker:
    """Deterministic cases: `make(index)` is the same bytes for the same (target, seed, index)."""

    def __init__(self, target: str, seed: int = 0):
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; choose from {', '.join(TARGETS)}")
        self.target, self.seed = target, seed
        from tests.fuzz.seeds import seed_models
        self.models = list(seed_models().values())
        self._plans = None

    @property
    def plans(self):
        if self._plans is None:
            from backends.engine.build import build_plan_from_onnx
            from backends.engine.plan import read_plan_header
            from native.logger import G_LOGGER, Severity
            old = G_LOGGER.min_severity
            G_LOGGER.min_severity = Severity.INTERNAL_ERROR
            try:
                self._plans = []
                for m in self.models:
                    plan = build_plan_from_onnx(m.SerializeToString())
                    header, blob = read_plan_header(plan)
                    self._plans.append((plan, header, bytes(blob)))
            finally:
                G_LOGGER.min_severity = old
        return self._plans

    def make(self, index: int) -> bytes:
        rng = random.Random(f"{self.target}/{self.seed}/{index}")
        if self.target == "hdf5-structure":
            from tests.fuzz.hdf5_cases import make_case
            return make_case(rng)
        if self.target == "onnx-bytes":
            return _mutate_bytes(rng.choice(self.models).SerializeToString(), rng)
        if self.target == "onnx-structure":
            m = copy.deepcopy(rng.choice(self.models))
            return mutate_model(m, rng).SerializeToString()
        plan, header, blob = rng.choice(self.plans)
        if self.target == "plan-bytes":
            out = _mutate_bytes(plan, rng)
            return _fix_checksums(out) if rng.random() < 0.5 else out
        return _repack(mutate_header(header, rng), blob)


# ---------------------------------------------------------------------------------------------------------------
# running a case (in the worker)

def run_case(target: str, data: bytes, messages=False):
    """Feed one case through the pipeline; returns ('ok'|'rejected'|'bug', detail). A rejection's detail is the
    error's type (what the report counts), with `messages` also its message."""
    import numpy as np
    from native.errors import DebugkitError
    if target == "selftest-crash":  # the harness's own tests: a case that kills its process,
        os.kill(os.getpid(), signal.SIGSEGV)
    if target == "selftest-sleep":  # one that blocks (only the wall limit ends it),
        time.sleep(float(data or 3600))
        return "ok", ""
    if target == "selftest-spin":   # one that computes forever (RLIMIT_CPU ends it)
        end = time.process_time() + float(data or 3600)   # CPU seconds: a loaded machine must not shorten it
        while time.process_time() < end:
            pass
        return "ok", ""
    if target == "hdf5-structure":
        from tests.fuzz.hdf5_cases import run_case as run_hdf5_case
        return run_hdf5_case(data, messages)
    try:
        if target.startswith("onnx"):
            from backends.engine.build import build_plan_from_onnx
            from backends.engine.builder import BuilderConfig
            config = BuilderConfig()
            config.avg_timing_iterations = 1
            plan = build_plan_from_onnx(data, config=config)
        else:
            plan = data
        from backends.engine import Runtime
        engine = Runtime().deserialize_engine(plan)
        ctx = engine.create_execution_context()
        rng = np.random.default_rng(0)
        from native.limits import default_limits
        feeds, budget = {}, default_limits().max_bytes
        for t in engine.graph.inputs:
            shape = [d if isinstance(d, int) and d >= 0 else 2 for d in (t.shape or [])]
            dtype = np.dtype(t.dtype) if t.dtype and t.dtype not in ("object", "str") else np.dtype(np.float32)
            budget -= int(np.prod(shape, dtype=np.float64)) * max(dtype.itemsize, 8)
            if budget < 0:  # a valid engine asking for more input than a fuzz case may allocate: not executed
                return "not-run", "inputs over the size limit"
            feeds[t.name] = (rng.standard_normal(shape) * 2).astype(dtype) if dtype.kind in "fiub" else \
                np.zeros(shape, dtype)
        ctx.execute(feeds)
        return "ok", ""
    except DebugkitError as e:
        return "rejected", f"{type(e).__name__}: {e}" if messages else type(e).__name__
    except RecursionError as e:
        return "bug", _site(e)
    except Exception as e:
        return "bug", _site(e)


def _site(e):
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(REPO)]
    f = frames[-1] if frames else (traceback.extract_tb(e.__traceback__) or [None])[-1]
    where = f"{os.path.relpath(f.filename, REPO)}:{f.lineno}" if f else "?"
    return f"{type(e).__name__} at {where}: {str(e)[:160]}"


def _cpu_seconds():
    """CPU time of this process and its children (user + system), the figure a case's limit is checked against:
    wall time on a loaded machine counts the other processes too."""
    import resource
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _proc_cpu_seconds(pid):
    """CPU seconds a (live) process has used, from /proc; None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _worker(conn, target, memory_mb, max_tensor_mb, cpu_limit, messages):
    import resource
    import warnings
    from native.config import single_core_env
    os.environ.update(single_core_env())   # before numpy loads: one BLAS thread, so CPU time is the case's own
    warnings.simplefilter("ignore")
    if memory_mb:
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.setrecursionlimit(3000)
    from native.limits import Limits, set_limits
    set_limits(Limits(max_bytes=max_tensor_mb << 20, max_elements=max_tensor_mb << 20))
    from native.logger import G_LOGGER, Severity
    G_LOGGER.min_severity = Severity.INTERNAL_ERROR
    __import__("numpy").seterr(all="ignore")
    hard_cpu = resource.getrlimit(resource.RLIMIT_CPU)[1]
    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        t0, cpu0 = time.perf_counter(), _cpu_seconds()
        if cpu_limit:  # RLIMIT_CPU counts the whole process: the backstop is this case's start plus the limit
            soft = int(cpu0 + cpu_limit) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (soft if hard_cpu == resource.RLIM_INFINITY
                                                     else min(soft, hard_cpu), hard_cpu))
        outcome, detail = run_case(target, msg, messages)
        conn.send((outcome, detail, _cpu_seconds() - cpu0, time.perf_counter() - t0))


class CaseResult(collections.namedtuple("CaseResult", "outcome detail cpu wall")):
    """One case's answer: outcome ('ok' | 'not-run' | 'rejected' | 'bug' | 'crash' | 'hang'), detail, and the CPU
    and wall seconds it took."""


class Worker:
    """A spawned process that runs cases; replaced when it dies, runs past its CPU limit (RLIMIT_CPU: SIGXCPU) or
    past the wall limit (a case that sleeps or blocks)."""

    def __init__(self, target, memory_mb, max_tensor_mb, cpu_limit=None, messages=False):
        self.args = (target, memory_mb, max_tensor_mb, cpu_limit, messages)
        self.cpu_limit = cpu_limit
        self.proc = None
        self.start()

    def start(self):
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        env_path = os.environ.get("PYTHONPATH", "")
        if REPO not in env_path.split(os.pathsep):
            os.environ["PYTHONPATH"] = REPO + (os.pathsep + env_path if env_path else "")
        self.proc = ctx.Process(target=_worker, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(120) or self.conn.recv() != "ready":
            raise RuntimeError("fuzz worker did not start")

    def run(self, data: bytes, hard_limit: float) -> CaseResult:
        """Run one case; outcome 'crash' (signal or exit) or 'hang' (over the CPU or wall limit) when the worker
        had to go. `hard_limit`: wall seconds before the worker is killed (checked every 0.5 s, so it fires on
        time even when the worker died without closing its pipe)."""
        t0 = time.perf_counter()
        deadline = t0 + hard_limit
        try:
            self.conn.send(data)
            while True:
                left = deadline - time.perf_counter()
                if left <= 0:
                    break
                if self.conn.poll(min(left, 0.5)):
                    return CaseResult(*self.conn.recv())
                if not self.proc.is_alive():
                    break
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            pass
        elapsed = time.perf_counter() - t0
        self.proc.join(0.05)
        if self.proc.is_alive():
            cpu = _proc_cpu_seconds(self.proc.pid)
            self.proc.kill()
            self.proc.join()
            outcome = "hang"
            detail = f"no answer after {elapsed:.1f} s wall" + (f" ({cpu:.1f} s CPU)" if cpu is not None else "")
        else:
            code, cpu = self.proc.exitcode, None
            if code == -signal.SIGXCPU:  #: RLIMIT_CPU, the CPU backstop
                outcome, detail = "hang", f"over the CPU limit of {self.cpu_limit:.0f} s (killed by SIGXCPU)"
                cpu = self.cpu_limit
            else:
                outcome, detail = "crash", (f"killed by signal {-code}" if code and code < 0 else f"exit code {code}")
        self.start()
        return CaseResult(outcome, detail, elapsed if cpu is None else cpu, elapsed)

    def close(self):
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()


# ---------------------------------------------------------------------------------------------------------------
# the campaign

class Report:
    def __init__(self, target, case_limit=10.0):
        self.target = target
        self.case_limit = case_limit
        self.iterations = 0
        self.outcomes = collections.Counter()
        self.rejections = collections.Counter()
        self.findings = collections.defaultdict(list)   # key -> [case index]
        self.slow = []                                    # (index, cpu seconds, wall seconds)
        self.slowest_cpu = (0.0, None)                    # (cpu seconds, case index)
        self.slowest_wall = (0.0, None)                   # (wall seconds, case index)
        self.seconds = 0.0

    @property
    def max_seconds(self):
        """The slowest case's CPU seconds (the figure compared with the case limit)."""
        return self.slowest_cpu[0]

    @property
    def failures(self):
        return self.outcomes["bug"] + self.outcomes["crash"] + self.outcomes["hang"] + len(self.slow)

    def add(self, index, result: CaseResult):
        self.iterations += 1
        self.outcomes[result.outcome] += 1
        self.slowest_cpu = max(self.slowest_cpu, (result.cpu, index), key=lambda t: t[0])
        self.slowest_wall = max(self.slowest_wall, (result.wall, index), key=lambda t: t[0])
        if result.outcome == "rejected":
            self.rejections[result.detail] += 1
        elif result.outcome in ("bug", "crash", "hang"):
            self.findings[f"{result.outcome}: {result.detail}"].append(index)
        if result.cpu > self.case_limit and result.outcome != "hang":
            self.slow.append((index, result.cpu, result.wall))

    def summary(self) -> str:
        o = self.outcomes
        (cpu, cpu_case), (wall, wall_case) = self.slowest_cpu, self.slowest_wall
        lines = [f"{self.target}: {self.iterations} cases in {self.seconds:.0f} s "
                 f"({self.iterations / max(self.seconds, 1e-9):.1f}/s); ok {o['ok']} (+{o['not-run']} loaded, inputs "
                 f"too large to run), rejected {o['rejected']}, bugs {o['bug']}, crashes {o['crash']}, hangs "
                 f"{o['hang']}, over the case limit ({self.case_limit:g} s CPU) {len(self.slow)}; slowest case "
                 f"{cpu:.2f} s CPU (case {cpu_case}), {wall:.2f} s wall (case {wall_case})"]
        if self.rejections:
            lines.append("  rejected as: " + ", ".join(f"{k} {v}" for k, v in self.rejections.most_common()))
        for key, cases in sorted(self.findings.items(), key=lambda kv: -len(kv[1])):
            lines.append(f"  {len(cases):4d} x {key}   (e.g. case {cases[0]})")
        for i, cpu, wall in self.slow[:10]:
            lines.append(f"  slow: case {i} took {cpu:.1f} s CPU ({wall:.1f} s wall)")
        return "\n".join(lines)


def hard_limits(case_limit):
    """(CPU backstop, wall limit) for a case limit: RLIMIT_CPU at 3x the limit (a runaway case is killed, counted
    as a hang), the wall limit generous (6x, at least 60 s: only a case that sleeps or blocks reaches it on a
    loaded machine)."""
    return max(3 * case_limit, 30.0), max(6 * case_limit, 60.0)


def fuzz(target: str, *, seed=0, iterations=None, seconds=None, case_limit=10.0, memory_mb=4096, max_tensor_mb=16,
         save_dir=None, start=0, log=None) -> Report:
    """Run cases start, start+1, ... until `iterations` or `seconds` is reached; returns the Report. A case is
    slow when its CPU time (in the worker) exceeds `case_limit`."""
    with _campaign_folder():
        return _fuzz(target, seed, iterations, seconds, case_limit, memory_mb, max_tensor_mb, save_dir, start, log)


@contextlib.contextmanager
def _campaign_folder():
    """One temporary folder for the campaign's scratch files, the workers' included (they inherit its name through
    the environment): removed at the end, so workers killed for a crash or a hang leave nothing in /tmp. The
    environment variable is restored afterwards."""
    from tests.fuzz.hdf5_cases import ROOT_ENV
    old = os.environ.get(ROOT_ENV)
    with tempfile.TemporaryDirectory(prefix="debugkit-fuzz-") as root:
        os.environ[ROOT_ENV] = root
        try:
            yield root
        finally:
            if old is None:
                os.environ.pop(ROOT_ENV, None)
            else:
                os.environ[ROOT_ENV] = old


def _fuzz(target, seed, iterations, seconds, case_limit, memory_mb, max_tensor_mb, save_dir, start, log):
    maker = CaseMaker(target, seed)
    if target.startswith("plan"):
        maker.plans  # build the seeds before the clock starts
    report = Report(target, case_limit)
    cpu_limit, wall_limit = hard_limits(case_limit)
    worker = Worker(target, memory_mb, max_tensor_mb, cpu_limit=cpu_limit)
    t_start = time.perf_counter()
    last_log = t_start
    index = start
    try:
        while True:
            elapsed = time.perf_counter() - t_start
            if iterations is not None and report.iterations >= iterations:
                break
            if seconds is not None and elapsed >= seconds:
                break
            data = maker.make(index)
            result = worker.run(data, hard_limit=wall_limit)
            report.add(index, result)
            if save_dir and (result.outcome in ("bug", "crash", "hang") or result.cpu > case_limit):
                os.makedirs(save_dir, exist_ok=True)
                ext = {"onnx": "onnx", "plan": "plan", "hdf5": "h5"}[target.split("-")[0]]
                with open(os.path.join(save_dir, f"{target}-s{seed}-{index}.{ext}"), "wb") as f:
                    f.write(data)
            index += 1
            if log and time.perf_counter() - last_log > 60:
                last_log = time.perf_counter()
                log(f"[{target}] {report.iterations} cases, {report.failures} failures, "
                    f"{time.perf_counter() - t_start:.0f} s")
    finally:
        report.seconds = time.perf_counter() - t_start
        worker.close()
    return report
