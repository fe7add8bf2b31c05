"""A model's run with another checkout's compiled SiLU / epilogue kernels against this one's, one build, one process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1 \
        python tools/silu_model_ab.py --old-tree OLD_CHECKOUT [--models yolov8n] [--rounds 15] [--calls N]

Two builds of one model differ by up to ±10% through the tactics timing picks at near-ties (docs/PERFORMANCE.md,
2026-11-29 13:42), more than a kernel change moves a whole run. So this builds once (tools/benchmark.py's build and
feeds) and swaps only the kernels the layers reach through `native.cpu.jit.kernel` by name (--kernels; default the
SiLU pass, the one-pass epilogue and the Winograd band, which carry the *-polyexp floats' SiLU) between
OLD_CHECKOUT's modules (loaded as modules of their own) and this tree's (what the tactics kept of the kernels
they looked up dropped at each swap: `_forgetter`), in alternating blocks of --calls executes
(ABBA over --rounds rounds), process time (run it on one thread: DEBUGKIT_THREADS=1 OPENBLAS_NUM_THREADS=1).
Kernels compiled into other kernels keep this tree's code in both modes (jit_stem's SiLU call, the phase-GEMM
band's inline SiLU). Prints, per model, how many elements each swapped kernel saw in one run, both modes'
median ms per run, new / old, and whether the two modes' outputs are the same bits.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.corpus.corpus import find_path, manifest  # noqa: E402
from tools import benchmark as B  # noqa: E402


def _old_module(tree, name):
    """OLD_CHECKOUT's native/cpu/<name>.py as a module of its own, numba's disk cache off for it (a module by
    another name: its cache entry cannot be loaded back in the next process). Its imports are this tree's."""
    path = os.path.join(tree, "native", "cpu", name + ".py")
    with open(path) as f:
        src = f.read().replace("cache=True", "cache=False")
    mod = types.ModuleType("silu_model_ab_old_" + name)
    mod.__file__ = path
    exec(compile(src, path, "exec"), mod.__dict__)
    return mod


def _counting(fn, counts, name):
    def wrapped(*args):
        key = name
        if name == "bias_steps_inplace":   # by its steps' codes (6, 7: SILU_POLYEXP)
            key = f"{name} codes {'-'.join(str(int(c)) for c in args[2][:, 0]) or 'none'}"
        elif name != "silu_polyexp_inplace":   # another kernel: its calls
            key = f"{name} calls"
        counts[key] = counts.get(key, 0) + (1 if key.endswith(" calls") else args[0].size)
        return fn(*args)
    return wrapped


def _forgetter():
    """A function that drops what the tactics keep of the kernels they looked up (winograd-f2x3-jit's plan per op
    and its band kernel, phase-gemm-s2's band kernel), so the next run looks them up again in the swapped table."""
    import gc

    from native.cpu.kernels.conv import phase_gemm, winograd
    from native.tactics import Op
    ops = [o for o in gc.get_objects() if isinstance(o, Op) and "_wino_jit_plan" in o.__dict__]

    def forget():
        for o in ops:
            o.__dict__.pop("_wino_jit_plan", None)
        winograd._STATE.clear()
        phase_gemm._STATE.clear()
    return forget


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old-tree", required=True, help="a checkout whose native/cpu/jit_act.py is the old code")
    ap.add_argument("--models", default="yolov8n")
    ap.add_argument("--kernels", default="jit_act:silu_polyexp_inplace,jit_act:bias_steps_inplace,"
                                         "jit_winograd:wino_band,jit_winograd:wino_out",
                    help="module:kernel pairs (native/cpu/<module>.py, the name jit.kernel knows)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=0, help="executes per block (default: ~0.1 s worth)")
    a = ap.parse_args(argv)
    from native.cpu import jit
    pairs = [p.split(":") for p in a.kernels.split(",")]
    mods = {m: _old_module(a.old_tree, m) for m in {m for m, _ in pairs}}
    new = {k: jit.kernel(k) for _, k in pairs}
    old = {k: getattr(mods[m], k) for m, k in pairs}
    entries = {m["name"]: m for m in manifest()}
    print(f"OpenBLAS core type: {os.environ.get('OPENBLAS_CORETYPE') or 'unpinned'}; load "
          f"{os.getloadavg()[0]:.2f}; threads {os.environ.get('DEBUGKIT_THREADS', 'default')}")
    for model in a.models.split(","):
        feeds = B.make_feeds(entries[model]["feeds"])
        ctx, _, _ = B.build_engine(find_path(entries[model]), feeds)
        by = {}
        for node in ctx.engine.graph.nodes:
            if any(st.get("op") == "activation" and "SILU" in str(st.get("type")) for st in
                   node.params.get("post_ops") or ()):
                by[node.tactic_name] = by.get(node.tactic_name, 0) + 1
        print(f"{model}: layers with a SiLU post-op by tactic: " +
              ", ".join(f"{k} {v}" for k, v in sorted(by.items(), key=lambda kv: -kv[1])))
        outs, counts = {}, {}
        ctx.execute(dict(feeds))
        forget = _forgetter()
        for mode, fns in (("old", old), ("new", new)):
            jit._KERNELS.update(fns)
            forget()
            for _ in range(3):
                got = ctx.execute(dict(feeds))
            outs[mode] = {k: np.array(v, copy=True) for k, v in got.items()}
        jit._KERNELS.update({k: _counting(f, counts, k) for k, f in new.items()})
        forget()
        ctx.execute(dict(feeds))
        jit._KERNELS.update(new)
        forget()
        same = all(outs["old"][k].tobytes() == outs["new"][k].tobytes() for k in outs["new"])
        calls = a.calls
        if calls <= 0:
            t0 = time.process_time()
            for _ in range(3):
                ctx.execute(dict(feeds))
            calls = max(3, int(0.1 / max((time.process_time() - t0) / 3, 1e-6)))
        times = {"old": [], "new": []}
        for r in range(a.rounds):
            for mode in ("old", "new") if r % 2 == 0 else ("new", "old"):
                jit._KERNELS.update(old if mode == "old" else new)
                forget()
                t0 = time.process_time()
                for _ in range(calls):
                    ctx.execute(dict(feeds))
                times[mode].append((time.process_time() - t0) / calls * 1e3)
        jit._KERNELS.update(new)
        forget()
        o, n = float(np.median(times["old"])), float(np.median(times["new"]))
        seen = ", ".join(f"{k} {v}" if k.endswith(" calls") else f"{k} {v / 1e6:.2f} M elements"
                         for k, v in counts.items()) or "none"
        print(f"{model}: one run through the swapped kernels: {seen}")
        print(f"{model}: old {o:.3f} ms, new {n:.3f} ms, new / old {n / o:.3f} ({a.rounds} rounds of {calls}); "
              f"outputs {'identical' if same else 'DIFFER'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
