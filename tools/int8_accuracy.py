"""INT8 engines against our FP32 engine: calibrate once (entropy2 on seeded batches, a calibration cache shared by
every INT8 build), build FP32 / FP16 / INT8 / INT8+FP16 at one batch size, report per engine the top-1 agreement
with FP32 and the cosine of the logits over N seeded inputs, which layers run INT8 (and why the others do not), and
save the plans for `debugkit bench --load-engine`.

    python tools/int8_accuracy.py MODEL.onnx --batch 128 --inputs 200 --device cuda --plans DIR [--json FILE]

The model's first input's batch dim is set to --batch (calibration runs at --calib-batch: the cache is per
tensor, independent of the batch). Inputs are seeded standard-normal images.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BUILDS = {"fp32": (), "fp16": ("fp16",), "int8": ("int8",), "int8+fp16": ("int8", "fp16")}


def with_batch(model: onnx.ModelProto, batch: int) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for vi in list(m.graph.input[:1]) + list(m.graph.output):
        dim = vi.type.tensor_type.shape.dim
        if dim:
            dim[0].Clear()
            dim[0].dim_value = batch
    return m


def feeds(model, batch, count, seed):
    inp = model.graph.input[0]
    shape = [batch] + [d.dim_value for d in inp.type.tensor_type.shape.dim[1:]]
    rng = np.random.default_rng(seed)
    return inp.name, [rng.standard_normal(shape).astype(np.float32) for _ in range(count)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--inputs", type=int, default=200, help="seeded inputs compared (default 200)")
    p.add_argument("--calib-batch", type=int, default=16)
    p.add_argument("--calib-batches", type=int, default=10)
    p.add_argument("--device", default="cuda")
    p.add_argument("--builds", nargs="+", default=list(BUILDS), choices=list(BUILDS))
    p.add_argument("--plans", default=None, help="folder to save each build's plan in (NAME.plan)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    from backends.engine import Calibrator
    from backends.engine.builder import BuilderConfig
    from backends.engine.builder.config import TimingCache
    from backends.runners import EngineRunner
    timing = TimingCache()     # one cache for every build: INT8+FP16 reuses what FP16 and INT8 timed
    base = onnx.load(args.model)
    name, calib = feeds(base, args.calib_batch, args.calib_batches, seed=7)
    cache = os.path.join(args.plans or ".", "int8.cache")
    if os.path.exists(cache):
        os.remove(cache)
    model = with_batch(base, args.batch)
    n_batches = -(-args.inputs // args.batch)
    _, xs = feeds(base, args.batch, n_batches, seed=11)
    outs, report = {}, {"model": args.model, "batch": args.batch, "inputs": args.inputs, "builds": {}}
    for build in args.builds:
        flags = BUILDS[build]
        cal = None
        if "int8" in flags:
            small = with_batch(base, args.calib_batch)
            cal = Calibrator([{name: x} for x in calib], cache=cache)
            if not os.path.exists(cache):     # calibrate at the small batch, once
                t0 = time.perf_counter()
                # the heuristic build times nothing: this engine exists only to write the cache
                with EngineRunner(small, flags=("int8", "enable_tactic_heuristic"), device=args.device,
                                  calibrator=cal):
                    pass
                print(f"calibrated ({args.calib_batches} x {args.calib_batch}) in {time.perf_counter() - t0:.1f} s",
                      flush=True)
            cal = Calibrator(None, cache=cache)
        plan = os.path.join(args.plans, f"{build.replace('+', '_')}.plan") if args.plans else None
        t0 = time.perf_counter()
        config = BuilderConfig()
        config.timing_cache = timing
        with EngineRunner(model, flags=flags, config=config, device=args.device, calibrator=cal,
                          save_plan=plan) as r:
            built = time.perf_counter() - t0
            ys = [r.infer({name: x})[r.engine.graph.output_names[0]] for x in xs]
            nodes = [n for n in r.engine.graph.nodes if n.kind not in ("Constant",)]
        y = np.concatenate([v.reshape(v.shape[0], -1) for v in ys])[:args.inputs].astype(np.float64)
        outs[build] = y
        counts = {}
        for n in nodes:
            counts[n.precision] = counts.get(n.precision, 0) + 1
        info = {"build_s": round(built, 1), "precisions": counts,
                "int8_layers": [n.name for n in nodes if n.precision == "int8"],
                "not_int8": {n.name: n.meta["int8_note"] for n in nodes
                             if str(n.meta.get("int8_note", "")).startswith("not INT8")},
                "tactics": sorted({f"{n.kind}:{n.precision}:{n.tactic_name}" for n in nodes})}
        if "fp32" in outs and build != "fp32":
            ref = outs["fp32"]
            cos = np.sum(y * ref, 1) / np.linalg.norm(y, axis=1) / np.linalg.norm(ref, axis=1)
            info["top1_agreement"] = float(np.mean(y.argmax(1) == ref.argmax(1)))
            info["cosine_min"], info["cosine_mean"] = float(cos.min()), float(cos.mean())
        report["builds"][build] = info
        print(f"{build}: built in {built:.1f} s; layers {counts}; "
              + (f"top-1 vs fp32 {info['top1_agreement']:.3f}, cosine min {info['cosine_min']:.5f} mean "
                 f"{info['cosine_mean']:.5f}" if "top1_agreement" in info else "reference")
              + (f"; not INT8: {len(info['not_int8'])} ({next(iter(info['not_int8'].values()))})"
                 if info["not_int8"] else ""), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
