"""FP16 / BF16 engines of corpus models against ONNX Runtime FP32: the table of docs/PRECISION.md.

For each model of the manifest (or those named with --models): seeded inputs from the manifest's feed specs, ONNX
Runtime FP32 as the reference, our engine built with --fp16 and with --bf16. Per output: max abs error, cosine
similarity; for classifiers (a 2-D [N, C] output), top-1 agreement over --samples seeded inputs. Where an FP16
output's cosine is below --threshold, `debugkit run --fp16 --mark-all` names the first diverging ONNX node and the
table says so (and why, when the value ranges tell: an overflow beyond 65504 or a NaN/Inf).

    python tools/precision_table.py --corpus CORPUS_DIR --shipped SHIPPED_DIR [--models NAME ...] [--doc docs/PRECISION.md]

CORPUS_DIR holds public_models.json and the exported models (models/...); SHIPPED_DIR holds the fetched shipped
models (the manifest's paths of 'shipped' entries are relative to it). --doc rewrites the part of that file between
the precision-table markers; without it the table goes to stdout.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BEGIN, END = "<!-- precision-table:begin -->", "<!-- precision-table:end -->"
PRECISIONS = ("fp16", "bf16")
CLASSIFIERS = ("vit_tiny", "timm-resnet18", "timm-mobilenetv3_small_100", "ppocr_cls")


def load_manifest(corpus):
    with open(os.path.join(corpus, "public_models.json")) as f:
        return json.load(f)["models"]


def model_path(entry, corpus, shipped):
    return os.path.join(corpus if entry["source"] == "exported" else shipped, entry["path"])


def make_feeds(entry, seed):
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, spec in entry["feeds"].items():
        shape, dtype = tuple(spec["shape"]), np.dtype(spec["dtype"])
        if "value" in spec:
            feeds[name] = np.full(shape, spec["value"], dtype=dtype)
        else:
            lo, hi = spec["range"]
            feeds[name] = (rng.integers(lo, hi + 1, size=shape) if dtype.kind in "iu"
                           else rng.uniform(lo, hi, size=shape)).astype(dtype)
    return feeds


def cosine(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("nan")
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if na == 0 and nb == 0:
        return 1.0
    return float(a @ b / (na * nb)) if na and nb else 0.0


def is_classifier_output(ref):
    return ref.ndim == 2 and ref.shape[1] >= 2 and np.issubdtype(ref.dtype, np.floating)


def matched_detections(boxes_ref, boxes, labels_ref, labels):
    """Detections compared without their order: each reference box against the nearest engine box of its label.
    Returns (cosine of the matched pairs, max abs error of a matched pair, engine boxes matched)."""
    idx = [int(np.argmin(np.where(labels == labels_ref[i], np.abs(boxes - boxes_ref[i]).max(1), np.inf)))
           for i in range(len(boxes_ref))]
    paired = boxes[idx]
    return cosine(paired, boxes_ref), float(np.abs(paired - boxes_ref).max()), len(set(idx))


def run_model(entry, path, precision, samples, classifier=False):
    from backends.runners import EngineRunner, OnnxrtRunner
    feeds0 = make_feeds(entry, 0)
    shapes = {k: v.shape for k, v in feeds0.items()}
    with OnnxrtRunner(path) as ort_r:
        refs = [ort_r.infer(make_feeds(entry, s)) for s in range(samples)]
    t0 = time.perf_counter()
    with EngineRunner(path, shapes=shapes, flags=(precision,)) as eng:
        build_s = time.perf_counter() - t0
        outs = [eng.infer(make_feeds(entry, s)) for s in range(samples)]
        layers = eng.engine.create_engine_inspector().layers()
    counts = {}
    for l in layers:
        if l["LayerType"] not in ("Constant", "Reformat"):
            counts[l["Precision"]] = counts.get(l["Precision"], 0) + 1
    rows = []
    for name, ref in refs[0].items():
        got = outs[0].get(name)
        ref = np.asarray(ref)
        if got is None or np.shape(got) != ref.shape:
            rows.append({"output": name, "note": f"shape {None if got is None else list(np.shape(got))} vs "
                                                 f"{list(ref.shape)}"})
            continue
        if not np.issubdtype(ref.dtype, np.floating):
            rows.append({"output": name, "exact": bool(np.array_equal(got, ref)), "dtype": ref.dtype.name})
            continue
        g32 = np.asarray(got, np.float32)
        finite = np.isfinite(g32)
        row = {"output": name, "max_abs": float(np.max(np.abs(g32 - ref))) if finite.all() else float("inf"),
               "cosine": cosine(g32, ref), "ref_max": float(np.max(np.abs(ref))) if ref.size else 0.0,
               "nonfinite": int((~finite).sum())}
        if classifier and is_classifier_output(ref) and samples > 1:
            agree = [np.array_equal(np.argmax(np.asarray(o[name], np.float32), -1), np.argmax(r[name], -1))
                     for o, r in zip(outs, refs)]
            row["top1"] = f"{sum(agree)}/{len(agree)}"
        rows.append(row)
    # detections (boxes [N, 4] beside int labels [N]): also compared without their order
    ints = [k for k, v in refs[0].items() if np.asarray(v).ndim == 1 and np.issubdtype(np.asarray(v).dtype, np.integer)]
    for row in rows:
        ref = np.asarray(refs[0][row["output"]]) if row["output"] in refs[0] else None
        if ref is None or "cosine" not in row or ref.ndim != 2 or ref.shape[1] != 4:
            continue
        lab = next((k for k in ints if len(refs[0][k]) == len(ref) and np.shape(outs[0].get(k)) == (len(ref),)), None)
        if lab is not None:
            c, m, n = matched_detections(ref, np.asarray(outs[0][row["output"]], np.float32), refs[0][lab],
                                         np.asarray(outs[0][lab]))
            row["matched"] = {"cosine": c, "max_abs": m, "distinct": n, "of": len(ref), "labels": lab}
    return {"rows": rows, "layers": counts, "build_s": build_s}


def first_divergence(path, entry, precision):
    """`debugkit run --PREC --mark-all` on seed 0's shapes: the first diverging node line it prints."""
    from debugkit.cli.main import main
    shapes = [f"{k}:{list(v['shape'])}".replace(" ", "") for k, v in entry["feeds"].items()]
    ranges = [f"{k}:[{v['range'][0]},{v['range'][1]}]" for k, v in entry["feeds"].items() if "range" in v]
    argv = ["run", path, "--engine", "--onnxrt", f"--{precision}", "--mark-all", "--input-shapes", *shapes]
    if ranges:
        argv += ["--val-range", *ranges]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv)
        except SystemExit:
            pass
    text = buf.getvalue()
    m = re.search(r">>> first diverging tensor '([^']*)', produced by node '([^']*)' \(([^)]*)\)([^\n]*)", text)
    if m is not None:
        return {"tensor": m.group(1), "node": m.group(2), "op": m.group(3), "rest": m.group(4)}
    m = re.search(r">>> error accumulates from node '([^']*)' through node '([^']*)' \(([^)]*)\) \((\d+) layers\)"
                  r"[^\n]*First tensor out of tolerance: '([^']*)'([^\n]*)", text)
    return None if m is None else {"tensor": m.group(5), "node": m.group(2), "op": m.group(3),
                                   "rest": f"; error accumulates from node '{m.group(1)}' ({m.group(4)} layers)"}


def fmt(x, kind):
    if x is None:
        return "-"
    if kind == "cos":
        return "nan" if x != x else f"{x:.6f}"
    return "inf" if x == float("inf") else f"{x:.3g}"


def table(results, threshold):
    lines = ["| model | output | FP16 max abs | FP16 cosine | FP16 top-1 | BF16 max abs | BF16 cosine | BF16 top-1 "
             "| \\|ref\\| max | layers FP16 / FP32 |", "|" + "---|" * 10]
    notes = []
    for name, res in results.items():
        if "error" in res:
            lines.append(f"| {name} | - | {res['error']} |" + " |" * 7)
            continue
        fp16, bf16 = res.get("fp16", {}), res.get("bf16", {})
        by_out16 = {r["output"]: r for r in fp16.get("rows", [])}
        by_out_b = {r["output"]: r for r in bf16.get("rows", [])}
        lay = fp16.get("layers", {})
        layer_note = f"{lay.get('float16', 0)} / {lay.get('float32', 0)}"
        for out in by_out16:
            a, b = by_out16[out], by_out_b.get(out, {})
            if "note" in a or "exact" in a:
                text = a.get("note") or (f"{a['dtype']}: {'exact' if a['exact'] else 'differs'}")
                lines.append(f"| {name} | {out} | {text} | | | | | | | {layer_note} |")
                continue
            lines.append(f"| {name} | {out} | {fmt(a['max_abs'], 'abs')} | {fmt(a['cosine'], 'cos')} | "
                         f"{a.get('top1', '-')} | {fmt(b.get('max_abs'), 'abs')} | {fmt(b.get('cosine'), 'cos')} | "
                         f"{b.get('top1', '-')} | {a['ref_max']:.3g} | {layer_note} |")
        for d in res.get("divergence", []):
            notes.append(f"- **{name}** `{d['output']}`: FP16 cosine {fmt(d['cosine'], 'cos')} < {threshold}; "
                         f"`debugkit run --fp16 --mark-all` names ONNX node `{d['node']}` ({d['op']}, tensor "
                         f"`{d['tensor']}`){d['why']}")
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", required=True, help="directory with public_models.json and the exported models")
    ap.add_argument("--shipped", required=True, help="directory the shipped models were fetched into")
    ap.add_argument("--models", nargs="+", help="only these manifest names")
    ap.add_argument("--samples", type=int, default=8, help="seeded inputs per model for top-1 agreement (default 8)")
    ap.add_argument("--threshold", type=float, default=0.999, help="FP16 cosine below this is investigated")
    ap.add_argument("--classifiers", nargs="+", default=list(CLASSIFIERS),
                    help="models whose 2-D outputs are class scores (top-1 agreement is reported for them)")
    ap.add_argument("--doc", help="Markdown file whose precision-table section to rewrite")
    ap.add_argument("--json", help="also write the raw results here")
    args = ap.parse_args(argv)
    from native.logger import G_LOGGER
    G_LOGGER.min_severity = G_LOGGER.ERROR
    results = {}
    for entry in load_manifest(args.corpus):
        name = entry["name"]
        if args.models and name not in args.models:
            continue
        path = model_path(entry, args.corpus, args.shipped)
        if not os.path.exists(path):
            results[name] = {"error": f"model file not found under {args.corpus if entry['source'] == 'exported' else args.shipped}"}
            continue
        res = results[name] = {}
        for prec in PRECISIONS:
            t0 = time.perf_counter()
            try:
                res[prec] = run_model(entry, path, prec, args.samples, name in args.classifiers)
            except Exception as e:  # the table says what failed instead of stopping
                res[prec] = {"rows": [{"output": "-", "note": f"{prec} failed: {type(e).__name__}: {str(e)[:150]}"}]}
            print(f"{name} {prec}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        bad = [r for r in res["fp16"]["rows"] if "cosine" in r and not (r["cosine"] >= args.threshold)]
        if bad:
            d = first_divergence(path, entry, "fp16")
            res["divergence"] = []
            for r in bad:
                why = ""
                if r["nonfinite"]:
                    why = f": {r['nonfinite']} NaN/Inf value(s) in the output"
                elif r["ref_max"] > 65504:
                    why = f": values up to {r['ref_max']:.3g} exceed FP16's 65504"
                if r.get("matched"):
                    mt = r["matched"]
                    why = (f"; compared without their order (each reference box against the nearest engine box of "
                           f"its label, `{mt['labels']}`) the detections agree at cosine {mt['cosine']:.6f}, "
                           f"{mt['distinct']} of {mt['of']} engine boxes matched, max error of a matched box "
                           f"{mt['max_abs']:.3g}")
                res["divergence"].append({"output": r["output"], "cosine": r["cosine"], "why": why,
                                          **(d or {"node": "?", "op": "?", "tensor": "?"})})
    text = table(results, args.threshold)
    if args.json:
        from native.files import output_file
        with output_file(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
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
