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
    p.add_argument("--ray", metavar="ADDRESS|auto", default=None, help="run the jobs on a Ray cluster")
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
    missing = [j["path"] for j in jobs if not os.path.exists(j["path"])]
    if missing:
        raise InputFileError(f"sweep: model file(s) not found: {missing}")
    return jobs


class SweepJob:
    """One model's task, run through the CLI entry point in the worker (picklable)."""

    def __init__(self, task, common_args, out_dir):
        self.task, self.common_args, self.out_dir = task, list(common_args), out_dir

    def __call__(self, job) -> dict:
        import contextlib
        import io
        from debugkit.cli.main import main
        name = os.path.splitext(os.path.basename(job["path"]))[0]
        d = os.path.join(self.out_dir, name)
        os.makedirs(d, exist_ok=True)
        if self.task == "run":
            argv = ["run", job["path"], *self.common_args, *job["args"], "--json", os.path.join(d, "run.json")]
        else:
            argv = ["debug", "precision", job["path"], *self.common_args, *job["args"],
                    "-o", os.path.join(d, "precision.json")]
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
    t0 = time.perf_counter()
    bar = _search_args.Progress(len(jobs), f"sweep {args.task}")
    results = []
    try:
        with _search_args.make_executor(args) as ex:
            for start in range(0, len(jobs), max(1, ex.workers)):
                batch = jobs[start:start + max(1, ex.workers)]
                for r in ex.map(fn, batch) if len(batch) > 1 or ex.workers > 1 else [fn(batch[0])]:
                    results.append(r)
                    bar({"result": r["status"]}, len(results))
    finally:
        bar.close()
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
