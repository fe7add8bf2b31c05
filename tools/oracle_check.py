"""Check the fp64 oracle against ONNX Runtime on every corpus model, and say which side each output is closer to.

    python tools/oracle_check.py [--models NAME ...] [--json out.json]

For every output: max |ORT - oracle| and max |engine - oracle| (the engine built in float32 as `run` builds it),
the oracle's scale, and whether ORT matches the oracle within run's float32 tolerances (atol 1e-4, rtol 1e-3).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from tests.corpus.corpus import CorpusUnavailable, find_path, make_feeds, manifest  # noqa: E402


def check(entry):
    from backends.runners import EngineRunner, OnnxrtRunner
    from backends.runners.oracle import Fp64OracleRunner
    path = find_path(entry)
    feeds = make_feeds(entry)
    shapes = {k: v.shape for k, v in feeds.items()}
    t0 = time.perf_counter()
    with OnnxrtRunner(path) as r:
        ort = r.infer(feeds)
    with Fp64OracleRunner(path, shapes=shapes) as r:
        oracle = r.infer(feeds)
    with EngineRunner(path, shapes=shapes) as r:
        engine = r.infer(feeds)
    rows = []
    for name, o in oracle.items():
        o = np.asarray(o)
        if o.dtype.kind != "f" or name not in ort:
            same = np.array_equal(np.asarray(ort.get(name)), o)
            rows.append({"output": name, "exact": bool(same), "passed": bool(same)})
            continue
        e_ort = np.abs(np.asarray(ort[name], np.float64) - o)
        e_eng = np.abs(np.asarray(engine[name], np.float64) - o) if name in engine else None
        passed = bool(np.all(e_ort <= 1e-4 + 1e-3 * np.abs(o))) if o.size else True
        rows.append({"output": name, "scale": float(np.max(np.abs(o))) if o.size else 0.0,
                     "ort_err": float(e_ort.max()) if o.size else 0.0,
                     "engine_err": float(e_eng.max()) if e_eng is not None and o.size else None,
                     "passed": passed})
    return {"model": entry["name"], "seconds": round(time.perf_counter() - t0, 1), "outputs": rows,
            "passed": all(r["passed"] for r in rows)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+")
    p.add_argument("--json")
    a = p.parse_args(argv)
    results = []
    for entry in manifest():
        if a.models and entry["name"] not in a.models:
            continue
        try:
            res = check(entry)
        except CorpusUnavailable as e:
            print(f"{entry['name']:32s} SKIPPED ({e})", flush=True)
            continue
        except Exception as e:  # report and go on: one model's failure is a finding, not the end of the run
            res = {"model": entry["name"], "error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}",
                   "passed": False, "outputs": []}
        results.append(res)
        if "error" in res:
            print(f"{res['model']:32s} ERROR {res['error']}", flush=True)
        for r in res["outputs"]:
            if "ort_err" in r:
                print(f"{res['model']:32s} {r['output'][:24]:24s} scale {r['scale']:9.3g}  |ORT-oracle| "
                      f"{r['ort_err']:9.3g}  |engine-oracle| {r['engine_err'] if r['engine_err'] is None else format(r['engine_err'], '9.3g')}"
                      f"  {'ok' if r['passed'] else 'MISMATCH'}", flush=True)
            else:
                print(f"{res['model']:32s} {r['output'][:24]:24s} non-float: {'identical' if r['exact'] else 'DIFFER'}",
                      flush=True)
    if a.json:
        from native.files import output_file
        with output_file(a.json, "w") as f:
            json.dump(results, f, indent=1)
    bad = [r["model"] for r in results if not r["passed"]]
    print(f"{len(results) - len(bad)}/{len(results)} models: ORT within float32 tolerance of the fp64 oracle"
          + (f"; not: {bad}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
