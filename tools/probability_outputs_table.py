"""FP16 engines of the public corpus with and without the FP32 rule for probability outputs (docs/PRECISION.md).

For each model of the manifest (or those named with --models), on --seeds seeded inputs and on --device (cpu by
default; cuda on a GPU): our FP32 engine as the
reference (issue 11's "FP16 cosine >= 0.999 against FP32"; --reference onnxrt compares with ONNX Runtime instead),
our FP16 engine built with the rule (the default) and without it (BuilderFlag.REDUCED_PROBABILITY_OUTPUTS), and ONNX
Runtime FP32 against our FP32 (how far the two FP32 answers themselves are apart: ONNX Runtime's Sigmoid has an
absolute error of ~1.3e-7, which is most of a probability of 1e-6).
Per model: the worst cosine over float outputs and seeds for each build, the layers the rule moved to FP32, and,
where it moved any, the FP16 engine's latency with / without the rule (ABBA-alternated calls, median of per-pair
ratios with a bootstrap 95% interval, so a shared machine's drift cancels). Detector boxes (an [N, 4] output beside
int labels) are compared without their order: each reference box against the nearest engine box of its label
(tools/precision_table.py's `matched_detections`), since near-tied FP16 scores reorder the detections.

    python tools/probability_outputs_table.py --corpus CORPUS_DIR --shipped SHIPPED_DIR [--models NAME ...]
                                              [--seeds 2] [--pairs 20] [--reference fp32|onnxrt] [--device cuda]
                                              [--doc docs/PRECISION.md] [--json FILE]

--doc rewrites the part of that file between the probability-table markers; without it the table goes to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchmark import alternate, paired_ratio  # noqa: E402
from precision_table import cosine, load_manifest, make_feeds, matched_detections, model_path  # noqa: E402

BEGIN, END = "<!-- probability-table:begin -->", "<!-- probability-table:end -->"
OFF = "reduced_probability_outputs"


def output_cosines(ref: dict, got: dict) -> dict:
    """{output: cosine} for the float outputs; detector boxes compared without their order."""
    out = {}
    ints = [k for k, v in ref.items() if np.ndim(v) == 1 and np.issubdtype(np.asarray(v).dtype, np.integer)]
    for name, r in ref.items():
        r = np.asarray(r)
        if not np.issubdtype(r.dtype, np.floating):
            continue
        g = np.asarray(got[name], np.float32)
        lab = next((k for k in ints if len(ref[k]) == len(r) and np.shape(got.get(k)) == (len(r),)), None) \
            if r.ndim == 2 and r.shape[1] == 4 else None
        if lab is not None and len(r):
            out[name + " (matched)"] = matched_detections(r, g, np.asarray(ref[lab]), np.asarray(got[lab]))[0]
        elif g.shape != r.shape:
            out[name] = float("nan")
        else:
            out[name] = cosine(g, r)
    return out


def run_model(entry, path, seeds, pairs, reference="fp32", device="cpu"):
    from backends.runners import EngineRunner, OnnxrtRunner
    feeds = [make_feeds(entry, s) for s in range(seeds)]
    shapes = {k: v.shape for k, v in feeds[0].items()}
    with OnnxrtRunner(path) as o:
        ort = [o.infer(f) for f in feeds]
    with EngineRunner(path, shapes=shapes, device=device) as fp32:
        ours = [fp32.infer(f) for f in feeds]
    refs = ours if reference == "fp32" else ort
    per = [output_cosines(a, b) for a, b in zip(ours, ort)]
    res = {"ort_vs_fp32": {k: min(p[k] for p in per) for k in per[0]}}
    with EngineRunner(path, shapes=shapes, flags=("fp16",), device=device) as on, \
            EngineRunner(path, shapes=shapes, flags=("fp16", OFF), device=device) as off:
        for key, r in (("on", on), ("off", off)):
            per = [output_cosines(ref, r.infer(f)) for ref, f in zip(refs, feeds)]
            res[key] = {k: min(p[k] for p in per) for k in per[0]}
            res[key + "_layers"] = {l["Name"]: l["Precision"] for l in r.engine.create_engine_inspector().layers()
                                    if l["LayerType"] not in ("Constant", "Reformat")}
        moved = sorted(n for n, p in res["on_layers"].items() if p == "float32" and res["off_layers"].get(n) not in
                       (None, "float32"))
        res["moved"] = moved
        if moved and pairs:
            ta, tb = alternate(lambda: on.infer(feeds[0]), lambda: off.infer(feeds[0]), pairs)
            res["time"] = {"on_ms": float(np.median(ta) * 1e3), "off_ms": float(np.median(tb) * 1e3),
                           **paired_ratio(ta, tb)}
    return res


def fmt_cos(d: dict) -> str:
    if not d:
        return "-"
    k = min(d, key=lambda x: d[x] if d[x] == d[x] else -1)
    return f"{d[k]:.6f}" + (f" ({k})" if len(d) > 1 else "")


def table(results: dict, seeds: int) -> str:
    lines = ["| model | FP16 cosine without the rule | with the rule | layers the rule keeps in FP32 | "
             "FP16 latency with / without (ratio, 95% CI) | ONNX Runtime FP32 vs ours FP32 |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | {r['error']} | | | | |")
            continue
        t = r.get("time")
        timing = (f"{t['on_ms']:.1f} / {t['off_ms']:.1f} ms ({t['median']:.3f}, {t['ci95'][0]:.3f}-"
                  f"{t['ci95'][1]:.3f})" if t and "median" in t else "-")
        moved = ", ".join(f"`{m}`" for m in r["moved"]) or "none"
        lines.append(f"| {name} | {fmt_cos(r['off'])} | {fmt_cos(r['on'])} | {moved} | {timing} | "
                     f"{fmt_cos(r.get('ort_vs_fp32', {}))} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="directory with public_models.json and the exported models")
    ap.add_argument("--shipped", required=True, help="directory the shipped models were fetched into")
    ap.add_argument("--models", nargs="+", help="only these manifest names")
    ap.add_argument("--seeds", type=int, default=2, help="seeded inputs per model; the worst cosine is reported")
    ap.add_argument("--reference", choices=["fp32", "onnxrt"], default="fp32",
                    help="what the FP16 engines are compared with: our FP32 engine (default) or ONNX Runtime FP32")
    ap.add_argument("--device", default="cpu", help="device the engines are built for and run on (cpu, cuda)")
    ap.add_argument("--pairs", type=int, default=20, help="timed call pairs where the rule moved a layer (0: none)")
    ap.add_argument("--doc", help="Markdown file whose probability-table section to rewrite")
    ap.add_argument("--json", help="also write the raw results here (merged into an existing file)")
    args = ap.parse_args(argv)
    from native.logger import G_LOGGER
    G_LOGGER.min_severity = G_LOGGER.ERROR
    results = {}
    if args.json and os.path.exists(args.json):
        with open(args.json) as f:
            results = json.load(f)
    for entry in load_manifest(args.corpus):
        name = entry["name"]
        if args.models and name not in args.models:
            continue
        path = model_path(entry, args.corpus, args.shipped)
        if not os.path.exists(path):
            results[name] = {"error": "model file not found"}
            continue
        t0 = time.perf_counter()
        try:
            results[name] = run_model(entry, path, args.seeds, args.pairs, args.reference, args.device)
        except Exception as e:  # the table says what failed instead of stopping
            results[name] = {"error": f"{type(e).__name__}: {str(e)[:150]}"}
        print(f"{name}: {time.perf_counter() - t0:.1f} s {json.dumps({k: v for k, v in results[name].items() if not k.endswith('_layers')})}",
              file=sys.stderr, flush=True)
        if args.json:
            from native.files import output_file
            with output_file(args.json, "w") as f:
                json.dump(results, f, indent=1)
    order = [e["name"] for e in load_manifest(args.corpus)]
    results = {k: results[k] for k in sorted(results, key=lambda k: order.index(k) if k in order else len(order))}
    text = table(results, args.seeds)
    if args.doc:
        with open(args.doc) as f:
            doc = f.read()
        if BEGIN not in doc or END not in doc:
            raise SystemExit(f"{args.doc} has no {BEGIN} ... {END} section")
        head, rest = doc.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        from native.files import output_file
        with output_file(args.doc, "w") as f:
            f.write(head + BEGIN + "\n" + text + "\n" + END + tail)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
