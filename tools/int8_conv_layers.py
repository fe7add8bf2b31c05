"""Time every INT8 NHWC convolution tactic (cuDNN's INT8 graphs and our kernels) on ResNet-50's convolutions at a
given batch, int8 in -> int8 out with the fused epilogue, and print a Markdown table: GPU ms per tactic per layer
(each run captured 10 times in a CUDA graph, best of 5 replays), and the network's total convolution time if every
layer took its fastest tactic (each shape weighted by how often ResNet-50 has it). Needs a GPU.

    python tools/int8_conv_layers.py [--batch 128] [--tactics tma-int8-128x128-s4,...] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# (C, M, kernel, stride, input size, residual, how many in ResNet-50 v1.5)
LAYERS = [
    (64, 64, 1, 1, 56, False, 1), (256, 64, 1, 1, 56, False, 2), (64, 64, 3, 1, 56, False, 3),
    (64, 256, 1, 1, 56, True, 3), (64, 256, 1, 1, 56, False, 1),
    (256, 128, 1, 1, 56, False, 1), (512, 128, 1, 1, 28, False, 3), (128, 128, 3, 2, 56, False, 1),
    (128, 128, 3, 1, 28, False, 3), (128, 512, 1, 1, 28, True, 4), (256, 512, 1, 2, 56, False, 1),
    (512, 256, 1, 1, 28, False, 1), (1024, 256, 1, 1, 14, False, 5), (256, 256, 3, 2, 28, False, 1),
    (256, 256, 3, 1, 14, False, 5), (256, 1024, 1, 1, 14, True, 6), (512, 1024, 1, 2, 28, False, 1),
    (1024, 512, 1, 1, 14, False, 1), (2048, 512, 1, 1, 7, False, 2), (512, 512, 3, 2, 14, False, 1),
    (512, 512, 3, 1, 7, False, 2), (512, 2048, 1, 1, 7, True, 3), (1024, 2048, 1, 2, 14, False, 1),
]


def conv_op(c, m, k, stride, residual, rng):
    """A ConvolutionNHWC layer with int8 I/O (the builder's INT8 I/O params) and ReLU, as passes/int8_io.py makes
    ResNet's."""
    from native.tactics import Op
    post = ([{"op": "add", "input": 3}] if residual else []) + [{"op": "activation", "type": "RELU"}]
    p8 = {"input_scale": 0.05, "output_scale": 0.08, "rounding": "half_even", "narrow_weights": True,
          "weight_rounding": "half_up", "io": {"input": "int8", "output": "int8"}}
    if residual:
        p8["residual_scales"] = {"3": 0.06}
    pad = k // 2
    params = {"kernel_spatial": [k, k], "num_output_maps": m, "strides": [stride, stride], "pre_padding": [pad, pad],
              "post_padding": [pad, pad], "dilations": [1, 1], "post_ops": post, "int8": p8, "groups": 1}
    w = {"kernel_hwio": (rng.standard_normal((k * k * c, m)) * 0.05).astype(np.float32),
         "bias": rng.standard_normal(m).astype(np.float32)}
    return Op("ConvolutionNHWC", "conv", params, w, precision="int8", format="nhwc")


def graph_ms(run, reps: int = 10, rounds: int = 5) -> float:
    """GPU ms of one run(): `reps` runs captured in a CUDA graph, the best of `rounds` replays."""
    from native.cuda.driver import _cu, check, context
    cu, ctx = _cu(), context()
    run()
    ctx.synchronize()
    check(cu.cuStreamBeginCapture(ctx.stream, cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED),
          "cuStreamBeginCapture")
    keep = [run() for _ in range(reps)]
    graph = check(cu.cuStreamEndCapture(ctx.stream), "cuStreamEndCapture")
    exe = check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    best = min(ctx.time_ms(lambda: check(cu.cuGraphLaunch(exe, ctx.stream), "cuGraphLaunch"))
               for _ in range(rounds))
    cu.cuGraphExecDestroy(exe)
    cu.cuGraphDestroy(graph)
    del keep
    return best / reps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tactics", help="comma-separated tactic names (default: every INT8 NHWC tactic)")
    ap.add_argument("--json", help="also write the timings here")
    ap.add_argument("--layers", help="comma-separated row numbers of the table to time (default: all)")
    args = ap.parse_args(argv)

    from native.cuda.array import GpuArray
    from native.tactics import LayerContext, tactics_for
    tactics = [t for t in tactics_for("ConvolutionNHWC", "cuda") if getattr(t, "int8_io", False)]
    if args.tactics:
        want = args.tactics.split(",")
        tactics = [t for t in tactics if t.name in want]
    names = [t.name for t in tactics]
    rng = np.random.default_rng(0)
    n = args.batch
    rows, total = [], {}
    rows_wanted = {int(i) for i in args.layers.split(",")} if args.layers else None
    for i, (c, m, k, s, h, res, count) in enumerate(LAYERS):
        if rows_wanted is not None and i not in rows_wanted:
            continue
        op = conv_op(c, m, k, s, res, rng)
        oh = (h + 2 * (k // 2) - k) // s + 1
        x = GpuArray.from_host(rng.integers(-128, 128, (n, h, h, c)).astype(np.int8))
        r = GpuArray.from_host(rng.integers(-128, 128, (n, oh, oh, m)).astype(np.int8)) if res else None
        inputs = [x, None, None] + ([r] if r is not None else [])
        y = GpuArray((n, oh, oh, m), np.int8)
        times = {}
        for t in tactics:
            why = t.supports(op, LayerContext.of(inputs))
            if why:
                times[t.name] = None
                continue
            try:
                times[t.name] = graph_ms(lambda: t.run(op, inputs, [y]))
            except Exception as e:   # noqa: BLE001 - reported, and the table says '-'
                print(f"  {t.name} on {c}->{m} {k}x{k}/{s} @{h}: {type(e).__name__}: {str(e)[:120]}", file=sys.stderr)
                times[t.name] = None
        ok = {kk: v for kk, v in times.items() if v is not None}
        best = min(ok, key=ok.get) if ok else None
        label = f"{c}->{m} {k}x{k}{'/2' if s == 2 else ''} @{h}{' + res' if res else ''} (x{count})"
        rows.append((label, times, best, count))
        for name, v in ok.items():
            total[name] = total.get(name, 0.0) + v * count
        total["best"] = total.get("best", 0.0) + (ok[best] * count if best else 0.0)
        print(f"{label}: " + ", ".join(f"{kk} {v:.4f}" for kk, v in sorted(ok.items(), key=lambda kv: kv[1])),
              file=sys.stderr, flush=True)
    print(f"ResNet-50 batch {n}, INT8 NHWC convolutions (int8 in/out, bias + rescale [+ int8 residual] + ReLU), "
          f"GPU ms ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})\n")
    print("| layer | " + " | ".join(names) + " | best |")
    print("|---" * (len(names) + 2) + "|")
    for label, times, best, _ in rows:
        cells = [("**%.4f**" if nm == best else "%.4f") % times[nm] if times.get(nm) is not None else "-"
                 for nm in names]
        print(f"| {label} | " + " | ".join(cells) + f" | {best} |")
    print(f"\nAll 53 convolutions at each layer's best tactic: {total['best']:.3f} ms")
    if args.json:     # written whole or not at all (native.files)
        from native.files import write_json
        write_json(args.json, {"batch": n, "rows": [{"layer": lb, "ms": t, "best": b, "count": cnt}
                                                    for lb, t, b, cnt in rows], "total": total})
    return 0


if __name__ == "__main__":
    sys.exit(main())
