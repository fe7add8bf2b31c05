"""`debug repeat`: run a check again and again and sort what each run produced into good/ and bad/.

Flaky builds (a tactic that wins timing only sometimes) and nondeterministic kernels show up as a mix of passing
and failing runs. In-process, every iteration builds a fresh engine (fresh tactic timing), runs it on the same feeds
and compares with ONNX Runtime; its plan goes to good/ or bad/, and when both kinds occur the layers whose tactic
differs between every good and every bad build are named. With `--check CMD` the command runs each time and the
files named by `--artifacts` are moved into good/ or bad/.
"""
from __future__ import annotations

import os
import shutil

from debugkit.debug.executor import ShippedModel


class RepeatProbe(ShippedModel):
    """One iteration; picklable. check: CommandCheck or CompareOptions (then model/feeds/expected are used).
    build/data: the command's BuildOptions and DataOptions (debugkit/options.py): every iteration builds with all of
    them (tactics modules, tactic sources, layer precisions, calibration, timing cache, ...), as `run` does.
    Shipped (ShippedModel.ship, for Ray workers on other nodes), its artifacts come back in the result as bytes,
    which the driver files into --art-dir (`land_artifacts`)."""

    def __init__(self, check, model_path=None, feeds=None, expected=None, build=None, art_dir=None, artifacts=(),
                 data=None):
        self.check, self.model_path, self.feeds, self.expected = check, model_path, feeds, expected
        self.build, self.data = build, data
        self.art_dir, self.artifacts = art_dir, list(artifacts)

    def __call__(self, iteration: int) -> dict:
        from debugkit.debug.checks import CommandCheck
        if isinstance(self.check, CommandCheck):
            from debugkit.verdict import Verdict
            res = self.check(self._model_file())
            res["artifacts"] = self._sort(iteration, res["fails"], self.artifacts)
            # the command's failing outcome (exit code, --fail-code, --fail-regex) makes this run bad: a disagreement
            res["verdict"] = Verdict.from_exit_code(1 if res["fails"] else 0, res.get("reason", ""), "check").to_json()
            return res
        return self._in_process(iteration)

    def _in_process(self, iteration):
        import tempfile
        from backends.runners import EngineRunner
        from debugkit.options import BuildOptions
        from debugkit.verdict import Verdict
        from native.errors import DebugkitError
        fd, plan = tempfile.mkstemp(suffix=".plan")
        os.close(fd)
        build = self.build or BuildOptions()
        try:
            model_path = self._model_file()
            config = build.builder_config(data=self.data, model_path=model_path)
            with EngineRunner(model_path, config=config, device=build.device or "cpu", save_plan=plan,
                              shapes=build.shape_ranges()) as r:
                out = r.infer(self.feeds)
                tactics = {n.fused_name: n.tactic_name or str(n.tactic_id) for n in r.engine.graph.nodes
                           if n.tactic_id is not None}
            res = self.check.judge(out, self.expected)
            res.pop("outputs", None)
        except DebugkitError as e:
            # the build or the inference failed: this build is bad (a disagreement with the reference, exit 1)
            why = f"error: {str(e).splitlines()[0][:200]}"
            res, tactics = {"fails": True, "reason": why,
                            "verdict": Verdict("check", [why], comparing=False).to_json()}, {}
        res["tactics"] = tactics
        res["artifacts"] = self._sort(iteration, res["fails"], [plan], rename=f"engine_{iteration}.plan")
        if os.path.exists(plan):
            os.remove(plan)
        return res

    def _sort(self, iteration, fails, paths, rename=None):
        """The artifacts moved into art_dir/good|bad; shipped (the worker may be on another node), their bytes as
        {"bad/<name>": bytes} for the driver to file, and the worker's files removed."""
        if not self.art_dir:
            return []
        sub = "bad" if fails else "good"
        if self.model_bytes is not None:
            files = {}
            for p in paths:
                if os.path.exists(p):
                    with open(p, "rb") as f:
                        files[f"{sub}/{rename or f'{iteration}_{os.path.basename(p)}'}"] = f.read()
                    os.remove(p)
            return {"files": files}
        moved = []
        dest = os.path.join(self.art_dir, sub)
        os.makedirs(dest, exist_ok=True)
        for p in paths:
            if os.path.exists(p):
                target = os.path.join(dest, rename or f"{iteration}_{os.path.basename(p)}")
                shutil.move(p, target)   # a complete file (written by the output module) filed, not written
                moved.append(target)
        return moved


def land_artifacts(result: dict, art_dir) -> dict:
    """A shipped iteration's artifacts written into art_dir/good|bad on the driver; result["artifacts"] becomes
    their paths here (as a local iteration reports them)."""
    shipped = result.get("artifacts")
    if not isinstance(shipped, dict):
        return result
    from native.files import write_bytes
    paths = []
    for rel, data in shipped.get("files", {}).items():
        target = os.path.join(art_dir, *rel.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_bytes(target, data, "repeat artifact")
        paths.append(target)
    result["artifacts"] = paths
    return result


def tactic_culprits(records) -> dict:
    """Layers whose tactic is the same in every good build, the same in every bad build, and differs between them."""
    good = [r["result"].get("tactics", {}) for r in records if not r["result"]["fails"]]
    bad = [r["result"].get("tactics", {}) for r in records if r["result"]["fails"]]
    if not good or not bad:
        return {}
    out = {}
    for layer in set(good[0]) & set(bad[0]):
        g = {t.get(layer) for t in good}
        b = {t.get(layer) for t in bad}
        if len(g) == 1 and len(b) == 1 and g != b:
            out[layer] = {"good": g.pop(), "bad": b.pop()}
    return out
