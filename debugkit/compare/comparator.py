"""Comparator: run every source on the same feeds, compare each against the reference, stream to HDF5.

A *source* is a live runner or a runner's results loaded from a data file. Per iteration the comparator gets the
feeds, runs the outputs of every source, then (layerwise) walks the observable tensors in chunks bounded by a byte
budget: each chunk is fetched from every source, written to disk, compared, and dropped. Only the small
OutputResults stay in memory, so --mark-all costs the largest chunk, not the whole model twice.
"""
from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field

import numpy as np

from debugkit.compare.divergence import first_divergence
from debugkit.compare.funcs import DEFAULT_SCALE_TOL, Tolerances, compare_simple, reorder_tied_rows, validate
from debugkit.compare.matching import pair_outputs
from debugkit.compare.outputstats import pair_stats
from debugkit.compare.postprocess import for_output
from debugkit.compare.nonfinite import NonFinite, locate  # noqa: F401  (NonFinite: part of this module's API)
from debugkit.data_file import inputs_hash
from native.errors import DataFileError, UsageError
from native.logger import G_LOGGER
from native.progress import progress


class LiveSource:
    def __init__(self, runner):
        self.runner, self.name = runner, runner.name
        self.loaded = False

    def outputs(self, feeds):
        return self.runner.infer(feeds)

    def observable(self, iteration):
        return self.runner.observable_tensors()

    def fetch(self, feeds, iteration, names):
        out = self.runner.infer(feeds, taps=names)
        return {n: out[n] for n in names if n in out}


class LoadedSource:
    """One runner's results in a data file written by --save-outputs (ours, HDF5) or by Polygraphy (JSON)."""

    def __init__(self, data_file, runner):
        self.file, self.runner_name = data_file, runner
        self.name = f"{runner}[{os.path.basename(data_file.path)}]"
        self.loaded = True
        self.layerwise = set()
        self.output_names = self.file.runner_attrs(runner).get("outputs") or []

    def outputs(self, feeds, iteration):
        names = self.output_names or self.file.tensor_names(iteration, self.runner_name)
        return {n: self.file.read(iteration, n, self.runner_name) for n in names
                if n in set(self.file.tensor_names(iteration, self.runner_name))}

    def observable(self, iteration):
        return self.file.tensor_names(iteration, self.runner_name)

    def fetch(self, feeds, iteration, names):
        have = set(self.file.tensor_names(iteration, self.runner_name))
        return {n: self.file.read(iteration, n, self.runner_name) for n in names if n in have}


@dataclass
class PairResult:
    """One iteration of one (source, reference) pair."""

    source: str
    reference: str
    iteration: int
    outputs: dict = field(default_factory=dict)      # name -> OutputResult (model outputs)
    layers: dict = field(default_factory=dict)       # name -> OutputResult (intermediate tensors, layerwise)
    divergence: object = None
    extra_funcs: dict = field(default_factory=dict)  # func name -> {output: OutputResult}
    problems: list = field(default_factory=list)     # why this pair's comparison means nothing (fails it)
    layerwise: bool = False                          # whether a layerwise comparison ran for this pair
    output_stats: dict = field(default_factory=dict)  # output -> {"actual": stats, "expected": stats}
    paired: dict = field(default_factory=dict)        # output -> (reference name, how) where names differ

    def results(self) -> list:
        """Every OutputResult of the model outputs (simple and the extra checks)."""
        return list(self.outputs.values()) + [r for d in self.extra_funcs.values() for r in d.values()]

    def nonfinite(self) -> dict:
        """{output: NonFiniteCounts} for the outputs where either side holds NaN/Inf."""
        return {n: r.nonfinite for n, r in self.outputs.items() if r.nonfinite is not None and r.nonfinite.any}

    @property
    def finite_compared(self) -> int:
        """Elements compared with finite values on both sides, over the model outputs."""
        return sum(r.compared for r in self.outputs.values())

    @property
    def layerwise_passed(self):
        return all(r.passed for r in self.layers.values()) and not (self.layerwise and not self.layers)

    @property
    def passed(self):
        return not self.problems and bool(self.outputs) and all(r.passed for r in self.outputs.values()) \
            and self.layerwise_passed and all(r.passed for d in self.extra_funcs.values() for r in d.values())


@dataclass
class RunSummary:
    """Everything a run found. `passed` is the one verdict: the report, the exit code and the JSON all read it."""

    pairs: list = field(default_factory=list)
    validation: list = field(default_factory=list)   # (source, iteration, tensor, problems)
    warnings: list = field(default_factory=list)
    problems: list = field(default_factory=list)     # run-level reasons to fail (e.g. mismatched inputs)
    first_nonfinite: dict = field(default_factory=dict)   # source -> NonFinite (first NaN/Inf tensor, layerwise)
    iterations: int = 0
    check: str = ""   # the outputs' check where it is not run's atol/rtol (the reduced-precision default), in words

    @property
    def passed(self):
        return all(p.passed for p in self.pairs) and not self.validation and not self.problems \
            and not self.first_nonfinite

    @property
    def exit_code(self):
        return 0 if self.passed else 1

    def reasons(self) -> list:
        """Why the run failed, one line each (empty when it passed)."""
        out = list(self.problems)
        for p in self.pairs:
            out += [f"{p.source} vs {p.reference}, iteration {p.iteration}: {x}" for x in p.problems]
        return out


def select_tensors(candidates: list, patterns) -> list:
    """`patterns` True/"all" → everything; a list of names or fnmatch patterns → those tensors."""
    if patterns in (True, "all"):
        return list(candidates)
    out = [t for t in candidates if any(t == p or fnmatch.fnmatchcase(t, p) for p in patterns)]
    if not out:
        raise UsageError(f"--mark {' '.join(patterns)} matches no observable tensor")
    return out


def excluded(name: str, patterns) -> bool:
    """Whether --exclude-outputs (names or fnmatch patterns) leaves `name` out of the comparison."""
    return any(name == p or fnmatch.fnmatchcase(name, p) for p in patterns or ())


class Comparator:
    """compare_funcs: extra {name: fn(name, actual, expected) -> OutputResult} run on the outputs besides simple."""

    def __init__(self, tolerances: Tolerances | None = None, nan_equal=False, inf_equal=True, extra_funcs=None,
                 validate=False, layerwise=None, model=None, chunk_bytes=256 << 20, logger=None, scale_tol=None,
                 allow_mismatched_inputs=False, check_shapes=True, postprocess=None, exclude=(), fail_fast=False,
                 output_check=None):
        self.tolerances = tolerances or Tolerances()
        # (fn(name, actual, expected) -> OutputResult, description): the model outputs' check in place of simple
        # (run's reduced-precision default); intermediate tensors (layerwise) keep simple with its noise floor
        self.output_check = output_check
        self.exclude = list(exclude or ())   # outputs and tensors left out of every comparison (names or patterns)
        self.fail_fast = fail_fast           # stop after the first iteration with a failed comparison
        self.nan_equal, self.inf_equal = nan_equal, inf_equal
        self.extra_funcs = dict(extra_funcs or {})
        self.validate = validate
        self.layerwise = layerwise            # None, True (all) or a list of names/patterns
        self.model = model                    # ONNX ModelProto for topological order and divergence
        self.chunk_bytes = chunk_bytes
        # layerwise noise floor per dtype (fraction of max |reference|); 0 turns it off
        self.scale_tol = dict(DEFAULT_SCALE_TOL) if scale_tol is None else (
            {k: float(scale_tol) for k in DEFAULT_SCALE_TOL} if not isinstance(scale_tol, dict) else scale_tol)
        self.logger = logger or G_LOGGER
        # results loaded from a file but produced from other inputs compare nothing meaningful: they fail the run
        # unless the user says the inputs may differ
        self.allow_mismatched_inputs = allow_mismatched_inputs
        self.check_shapes = check_shapes          # False: pair outputs of equal element count whatever their shape
        self.postprocess = dict(postprocess or {})   # output (or "") -> Postprocess, applied to both sides

    def _simple(self, name, a, e):
        if self.output_check is not None:
            return self.output_check[0](name, a, e)
        return compare_simple(name, a, e, self.tolerances, self.nan_equal, self.inf_equal,
                              check_shapes=self.check_shapes)

    def _compare_outputs(self, pr, source_name, ref_name, out, ref_out, summary):
        """Pair `out` with `ref_out` (exact names, then Polygraphy's fallbacks), postprocess, and compare."""
        simple_pairs = {}
        for name, rname, how in pair_outputs(out, ref_out):
            if excluded(name, self.exclude) or excluded(rname, self.exclude):
                continue
            if how != "exact":
                pr.paired[name] = (rname, how)
                msg = (f"output names differ: comparing {source_name}'s '{name}' with {ref_name}'s '{rname}' "
                       f"(matched by {how}, as Polygraphy does)")
                if msg not in summary.warnings:
                    summary.warnings.append(msg)
            a, e = out[name], ref_out[rname]
            pp = for_output(self.postprocess, name)
            if pp is not None:
                a, e = pp.apply(a), pp.apply(e)
            pr.output_stats[name] = pair_stats(a, e)
            simple_pairs[name] = (a, e)
            extra = dict(self.extra_funcs)
            if pp is not None and "indices" in extra:
                # indices after top-k/argmax: the index check (with its tolerance) is the check; exact equality of
                # the indices would contradict the tolerance
                r = extra.pop("indices")(name, a, e)
                pr.outputs[name] = r
                simple_pairs.pop(name)
            else:
                pr.outputs[name] = self._simple(name, a, e)
            if pp is not None:
                pr.outputs[name].metrics["postprocess"] = str(pp)
            for fname, fn in extra.items():
                pr.extra_funcs.setdefault(fname, {})[name] = fn(name, a, e)
        # detections whose near-tied rows swapped are compared in the reference's order (funcs.reorder_tied_rows):
        # which of two tied rows comes first is rounding, so the verdict must not hang on it
        for name, r in reorder_tied_rows(pr.outputs, simple_pairs, self._simple).items():
            self.logger.info(f"{source_name} vs {ref_name}: output {name}: {r.metrics['tie_note']}")
        return {rname for rname, _ in pr.paired.values()}

    def run(self, sources: list, reference, feeds_iter, writer=None, input_writer=None, expected_hashes=None):
        """Compare every source against `reference` for each feed dict; returns a RunSummary."""
        summary = RunSummary(check=self.output_check[1] if self.output_check is not None else "")
        self._mismatch_reported = set()
        others = [s for s in sources if s is not reference and not s.loaded]
        if not others:  # nothing live besides the reference: compare the loaded results with each other
            others = [s for s in sources if s is not reference]
        for it, feeds in enumerate(feeds_iter):
            summary.iterations += 1
            ihash = inputs_hash(feeds)
            if input_writer is not None:
                input_writer.write_inputs(it, feeds)
            self._check_provenance(sources, it, ihash, summary)
            outs = {}
            for s in sources:
                outs[s.name] = s.outputs(feeds, it) if s.loaded else s.outputs(feeds)
                if writer is not None and not s.loaded:
                    writer.write_many(s.name, it, outs[s.name], ihash)
                    writer.set_runner_attrs(s.name, {"outputs": list(outs[s.name])})
                if self.validate:
                    for name, v in outs[s.name].items():
                        problems = validate(name, v)
                        if problems:
                            summary.validation.append((s.name, it, name, problems))
            ref_out = outs[reference.name]
            pairs = []
            for s in others:
                pr = PairResult(s.name, reference.name, it)
                for name, v in outs[s.name].items():   # strings against numbers: bad input, not a disagreement
                    if name in ref_out:
                        _check_comparable(name, s, v, reference, ref_out[name])
                fallback = self._compare_outputs(pr, s.name, reference.name, outs[s.name], ref_out, summary)
                missing = [n for n in ref_out if n not in outs[s.name] and n not in fallback
                           and not excluded(n, self.exclude)]
                if self.model is not None:   # a golden may hold marked intermediates too: only outputs are missed
                    missing = [n for n in missing if n in {o.name for o in self.model.graph.output}]
                if not pr.outputs:
                    pr.problems.append(f"nothing in common: {s.name} has outputs {_names(outs[s.name])}, "
                                       f"{reference.name} has {_names(ref_out)} (outputs of another model?)")
                elif missing:
                    summary.warnings.append(f"{s.name} has no output(s) {missing} that {reference.name} has")
                pairs.append(pr)
            del outs
            if self.layerwise:
                self._layerwise(sources, reference, others, pairs, feeds, it, ihash, writer, summary)
            summary.pairs.extend(pairs)
            if self.fail_fast and not all(p.passed for p in pairs):
                summary.warnings.append(f"stopped after iteration {it}, the first with a failed comparison "
                                        f"(--fail-fast)")
                break
        return summary

    def _check_provenance(self, sources, it, ihash, summary):
        for s in sources:
            if not s.loaded:
                continue
            try:
                saved = s.file.inputs_hash(it, s.runner_name)
            except DataFileError as e:
                raise DataFileError(f"{s.file.path}: {e}; it was saved with fewer iterations than this run "
                                    f"(use --iterations)") from None
            if saved and saved != ihash and (s.file.path, s.runner_name) not in self._mismatch_reported:
                self._mismatch_reported.add((s.file.path, s.runner_name))
                msg = (f"MISMATCHED INPUTS: outputs in {s.file.path} (runner {s.runner_name}, iteration {it}) were "
                       f"produced from different inputs than this run's, so comparing them means nothing. Pass "
                       f"the inputs saved with them via --load-inputs")
                if self.allow_mismatched_inputs:
                    summary.warnings.append(msg + " (allowed by --allow-mismatched-inputs)")
                else:
                    summary.problems.append(msg + ", or --allow-mismatched-inputs if that is intended")

    def _first_nonfinite(self, source, it, chunk, values, summary, observed, feeds):
        """Record the first tensor of `chunk` (chunks come in topological order) that holds NaN or Inf, and the
        ONNX node inside its fused region that made it."""
        for t in chunk:
            problems = validate(t, values.get(t))
            if problems:
                def fetch(names):
                    got = {n: feeds[n] for n in names if n in feeds}
                    rest = [n for n in names if n not in got]
                    if rest:
                        got.update(source.fetch(feeds, it, rest))
                    return got
                summary.first_nonfinite[source.name] = locate(self.model, source.name, it, t, problems, observed,
                                                              fetch)
                return

    def _order(self, names):
        if self.model is None:
            return list(names)
        from backends.runners.model import markable_onnx_tensors
        rank = {t: i for i, t in enumerate(markable_onnx_tensors(self.model))}
        return sorted(names, key=lambda t: (rank.get(t, len(rank)), t))

    def _layerwise(self, sources, reference, others, pairs, feeds, it, ihash, writer, summary):
        common = None
        for s in sources:
            obs = set(s.observable(it))
            common = obs if common is None else common & obs
        tensors = [t for t in select_tensors(self._order(common or []), self.layerwise)
                   if not excluded(t, self.exclude)]
        for pr in pairs:
            pr.layerwise = True
        if not tensors:
            for pr in pairs:
                pr.problems.append("layerwise: no tensor is observable in both (was the saved file written "
                                   "without --mark-all?)")
            return
        self.logger.info(f"layerwise: comparing {len(tensors)} tensors observable in every runner")
        i, per_tensor = 0, None
        bar = progress(total=len(tensors), desc="layerwise", unit="tensor")  # a bar on a terminal (large models)
        while i < len(tensors):
            n = 16 if per_tensor is None else max(1, int(self.chunk_bytes // max(per_tensor, 1)))
            chunk = tensors[i:i + n]
            i += len(chunk)
            bar.update(len(chunk))
            vals = {}
            nbytes = 0
            for s in sources:
                vals[s.name] = s.fetch(feeds, it, chunk)
                nbytes = max(nbytes, sum(getattr(v, "nbytes", 0) for v in vals[s.name].values()))
                if writer is not None and not s.loaded:
                    writer.write_many(s.name, it, vals[s.name], ihash)
                if self.validate and s.name not in summary.first_nonfinite:
                    self._first_nonfinite(s, it, chunk, vals[s.name], summary, tensors, feeds)
            per_tensor = max(per_tensor or 0, nbytes / max(len(chunk), 1))
            ref = vals[reference.name]
            for pr, s in zip(pairs, others):
                for t in chunk:
                    a, e = vals[s.name].get(t), ref.get(t)
                    if isinstance(a, np.ndarray) and isinstance(e, np.ndarray):
                        pr.layers[t] = compare_simple(t, a, e, self.tolerances, self.nan_equal, self.inf_equal,
                                                      scale_tol=self.scale_tol.get(e.dtype.name))
            del vals, ref
        bar.close()
        if writer is not None:
            for s in sources:
                if not s.loaded:
                    writer.set_runner_attrs(s.name, {"layerwise": True})
        for pr, s in zip(pairs, others):
            if self.output_check is not None:   # a model output has one verdict: its output check's, here too
                pr.layers.update({t: r for t, r in pr.outputs.items() if t in pr.layers})
            merged = dict(pr.layers)
            merged.update(pr.outputs)
            pr.divergence = first_divergence(self.model, merged, split=self._splitter(s, reference, feeds, it),
                                             source=s.name, reference=reference.name)

    def _splitter(self, source, reference, feeds, it):
        """split(tensor, nodes, boundary) for first_divergence: re-run the diverging node from both sides' values
        (origin.py) with the tensor's own layerwise tolerance."""
        if self.model is None:
            return None
        from debugkit.compare.origin import split_error
        inits = {i.name for i in self.model.graph.initializer}

        def values(src, names):
            got = {n: feeds[n] for n in names if n in feeds}
            rest = [n for n in names if n not in got]
            if rest:
                got.update(src.fetch(feeds, it, rest))
            return got

        def compare(name, a, e):
            return compare_simple(name, a, e, self.tolerances, self.nan_equal, self.inf_equal, hist=False,
                                  scale_tol=self.scale_tol.get(np.asarray(e).dtype.name))

        def split(tensor, nodes, boundary):
            names = [t for t in boundary if t not in inits] + [tensor]
            return split_error(self.model, tensor, nodes, boundary, values(source, names), values(reference, names),
                               compare)
        return split


def _check_comparable(name, source, value, reference, expected):
    """A loaded file holding strings where the other side is numeric (or the reverse) is bad input, not a
    disagreement: raise DataFileError naming the file and the output."""
    kinds = [np.asarray(x).dtype.kind if not hasattr(x, "dtype") else np.dtype(x.dtype).kind for x in (value, expected)]
    text = [k in "USO" for k in kinds]
    if text[0] == text[1]:
        return
    bad, other = (source, reference) if text[0] else (reference, source)
    bad_value = value if text[0] else expected
    where = getattr(getattr(bad, "file", None), "path", None) or bad.name
    raise DataFileError(f"{where}: output '{name}' holds {np.asarray(bad_value).dtype} (text), but {other.name}'s is "
                        f"numeric; this file is not outputs of this model (a golden of strings cannot be compared)")


def _names(d, limit=6):
    names = list(d)
    return str(names[:limit])[:-1] + (f", ... ({len(names)} in all)]" if len(names) > limit else "]")
