"""Which side is wrong? Compare each runner with the fp64 oracle, per output and per layer (`run --reference fp64`).

Two float32 implementations that disagree only say that one of them (or both) is off; the oracle — our engine on the
model widened to float64, fusion off — is closer to the exact result than either, so the error of each side against
it says which one is wrong: "engine error vs oracle 3e-02, ONNX Runtime error vs oracle 4e-06".
"""
from __future__ import annotations

import numpy as np

from native.logger import G_LOGGER

_PRETTY = {"onnxrt": "ONNX Runtime", "engine": "engine"}


def _label(runner_name):
    for k, v in _PRETTY.items():
        if runner_name.startswith(k):
            return v
    return runner_name


def _err(a, oracle):
    a, o = np.asarray(a), np.asarray(oracle)
    if a.shape != o.shape or a.dtype.kind not in "fiub" or o.dtype.kind != "f" or not o.size:
        return None
    with np.errstate(all="ignore"):
        d = np.abs(a.astype(np.float64) - o)
    d = np.where(np.isnan(d) & np.isnan(o), 0.0, d)
    return float(np.nanmax(d)) if not np.isnan(d).all() else float("nan")


def verdict(errors: dict, scale: float) -> str:
    """'the engine is the wrong side' when its error is >10x the other's and above float32 rounding of the scale."""
    if len(errors) < 2 or any(e is None for e in errors.values()):
        return ""
    floor = 1e-6 * max(scale, 1e-30)
    (n1, e1), (n2, e2) = sorted(errors.items(), key=lambda kv: kv[1])
    if not np.isfinite(e2) and np.isfinite(e1):
        return f"{n2} is the wrong side (non-finite)"
    if e2 <= floor:
        return "both agree with the oracle to float32 rounding"
    if e2 > 10 * max(e1, floor):
        return f"{n2} is the wrong side"
    return "both sides are off by similar amounts"


def compare_with_oracle(model, runners, feeds: dict, layerwise=False) -> dict:
    """{"outputs": [...], "layers": [...]} with each runner's max |error| against the fp64 oracle."""
    from backends.runners.oracle import Fp64OracleRunner
    shapes = {k: np.shape(v) for k, v in feeds.items()}
    with Fp64OracleRunner(model, shapes=shapes) as oracle:
        taps = []
        if layerwise:
            common = set(oracle.observable_tensors())
            for r in runners:
                try:
                    common &= set(r.observable_tensors())
                except Exception:
                    common = set()
            taps = [t for t in oracle.observable_tensors() if t in common]
        truth = oracle.infer(feeds, taps=taps)
        outputs = oracle.output_names()
    values = {r.name: r.infer(feeds, taps=taps) for r in runners}
    rows = {"outputs": [], "layers": []}
    for kind, names in (("outputs", outputs), ("layers", [t for t in taps if t not in outputs])):
        for name in names:
            o = truth.get(name)
            if o is None or np.asarray(o).dtype.kind != "f":
                continue
            scale = float(np.nanmax(np.abs(o))) if np.asarray(o).size else 0.0
            errs = {_label(r): _err(v[name], o) for r, v in values.items() if name in v}
            rows[kind].append({"tensor": name, "scale": scale, "errors": errs, "verdict": verdict(errs, scale)})
    return rows


def render(rows: dict, max_layers: int = 10) -> str:
    lines = ["", "fp64 oracle (our engine in float64, fusion off): error of each side against it"]
    for r in rows["outputs"]:
        errs = ", ".join(f"{n} error vs oracle {e:.2g}" for n, e in r["errors"].items() if e is not None)
        lines.append(f"  output {r['tensor']}: {errs}" + (f"  → {r['verdict']}" if r["verdict"] else ""))
    wrong = [r for r in rows["layers"] if "wrong side" in r["verdict"]]
    if rows["layers"]:
        lines.append(f"  layers: {len(rows['layers'])} compared, {len(wrong)} where one side is clearly wrong")
        for r in wrong[:max_layers]:
            errs = ", ".join(f"{n} {e:.2g}" for n, e in r["errors"].items() if e is not None)
            lines.append(f"    {r['tensor']}: {errs} → {r['verdict']}")
        if len(wrong) > max_layers:
            lines.append(f"    ... {len(wrong) - max_layers} more")
    return "\n".join(lines)


def truth_report(model, runners, feeds, layerwise=False) -> str:
    G_LOGGER.info("running the fp64 oracle (our engine in float64, fusion off)")
    return render(compare_with_oracle(model, runners, feeds, layerwise))
