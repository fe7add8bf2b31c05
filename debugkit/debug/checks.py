"""Checks a search asks about each artifact: an external command, or run's comparison done in-process.

`CommandCheck`: the user's command line (`--check CMD ...`), with `{model}` / `{inputs}` replaced by the artifact's
paths (without `{model}` the model path is appended). It fails on a non-zero exit code (or only on `--fail-code`
codes, or when `--fail-regex` matches its output).
`CompareOptions`: run's comparison flags (--atol/--rtol/--check-error-stat/--compare/--validate/...) applied to
{output: array} pairs, so a search judges an artifact exactly as `debugkit run` would.
"""
from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field

import numpy as np

from native.errors import UsageError


class CheckCommandError(UsageError):
    """The --check command cannot be run (not found, not executable)."""


class ReferenceFailedError(UsageError):
    """The reference (ONNX Runtime, the fp64 oracle) itself fails on the model, so nothing can be compared."""


class CommandCheck:
    """An external check command; picklable (it travels to executor workers)."""

    def __init__(self, argv, fail_codes=None, fail_regex=None, timeout=None):
        self.argv = list(shlex.split(argv) if isinstance(argv, str) else argv)
        if not self.argv:
            raise CheckCommandError("--check needs a command")
        self.fail_codes = set(fail_codes or [])
        self.fail_regex = fail_regex
        self.timeout = timeout
        exe = self.argv[0]
        if shutil.which(exe) is None and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            raise CheckCommandError(f"--check command '{exe}' not found (not on PATH and not an executable file)")

    def command(self, model_path, inputs_path=None, extra=None) -> list:
        subs = {"{model}": str(model_path), "{inputs}": str(inputs_path or "")}
        subs.update({"{" + k + "}": str(v) for k, v in (extra or {}).items()})
        argv = []
        for a in self.argv:
            for k, v in subs.items():
                a = a.replace(k, v)
            argv.append(a)
        if not any("{model}" in a for a in self.argv):
            argv.append(str(model_path))
        return argv

    def __call__(self, model_path, inputs_path=None, extra=None) -> dict:
        argv = self.command(model_path, inputs_path, extra)
        try:
            p = subprocess.run(argv, capture_output=True, text=True, timeout=self.timeout)
        except FileNotFoundError:
            raise CheckCommandError(f"--check command '{argv[0]}' not found") from None
        except subprocess.TimeoutExpired:
            return {"fails": True, "rc": None, "reason": f"timed out after {self.timeout}s"}
        out = (p.stdout or "") + (p.stderr or "")
        if self.fail_regex is not None:
            fails = re.search(self.fail_regex, out, re.MULTILINE) is not None
        elif self.fail_codes:
            fails = p.returncode in self.fail_codes
        else:
            fails = p.returncode != 0
        tail = out.strip().splitlines()[-1][:200] if out.strip() else ""
        return {"fails": bool(fails), "rc": p.returncode, "reason": tail, "seconds_check": None}


@dataclass
class CompareOptions:
    """run's comparison options (Polygraphy spellings), applied to {name: array} outputs."""

    atol: dict = field(default_factory=dict)
    rtol: dict = field(default_factory=dict)
    check_error_stat: dict = field(default_factory=dict)
    error_quantile: object = 0.99      # a number or {output: q} with "" as the default
    compare: tuple = ()
    cosine_threshold: float = 0.999
    l2_threshold: float = 1e-2
    psnr_threshold: float = 30.0
    snr_threshold: float = 20.0
    index_tolerance: object = 0        # a number or {output: n}
    validate: bool = False
    allow_nan: bool = False
    strict_inf: bool = False
    check_shapes: bool = True

    @classmethod
    def from_args(cls, args):
        from debugkit import options
        return cls.from_options(options.CompareOptions.from_args(args))

    @classmethod
    def from_options(cls, o):
        """From the comparison group (debugkit/options.py CompareOptions), tolerances parsed per output."""
        tol = o.tolerances()
        return cls(atol=tol.atol, rtol=tol.rtol, check_error_stat=tol.stat, error_quantile=tol.quantiles,
                   compare=tuple(o.compare or ()), cosine_threshold=o.cosine_threshold, l2_threshold=o.l2_threshold,
                   psnr_threshold=o.psnr_threshold, snr_threshold=o.snr_threshold,
                   index_tolerance=tol.index_tolerance, validate=o.validate, allow_nan=o.allow_nan,
                   strict_inf=o.strict_inf, check_shapes=o.check_shapes)

    def judge(self, actual: dict, expected: dict) -> dict:
        """{"fails", "disagrees", "reason", "outputs": {name: {"passed", "max_abs", "cosine", ...}}, "verdict":
        Verdict.to_json()} for these outputs. As everywhere (debugkit/verdict.py), passing needs at least one finite
        comparison; "disagrees" is whether any value disagreed (a search reproducing a failure wants that)."""
        from debugkit.compare import funcs
        from debugkit.verdict import Compared, Verdict, _finite_pairs, nonfinite_entry
        tol = funcs.Tolerances(self.atol, self.rtol, self.check_error_stat, self.error_quantile,
                               self.index_tolerance)
        extra = funcs.make_checks(self.compare, index_tolerance=tol.index_tolerance,
                                  l2_threshold=self.l2_threshold, cosine_threshold=self.cosine_threshold,
                                  psnr_threshold=self.psnr_threshold, snr_threshold=self.snr_threshold,
                                  check_shapes=self.check_shapes)
        report, reasons, simples = {}, [], []

        def simple(name, a, e):
            return funcs.compare_simple(name, a, e, tol, nan_equal=self.allow_nan, inf_equal=not self.strict_inf,
                                        hist=False, check_shapes=self.check_shapes)
        present = {n: (actual[n], e) for n, e in expected.items() if n in actual}
        first = {n: simple(n, a, e) for n, (a, e) in present.items()}
        funcs.reorder_tied_rows(first, present, simple)   # tied detections swapped: compared in reference order
        for name, e in expected.items():
            if name not in actual:
                reasons.append(f"{name}: missing")
                report[name] = {"passed": False}
                continue
            a = actual[name]
            checks = [first[name]]
            simples.append(checks[0])
            checks += [fn(name, a, e) for fn in extra.values()]
            entry = {"passed": all(c.passed for c in checks), "max_abs": _max_abs(a, e),
                     "cosine": _cosine(a, e)}
            if self.validate:
                bad = funcs.validate(name, a)
                if bad:
                    entry["passed"] = False
                    checks.append(type("V", (), {"passed": False, "reason": ", ".join(bad)})())
            for c in checks:
                if not c.passed:
                    reasons.append(f"{name}: {c.reason or c.func}")
            report[name] = entry
        disagrees = bool(reasons)
        verdict = Verdict("check", list(reasons), Compared(
            outputs=len(simples), iterations=1, inputs=1 if simples else 0, comparisons=len(simples),
            finite=sum(_finite_pairs(r) > 0 for r in simples)),
            [x for x in (nonfinite_entry(r) for r in simples) if x])
        reasons = verdict.reasons()
        return {"fails": not verdict.passed, "disagrees": disagrees, "reason": "; ".join(reasons)[:300],
                "outputs": report, "verdict": verdict.to_json()}


# The default check of a reduced-precision search, per precision: (largest relative L2 error, smallest cosine) of
# each output against the FP32 reference. An engine built entirely in that precision meets it on a healthy model
# (FP16 ResNet/BERT/ViT outputs: relative L2 1e-3..4e-3; see docs/debug.md), a layer that overflows or loses its
# signal does not; no NaN/Inf may appear where the reference is finite.
REDUCED_PRECISION_CHECK = {"fp16": (1e-2, 0.9999), "bf16": (5e-2, 0.998), "int8": (0.15, 0.99), "fp8": (0.15, 0.99)}


@dataclass
class ReducedPrecisionCheck:
    """The default check of `debug precision` (and of reduced-precision `debug build`/`repeat`): every output's
    relative L2 error ||a - ref|| / ||ref|| <= rel_l2 and cosine similarity >= cosine, no new NaN/Inf; scale-free, so
    one criterion fits logits, embeddings and images alike."""

    low: str = "fp16"
    rel_l2: float = 1e-2
    cosine: float = 0.9999

    @classmethod
    def for_precision(cls, low: str):
        rel, cos = REDUCED_PRECISION_CHECK[low]
        return cls(low, rel, cos)

    def describe(self) -> str:
        return (f"every output's relative L2 error <= {self.rel_l2:g} and cosine >= {self.cosine:g} against the "
                f"FP32 reference, no new NaN/Inf (the --{self.low} default; --atol/--rtol/--check-error-stat/"
                f"--compare choose run's comparison instead)")

    def judge(self, actual: dict, expected: dict) -> dict:
        """{"fails", "reason", "outputs": {name: {"passed", "rel_l2", "cosine", "max_abs", "nonfinite"}}}."""
        report, reasons = {}, []
        for name, e in expected.items():
            if name not in actual:
                reasons.append(f"{name}: missing")
                report[name] = {"passed": False}
                continue
            entry = reduced_metrics(actual[name], e)
            ok = entry.get("nonfinite", 0) == 0 and entry["rel_l2"] <= self.rel_l2 and entry["cosine"] >= self.cosine
            entry["passed"] = bool(ok)
            if not ok:
                if entry.get("nonfinite"):
                    reasons.append(f"{name}: {entry['nonfinite']} NaN/Inf where the reference is finite")
                else:
                    reasons.append(f"{name}: relative L2 {entry['rel_l2']:.4g} (<= {self.rel_l2:g}), cosine "
                                   f"{entry['cosine']:.6f} (>= {self.cosine:g})")
            report[name] = entry
        return {"fails": bool(reasons), "reason": "; ".join(reasons)[:300], "outputs": report}

    def margin(self, outputs: dict) -> float:
        """The largest fraction of the allowed error any output uses (1.0: exactly at the limit)."""
        worst = 0.0
        for entry in (outputs or {}).values():
            rel, cos = entry.get("rel_l2"), entry.get("cosine")
            if rel is None or cos is None:
                continue
            worst = max(worst, rel / self.rel_l2 if self.rel_l2 else math.inf,
                        (1 - cos) / (1 - self.cosine) if self.cosine < 1 else 0.0)
        return worst


def reduced_metrics(a, e) -> dict:
    """relative L2 error, cosine, max abs error and the count of NaN/Inf in `a` where `e` is finite."""
    a, e = np.asarray(a), np.asarray(e)
    if a.shape != e.shape or a.dtype.kind not in "fiub" or e.dtype.kind not in "fiub":
        ok = a.shape == e.shape and bool(np.all(a == e))
        return {"rel_l2": 0.0 if ok else math.inf, "cosine": 1.0 if ok else 0.0, "max_abs": None}
    a, e = a.astype(np.float64), e.astype(np.float64)
    fin = np.isfinite(e)
    bad = int(np.count_nonzero(~np.isfinite(a) & fin))
    a, e = np.where(fin, a, 0.0), np.where(fin, e, 0.0)
    if bad:
        return {"rel_l2": math.inf, "cosine": 0.0, "max_abs": math.inf, "nonfinite": bad}
    d = a - e
    ne, na = float(np.linalg.norm(e)), float(np.linalg.norm(a))
    nd = float(np.linalg.norm(d))
    rel = 0.0 if nd == 0 else (nd / ne if ne else math.inf)
    cos = 1.0 if na == ne == 0 else (float(a.ravel() @ e.ravel()) / (na * ne) if na and ne else 0.0)
    return {"rel_l2": rel, "cosine": cos, "max_abs": float(np.max(np.abs(d))) if d.size else 0.0, "nonfinite": 0}


def reduced_precision_default(args):
    """The ReducedPrecisionCheck for a build with reduced precision on (the loosest of those enabled) when the
    command line chose no comparison of its own, else None (run's comparison applies)."""
    if comparison_given(args):
        return None
    enabled = [p for p in REDUCED_PRECISION_CHECK if getattr(args, p, False)]
    if not enabled:
        return None
    return ReducedPrecisionCheck.for_precision(max(enabled, key=lambda p: REDUCED_PRECISION_CHECK[p][0]))


def run_output_check(args, runners):
    """(fn(name, actual, expected) -> OutputResult, description) of the check `run` judges each model output by
    for an engine built with reduced precision (--fp16/--bf16/--int8/--fp8) when the command line chose no
    comparison of its own: this module's scale-free check (compare_reduced), the one the searches use; else None
    (run's atol/rtol). An FP32 atol/rtol flags the rounding every healthy FP16 engine has, so the set a precision
    search found would fail `run` although it meets the search's check."""
    if "engine" not in runners:
        return None
    criterion = reduced_precision_default(args)
    if criterion is None:
        return None
    from functools import partial
    from debugkit.compare.funcs import compare_reduced
    fn = partial(compare_reduced, rel_l2=criterion.rel_l2, cosine=criterion.cosine, nan_equal=args.allow_nan,
                 inf_equal=not args.strict_inf, check_shapes=args.check_shapes)
    return fn, (f"--{criterion.low} default: relative L2 <= {criterion.rel_l2:g} and cosine >= {criterion.cosine:g} "
                f"per output (--atol/--rtol/--compare choose another)")


def comparison_given(args) -> bool:
    """Whether the command line chose run's comparison (any tolerance, error statistic or extra compare)."""
    return any(getattr(args, k, None) for k in ("atol", "rtol", "check_error_stat", "compare"))


def _max_abs(a, e):
    a, e = np.asarray(a), np.asarray(e)
    if a.shape != e.shape or a.dtype.kind not in "fiub" or e.dtype.kind not in "fiub" or not a.size:
        return None
    with np.errstate(all="ignore"):
        d = np.abs(a.astype(np.float64) - e.astype(np.float64))
    return float(np.nanmax(d)) if np.isfinite(d).any() else float("inf")


def _cosine(a, e):
    a, e = np.asarray(a), np.asarray(e)
    if a.shape != e.shape or a.dtype.kind != "f" or not a.size:
        return None
    a, e = a.astype(np.float64).ravel(), e.astype(np.float64).ravel()
    if not (np.isfinite(a).all() and np.isfinite(e).all()):
        return 0.0
    na, ne = np.linalg.norm(a), np.linalg.norm(e)
    return 1.0 if na == ne == 0 else float(a @ e / (na * ne)) if na and ne else 0.0


def add_check_args(parser, *, model_check=True):
    """--check CMD..., --fail-code, --fail-regex, --check-timeout."""
    g = parser.add_argument_group("check (an external command instead of the in-process comparison)")
    g.add_argument("--check", nargs=argparse_remainder(), metavar="CMD",
                   help="command run on each artifact; {model} and {inputs} are replaced by the artifact's paths "
                        "(without {model} the model path is appended). Must be the last option.")
    g.add_argument("--fail-code", type=int, nargs="+", default=None, metavar="RC",
                   help="exit codes that count as failing (default: any non-zero)")
    g.add_argument("--fail-regex", default=None, metavar="REGEX",
                   help="failing means this regex matches the command's output (exit code ignored)")
    g.add_argument("--check-timeout", type=float, default=None, metavar="S", help="a check running longer fails")
    return g


def argparse_remainder():
    import argparse
    return argparse.REMAINDER


def add_compare_args(parser):
    """run's comparison options: the comparison group of debugkit/options.py."""
    from debugkit.options import add_groups
    return add_groups(parser, "compare")


def command_check_from_args(args):
    if not getattr(args, "check", None):
        return None
    return CommandCheck(args.check, fail_codes=args.fail_code, fail_regex=args.fail_regex,
                        timeout=args.check_timeout)
