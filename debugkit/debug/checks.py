"""Checks a search asks about each artifact: an external command, or run's comparison done in-process.

`CommandCheck`: the user's command line (`--check CMD ...`), with `{model}` / `{inputs}` replaced by the artifact's
paths (without `{model}` the model path is appended). It fails on a non-zero exit code (or only on `--fail-code`
codes, or when `--fail-regex` matches its output).
`CompareOptions`: run's comparison flags (--atol/--rtol/--check-error-stat/--compare/--validate/...) applied to
{output: array} pairs, so a search judges an artifact exactly as `debugkit run` would.
"""
from __future__ import annotations

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
        from debugkit.cli.run import tolerances_from_args
        tol = tolerances_from_args(args)
        return cls(atol=tol.atol, rtol=tol.rtol, check_error_stat=tol.stat, error_quantile=tol.quantiles,
                   compare=tuple(args.compare or ()),
                   cosine_threshold=args.cosine_threshold, l2_threshold=args.l2_threshold,
                   psnr_threshold=args.psnr_threshold, snr_threshold=args.snr_threshold,
                   index_tolerance=tol.index_tolerance, validate=args.validate, allow_nan=args.allow_nan,
                   strict_inf=args.strict_inf, check_shapes=getattr(args, "check_shapes", True))

    def judge(self, actual: dict, expected: dict) -> dict:
        """{"fails", "reason", "outputs": {name: {"passed", "max_abs", "cosine", ...}}} for these outputs."""
        from debugkit.compare import funcs
        tol = funcs.Tolerances(self.atol, self.rtol, self.check_error_stat, self.error_quantile,
                               self.index_tolerance)
        extra = funcs.make_checks(self.compare, index_tolerance=tol.index_tolerance,
                                  l2_threshold=self.l2_threshold, cosine_threshold=self.cosine_threshold,
                                  psnr_threshold=self.psnr_threshold, snr_threshold=self.snr_threshold,
                                  check_shapes=self.check_shapes)
        report, reasons = {}, []
        for name, e in expected.items():
            if name not in actual:
                reasons.append(f"{name}: missing")
                report[name] = {"passed": False}
                continue
            a = actual[name]
            checks = [funcs.compare_simple(name, a, e, tol, nan_equal=self.allow_nan, inf_equal=not self.strict_inf,
                                           hist=False, check_shapes=self.check_shapes)]
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
        return {"fails": bool(reasons), "reason": "; ".join(reasons)[:300], "outputs": report}


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
    """run's comparison options, same spellings and defaults."""
    c = parser.add_argument_group("comparison (as in run)")
    c.add_argument("--atol", nargs="+", default=[], metavar="[NAME:]VALUE")
    c.add_argument("--rtol", nargs="+", default=[], metavar="[NAME:]VALUE")
    c.add_argument("--check-error-stat", nargs="+", default=[], metavar="[NAME:]STAT")
    c.add_argument("--error-quantile", nargs="+", default=[], metavar="[NAME:]Q")
    c.add_argument("--compare", nargs="+", default=[], choices=["simple", "indices", "l2", "cosine", "psnr", "snr"],
                   help="extra checks on the outputs besides simple (all must pass)")
    c.add_argument("--index-tolerance", nargs="+", default=[], metavar="[NAME:]N")
    c.add_argument("--no-check-shapes", dest="check_shapes", action="store_false", default=True,
                   help="compare outputs whose element counts match although their shapes differ")
    c.add_argument("--l2-threshold", type=float, default=1e-2)
    c.add_argument("--cosine-threshold", type=float, default=0.999)
    c.add_argument("--psnr-threshold", type=float, default=30.0)
    c.add_argument("--snr-threshold", type=float, default=20.0)
    c.add_argument("--allow-nan", action="store_true")
    c.add_argument("--strict-inf", action="store_true")
    c.add_argument("--validate", action="store_true", help="fail on NaN/Inf in any output")
    return c


def command_check_from_args(args):
    if not getattr(args, "check", None):
        return None
    return CommandCheck(args.check, fail_codes=args.fail_code, fail_regex=args.fail_regex,
                        timeout=args.check_timeout)
