"""Run `run` or `debug precision` over a list of models with one executor and write one summary table (HTML, JSON).

    debugkit sweep MODEL [MODEL ...] [--models-file FILE] --task run|precision -o DIR [--workers N | --ray auto]
        [--task-args 'options for every task, e.g. --engine --onnxrt --fp16 --atol 1e-2']

Each model is an independent job (its own process with --workers/--ray); per model the task's own outputs (run's
--json verdict, precision's answer file and report) go to DIR/<model>/, and DIR/sweep.json + DIR/sweep.html sum up.
A models file holds one path per line (`#` comments) or a JSON list of {"path": ..., "args": [...]} entries whose
args are added for that model only (e.g. its --input-shapes).
"""
from __future__ import annotations

import html
import json
import os
import time

from debugkit.cli import _search_args
from native.errors import InputFileError, UsageError

TASKS = ("run", "precision")


def register(subparsers):
    p = subparsers.add_parser("sweep", help=__doc__.splitlines()[0], description=__doc__)
    p.add_argument("models", nargs="*", help="ONNX models")
    p.add_argument("--models-file", metavar="FILE", help="more models: one path per line, or a JSON list")
    p.add_argument("--task", choices=TASKS, default="run")
    from debugkit import options
    options.add_outputs(p, "output", output={"default": "sweep", "metavar": "DIR",
                                             "help": "where results go (default ./sweep)"})
    options.add_aliases(p, "sweep")   # --output-dir: the older spelling of -o
    p.add_argument("--workers", type=_search_args._workers_arg, default=1, metavar="N|auto",
                   help="models evaluated in parallel processes (auto: one per core); a lost worker is replaced")
    p.add_argument("--ray", metavar="ADDRESS|auto", default=None,
                   help="run the jobs on a Ray cluster (each job gets the model's bytes; its outputs come back here)")
    p.add_argument("--resume", action="store_true",
                   help="skip the models DIR/sweep_log.jsonl has done with the same task and options")
    p.add_argument("--task-args", default="", metavar="'OPTIONS'",
                   help="options for every task, one quoted string (run: '--engine --onnxrt'; precision: '--fp16 "
                        "--atol 1e-2')")
    _search_args.add_common(p)
    p.set_defaults(func=run)


def _models(args) -> list:
    jobs = [{"path": m, "args": []} for m in args.models]
    if args.models_file:
        if not os.path.exists(args.models_file):
            raise InputFileError(f"--models-file not found: {args.models_file}")
        text = open(args.models_file).read()
        try:
            data = json.loads(text)
            jobs += [{"path": d["path"], "args": list(d.get("args", []))} if isinstance(d, dict)
                     else {"path": str(d), "args": []} for d in data]
        except ValueError:
            jobs += [{"path": line.strip(), "args": []} for line in text.splitlines()
                     if line.strip() and not line.strip().startswith("#")]
    if not jobs:
        raise UsageError("sweep: give at least one model (positional or --models-file)")
    base = os.path.dirname(os.path.abspath(args.models_file)) if args.models_file else os.getcwd()
    for j in jobs[len(args.models):]:   # a manifest's relative paths are relative to the manifest
        if not os.path.isabs(j["path"]) and not os.path.exists(j["path"]):
            j["path"] = os.path.join(base, j["path"])
    missing = [j["path"] for j in jobs if not os.path.exists(j["path"])]
    if missing:
        raise InputFileError(f"sweep: model file(s) not found: {missing}")
    seen: dict = {}
    for j in jobs:   # resolved here, on the driver: workers (on other nodes) never see these paths
        j["path"] = os.path.abspath(j["path"])
        stem = os.path.splitext(os.path.basename(j["path"]))[0]
        seen[stem] = seen.get(stem, 0) + 1
        j["name"] = stem if seen[stem] == 1 else f"{stem}_{seen[stem]}"
    return jobs


def _ship(job) -> dict:
    """The job with the model's bytes (external data included) instead of a path only this machine has."""
    from backends.runners import load_onnx
    return {**job, "model_bytes": load_onnx(job["path"]).SerializeToString()}


class SweepJob:
    """One model's task, run through the CLI entry point in the worker (picklable).

    A job with "model_bytes" (Ray: no shared filesystem assumed) runs in the worker's own scratch directory and
    returns its output files as bytes ("files"), which the driver writes into DIR/<model>/; paths inside text
    outputs name the driver's directory."""

    def __init__(self, task, common_args, out_dir):
        self.task, self.common_args, self.out_dir = task, list(common_args), out_dir

    def __call__(self, job) -> dict:
        name = job.get("name") or os.path.splitext(os.path.basename(job["path"]))[0]
        final = os.path.join(self.out_dir, name)
        if job.get("model_bytes") is None:
            os.makedirs(final, exist_ok=True)
            return self._run(job["path"], job, final, name)
        from debugkit.debug.scratch import search_dir
        with search_dir("debugkit_sweep_") as work:   # the worker's own, removed when the job ends
            model = os.path.join(work, os.path.basename(job["path"]))
            with open(model, "wb") as f:
                f.write(job["model_bytes"])
            d = os.path.join(work, name)
            os.makedirs(d)
            res = self._run(model, job, d, name)
            res["files"] = _collect(d, {d: final, model: job["path"]})
            res.update(dir=final, path=job["path"])
            for k in ("report",):
                if isinstance(res.get(k), str):
                    res[k] = res[k].replace(d, final)
            return res

    def _run(self, model, job, d, name) -> dict:
        import contextlib
        import io
        from debugkit.cli.main import main
        if self.task == "run":
            argv = ["run", model, *self.common_args, *job["args"], "--json", os.path.join(d, "run.json")]
        else:
            # the probe log named outright: parallel jobs must not share a placeholder path ("<output>_probes.jsonl")
            argv = ["debug", "precision", model, *self.common_args, *job["args"],
                    "-o", os.path.join(d, "precision.json"), "--log", os.path.join(d, "precision_probes.jsonl")]
        out, err = io.StringIO(), io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as e:   # argparse errors
                rc = e.code if isinstance(e.code, int) else 2
        res = {"model": name, "path": job["path"], "rc": rc, "seconds": round(time.perf_counter() - t0, 1),
               "dir": d, "error": err.getvalue().strip().splitlines()[-1][:300] if rc not in (0, 1) and
               err.getvalue().strip() else None}
        with open(os.path.join(d, "log.txt"), "w") as f:
            f.write(out.getvalue() + err.getvalue())
        res.update(_task_summary(self.task, d, rc, res["error"]))
        if res["error"] is None and rc != 0 and res.get("reasons"):   # a failed model says why in its row too
            res["error"] = res["reasons"][0][:300]
        return res


TEXT_OUTPUTS = (".json", ".jsonl", ".html", ".txt", ".svg")


def _collect(d, renames: dict) -> dict:
    """{relative path: bytes} of every file under d; in text outputs the worker's paths become the driver's."""
    out = {}
    for root, _, files in os.walk(d):
        for fn in files:
            path = os.path.join(root, fn)
            with open(path, "rb") as f:
                data = f.read()
            if fn.endswith(TEXT_OUTPUTS):
                for a, b in sorted(renames.items(), key=lambda kv: -len(kv[0])):
                    data = data.replace(a.encode(), b.encode())
            out[os.path.relpath(path, d)] = data
    return out


def _land(res) -> dict:
    """Write a shipped job's files into its directory on the driver; the row without them."""
    from native.files import write_bytes
    files = res.pop("files", None)
    for rel, data in (files or {}).items():
        target = os.path.join(res["dir"], rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        write_bytes(target, data, "sweep result")
    return res


def _task_summary(task, d, rc, error) -> dict:
    """The row's status comes from the task's verdict (debugkit/verdict.py): run's --json document when it agrees
    with the exit code, else the exit code alone. A non-zero exit is never PASSED."""
    from debugkit.verdict import Verdict
    doc = None
    path = os.path.join(d, "run.json" if task == "run" else "precision.json")
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        pass
    if task == "run":
        if isinstance(doc, dict) and doc.get("exit_code") == rc:
            verdict = Verdict.from_json(doc)
        else:
            verdict = Verdict.from_exit_code(rc, error or "", "run")
        outs = doc.get("outputs", []) if isinstance(doc, dict) else []
        worst = max((o["max_abs"] for o in outs if o.get("max_abs") is not None), default=None)
        return {"status": verdict.status, "exit_code": verdict.exit_code, "reasons": verdict.reasons(),
                "max_abs": worst, "failed_outputs": [o["name"] for o in outs if o.get("status") == "FAILED"],
                "verdict": verdict.to_json()}
    if isinstance(doc, dict) and isinstance(doc.get("verdict"), dict) and doc["verdict"].get("exit_code") == rc:
        verdict = Verdict.from_json(doc["verdict"])   # the search's own verdict (debugkit/verdict.py)
    else:
        verdict = Verdict.from_exit_code(rc, error or "", "debug precision")
    row = {"status": "FOUND" if rc == 0 and isinstance(doc, dict) else verdict.status, "exit_code": rc,
           "reasons": verdict.reasons(), "verdict": verdict.to_json()}
    if rc == 0 and isinstance(doc, dict):
        try:
            row.update(kept=len(doc["layer_precisions"]), layers=doc["layers"], probes=doc["probes"],
                       report=doc.get("report"), kept_layers=list(doc["layer_precisions"])[:20])
        except (KeyError, TypeError):
            row["status"] = "ERROR"
    return row


def run(args) -> int:
    from debugkit.debug.executor import make_executor
    _search_args.apply_common(args)
    jobs = _models(args)
    import shlex
    task_args = shlex.split(args.task_args)
    args.output_dir = args.output
    os.makedirs(args.output_dir, exist_ok=True)
    fn = SweepJob(args.task, task_args, os.path.abspath(args.output_dir))
    from debugkit.debug.fingerprint import file_sha256
    from debugkit.debug.probe_log import ProbeLog
    log = ProbeLog(os.path.join(args.output_dir, "sweep_log.jsonl"),
                   {"search": "sweep", "task": args.task, "task_args": task_args}, resume=args.resume)
    keys = [{"model": j["path"], "sha256": file_sha256(j["path"]), "args": j["args"]} for j in jobs]
    done = {i: log.lookup(k)["result"] for i, k in enumerate(keys) if log.lookup(k) is not None}
    if done:
        print(f"sweep --resume: {len(done)} of {len(jobs)} model(s) already done ({log.path})")
    todo = [i for i in range(len(jobs)) if i not in done]
    t0 = time.perf_counter()
    bar = _search_args.Progress(len(todo), f"sweep {args.task}")
    try:
        with _search_args.make_executor(args) as ex:
            ship = getattr(ex, "remote", False)

            def finished(r, it=iter(todo)):
                i = next(it)
                done[i] = _land(r)
                log.record(keys[i], done[i], r.get("seconds", 0.0))
                bar({"result": r["status"]}, len(done))
            batch = [_ship(jobs[i]) if ship else jobs[i] for i in todo]
            if len(batch) == 1 and ex.workers == 1:
                finished(fn(batch[0]))
            elif batch:
                ex.map(fn, batch, on_done=finished)
    finally:
        bar.close()
    results = [done[i] for i in range(len(jobs))]
    summary = {"task": args.task, "task_args": task_args, "models": len(results),
               "seconds": round(time.perf_counter() - t0, 1), "results": results}
    from native.files import write_json, write_text
    write_json(os.path.join(args.output_dir, "sweep.json"), summary, "sweep summary", indent=1, default=str)
    write_text(os.path.join(args.output_dir, "sweep.html"), _html(summary), "sweep report")
    for line in _table(summary):
        print(line)
    print(f"wrote {os.path.join(args.output_dir, 'sweep.json')} and sweep.html")
    return sweep_verdict(results).exit_code


def sweep_verdict(results):
    """The sweep's verdict: it passes when every model's task passed; a model that failed, could not be read or
    crashed is a finding of the sweep (exit 1), not bad input to it (the sweep's own bad input raised earlier)."""
    from debugkit.verdict import Verdict, combine
    parts = [Verdict.from_json(r["verdict"]) for r in results]
    v = combine([Verdict("sweep", p.reasons(), p.compared, p.nonfinite, comparing=p.comparing) if not p.passed else p
                 for p in parts], "sweep", label=lambda i: f"{results[i]['model']} ({parts[i].status})")
    return v


def _columns(task):
    if task == "run":
        return [("model", "model"), ("status", "status"), ("max_abs", "max abs"), ("seconds", "s"), ("error", "why")]
    return [("model", "model"), ("status", "status"), ("kept", "kept"), ("layers", "of layers"),
            ("probes", "probes"), ("seconds", "s"), ("error", "why")]


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    return "" if v is None else str(v)


def _cell(text, width=100):
    return text if len(text) <= width else text[:width - 1] + "…"


def _table(summary):
    cols = _columns(summary["task"])
    rows = [[_cell(_fmt(r.get(k))) for k, _ in cols] for r in summary["results"]]
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, (_, h) in enumerate(cols)]
    lines = ["  ".join(h.ljust(w) for (_, h), w in zip(cols, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)) for row in rows]
    return lines


def _html(summary):
    cols = _columns(summary["task"])
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h in cols)
    body = []
    for r in summary["results"]:
        cells = []
        for k, _ in cols:
            v = _fmt(r.get(k))
            if k == "model" and r.get("report"):
                v = f"<a href='{html.escape(os.path.relpath(r['report'], r['dir'] + '/..'))}'>{html.escape(v)}</a>"
            else:
                v = html.escape(v)
            cells.append(f"<td>{v}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f"<!doctype html><meta charset='utf-8'><title>debugkit sweep {summary['task']}</title>"
            "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
            "tr:nth-child(even){background:#f4f4f4}</style>"
            f"<h1>debugkit sweep: {summary['task']}</h1><p>{summary['models']} model(s), {summary['seconds']} s; "
            f"options: <code>{html.escape(' '.join(summary['task_args']))}</code></p>"
            f"<table><tr>{head}</tr>{''.join(body)}</table>")
