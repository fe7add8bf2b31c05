"""Check the CUDA device on real models: build each model for device="cuda", run it on the corpus feeds and
compare with ONNX Runtime (FP32, TF32 off: rtol 1e-3 / atol 1e-4), and count layers on the GPU vs host layers.

    python tools/cuda_check.py --corpus DIR [--models bert_mini timm-resnet18 ...] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="folder holding public_models.json (or models/*.onnx + _io.npz)")
    ap.add_argument("--models", nargs="*", default=None)
    ap.add_argument("--json")
    ap.add_argument("--fp16", action="store_true", help="build FP16 engines; pass = cosine >= 0.999 vs FP32 per output")
    args = ap.parse_args()
    import onnxruntime as ort

    from backends.runners import EngineRunner
    rows = []
    models_dir = os.path.join(args.corpus, "models")
    names = args.models or sorted(f[:-5] for f in os.listdir(models_dir) if f.endswith(".onnx"))
    for name in names:
        path = os.path.join(models_dir, name + ".onnx")
        io = np.load(os.path.join(models_dir, name + "_io.npz"))
        feeds = {k[3:]: io[k] for k in io.files if k.startswith("in_")}
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = {i.name: feeds.get(i.name, next(iter(feeds.values()))) for i in sess.get_inputs()}
        ref = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        t0 = time.perf_counter()
        with EngineRunner(path, device="cuda", flags=("fp16",) if args.fp16 else ()) as r:
            build_s = time.perf_counter() - t0
            out = r.infer(feeds)
            t1 = time.perf_counter()
            for _ in range(5):
                r.infer(feeds)
            run_ms = (time.perf_counter() - t1) / 5 * 1e3
            nodes = r.engine.graph.nodes
        host = sorted({n.kind for n in nodes if (n.tactic_name or "").startswith("host:")})
        worst, ok = 0.0, True
        for k, v in ref.items():
            g = np.asarray(out[k], dtype=np.float64)
            err = np.abs(g - v)
            if args.fp16:
                v64 = np.asarray(v, np.float64).ravel()
                denom = np.linalg.norm(g.ravel()) * np.linalg.norm(v64)
                cos = float(g.ravel() @ v64 / denom) if denom else float(np.array_equal(g.ravel(), v64))
                ok &= cos >= 0.999 or v.dtype.kind not in "f"
                worst = min(worst if worst else 1.0, cos) if v.dtype.kind == "f" else worst
            else:
                ok &= bool(np.all(err <= 1e-4 + 1e-3 * np.abs(v)))
                worst = max(worst, float(err.max()) if err.size else 0.0)
        row = {"model": name, "match": ok, ("min_cosine" if args.fp16 else "max_abs"): worst, "layers": len(nodes), "host_layers": host,
               "build_s": round(build_s, 2), "run_ms": round(run_ms, 2)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        from native.files import output_file
        with output_file(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0 if all(r["match"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
