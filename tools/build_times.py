"""Cold and warm build time of every corpus model (issue 24: cold <= 60 s, warm <= 10 s on the GPU).

    python tools/build_times.py [--device cuda] [--models yolov8n,timm-resnet18] [--fp16|--tf32] [--json F]
                                [--breakdown] [--profile DIR]

For each model of the corpus manifest (tests/corpus/models.json; exported models from DEBUGKIT_CORPUS, pypi ones
from the model cache: `python tests/corpus/fetch_models.py` first) two builds run, each in a fresh Python process
so nothing of the first (cuDNN graphs, compiled kernels, imports) helps the second: cold, `debugkit convert MODEL
--timing-cache C` with no C, then warm, the same command with the C (and C.prep) the cold build wrote. Each model's
builds get a CUDA JIT cache and a debugkit kernel cache of their own (CUDA_CACHE_PATH and DEBUGKIT_KERNEL_CACHE in
a fresh directory): empty for the cold build, so no kernel an earlier build compiled helps it. The figures per build: the command's wall seconds (parse, build and
plan write), the tactic-timing work — candidates timed (`tactic_selection.time_candidates`: every tactic of every
layer variant timed on the device), timed runs (the device's `time()` calls) — and the layers. `--breakdown` adds
where the seconds went: the builder's passes, NVRTC compiles (summed over the threads compiling), cuDNN graphs
(heuristics) and execution plans built, tactic timing (each with its count), and for cuDNN each compile class's
runtime compiles and the slowest plan builds (config name, runtime-compiled or not); `--profile DIR` writes each
build's cProfile statistics to DIR/<model>-<cold|warm>.prof. A build past --timeout is stopped with SIGTERM first, so its
counts so far (and its profile) still come back. `--unbounded` times every candidate in the layout and precision
probes (the build before they were bounded to the first plan of each tactic family), for the before/after. A model
that cannot be had or fails to build is listed with the reason. The table ends with which models miss the limits
(--cold-limit, --warm-limit).
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


class Stopped(BaseException):
    """The parent's --timeout (SIGTERM) in a child build: a BaseException, so the builder's `except Exception`
    fallbacks (a layout probe that fails falls back to the device's preference, a plan build that fails is passed
    over) do not swallow it and build on past the limit (yolov8n FP16 on 73c808b: no output within 10 s of it)."""


def child(argv) -> int:
    """One build (`--child MODEL PLAN CACHE DEVICE [flags]`), counting the tactic timing; prints one JSON line."""
    model, plan, cache, device, *flags = argv
    profile_to = None
    if "--profile-to" in flags:
        i = flags.index("--profile-to")
        profile_to = flags[i + 1]
        del flags[i:i + 2]
    from backends.engine.builder import tactic_selection, timed_choice
    if "--unbounded" in flags:    # layout/precision probes time every candidate (the build before the bound)
        flags.remove("--unbounded")
        timed_choice.FIRST_OF_FAMILY = False
    from native.device import get_device
    counts = {"candidates_timed": 0, "timed_runs": 0}
    real_time_candidates = tactic_selection.time_candidates

    def time_candidates(node, candidates, *a, **k):
        counts["candidates_timed"] += len(candidates)
        return real_time_candidates(node, candidates, *a, **k)
    tactic_selection.time_candidates = time_candidates
    dev = get_device(device)
    real_time = dev.time

    def timed(fn, stream=None):
        counts["timed_runs"] += 1
        return real_time(fn, stream)
    dev.time = timed
    from tests.corpus.corpus import entry, find_path
    e = entry(model)
    path = find_path(e)
    shapes = [f"{k}:{list(v['shape'])}".replace(" ", "") for k, v in e["feeds"].items()]
    spent = breakdown_counters()
    from debugkit.cli.main import main as cli
    import signal

    def stop(signum, frame):      # the parent's timeout: unwind, so the counts so far are still printed
        raise Stopped("stopped by the parent's --timeout")
    signal.signal(signal.SIGTERM, stop)
    prof = None
    if profile_to:
        import cProfile
        prof = cProfile.Profile()
    t0 = time.perf_counter()
    rc, layers = 3, None
    try:
        if prof is not None:
            prof.enable()
        rc = cli(["convert", path, "-o", plan, "--device", device, "--timing-cache", cache, "--input-shapes",
                  *shapes, "-q", *flags])
    except Stopped:
        rc = 124
    finally:
        if prof is not None:
            prof.disable()
            prof.dump_stats(profile_to)
    seconds = time.perf_counter() - t0
    if rc == 0:
        from backends.engine.runtime.runtime import Runtime
        with open(plan, "rb") as f:
            layers = len(Runtime(device=device).deserialize_engine(f.read()).graph.nodes)
    print("BUILD " + json.dumps(dict(counts, rc=rc, seconds=round(seconds, 2), layers=layers,
                                     breakdown={k: [v[0], round(v[1], 2)] for k, v in spent.items()
                                                if isinstance(v, list)},
                                     cudnn_failures=spent.get("cuDNN failures (first per kind)", {}),
                                     **cudnn_plan_costs())), flush=True)
    return 0 if rc == 124 else rc


def cudnn_plan_costs(slowest=8) -> dict:
    """The cuDNN plan builds of this process that cost most (family, cuDNN's index, config name, runtime-compiled,
    seconds, built) and the runtime compiles per compile class ([builds, seconds, longest]): which configs a cold
    build's plan seconds went to. Empty without cuDNN."""
    conv = sys.modules.get("native.cuda.tactics.cudnn_conv")
    if conv is None:
        return {}
    log = sorted(conv.BUILD_LOG, key=lambda r: -r[4])[:slowest]
    return {"cudnn_slowest_plans": [list(r) for r in log], "cudnn_compiles": conv.compile_costs()}


def breakdown_counters() -> dict:
    """{what: [count, seconds]} filled in as the build runs: each builder pass, NVRTC compiles, cuDNN convolution
    graphs (built with heuristics: what plans cuDNN offers) and plans built, tactic timing. Counted by wrapping
    the functions that do the work (this process only)."""
    spent: dict = {}

    def add(what, n, seconds):
        c = spent.setdefault(what, [0, 0.0])
        c[0] += n
        c[1] += seconds

    def timed(owner, name, what, count=lambda self, r: 1):
        real = getattr(owner, name)

        def wrapper(*a, **k):
            t = time.perf_counter()
            r = real(*a, **k)
            add(what, count(a[0] if a else None, r) if count else 1, time.perf_counter() - t)
            return r
        setattr(owner, name, wrapper)

    from backends.engine.builder import pass_manager, tactic_selection
    real_after = pass_manager.TimingInstrument.after

    def after(self, name, graph, ctx, result, seconds):
        add("pass: " + name, 1, seconds)
        return real_after(self, name, graph, ctx, result, seconds)
    pass_manager.TimingInstrument.after = after
    timed(tactic_selection, "time_candidates", "tactic timing (time_candidates)")
    try:
        from native.cuda import nvrtc
        from native.cuda.tactics import cudnn_conv
    except Exception:      # no CUDA Python bindings: a CPU build has none of these
        return spent
    timed(nvrtc, "compile_source", "NVRTC compiles")
    timed(cudnn_conv.ConvGraph, "__init__", "cuDNN conv graphs (heuristics, support check)")
    real_plan = cudnn_conv.ConvGraph.plan

    def plan(self, index):      # real plan builds only (not the configs passed over unbuilt), and their seconds
        before = (self.built, self.failed, *self.seconds)
        try:
            return real_plan(self, index)
        finally:
            if self.built != before[0]:
                add("cuDNN conv plans built", self.built - before[0], self.seconds[0] - before[2])
            if self.failed != before[1]:
                add("cuDNN conv plan builds failed", self.failed - before[1], self.seconds[1] - before[3])
                kind = repr(cudnn_conv.family(self.key))    # the first failure of each kind of convolution, said
                spent.setdefault("cuDNN failures (first per kind)", {}).setdefault(kind, self.last_failure[:300])
    cudnn_conv.ConvGraph.plan = plan
    return spent


def one_build(model, plan, cache, device, flags, timeout, profile=None, jit_cache=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, plan, cache, device, *flags]
    if profile:
        cmd += ["--profile-to", profile]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if jit_cache:     # the CUDA driver's JIT cache and debugkit's kernel cache (NVRTC cubins): empty for the
        env["CUDA_CACHE_PATH"] = jit_cache                # model's cold build, what it left for the warm one
        env["DEBUGKIT_KERNEL_CACHE"] = os.path.join(jit_cache, "debugkit-kernels")
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    timed_out = False
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:    # SIGTERM first: the child prints its counts so far
        timed_out = True
        p.terminate()
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
    wall = round(time.perf_counter() - t0, 2)
    line = next((x for x in out.splitlines() if x.startswith("BUILD ")), None)
    got = json.loads(line[6:]) if line is not None else {}
    if timed_out:
        return dict(got, error=f"timed out after {timeout:g} s", process_seconds=wall)
    if line is None or p.returncode != 0:
        tail = (err.strip().splitlines() or ["(no output)"])[-1]
        return dict(got, error=f"exit {p.returncode}: {tail}", process_seconds=wall)   # the whole reason
    return dict(got, process_seconds=wall)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        return child(argv[1:])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="device to build for (default cuda)")
    ap.add_argument("--models", help="comma-separated corpus names (default: every model of the manifest)")
    prec = ap.add_mutually_exclusive_group()
    prec.add_argument("--fp16", action="store_true")
    prec.add_argument("--tf32", action="store_true")
    ap.add_argument("--unbounded", action="store_true",
                    help="layout/precision probes time every candidate, not the first plan of each family "
                         "(timed_choice.FIRST_OF_FAMILY off): the before picture")
    ap.add_argument("--cold-limit", type=float, default=60.0, help="seconds (default 60)")
    ap.add_argument("--warm-limit", type=float, default=10.0, help="seconds (default 10)")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per build before it is given up")
    ap.add_argument("--json", help="write the rows as JSON")
    ap.add_argument("--breakdown", action="store_true",
                    help="after the table, where each build's seconds went (passes, NVRTC, cuDNN, tactic timing)")
    ap.add_argument("--profile", metavar="DIR", help="write each build's cProfile statistics to DIR")
    args = ap.parse_args(argv)
    from tests.corpus.corpus import CorpusUnavailable, find_path, manifest
    names = [m["name"] for m in manifest()]
    if args.models:
        wanted = [n.strip() for n in args.models.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            print(f"build_times: unknown model(s) {unknown}; the corpus has {names}", file=sys.stderr)
            return 2
        names = wanted
    flags = (["--fp16"] if args.fp16 else ["--tf32"] if args.tf32 else []) + (["--unbounded"] if args.unbounded
                                                                              else [])
    rows = []
    for name in names:
        try:
            find_path(next(m for m in manifest() if m["name"] == name))
        except CorpusUnavailable as e:
            rows.append({"model": name, "unavailable": str(e)})
            print(f"{name}: not available ({e})", flush=True)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cache, plan = os.path.join(tmp, "timing.cache"), os.path.join(tmp, "model.plan")
            prof = (lambda which: os.path.join(args.profile, f"{name}-{which}.prof")) if args.profile else \
                (lambda which: None)
            if args.profile:
                os.makedirs(args.profile, exist_ok=True)
            jit = os.path.join(tmp, "cuda-jit-cache")
            cold = one_build(name, plan, cache, args.device, flags, args.timeout, prof("cold"), jit)
            print(json.dumps({"model": name, "cold": cold}), flush=True)
            warm = one_build(name, plan, cache, args.device, flags, args.timeout, prof("warm"), jit) \
                if "error" not in cold else None
        row = {"model": name, "device": args.device, "flags": flags, "cold": cold, "warm": warm}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(table(rows, args.cold_limit, args.warm_limit))
    if args.breakdown:
        print(breakdown(rows))
    if args.json:
        from native.files import write_json
        write_json(args.json, rows, "--json", indent=1)
    return 0


def breakdown(rows) -> str:
    """Where each build's seconds went: one line per counted item, `count x, seconds`, largest first."""
    lines = []
    for r in rows:
        for which in ("cold", "warm"):
            b = (r.get(which) or {}).get("breakdown")
            if not b:
                continue
            items = sorted(b.items(), key=lambda kv: -kv[1][1])
            lines.append(f"{r['model']} {which} ({r[which].get('seconds', '?')} s): " +
                         "; ".join(f"{k} {n}x {s:g} s" for k, (n, s) in items if s >= 0.05 or not k.startswith("pass")))
            for kind, why in (r[which].get("cudnn_failures") or {}).items():
                lines.append(f"  cuDNN plan build failed for {kind}: {why}")
            for cls, (n, s, longest) in (r[which].get("cudnn_compiles") or {}).items():
                lines.append(f"  cuDNN runtime compiles {cls}: {n}x {s:g} s (longest {longest:g} s)")
            for fam, j, name, compiles, s, ok in (r[which].get("cudnn_slowest_plans") or [])[:5]:
                lines.append(f"  slow cuDNN plan build: {s:g} s {'built' if ok else 'FAILED'} plan {j} {name} "
                             f"(runtime-compiled: {compiles}) for {fam}")
    return "\n".join(lines)


def table(rows, cold_limit, warm_limit) -> str:
    lines = ["| model | cold s | warm s | candidates timed cold / warm | timed runs cold / warm | layers | within limits |",
             "|---|---|---|---|---|---|---|"]
    missed = []
    for r in rows:
        if "unavailable" in r:
            lines.append(f"| {r['model']} | not available | | | | | |")
            continue
        c, w = r["cold"], r["warm"] or {}
        if "error" in c or "error" in w:
            lines.append(f"| {r['model']} | {c.get('error') or c['seconds']} | {w.get('error') or w.get('seconds')} "
                         f"| | | | no |")
            missed.append(r["model"])
            continue
        ok = c["seconds"] <= cold_limit and w["seconds"] <= warm_limit
        missed += [] if ok else [r["model"]]
        lines.append(f"| {r['model']} | {c['seconds']} | {w['seconds']} | {c['candidates_timed']} / "
                     f"{w['candidates_timed']} | {c['timed_runs']} / {w['timed_runs']} | {c['layers']} | "
                     f"{'yes' if ok else 'NO'} |")
    lines.append(f"limits: cold <= {cold_limit:g} s, warm <= {warm_limit:g} s; "
                 + (f"missed by {missed}" if missed else "every built model within them"))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
