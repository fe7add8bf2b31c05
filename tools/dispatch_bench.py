"""Per-layer dispatch overhead of the runtime: a chain of N tiny layers (default 1,000) on a [1, 8] tensor.

    python tools/dispatch_bench.py [--layers 1000] [--iterations 30] [--clock wall|cpu] [--json FILE]

The chain alternates Add and Mul with small constants, built with fusion off so every ONNX node stays a layer of
its own. Each layer's arithmetic costs about a microsecond, so the rest of the time per layer is the interpreter's
own: finding the inputs, calling the tactic, storing and freeing the outputs. Reported per layer in microseconds
(the best of 3 back-to-back executes per round, the median over rounds, the modes interleaved) in four modes:
plain; every tensor tapped (`--mark-all`); a profiler attached; and the bare kernels called back to back with no
interpreter (the floor). The overhead is the per-round difference to the floor. The machine's load is printed
beside it: a shared machine inflates every figure alike; `--clock cpu` times the calling thread's CPU time
instead, which preemption does not inflate (the chain runs on the calling thread).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def chain_model(n_layers: int, width: int = 8):
    """An ONNX model: x -> Add(c0) -> Mul(c1) -> Add(c2) -> ... (n_layers nodes) -> y."""
    import onnx
    from onnx import TensorProto, helper
    nodes, inits = [], []
    prev = "x"
    for i in range(n_layers):
        c = f"c{i}"
        value = np.full([width], 1e-3 if i % 2 == 0 else 1.0 - 1e-4, np.float32)
        inits.append(helper.make_tensor(c, TensorProto.FLOAT, [width], value.tolist()))
        out = "y" if i == n_layers - 1 else f"t{i}"
        nodes.append(helper.make_node("Add" if i % 2 == 0 else "Mul", [prev, c], [out], name=f"n{i}"))
        prev = out
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, width])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def build_context(n_layers: int, width: int = 8):
    from backends.engine import BuilderConfig, BuilderFlag, Runtime, parse_onnx
    from backends.engine.builder import Builder
    from backends.engine.plan import serialize_plan
    net, _ = parse_onnx(chain_model(n_layers, width))
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.DISABLE_FUSION)
    graph = Builder().build_graph(net, cfg)
    engine = Runtime().deserialize_engine(serialize_plan(graph, cfg))
    return engine.create_execution_context(), engine


def interleaved_us(fns: dict, iterations: int, block: int = 3, clock=time.perf_counter) -> dict:
    """Median microseconds per call of each function, timed in alternating blocks (A x3, B x3, ..., rotating who
    goes first) so a shared machine's drift hits every mode alike; also the per-round difference to "bare"."""
    for fn in fns.values():
        fn()
    times = {k: [] for k in fns}
    order = list(fns.items())
    rounds = max(1, -(-iterations // block))
    for r in range(rounds):
        for k, fn in order[r % len(order):] + order[:r % len(order)]:
            best = float("inf")
            for _ in range(block):
                t0 = clock()
                fn()
                best = min(best, clock() - t0)
            times[k].append(best)
    med = {k: float(np.median(v)) * 1e6 for k, v in times.items()}
    over = {k: float(np.median(np.array(v) - np.array(times["bare"]))) * 1e6 for k, v in times.items() if k != "bare"}
    return med, over


def bare_kernels(engine):
    """The chain's kernels called back to back on the previous result, no interpreter: the arithmetic floor."""
    steps = engine.executor.steps
    consts = engine.executor.consts
    calls = []
    for node, tactic, op, _ in steps:
        calls.append((tactic.run, op, node.inputs[1]))

    def run(x):
        for fn, op, c in calls:
            x = fn(op, [x, consts[c]])[0]
        return x
    return run


def measure(n_layers: int, iterations: int, clock=time.perf_counter) -> dict:
    from backends.engine.runtime.profiler import LayerProfiler
    ctx, engine = build_context(n_layers)
    n = len(engine.executor.steps)
    x = {"x": np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)}
    taps = engine.tensor_names()
    bare = bare_kernels(engine)
    profiled = engine.create_execution_context()
    profiled.profiler = LayerProfiler()

    def with_profiler():
        profiled.execute(x)
        profiled.profiler.runs.clear()
    med, over = interleaved_us({"bare": lambda: bare(x["x"]), "plain": lambda: ctx.execute(x),
                                "taps": lambda: ctx.execute(x, taps=taps), "profiler": with_profiler}, iterations, clock=clock)
    res = {"layers": n, "bare_kernels_us": med["bare"] / n}
    for k in ("plain", "taps", "profiler"):
        res[f"{k}_us"] = med[k] / n
        res[f"{k}_overhead_us"] = over[k] / n
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1000)
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: elapsed time (default); cpu: this thread's CPU time, which a busy shared machine "
                         "inflates far less (the chain runs on the calling thread)")
    ap.add_argument("--json", metavar="FILE")
    args = ap.parse_args(argv)
    if args.layers < 1 or args.iterations < 1:
        print("dispatch_bench: --layers and --iterations must be >= 1", file=sys.stderr)
        return 2
    res = measure(args.layers, args.iterations, time.thread_time if args.clock == "cpu" else time.perf_counter)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"chain of {res['layers']} layers ([1, 8] float32, fusion off); {os.cpu_count()} CPUs, load average "
          f"{load:.2f}; {args.clock} clock")
    print(f"{'mode':24s} {'us/layer':>9s} {'overhead us/layer':>18s}")
    print(f"{'bare kernels (floor)':24s} {res['bare_kernels_us']:9.2f} {'':>18s}")
    for k, label in (("plain", "execute"), ("taps", "execute, every tensor tapped"), ("profiler", "execute, profiler")):
        print(f"{label:24s} {res[k + '_us']:9.2f} {res[k + '_overhead_us']:18.2f}")
    if args.json:
        from native.files import write_json
        write_json(args.json, res, "--json", indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
