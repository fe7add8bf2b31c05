"""INT8 post-training quantization of corpus models: our engine against ONNX Runtime's quantize_static.

For each model:
  1. calibration inputs and held-out inputs (disjoint seeds) that look like the model's real inputs (see `inputs`);
  2. ONNX Runtime: quant_pre_process, then quantize_static in QDQ format, per-channel symmetric int8 weights,
     symmetric int8 activations (zero point 0, which TensorRT and our engine require), once with the MinMax and
     once with the Entropy calibration method, on the calibration inputs;
  3. ours, implicit INT8: the FP32 model built with --int8 and a Calibrator (entropy2, minmax) on the SAME inputs;
  4. ours, explicit INT8: each QDQ model from step 2 built with --int8 (Q/DQ fused into INT8 kernels);
  5. on the held-out inputs: error against ONNX Runtime's FP32 run (1 - cosine, max abs; per output, over all
     held-out inputs together) for steps 2 and 3, and for step 4 the cosine against ONNX Runtime's own run of the
     same QDQ model plus, for classifiers, top-1 agreement with it over --top1 seeded inputs.
Writes a Markdown table (stdout, or into the INT8 section of --doc between its markers).

    python tools/int8_table.py --corpus CORPUS_DIR --shipped SHIPPED_DIR --work WORK_DIR [--doc docs/PRECISION.md]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MODELS = {  # name in the manifest -> (classifier?)
    "timm-resnet18": True,
    "timm-mobilenetv3_small_100": True,
    "ppocr_v4_det": False,
    "ppocr_v4_rec": False,
}
BEGIN, END = "<!-- int8-table:begin -->", "<!-- int8-table:end -->"
CALIB_CHUNK = None   # --ort-calib-chunk: ONNX Runtime's CalibMaxIntermediateOutputs (bounds its calibration memory)


def load_manifest(corpus):
    with open(os.path.join(corpus, "public_models.json")) as f:
        return {m["name"]: m for m in json.load(f)["models"]}


def model_path(entry, corpus, shipped):
    return os.path.join(corpus if entry["source"] == "exported" else shipped, entry["path"])


def inputs(entry, corpus, seed, count):
    """`count` feed dicts. Exported models: the exporter's own input from NAME_io.npz (normalised-image
    statistics) and seeded variations of it (random shift, flip, gain 0.8-1.2, Gaussian noise of 0.2). Shipped OCR
    models: synthetic text images (see `text_images`) normalised as PaddleOCR does."""
    rng = np.random.default_rng(seed)
    (name, spec), = entry["feeds"].items()
    shape = tuple(spec["shape"])
    base = None
    npz = os.path.join(corpus, "models", f"{entry['name']}_io.npz")
    if entry["source"] == "exported" and os.path.exists(npz):
        data = np.load(npz)
        base = data[f"in_{name}"] if f"in_{name}" in data else None
    feeds = []
    for _ in range(count):
        if base is not None:
            x = np.roll(base, (int(rng.integers(-20, 21)), int(rng.integers(-20, 21))), axis=(2, 3))
            if rng.random() < 0.5:
                x = x[..., ::-1]
            x = x * rng.uniform(0.8, 1.2) + rng.normal(0, 0.2, shape)
        else:
            x = text_images(rng, shape, entry["name"])
        feeds.append({name: np.ascontiguousarray(x, dtype=np.float32)})
    return feeds


def text_images(rng, shape, name):
    """Dark pen strokes grouped into characters and text lines on a light, unevenly lit background: one line
    filling a 48-pixel crop for the recogniser, several lines on a page for the detector. Normalised as PaddleOCR
    does: the detector with ImageNet's mean/std, the recogniser to (x - 0.5) / 0.5."""
    n, c, h, w = shape
    out = np.empty(shape, np.float32)
    for b in range(n):
        light = rng.uniform(0.75, 1.0, (c, 3, 3))
        yy, xx = np.linspace(0, 2, h)[:, None], np.linspace(0, 2, w)[None, :]
        y0, x0 = np.minimum(yy.astype(int), 1), np.minimum(xx.astype(int), 1)
        fy, fx = yy - y0, xx - x0
        img = np.stack([(light[k][y0, x0] * (1 - fy) * (1 - fx) + light[k][y0 + 1, x0] * fy * (1 - fx)
                         + light[k][y0, x0 + 1] * (1 - fy) * fx + light[k][y0 + 1, x0 + 1] * fy * fx)
                        for k in range(c)])
        lines = [(int(h * 0.2), int(h * 0.6))] if h <= 64 else \
            [(int(y), int(rng.integers(14, 36))) for y in np.sort(rng.choice(np.arange(10, h - 50, 48),
                                                                               size=min(8, (h - 60) // 48),
                                                                               replace=False))]
        for top, height in lines:
            ink = rng.uniform(0.0, 0.35, c)[:, None, None]
            x = int(rng.integers(4, max(5, w // 8)))
            end = int(rng.integers(w // 2, w - 4))
            while x < end:
                cw = max(3, int(height * rng.uniform(0.5, 1.0)))
                t = max(1, height // 8)
                for _ in range(int(rng.integers(2, 5))):
                    if rng.random() < 0.5:   # vertical stroke
                        sx = x + int(rng.integers(0, cw))
                        img[:, top:top + height, sx:sx + t] = ink
                    else:
                        sy = top + int(rng.integers(0, height))
                        img[:, sy:sy + t, x:x + cw] = ink
                x += cw + int(rng.integers(2, max(3, height // 3)))
        img = np.clip(img + rng.normal(0, 0.02, img.shape), 0, 1)
        if "det" in name:
            mean = np.array([0.485, 0.456, 0.406])[:, None, None]
            std = np.array([0.229, 0.224, 0.225])[:, None, None]
            out[b] = (img - mean) / std
        else:
            out[b] = (img - 0.5) / 0.5
    return out


def ort_session(path):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def ort_quantize(src, dst_dir, tag, calib, method):
    """quantize_static (QDQ, per-channel symmetric int8) after quant_pre_process; returns (path, note). When the
    pre-processed model quantizes into a model ONNX Runtime cannot load, the raw model is quantized instead."""
    path, note = _ort_quantize(src, dst_dir, tag, calib, method, True)
    try:
        ort_session(path)
    except Exception as e:
        path, _ = _ort_quantize(src, dst_dir, tag + "_raw", calib, method, False)
        note += (f"the model quantized after quant_pre_process does not load in ONNX Runtime "
                 f"({str(e).split(':')[-1].strip()[:80]}); quantized the model without pre-processing. ")
    return path, note


def _ort_quantize(src, dst_dir, tag, calib, method, preprocess):
    from onnxruntime.quantization.shape_inference import quant_pre_process
    pre = os.path.join(dst_dir, f"{tag}_pre.onnx")
    note = ""
    if not preprocess:
        pre = src
    cwd = os.getcwd()
    os.chdir(dst_dir)   # ONNX Runtime's tools leave temporary models in the working directory
    try:
        if preprocess and not os.path.exists(pre):
            try:
                quant_pre_process(src, pre)
            except Exception as e:   # ONNX Runtime's documented way out: skip its symbolic shape inference
                note = f"quant_pre_process failed ('{str(e)[:80]}'); ran it with skip_symbolic_shape=True. "
                try:
                    quant_pre_process(src, pre, skip_symbolic_shape=True)
                except Exception as e2:   # the quantizer may still work on the raw model
                    note = (f"quant_pre_process failed ('{str(e)[:80]}', and with skip_symbolic_shape: "
                            f"'{str(e2)[:80]}'); quantized the model as is. ")
                    pre = src
        elif preprocess and os.path.exists(pre + ".note"):
            note = open(pre + ".note").read()
        if preprocess and note and not os.path.exists(pre + ".note") and pre != src:
            from native.files import output_file
            with output_file(pre + ".note", "w") as f:
                f.write(note)
        return _quantize(pre, dst_dir, tag, calib, method), note
    finally:
        os.chdir(cwd)


def _quantize(pre, dst_dir, tag, calib, method):
    from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, \
        quantize_static
    out = os.path.join(dst_dir, f"{tag}_{method.lower()}_qdq.onnx")
    if os.path.exists(out):   # quantized by an earlier run with the same --work (delete it to quantize again)
        return out

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(calib)

        def get_next(self):
            return next(self.it, None)

    quantize_static(pre, out, Reader(), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
                    weight_type=QuantType.QInt8, per_channel=True,
                    calibrate_method=getattr(CalibrationMethod, method),
                    extra_options=dict({"ActivationSymmetric": True, "WeightSymmetric": True},
                                       **({"CalibMaxIntermediateOutputs": CALIB_CHUNK} if CALIB_CHUNK else {})))
    return out


def our_engine(path, shape_feed, calib=None, algorithm=None, qdq_emulation=None):
    from backends.engine import BuilderConfig, BuilderFlag, Calibrator
    from backends.runners.engine import EngineRunner
    cal = Calibrator(calib, algorithm=algorithm) if calib is not None else None
    shapes = {k: v.shape for k, v in shape_feed.items()}
    config = None
    if qdq_emulation:
        config = BuilderConfig()
        config.set_flag(BuilderFlag.INT8)
        config.qdq_emulation = qdq_emulation
    runner = EngineRunner(path, shapes=shapes, flags=("int8",), calibrator=cal, config=config)
    runner.activate()
    return runner


def errors(ref_runs, runs):
    """Per output: (1 - cosine, max abs) over all runs together."""
    out = []
    for i in range(len(ref_runs[0])):
        a = np.concatenate([np.asarray(r[i], np.float64).ravel() for r in ref_runs])
        b = np.concatenate([np.asarray(r[i], np.float64).ravel() for r in runs])
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-300))
        out.append((1.0 - cos, float(np.max(np.abs(a - b)))))
    return out


def run_ours(runner, feeds, names):
    outs = []
    for f in feeds:
        r = runner.infer(f)
        outs.append([np.asarray(r[n]) for n in names])
    return outs


def _environment():
    import platform
    import onnxruntime
    return {"onnxruntime": onnxruntime.__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared with other jobs)"}


def evaluate(name, classifier, args, manifest):
    entry = manifest[name]
    src = model_path(entry, args.corpus, args.shipped)
    calib = inputs(entry, args.corpus, 1000, args.calib)
    held = inputs(entry, args.corpus, 2000, args.held_out)
    fp32 = ort_session(src)
    names = [o.name for o in fp32.get_outputs()]
    ref = [fp32.run(None, f) for f in held]
    row = {"model": name, "notes": [], "setup": dict(_environment(), calib=args.calib, held_out=args.held_out,
                                                    top1=args.top1)}
    for method, ours_algo in (("MinMax", "minmax"), ("Entropy", "entropy2")):
        if method not in args.methods:
            continue
        t0 = time.time()
        try:
            qdq, note = ort_quantize(src, args.work, name, calib, method)
            if note and note not in row["notes"]:
                row["notes"].append(note)
            qs = ort_session(qdq)
            ort_runs = [qs.run(None, f) for f in held]
            row[f"ort_{method}"] = errors(ref, ort_runs)
        except Exception as e:
            row["notes"].append(f"ONNX Runtime's quantizer failed with {method}: {type(e).__name__}: {str(e)[:120]}")
            qdq = None
        if not args.explicit_only:
            implicit = our_engine(src, held[0], calib, ours_algo)
            ours = run_ours(implicit, held, implicit.output_names())
            implicit.deactivate()
            row[f"ours_{ours_algo}"] = errors(ref, ours)
        if qdq is not None:   # acceptance 5: the same QDQ model on our engine vs ONNX Runtime's run of it
            top = inputs(entry, args.corpus, 3000, args.top1) if classifier else []
            ort_top = [qs.run(None, f)[0] for f in top]
            for key, emulation in (("", None), ("ortx86_", "onnxruntime-x86")):
                explicit = our_engine(qdq, held[0], qdq_emulation=emulation)
                ex_names = explicit.output_names()
                runs = run_ours(explicit, held, ex_names)
                row[f"qdq_{key}{method}"] = errors(ort_runs, runs)
                row[f"qdq_{key}bits_{method}"] = float(np.mean([all(np.array_equal(np.asarray(a), b)
                                                                    for a, b in zip(o, r))
                                                                for o, r in zip(ort_runs, runs)]))
                if classifier:
                    agree = sum(int(np.argmax(a) == np.argmax(np.asarray(explicit.infer(f)[ex_names[0]])))
                                for f, a in zip(top, ort_top))
                    row[f"top1_{key}{method}"] = agree / len(top)
                explicit.deactivate()
        print(f"{name} {method}: {time.time() - t0:.1f} s", file=sys.stderr)
    return row


def fmt(err):
    if err is None:
        return "n/a"
    return " / ".join(f"{c:.2e}, {m:.3g}" for c, m in err)


def ratio(ours, theirs):
    if ours is None or theirs is None:
        return "n/a"
    r = [max(o[0] / t[0] if t[0] > 0 else np.inf, o[1] / t[1] if t[1] > 0 else np.inf) for o, t in zip(ours, theirs)]
    return f"{max(r):.2f}"


def table(rows, args):
    setup = dict(_environment(), **(rows[0].get("setup", vars(args)) if rows else vars(args)))
    lines = [f"Measured {setup.get('date', '?')} with ONNX Runtime {setup.get('onnxruntime', '?')} on "
             f"{setup.get('machine', '?')}.", "",
             f"Calibration: {setup['calib']} inputs, held-out: {setup['held_out']} inputs (disjoint seeds), top-1: "
             f"{setup['top1']} "
             f"inputs. Error = (1 - cosine, max abs) against ONNX Runtime FP32 on the held-out inputs, per output "
             f"(outputs separated by ' / '); ratio = the larger of ours/ORT over both metrics and all outputs "
             f"(acceptance: <= 1.25).", "",
             "| model | ORT QDQ MinMax | ours MinMax | ratio | ORT QDQ Entropy | ours Entropy2 | ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {fmt(r.get('ort_MinMax'))} | {fmt(r.get('ours_minmax'))} | "
                     f"{ratio(r.get('ours_minmax'), r.get('ort_MinMax'))} | {fmt(r.get('ort_Entropy'))} | "
                     f"{fmt(r.get('ours_entropy2'))} | {ratio(r.get('ours_entropy2'), r.get('ort_Entropy'))} |")
    lines += ["", "Explicit quantization: the QDQ models above on our engine (`--int8`) against ONNX Runtime's run of "
              "the same QDQ model (default session, x86-64): min cosine over outputs, top-1 agreement for the "
              "classifiers, and the share of held-out inputs whose outputs are bit-identical. \"ORT x86 "
              "emulation\": `config.qdq_emulation = \"onnxruntime-x86\"` (the Q/DQ groups ONNX Runtime's x86 CPU EP "
              "runs in FP32 run in FP32 here too, in its summation order); \"TensorRT fusion\": the default, every "
              "Q/DQ group INT8.", "",
              "| model | QDQ | ORT x86 emulation: cosine | top-1 | bit-equal | TensorRT fusion: cosine | top-1 | "
              "bit-equal |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        def cos(k):
            e = r.get(k)
            return "n/a" if e is None else f"{min(1 - c for c, _ in e):.6f}"

        def pct(k, none="-"):
            v = r.get(k)
            return none if v is None else f"{100 * v:.1f}%"
        for m in ("MinMax", "Entropy"):
            lines.append(f"| {r['model']} | {m} | {cos(f'qdq_ortx86_{m}')} | {pct(f'top1_ortx86_{m}')} | "
                         f"{pct(f'qdq_ortx86_bits_{m}', 'n/a')} | {cos(f'qdq_{m}')} | {pct(f'top1_{m}')} | "
                         f"{pct(f'qdq_bits_{m}', 'n/a')} |")
    notes = [f"- {r['model']}: {n}" for r in rows for n in r["notes"]]
    if notes:
        lines += ["", "Notes:"] + notes
    return "\n".join(lines) + "\n"


def write_doc(path, text):
    doc = open(path).read() if os.path.exists(path) else ""
    block = f"{BEGIN}\n{text}{END}"
    if BEGIN in doc and END in doc:
        doc = doc[:doc.index(BEGIN)] + block + doc[doc.index(END) + len(END):]
    else:
        doc = doc.rstrip("\n") + "\n\n" + block + "\n"
    from native.files import output_file
    with output_file(path, "w") as f:
        f.write(doc)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", required=True, help="the corpus dir (public_models.json, models/)")
    ap.add_argument("--shipped", required=True, help="dir the shipped models were fetched into")
    ap.add_argument("--work", required=True, help="dir for the quantized models")
    ap.add_argument("--models", nargs="*", default=list(MODELS))
    ap.add_argument("--calib", type=int, default=32)
    ap.add_argument("--held-out", type=int, default=16)
    ap.add_argument("--top1", type=int, default=200)
    ap.add_argument("--doc", help="write the table into this Markdown file between its int8-table markers")
    ap.add_argument("--json", help="also write the raw numbers here")
    ap.add_argument("--explicit-only", action="store_true",
                    help="measure only ONNX Runtime's QDQ models and our runs of them (with --merge: keep the rest)")
    ap.add_argument("--merge", metavar="JSON", help="update this earlier --json file's rows with the new numbers")
    ap.add_argument("--methods", nargs="+", default=["MinMax", "Entropy"], choices=["MinMax", "Entropy"],
                    help="ONNX Runtime calibration methods to measure (ours: minmax, entropy2 respectively)")
    ap.add_argument("--note", action="append", default=[], metavar="MODEL:TEXT",
                    help="a note for a model's row (e.g. what failed outside this run)")
    ap.add_argument("--ort-calib-chunk", type=int, metavar="N",
                    help="ONNX Runtime's calibrator keeps every intermediate output of every calibration input in "
                         "memory (ppocr_v4_det at 640x640 x 32 inputs: over 17 GB); N bounds it to N inputs at a time "
                         "(its CalibMaxIntermediateOutputs)")
    ap.add_argument("--render", nargs="+", default=[], metavar="JSON",
                    help="no measuring: render the table from the --json files of earlier runs")
    args = ap.parse_args(argv)
    global CALIB_CHUNK
    CALIB_CHUNK = args.ort_calib_chunk
    args.corpus, args.shipped, args.work = map(os.path.abspath, (args.corpus, args.shipped, args.work))
    from native.logger import G_LOGGER, Severity
    G_LOGGER.min_severity = Severity.ERROR   # the calibration's per-tensor warnings would drown the table
    os.makedirs(args.work, exist_ok=True)
    manifest = load_manifest(args.corpus)
    rows = []
    for path in args.render:
        with open(path) as f:
            rows += json.load(f)
    if args.merge and os.path.exists(args.merge):
        with open(args.merge) as f:
            rows += json.load(f)
    for m in ([] if args.render else args.models):
        new = evaluate(m, MODELS.get(m, False), args, manifest)
        old = next((r for r in rows if r["model"] == m), None)
        if old is not None:
            old.update({k: v for k, v in new.items() if k not in ("notes", "setup")})
            old["notes"] = list(dict.fromkeys(old.get("notes", []) + new["notes"]))
        else:
            rows.append(new)
        if args.json:   # after every model: a long run that stops still leaves its finished rows
            from native.files import output_file
            with output_file(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    for spec in args.note:
        model, _, text = spec.partition(":")
        for r in rows:
            if r["model"] == model and text not in r["notes"]:
                r["notes"].append(text)
    text = table(rows, args)
    if args.doc:
        write_doc(args.doc, text)
    print(text)


if __name__ == "__main__":
    main()
