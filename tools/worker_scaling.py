"""Time one `debug precision` search with 1 and with 2 (or more) local workers; check the answers agree.

    python tools/worker_scaling.py [MODEL.onnx] [--workers 1 2 4] [--repeat 1] [-- extra debug precision options]

Without MODEL it generates a planted MLP (`--depth` × MatMul→Add→Tanh, `--width`, `--batch`) with two layers made
FP16-sensitive by tools/make_fp16_sensitive.py, whose answer is known: {mm_a, mm_a/fp16_compensation, mm_b, ...}.
Each search runs in a fresh `python -m debugkit` process (same seed, same options, its own probe log), so start-up
cost is counted the same way for every worker count. Prints wall time, probes, answer size and speed-up per worker
count, and whether every answer equals the first (and, for the generated model, the planted set). Exit 1 when the
answers differ. Measure on a quiet machine with at least as many cores as the largest worker count: each worker is
single-threaded (DEBUGKIT_THREADS=1, BLAS 1 thread), so N workers want N free cores.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def planted_mlp(path: str, depth: int, width: int, batch: int) -> list:
    """Write the generated model to `path`; returns the layers that must stay FP32 (the known answer)."""
    import importlib.util

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    nodes, inits, t = [], [], "x"
    for i in range(depth):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
                                          f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(width) / 4).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [t, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"act{i}")]
        t = f"t{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, width])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    planted = [f"mm{depth // 4}", f"mm{(3 * depth) // 4}"]
    from backends.runners import OnnxrtRunner
    from debugkit.cli import _search_args, debug_precision
    sub = argparse.ArgumentParser().add_subparsers()
    debug_precision.register(sub)
    defaults = sub.choices["precision"].parse_args([path, "--fp16"])
    feeds = _search_args.generated_feeds(defaults, model)   # the feeds `debug precision` generates itself
    taps = [f"m{n[2:]}" for n in planted]
    with OnnxrtRunner(model, mark=taps) as r:
        values = r.infer(feeds, taps=taps)
    spec = importlib.util.spec_from_file_location("make_fp16_sensitive",
                                                  os.path.join(REPO, "tools", "make_fp16_sensitive.py"))
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    answer = tool.plant(model, planted, values)
    from debugkit.surgeon.external_data import save_model
    save_model(model, path)
    return sorted(x for v in answer.values() for x in v["must_stay_fp32"])


def search(model: str, workers: int, workdir: str, extra: list, threads: int | None = None) -> dict:
    """One `debug precision --fp16` run in a fresh process; its answer file plus the wall time."""
    out = os.path.join(workdir, f"workers{workers}.json")
    log = os.path.join(workdir, f"workers{workers}.jsonl")
    for p in (out, log):
        if os.path.exists(p):
            os.remove(p)
    argv = [sys.executable, "-m", "debugkit", "debug", "precision", model, "--fp16", "-o", out, "--log", log,
            "--workers", str(workers), "-q", *extra]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if threads:
        env["DEBUGKIT_THREADS"] = str(threads)
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"workers={workers}: debug precision exited {proc.returncode}\n{proc.stdout}{proc.stderr}")
    with open(out) as f:
        res = json.load(f)
    return {"workers": workers, "wall_s": round(wall, 2), "probes": res["probes"],
            "answer": sorted(res["layer_precisions"])}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", help="an ONNX model (default: a generated planted MLP)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts to time (default 1 2)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per worker count; the fastest is reported")
    ap.add_argument("--depth", type=int, default=24, help="generated MLP: layers of MatMul→Add→Tanh (default 24)")
    ap.add_argument("--width", type=int, default=512, help="generated MLP: width (default 512)")
    ap.add_argument("--batch", type=int, default=128, help="generated MLP: batch (default 128)")
    ap.add_argument("--threads", type=int, default=None,
                    help="DEBUGKIT_THREADS for the search process itself (default: the CLI's, all cores). Workers "
                         "are always single-threaded, so --threads 1 compares N single-threaded processes with one")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("extra", nargs=argparse.REMAINDER,
                    help="after --: options passed to debug precision (default: --atol 1e-2)")
    args = ap.parse_args(argv)
    extra = [a for a in args.extra if a != "--"] or ["--atol", "1e-2"]
    workdir = tempfile.mkdtemp(prefix="worker_scaling_")
    expected = None
    model = args.model
    if model is None:
        model = os.path.join(workdir, "planted_mlp.onnx")
        expected = planted_mlp(model, args.depth, args.width, args.batch)
        print(f"generated {model}: {args.depth * 3 + 1} nodes, planted answer {expected}")
    rows = []
    for w in args.workers:
        runs = [search(model, w, workdir, extra, args.threads) for _ in range(max(1, args.repeat))]
        rows.append(min(runs, key=lambda r: r["wall_s"]))
    base = rows[0]
    print(f"{'workers':>7}  {'wall s':>8}  {'speed-up':>8}  {'probes':>6}  {'answer':>6}  same answer")
    for r in rows:
        r["speedup"] = round(base["wall_s"] / r["wall_s"], 2) if r["wall_s"] else None
        r["same_answer"] = r["answer"] == base["answer"]
        print(f"{r['workers']:>7}  {r['wall_s']:>8.2f}  {r['speedup']:>7.2f}x  {r['probes']:>6}  "
              f"{len(r['answer']):>6}  {'yes' if r['same_answer'] else 'NO'}")
    agree = all(r["same_answer"] for r in rows)
    print(f"answers agree: {'yes' if agree else 'NO'}" +
          ("" if expected is None else f"; equal to the planted set: {'yes' if base['answer'] == expected else 'NO'}"))
    print(f"machine: {os.cpu_count()} CPUs (os.cpu_count), load average {os.getloadavg()[0]:.2f}; search process "
          f"DEBUGKIT_THREADS={args.threads or os.environ.get('DEBUGKIT_THREADS') or 'default (all cores)'}, "
          f"workers single-threaded")
    if args.json:
        from native.files import output_file
        with output_file(args.json, "w") as f:
            json.dump({"model": model, "expected": expected, "rows": rows}, f, indent=1)
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
