"""`debug build`: build the engine again and again, check each build, and sort the artifacts into good/ and bad/.

Each iteration is a fresh build (tactic timing is measured anew unless a timing cache is given, so tactic choices
vary the way they do between real builds), whose replay file (and plan, on request) is checked and then moved to
`<artifacts>/good/` or `<artifacts>/bad/`. The check is our own comparison against ONNX Runtime, run in process,
or any command (`--check CMD`), whose exit status 0 means good. `inspect diff-tactics --good DIR --bad DIR` then
says which layers' tactics separate the two piles.
"""
from __future__ import annotations

import os
import shlex
import subprocess
import time

from debugkit.debug.executor import ShippedModel
from native.files import write_bytes
from native import config
from native.logger import G_LOGGER
from native.progress import progress, search_scope


class BuildLoop:
    """build(i) -> (graph, replay doc, plan bytes or None); check(graph, plan_path, replay_path) -> (passed, detail)
    or (passed, detail, verdict JSON); each result keeps its build's verdict (debugkit/verdict.py)."""

    def __init__(self, build, check, artifacts_dir, until="bad", save_plans=False):
        self.build, self.check = build, check
        self.dir = artifacts_dir
        self.until = until
        self.save_plans = save_plans
        self.results = []

    def _done(self, passed, i):
        if self.until == "good":
            return passed
        if self.until == "bad":
            return not passed
        return i + 1 >= int(self.until)

    def _limit(self, max_iterations) -> int:
        for sub in ("good", "bad"):
            os.makedirs(os.path.join(self.dir, sub), exist_ok=True)
        return int(self.until) if str(self.until).isdigit() else max_iterations

    def run(self, max_iterations=100) -> list:
        from backends.engine.builder.tactic_replay import save_replay
        limit = self._limit(max_iterations)
        with search_scope(), progress(total=limit, desc="debug build", unit="build", outer=True) as bar:
            for i in range(limit):
                t0 = time.perf_counter()
                graph, doc, plan = self.build(i)
                replay = os.path.join(self.dir, "current_tactics.json")
                save_replay(doc, replay)
                plan_path = None
                if plan is not None:
                    plan_path = os.path.join(self.dir, "current.plan")
                    write_bytes(plan_path, plan, "plan")
                checked = self.check(graph, plan_path, replay)
                passed = checked[0]
                pile = "good" if passed else "bad"
                name = f"iter{i:03d}"
                # complete files (written by the output module above) filed into good/ or bad/ by a rename
                os.replace(replay, os.path.join(self.dir, pile, f"{name}_tactics.json"))
                if plan_path is not None:
                    if self.save_plans:
                        os.replace(plan_path, os.path.join(self.dir, pile, f"{name}.plan"))
                    else:
                        os.remove(plan_path)
                self._record(i, checked, time.perf_counter() - t0, bar)
                if self._done(passed, i):
                    break
        return self.results

    def run_on(self, executor, iteration, max_iterations=100) -> list:
        """The builds on `executor`'s workers, as many at once as it has (BuildIteration: each builds and checks
        where it runs; the replay documents and plans come back and are filed here). The answer is the serial
        loop's: the builds are filed in order, and the loop stops where a serial run would, so the builds of the
        last batch after that one (started speculatively) are not filed."""
        from backends.engine.builder.tactic_replay import save_replay
        limit = self._limit(max_iterations)
        width = max(1, int(getattr(executor, "workers", 1)))
        with search_scope(), progress(total=limit, desc="debug build", unit="build", outer=True) as bar:
            i = 0
            while i < limit:
                batch = list(range(i, min(limit, i + width)))
                for k, r in zip(batch, executor.map(iteration, batch)):
                    pile = "good" if r["passed"] else "bad"
                    save_replay(r["doc"], os.path.join(self.dir, pile, f"iter{k:03d}_tactics.json"))
                    if self.save_plans and r.get("plan") is not None:
                        write_bytes(os.path.join(self.dir, pile, f"iter{k:03d}.plan"), r["plan"], "plan")
                    if self.on_timings is not None and r.get("timings"):
                        self.on_timings(r["timings"])
                    self._record(k, (r["passed"], r["detail"], r.get("verdict")), r["seconds"], bar)
                    if self._done(r["passed"], k):
                        if k < batch[-1]:
                            G_LOGGER.info(f"builds {k + 1}..{batch[-1]} ran beside build {k}, past where the loop "
                                          f"stops: not filed")
                        return self.results
                i += len(batch)
        return self.results

    on_timings = None   # run_on: called with the timings each worker's build measured (the --timing-cache merge)

    def _record(self, i, checked, seconds, bar):
        passed, detail = checked[0], checked[1]
        verdict = checked[2] if len(checked) > 2 else None
        pile = "good" if passed else "bad"
        self.results.append({"iteration": i, "result": pile, "detail": detail, "seconds": round(seconds, 3),
                             **({"verdict": verdict} if verdict is not None else {})})
        G_LOGGER.info(f"build {i}: {pile.upper()} ({detail})")
        bar.update(1)
        bar.set_postfix_str(f"good {sum(r['result'] == 'good' for r in self.results)} "
                            f"bad {sum(r['result'] == 'bad' for r in self.results)}")


class BuildIteration(ShippedModel):
    """One `debug build` iteration where a worker runs it (picklable): a fresh build of the model with the
    command's build options (fresh tactic timing, or from the --timing-cache file's timings when they came along),
    checked there by `check` (GraphCheck or OutputCheck, in process) or by the command `check_cmd`. Returns what
    the search process files: {"doc": the replay document, "plan": its bytes (save_plans), "passed", "detail",
    "verdict", "seconds", "timings": what this build timed}."""

    def __init__(self, model_path, build, data, fingerprint, feeds, *, check=None, check_cmd=None,
                 save_plans=False, timings=None):
        self.model_path, self.build, self.data, self.fingerprint = model_path, build, data, fingerprint
        self.feeds, self.check, self.check_cmd = feeds, check, check_cmd
        self.save_plans, self.timings = save_plans, dict(timings or {})

    def __call__(self, iteration: int) -> dict:
        import shutil
        import tempfile

        from backends.engine.builder import TimingCache
        from backends.engine.builder.tactic_replay import save_replay
        from backends.engine.plan import serialize_plan
        from debugkit.debug.tactics import TacticBuilds
        t0 = time.perf_counter()
        path = self._model_file()
        made = {}

        def make_config(unrestricted=False):
            config = self.build.builder_config(data=self.data, model_path=path, fingerprint=self.fingerprint)
            config.timing_cache = made.setdefault("cache", TimingCache(dict(self.timings)))
            config.algorithm_selector = None
            made["config"] = config
            return config
        graph, doc = TacticBuilds(path, make_config, self.feeds[0], self.build.shape_ranges()).build()
        plan = serialize_plan(graph, made["config"]) if self.save_plans or self.check_cmd else None
        if self.check_cmd:
            scratch = tempfile.mkdtemp(prefix=f"debugkit_build_pid{os.getpid()}_")
            try:
                replay, plan_path = os.path.join(scratch, "tactics.json"), os.path.join(scratch, "build.plan")
                save_replay(doc, replay)
                write_bytes(plan_path, plan, "plan")
                checked = command_check(self.check_cmd)(graph, plan_path, replay)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        else:
            checked = self.check(graph)
        timings = {k: v for k, v in made["cache"].entries.items() if k not in self.timings}
        return {"doc": doc, "plan": plan if self.save_plans else None, "passed": bool(checked[0]),
                "detail": checked[1], "verdict": checked[2] if len(checked) > 2 else None,
                "seconds": time.perf_counter() - t0, "timings": timings}


class GraphCheck:
    """Our comparison in process, as `run` judges (the comparison group's CompareOptions.judge): the engine graph
    on every feed against the reference outputs; (passed, detail, verdict JSON) with one verdict over the feeds."""

    def __init__(self, feeds_list, reference_outputs, options, device="cpu"):
        self.feeds_list, self.reference, self.options, self.device = feeds_list, reference_outputs, options, device

    def __call__(self, graph, plan_path=None, replay_path=None):
        from backends.engine.runtime.executor import GraphExecutor
        from debugkit.verdict import Verdict, combine
        from native.errors import DebugkitError
        verdicts = []
        try:
            ex = GraphExecutor(graph, self.device)
            for feeds, ref in zip(self.feeds_list, self.reference):
                env = ex.run(dict(feeds))
                out = {}
                for name in ref:
                    v = env.get(graph.aliases.get(name, name), env.get(name))
                    if v is not None:
                        out[name] = v
                verdicts.append(Verdict.from_json(self.options.judge(out, ref)["verdict"]))
        except DebugkitError as e:
            why = f"error: {str(e).splitlines()[0][:200]}"
            return False, why, Verdict("check", [why], comparing=False).to_json()
        v = combine(verdicts, "check", label=lambda i: f"input {i}")
        detail = "; ".join(v.reasons())[:200] if not v.passed else \
            f"{v.compared.comparisons} comparison(s) passed"
        return v.passed, detail, v.to_json()


def command_check(cmd: str):
    """A check that runs `cmd` (a shell-free argument list; {plan} and {tactics} are replaced by the artifact
    paths, which are also in $DEBUGKIT_PLAN / $DEBUGKIT_TACTICS); exit status 0 means good."""
    def check(graph, plan_path, replay_path):
        argv = [a.replace("{plan}", plan_path or "").replace("{tactics}", replay_path) for a in shlex.split(cmd)]
        r = subprocess.run(argv, env=config.child_env(plan=plan_path, tactics=replay_path), capture_output=True,
                           text=True)
        tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
        from debugkit.verdict import Verdict
        detail = f"exit {r.returncode}: {tail[0][:120]}"   # any failing exit: this build is bad (a disagreement)
        return r.returncode == 0, detail, Verdict.from_exit_code(0 if r.returncode == 0 else 1, detail,
                                                                 "check").to_json()
    return check
