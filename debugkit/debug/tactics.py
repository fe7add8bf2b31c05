"""`debug tactics`: find the (layer, tactic) pairs that make an engine fail its check.

Start from a failing tactic assignment and a passing one (replay files, or found: the default build and a build
restricted to the reference tactics, the first registered built-in of every layer kind). Both are built once
(tactic timings come from the shared timing cache, replays skip timing); every probe then assembles an engine
whose layers come from the passing build except a chosen subset taken from the failing one (the graphs have the
same layers, only tactics and their prepared weights differ) and runs the check: an assembly and an inference,
not a build.

The search finds culprits one at a time: the shortest prefix of the differing layers whose bad tactics fail holds
one culprit at its end (binary search, ceil(log2 L) probes); then the failing set minus the culprits found is
probed, and the search continues in what is left while that still fails; a last probe confirms that the culprits
alone fail. One culprit costs ceil(log2 L) + 2 probes besides the two end points.
"""
from __future__ import annotations

import copy
import hashlib
import os
import time

import numpy as np

from backends.engine.builder.tactic_replay import (TacticRecorder, TacticReplayer, replay_document, save_replay,
                                                   tactic_choices)
from native.errors import DebugkitError, UsageError
from native.logger import G_LOGGER


class TacticSearchError(UsageError):
    """The search cannot start: the 'bad' build passes, the 'good' one fails, or the two builds differ in layers."""


class ReferenceSelector:
    """Restricts every layer to its first registered built-in tactic (the general, reference implementation)."""

    def select_algorithms(self, context, choices):
        from native.tactic_modules import builtin_name
        for i, c in enumerate(choices):
            if builtin_name(context.kind, c.implementation):
                return [i]
        return []

    def report_algorithms(self, contexts, choices):
        pass


def model_hash(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class TacticBuilds:
    """Builds engine graphs of one model under one base config, with a recorded tactic assignment each."""

    def __init__(self, model_path, make_config, feeds: dict, ranges=None):
        self.model_path = model_path
        self.make_config = make_config   # (unrestricted: bool) -> BuilderConfig (no --tactic-sources); one timing cache
        self.feeds = feeds
        self.ranges = dict(ranges or {})   # --shape-profiles: {input: (min, opt, max)}

    def build(self, replay: dict | None = None, reference=False):
        """(engine graph, replay document) for a build restricted to `replay` (or to reference tactics)."""
        from backends.engine.build import parse_onnx, profile_from_shapes
        from backends.engine.builder import Builder
        from backends.engine.builder.algorithm_selector import SelectorChain
        config = self.make_config(reference or replay is not None)  # a replay names tactics: no source filter
        recorder = TacticRecorder(device=config.device)
        chain = [ReferenceSelector() if reference else None,
                 TacticReplayer(replay, source="--bad/--good tactics") if replay is not None else None,
                 recorder, config.algorithm_selector]
        config.algorithm_selector = SelectorChain(chain)
        network, _ = parse_onnx(self.model_path)
        if not config.profiles:
            profile = profile_from_shapes(network, {k: np.shape(v) for k, v in self.feeds.items()}, self.ranges)
            if profile is not None:
                config.add_optimization_profile(profile)
        graph = Builder().build_graph(network, config, timing_feeds=self.feeds)
        return graph, recorder.document


def assemble(good, bad, bad_layers) -> object:
    """An engine graph with `good`'s layers, except those named in `bad_layers`, which come from `bad`."""
    if [n.name for n in good.nodes] != [n.name for n in bad.nodes]:
        raise TacticSearchError("the failing and passing builds have different layers (their configs differ in more "
                                "than tactics); build both from the same model and options")
    g = copy.copy(good)
    bad_by_name = {n.name: n for n in bad.nodes}
    g.set_nodes([bad_by_name[n.name] if n.name in bad_layers else n for n in good.nodes])
    return g


class OutputCheck:
    """Our own comparison, in process: engine outputs against reference outputs (ONNX Runtime by default)."""

    def __init__(self, feeds_list, reference_outputs, tolerances=None, device="cpu"):
        self.feeds_list, self.reference, self.tolerances, self.device = feeds_list, reference_outputs, tolerances, device

    def __call__(self, graph) -> tuple[bool, str]:
        from backends.engine.runtime.executor import GraphExecutor
        from debugkit.compare.funcs import compare_simple
        ex = GraphExecutor(graph, self.device)
        worst = ""
        for feeds, ref in zip(self.feeds_list, self.reference):
            env = ex.run(dict(feeds))
            if hasattr(self.tolerances, "judge"):   # a criterion (the reduced-precision default): all outputs at once
                actual = {n: env.get(graph.aliases.get(n, n), env.get(n)) for n in ref}
                res = self.tolerances.judge({k: v for k, v in actual.items() if v is not None}, ref)
                if res["fails"]:
                    return False, res["reason"]
                continue
            for name, expected in ref.items():
                actual = env.get(graph.aliases.get(name, name), env.get(name))
                if actual is None:
                    continue
                r = compare_simple(name, actual, expected, self.tolerances, hist=False)
                if not r.passed:
                    return False, f"{name}: max abs {r.max_abs:.3g} (atol {r.atol:g}, rtol {r.rtol:g})"
                worst = worst or f"{name}: max abs {r.max_abs:.3g}"
        return True, worst


def onnxrt_outputs(model_path, feeds_list) -> list:
    from backends.runners import OnnxrtRunner, load_onnx
    runner = OnnxrtRunner(load_onnx(model_path))
    with runner:
        return [runner.infer(dict(f)) for f in feeds_list]


def find_culprits(items: list, fails, log=None) -> tuple[list, int]:
    """Culprit search over `items` (fails(all) is known True, fails([]) known False); returns (culprits, probes).

    Each round binary-searches the shortest failing prefix of what is left (with the culprits found so far
    excluded); its last element is a culprit. Rounds continue while the items minus the culprits still fail."""
    probes = [0]

    def probe(subset):
        probes[0] += 1
        return fails(subset)

    culprits: list = []
    rest = list(items)
    while rest:
        lo, hi = 0, len(rest)             # fails(rest[:hi]) True, fails(rest[:lo]) False
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if probe(rest[:mid]):
                hi = mid
            else:
                lo = mid
        culprits.append(rest[hi - 1])
        rest = rest[:hi - 1] + rest[hi:]
        if not rest or not probe(rest):
            break
        # the culprit's partners (if it needs any) lie in rest[:hi-1]; independent culprits anywhere in rest
    if len(culprits) > 0 and not probe(list(culprits)):
        G_LOGGER.warning(f"the culprits {culprits} fail only together with other bad tactics; reporting them anyway "
                         f"(the replay that avoids them passes)")
    return culprits, probes[0]


class TacticSearch:
    """The whole `debug tactics` search; `run()` returns the report dict."""

    def __init__(self, builds: TacticBuilds, check, *, bad=None, good=None, log_path=None, resume=False,
                 meta=None):
        self.builds, self.check = builds, check
        self.bad_doc, self.good_doc = bad, good
        self.log = _probe_log(log_path, meta or {}, resume)
        self.probes = 0
        self.records = []

    def _recorded(self, name, given):
        """The tactic assignment given for an end point, else the one a resumed log recorded for it, else None."""
        if given is not None or self.log is None:
            return given
        rec = self.log.lookup(f"{name} tactics")
        return rec["result"] if rec is not None else None

    def _checked(self, artifact, graph_fn):
        rec = self.log.lookup(artifact) if self.log is not None else None
        if rec is not None:
            self.records.append(rec)
            return rec["result"] == "fail"
        t0 = time.perf_counter()
        try:
            passed, detail = self.check(graph_fn())[:2]
        except DebugkitError as e:
            passed, detail = False, f"{type(e).__name__}: {e}"
        result = "pass" if passed else "fail"
        cost = time.perf_counter() - t0
        if self.log is not None:
            rec = self.log.record(artifact, result, cost, detail=detail)
        else:
            rec = {"artifact": artifact, "result": result, "cost": round(cost, 6), "detail": detail}
        self.records.append(rec)
        G_LOGGER.info(f"probe {len(self.records)}: {len(artifact) if isinstance(artifact, list) else artifact} "
                      f"bad layer(s) -> {result} ({detail})")
        return not passed

    def run(self) -> dict:
        t0 = time.perf_counter()
        # a resumed search rebuilds the end points it recorded (a timed build may pick other tactics this time)
        bad_in, good_in = self._recorded("bad", self.bad_doc), self._recorded("good", self.good_doc)
        bad_graph, bad_doc = self.builds.build(bad_in)
        good_graph, good_doc = self.builds.build(good_in, reference=good_in is None)
        for name, given, doc in (("bad", bad_in, bad_doc), ("good", good_in, good_doc)):
            if given is None and self.log is not None:
                self.log.record(f"{name} tactics", doc)
        build_s = time.perf_counter() - t0
        bad_t, good_t = tactic_choices(bad_doc), tactic_choices(good_doc)
        differing = [n.name for n in good_graph.nodes if bad_t.get(n.name) != good_t.get(n.name)]
        G_LOGGER.info(f"{len(differing)} layer(s) differ in tactic between the failing and the passing build")
        if not self._checked("bad", lambda: bad_graph):
            raise TacticSearchError("the failing build passes the check: nothing to search (is the faulty tactic "
                                    "enabled, e.g. --tactics-module / --tactic-sources / --bad-tactics?)")
        if self._checked("good", lambda: good_graph):
            raise TacticSearchError("the passing (reference-tactics) build fails the check too: the failure is not "
                                    "a tactic choice; try `debug precision` or `debug reduce`")
        end_points = len(self.records)

        def fails(subset):
            return self._checked(sorted(subset), lambda: assemble(good_graph, bad_graph, set(subset)))

        culprits, probes = find_culprits(differing, fails)
        nodes = {n.name: n for n in bad_graph.nodes}
        guilty = [{"layer": name, "onnx_nodes": list(nodes[name].source_nodes), "tactic": bad_t[name],
                   "reference_tactic": good_t[name], "kind": nodes[name].kind} for name in culprits]
        fixed = copy.deepcopy(bad_doc)
        for name in culprits:
            fixed["layers"][name] = good_doc["layers"][name]
        fixed_graph, _ = self.builds.build(fixed)   # a real build from the replay it writes, checked once more
        fixed_passes, fixed_detail = self.check(fixed_graph)[:2]
        G_LOGGER.info(f"a build from the fixed replay {'passes' if fixed_passes else 'FAILS'} ({fixed_detail})")
        return {"guilty": guilty, "probes": probes, "end_point_checks": end_points,
                "differing_layers": len(differing), "fixed_replay_passes": bool(fixed_passes), "probe_budget": round(2 * np.log2(max(len(differing), 1)) + 4, 2),
                "build_seconds": round(build_s, 3), "search_seconds": round(time.perf_counter() - t0 - build_s, 3),
                "bad_tactics": bad_doc, "good_tactics": good_doc, "fixed_tactics": fixed,
                "probe_records": self.records}


def _probe_log(path, meta, resume):
    if path is None:
        return None
    from debugkit.debug.probe_log import ProbeLog
    return ProbeLog(path, meta, resume=resume)


def write_report(report: dict, path, replay_path=None):
    """R.json without the bulky replay documents (they go to their own files)."""
    slim = {k: v for k, v in report.items() if k not in ("bad_tactics", "good_tactics", "fixed_tactics")}
    if replay_path:
        slim["fixed_replay"] = os.path.abspath(replay_path)
    from native.files import write_json
    write_json(path, slim, "report", indent=1, default=str)
    return slim


def save_fixed_replay(report, path):
    save_replay(report["fixed_tactics"], path)


__all__ = ["TacticSearch", "TacticBuilds", "OutputCheck", "find_culprits", "assemble", "ReferenceSelector",
           "replay_document", "onnxrt_outputs", "model_hash", "write_report", "save_fixed_replay"]
