"""Make chosen layers of a model FP16-sensitive on purpose, leaving its FP32 outputs unchanged (bit for bit).

    python tools/make_fp16_sensitive.py MODEL.onnx -o OUT.onnx --layers NODE [NODE ...] [--feeds-seed 1]

For each named Conv / MatMul / Gemm node L with constant weights: its weights and its bias are multiplied by k = 2^s
("bias-compensated": the bias scales with the weights, so L's output is exactly k times the original), with s the
smallest power that pushes L's output and its largest weight past FP16's largest value (65504); a new node
`<L>/fp16_compensation` multiplies by 1/k and restores the original values for L's readers (exact in FP32: k is a
power of two). The factor 1/k is computed at run time (`0 * min(input of L) + 1/k`, exact in FP16 too) so the
builder cannot fold the compensation back into L's weights. In FP32 nothing changes; with FP16 the scaled weights and
the scaled tensor overflow to inf unless L *and* its compensation run in FP32 (the tensor between them must be FP32
too), so the layers that must stay FP32 are exactly {L, L/fp16_compensation} for each planted L. The tool prints
that set as JSON (`--answer FILE` writes it).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
import onnx
from onnx import helper, numpy_helper

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

FP16_MAX = 65504.0


def _constant(graph, name):
    """The initializer array behind `name`, following Identity chains; (array, initializer name) or (None, None)."""
    inits = {t.name: t for t in graph.initializer}
    producers = {o: n for n in graph.node for o in n.output}
    seen = 0
    while name not in inits and name in producers and producers[name].op_type == "Identity" and seen < 10:
        name, seen = producers[name].input[0], seen + 1
    if name in inits:
        return numpy_helper.to_array(inits[name]), name
    return None, None


def plant(model: onnx.ModelProto, layers, values: dict) -> dict:
    """Plant each layer in place; `values` holds FP32 outputs of the layers (to choose k). Returns {L: [L, comp]}."""
    g = model.graph
    by_name = {n.name: n for n in g.node}
    answer = {}
    for name in layers:
        node = by_name.get(name)
        if node is None or node.op_type not in ("Conv", "MatMul", "Gemm"):
            raise SystemExit(f"{name}: not a Conv/MatMul/Gemm node of the model")
        peak = float(np.max(np.abs(values[node.output[0]])))
        w_peak = float(np.max(np.abs(_constant(g, node.input[1])[0])))
        if peak == 0.0 or w_peak == 0.0:
            raise SystemExit(f"{name}: its output (or weight) is all zeros on these feeds, so no scale makes it "
                             f"overflow; choose another layer")
        s = max(1, int(np.ceil(np.log2(4 * FP16_MAX / max(min(peak, w_peak), 1e-30)))))
        k = np.float32(2.0 ** s)
        w_idx = 1
        for idx in ([w_idx, 2] if len(node.input) > 2 else [w_idx]):
            arr, _ = _constant(g, node.input[idx])
            if arr is None:
                raise SystemExit(f"{name}: input {idx} ({node.input[idx]}) is not a constant")
            new = f"{name}/fp16_sensitive_{idx}"
            g.initializer.append(numpy_helper.from_array((arr * k).astype(np.float32), new))
            node.input[idx] = new
        if node.op_type == "MatMul":   # MatMul has no bias: only the weight scales
            pass
        out = node.output[0]
        node.output[0] = f"{out}/scaled"
        c = f"{name}/fp16_compensation"
        g.initializer.extend([numpy_helper.from_array(np.array(1.0 / k, np.float32), f"{c}/inv_k"),
                              numpy_helper.from_array(np.array(0.0, np.float32), f"{c}/zero")])
        helpers = [helper.make_node("Mul", [node.input[0], f"{c}/zero"], [f"{c}/zeros"], name=f"{c}/zeros"),
                   helper.make_node("ReduceMin", [f"{c}/zeros"], [f"{c}/min"], name=f"{c}/min", keepdims=0),
                   helper.make_node("Add", [f"{c}/min", f"{c}/inv_k"], [f"{c}/factor"], name=f"{c}/factor")]
        comp = helper.make_node("Mul", [node.output[0], f"{c}/factor"], [out], name=c)
        at = list(g.node).index(node) + 1
        for j, h in enumerate(helpers + [comp]):
            g.node.insert(at + j, h)
        answer[name] = {"k": float(k), "peak_fp32": peak, "peak_scaled": peak * float(k),
                        "must_stay_fp32": [name, comp.name]}
    return answer


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--layers", nargs="+", required=True, metavar="NODE")
    p.add_argument("--input-shapes", nargs="+", default=[], metavar="NAME:[D,...]")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--answer", metavar="FILE.json", help="write the set of layers that must stay FP32")
    a = p.parse_args(argv)
    from backends.runners import OnnxrtRunner
    from backends.runners.model import onnx_input_metadata
    from debugkit.cli import _args
    from debugkit.data_loader import DataLoader, coerce_feeds
    model = onnx.load(a.model)
    meta = onnx_input_metadata(model)
    dl = DataLoader(a.seed, 1, {}, _args.parse_shape_list(a.input_shapes))
    dl.input_metadata = meta
    feeds = coerce_feeds(next(iter(dl)), meta)
    targets = [n.output[0] for n in model.graph.node if n.name in a.layers]
    with OnnxrtRunner(model, mark=targets) as r:
        values = r.infer(feeds, taps=targets)
    answer = plant(model, a.layers, values)
    onnx.checker.check_model(model)
    from debugkit.surgeon.external_data import save_model
    save_model(model, a.output)
    with OnnxrtRunner(a.model) as r0, OnnxrtRunner(a.output) as r1:
        before, after = r0.infer(feeds), r1.infer(feeds)
    diff = max(float(np.max(np.abs(np.asarray(before[k], np.float64) - np.asarray(after[k], np.float64))))
               for k in before if np.asarray(before[k]).dtype.kind == "f")
    must = sorted(x for v in answer.values() for x in v["must_stay_fp32"])
    print(json.dumps({"planted": answer, "must_stay_fp32": must, "fp32_max_abs_change": diff}, indent=1))
    if a.answer:
        from native.files import output_file
        with output_file(a.answer, "w") as f:
            json.dump({"must_stay_fp32": must, "planted": answer}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
