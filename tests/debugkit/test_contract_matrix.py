"""The contract matrix: one row per command x scenario, each asserting what the verdict and exit-code rule promise
(debugkit/verdict.py, docs/run.md "Exit codes"): a command passes only with at least one finite comparison of at
least one input, bad input is exit 2, a disagreement or nothing compared is exit 1, sweep rows never say PASSED for
a failing model, debug build|repeat fail when a build fails, and every command hands every build option to the
builder (debugkit/options.py).

Adding a row: append `Row(command, scenario, argv, expect)` to ROWS (or a generator below). `argv(ctx)` returns the
command line after `debugkit` (ctx holds the fixture files: ctx.chain, ctx.tmp, ...; `ctx.file(name, text)` writes
one); `expect` is an exit code, a set of exit codes, or a function `(result, ctx) -> None` that asserts on
result.code / result.out / result.err. `env` sets environment variables for the row.
"""
from __future__ import annotations

import json
import os
import textwrap
import uuid
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests.debugkit.conftest import chain_model

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTY = os.path.join(os.path.dirname(HERE), "tactics", "faulty_tactics.py")


@dataclass
class Row:
    command: str
    scenario: str
    argv: Callable
    expect: object
    env: dict = field(default_factory=dict)

    @property
    def id(self):
        return f"{self.command} | {self.scenario}"


@dataclass
class Result:
    code: int
    out: str
    err: str


class Ctx:
    """The fixture files every row may use (made once per test, in its tmp dir)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.chain = self._save(chain_model(), "chain.onnx")
        other = chain_model(scale=2.0)
        other.graph.output[0].name = "z"
        other.graph.node[-1].output[0] = "z"
        self.other = self._save(other, "other.onnx")
        self.log = self._save(_unary("Log"), "log.onnx")               # NaN for x < 0 on both sides
        self.reciprocal = self._save(_unary("Reciprocal"), "recip.onnx")   # Inf for x == 0 on both sides
        from tests.tactics.models import conv_chain
        self.convs = self._save(conv_chain(), "convs.onnx")
        self.empty_loader = self.file("empty_loader.py", "def load_data():\n    return iter(())\n")
        self.modules = [FAULTY]   # tactics modules a row may load: unloaded after it (the registry is global)

    def _save(self, model, name):
        path = os.path.join(self.tmp, name)
        onnx.save(model, path)
        return path

    def file(self, name, text):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def path(self, name):
        return os.path.join(self.tmp, name)


def _unary(op):
    g = helper.make_graph([helper.make_node(op, ["x"], ["y"], name="op")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _json(ctx, name):
    with open(ctx.path(name)) as f:
        return json.load(f)


# --- expectations ---------------------------------------------------------------------------------------------------

def _run_json_failed(code):
    def check(r, ctx):
        assert r.code == code, (r.code, r.out[-500:], r.err[-500:])
        doc = _json(ctx, "v.json")
        assert doc["exit_code"] == code and doc["passed"] is False and doc["reasons"], doc
    return check


def _nothing_compared(r, ctx):
    assert r.code == 1, (r.code, r.out[-400:], r.err[-400:])
    assert "nothing compared" in r.out
    doc = _json(ctx, "v.json")
    assert doc["exit_code"] == 1 and doc["status"] == "FAILED" and doc["compared"]["iterations"] == 0
    assert any("nothing compared" in x for x in doc["reasons"])


def _nan_counted(r, ctx):
    assert r.code == 1, (r.code, r.out[-400:])
    doc = _json(ctx, "v.json")
    assert doc["reasons"] and doc["compared"]["finite"] == 0
    counts = doc["nonfinite_counts"]
    assert counts and counts[0]["nonfinite"] == 4 and counts[0]["reference_nonfinite"] == 4, counts


def _inf_counted(r, ctx):
    doc = _json(ctx, "v.json")
    assert r.code == 0 and doc["passed"] and doc["compared"]["finite"] == 1, (r.code, doc["reasons"])
    assert doc["nonfinite_counts"] and doc["nonfinite_counts"][0]["nonfinite"] == 1


def _sweep_status(r, ctx):
    assert r.code == 1
    doc = _json(ctx, "sw/sweep.json")
    for row in doc["results"]:
        assert (row["status"] == "PASSED") == (row["rc"] == 0), row
    by = {x["model"]: x for x in doc["results"]}
    assert by["broken"]["status"] == "ERROR" and by["chain"]["status"] == "PASSED"
    assert by["log"]["status"] == "FAILED"


def _every_build_bad(word):
    def check(r, ctx):
        assert r.code == 1, (r.code, r.out[-600:], r.err[-600:])
        assert word in r.out, r.out[-600:]
    return check


def _fp16_sensitive(ctx):
    """The conv chain with conv2 made FP16-sensitive (tools/make_fp16_sensitive.py) and the precision file that
    fixes it: --fp16 fails, --fp16 --layer-precisions FILE passes."""
    import importlib.util
    path = ctx.path("sensitive.onnx")
    if not os.path.exists(path):
        spec = importlib.util.spec_from_file_location(
            "make_fp16_sensitive", os.path.join(os.path.dirname(os.path.dirname(HERE)), "tools",
                                                "make_fp16_sensitive.py"))
        tool = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(tool)
        assert tool.main([ctx.convs, "-o", path, "--layers", "conv2"]) in (0, None)
        ctx.file("keep_fp32.json", json.dumps({"layer_precisions": {"conv2": "fp32",
                                                                    "conv2/fp16_compensation": "fp32"}}))
    return path


def _broken(ctx):
    m = chain_model()
    m.graph.node[0].op_type = "NoSuchOp"
    return ctx._save(m, "broken.onnx")


ROWS = [
    Row("run", "a data loader script that yields nothing", lambda c: [
        "run", c.chain, "--engine", "--onnxrt", "--input-shapes", "x:[2,4]", "--data-loader-script", c.empty_loader,
        "--json", c.path("v.json")], _run_json_failed(2)),
    Row("run", "--iterations 0", lambda c: [
        "run", c.chain, "--engine", "--onnxrt", "--input-shapes", "x:[2,4]", "--iterations", "0",
        "--json", c.path("v.json")], _nothing_compared),
    Row("run", "another model's golden", lambda c: (
        ["run", c.other, "--onnxrt", "--input-shapes", "x:[2,4]", "--save-outputs", c.path("g.h5"), "-q"],
        ["run", c.chain, "--engine", "--input-shapes", "x:[2,4]", "--load-outputs", c.path("g.h5"),
         "--json", c.path("v.json")]), _run_json_failed(1)),
    Row("run", "NaN on both sides, allowed: nothing finite compared", lambda c: [
        "run", c.log, "--engine", "--onnxrt", "--val-range", "[-1,-0.5]", "--allow-nan",
        "--json", c.path("v.json")], _nan_counted),
    Row("run", "an Inf on both sides is counted, the finite rest compared", lambda c: [
        "run", c.reciprocal, "--engine", "--onnxrt", "--data-loader-script", c.file(
            "zero.py", "import numpy as np\ndef load_data():\n    yield {'x': np.array([0, 1, 2, 3], np.float32)}\n"),
        "--json", c.path("v.json")], _inf_counted),
    Row("run", "a failed run's JSON carries its reasons", lambda c: [
        "run", c.log, "--engine", "--onnxrt", "--val-range", "[-1,-0.5]", "--json", c.path("v.json")],
        _run_json_failed(1)),
    Row("sweep", "a model that errors or fails is never PASSED", lambda c: [
        "sweep", c.chain, _broken(c), c.log, "-o", c.path("sw"),
        "--task-args", "--engine --onnxrt --val-range [-1,-0.5]"], _sweep_status),
    Row("debug repeat", "the faulty tactic module fails every build run fails", lambda c: [
        "debug", "repeat", c.convs, "--tactics-module", FAULTY, "--tactic-sources", "faulty-conv", "--until", "2",
        "--art-dir", c.path("rep"), "--log", c.path("rep.jsonl"), "-q"], _every_build_bad("0 passed, 2 failed"),
        env={"DEBUGKIT_FAULTY": "faulty-conv:cin=32"}),
    Row("run", "the faulty tactic module fails (the reference for the repeat row)", lambda c: [
        "run", c.convs, "--engine", "--onnxrt", "--tactics-module", FAULTY, "--tactic-sources", "faulty-conv",
        "-q"], 1, env={"DEBUGKIT_FAULTY": "faulty-conv:cin=32"}),
    Row("debug build", "a bad build is a failing verdict (exit 1), as in repeat", lambda c: [
        "debug", "build", c.convs, "--tactics-module", FAULTY, "--tactic-sources", "faulty-conv", "--until", "2",
        "--artifacts-dir", c.path("bld"), "-q"], _every_build_bad("0 good, 2 bad"),
        env={"DEBUGKIT_FAULTY": "faulty-conv:cin=32"}),
    Row("run", "an FP16-sensitive layer fails --fp16 (the reference for the next rows)", lambda c: [
        "run", _fp16_sensitive(c), "--engine", "--onnxrt", "--fp16", "--atol", "1e-2", "--rtol", "1e-2", "-q"], 1),
    Row("run", "a precision file that keeps it FP32 passes", lambda c: [
        "run", _fp16_sensitive(c), "--engine", "--onnxrt", "--fp16", "--layer-precisions", c.path("keep_fp32.json"),
        "--atol", "1e-2", "--rtol", "1e-2", "-q"], 0),
    Row("debug repeat", "the precision file that passes in run passes here too", lambda c: [
        "debug", "repeat", _fp16_sensitive(c), "--fp16", "--layer-precisions", c.path("keep_fp32.json"),
        "--atol", "1e-2", "--rtol", "1e-2", "--until", "2", "--art-dir", c.path("rp"), "--log", c.path("rp.jsonl"),
        "-q"], 0),
    Row("debug build", "good builds pass (exit 0)", lambda c: [
        "debug", "build", c.chain, "--input-shapes", "x:[2,4]", "--until", "2", "--artifacts-dir", c.path("bld"),
        "-q"], 0),
]


# --- every command honours every build option ------------------------------------------------------------------------

class _Built(BaseException):
    """Raised by the hook at the first build: the command has handed its config to the builder; stop there."""


def effective_config(config) -> str:
    """What the builder was given, as text: the config's JSON (flags, profiles, precisions, sources, DLA, ...), the
    calibrator's settings, the timing cache's entry count, the algorithm selectors (and their files), the Q/DQ
    mode and the tactics registered (a --tactics-module registers some)."""
    from native.tactic_modules import known_tactic_names
    d = config.to_json()
    d.pop("options_fingerprint", None)
    cal = config.int8_calibrator
    d["calibrator"] = None if cal is None else [str(getattr(cal, "algorithm", "")), getattr(cal, "cache", None),
                                                getattr(cal, "percentile", None)]
    d["timing_cache_entries"] = None if config.timing_cache is None else len(config.timing_cache.entries)
    d["selectors"] = _selectors(config.algorithm_selector)
    d["qdq"] = config.qdq_emulation
    d["dla_settings"] = [getattr(config, "dla_profile", None), getattr(config, "dla_core", None),
                str(config.default_device_type)]
    d["tactics"] = sorted(known_tactic_names())
    return json.dumps(d, sort_keys=True, default=str)


def _selectors(sel):
    if sel is None:
        return []
    inner = getattr(sel, "selectors", None)
    if inner is not None:
        return [x for s in inner for x in _selectors(s)]
    return [f"{type(sel).__name__}:{getattr(sel, 'path', None) or getattr(sel, 'source', None) or ''}"]


# command -> (argv before the options, argv after; {m} is the model, {t} the tmp dir)
BUILD_COMMANDS = {
    "run": (["run", "{m}", "--engine", "--input-shapes", "x:[2,4]"], []),
    "convert": (["convert", "{m}", "-o", "{t}/c.plan", "--input-shapes", "x:[2,4]"], []),
    "bench": (["bench", "{m}", "--input-shapes", "x:[2,4]", "--duration", "0", "--iterations", "1", "--warm-up", "0"],
              []),
    "debug build": (["debug", "build", "{m}", "--input-shapes", "x:[2,4]", "--artifacts-dir", "{t}/b", "--until", "1"],
                    []),
    "debug repeat": (["debug", "repeat", "{m}", "--input-shapes", "x:[2,4]", "--art-dir", "{t}/r", "--until", "1",
                      "--log", "{t}/r.jsonl"], []),
    "debug tactics": (["debug", "tactics", "{m}", "--input-shapes", "x:[2,4]", "-o", "{t}/f.json",
                       "--log", "{t}/t.jsonl"], []),
    "debug reduce": (["debug", "reduce", "{m}", "--input-shapes", "x:[2,4]", "-o", "{t}/red.onnx",
                      "--log", "{t}/red.jsonl"], []),
    "debug precision": (["debug", "precision", "{m}", "--input-shapes", "x:[2,4]", "-o", "{t}/p.json"], ["--fp16"]),
}


def _tactics_module(ctx):
    name = f"contract-{uuid.uuid4().hex[:8]}"
    ctx.modules.append(ctx.path(f"{name.replace('-', '_')}.py"))
    return ctx.file(f"{name.replace('-', '_')}.py", textwrap.dedent(f"""
        from native.cpu.kernels.matmul import BlasMatMul
        from native.tactics import register_tactic

        @register_tactic
        class ContractTactic(BlasMatMul):
            name = "{name}"

            def supports(self, op, input_shapes):
                return "a contract-test tactic: registered, never chosen"
        """))


def _timing_cache(ctx):
    path = ctx.path("tc.json")
    if not os.path.exists(path):
        from debugkit.cli.main import main
        assert main(["convert", ctx.chain, "-o", ctx.path("tc.plan"), "--input-shapes", "x:[2,4]",
                     "--timing-cache", path, "-q"]) == 0
    return path


def _replay(ctx):
    path = ctx.path("replay.json")
    if not os.path.exists(path):
        from debugkit.cli.main import main
        assert main(["convert", ctx.chain, "-o", ctx.path("rp.plan"), "--input-shapes", "x:[2,4]",
                     "--save-tactics", path, "-q"]) == 0
    return path


# (flag, argv(ctx), extra base args the option needs to mean anything)
BUILD_OPTIONS = [
    ("--fp16", lambda c: ["--fp16"], []),
    ("--bf16", lambda c: ["--bf16"], []),
    ("--int8", lambda c: ["--int8"], []),
    ("--fp8", lambda c: ["--fp8"], []),
    ("--tf32", lambda c: ["--tf32"], []),
    ("--precision-constraints", lambda c: ["--precision-constraints", "obey"], []),
    ("--layer-precisions", lambda c: ["--layer-precisions", "mm:fp32"], []),
    ("--layer-output-types", lambda c: ["--layer-output-types", "mm:fp32"], []),
    ("--reduced-probability-outputs", lambda c: ["--reduced-probability-outputs"], []),
    ("--disable-fusion", lambda c: ["--disable-fusion"], []),
    ("--shape-profiles", lambda c: ["--shape-profiles", "x:[1,4]:[2,4]:[4,4]"], []),
    ("--calibration-cache", lambda c: ["--calibration-cache", c.path("cal.cache")], ["--int8"]),
    ("--calibration-algorithm", lambda c: ["--calibration-algorithm", "minmax"], ["--int8"]),
    ("--calibration-percentile", lambda c: ["--calibration-algorithm", "percentile", "--calibration-percentile",
                                            "99.5"], ["--int8", "--calibration-algorithm", "percentile"]),
    ("--qdq-emulation", lambda c: ["--qdq-emulation", "onnxruntime-x86"], []),
    ("--tactics-module", lambda c: ["--tactics-module", _tactics_module(c)], []),
    ("--tactic-sources", lambda c: ["--tactic-sources", "-blas"], []),
    ("--load-tactics", lambda c: ["--load-tactics", _replay(c)], []),
    ("--save-tactics", lambda c: ["--save-tactics", c.path("saved_tactics.json")], []),
    # the file comes from an FP32 `convert`; debug precision builds with its --fp16 (another header): load it anyway
    ("--timing-cache", lambda c: ["--timing-cache", _timing_cache(c), "--ignore-timing-cache-mismatch"], []),
    ("--avg-timing-iterations", lambda c: ["--avg-timing-iterations", "2"], []),
    ("--workspace", lambda c: ["--workspace", "1024"], []),
    ("--tactic-heuristic", lambda c: ["--tactic-heuristic"], []),
    ("--use-dla-core", lambda c: ["--use-dla-core", "0"], ["--fp16"]),
    ("--allow-gpu-fallback", lambda c: ["--allow-gpu-fallback"], ["--fp16", "--use-dla-core", "0"]),
    ("--layer-device-types", lambda c: ["--layer-device-types", "mm:dla"], ["--fp16"]),
    ("--dla-profile", lambda c: ["--dla-profile", "xavier"], ["--fp16", "--use-dla-core", "0"]),
]
# build options that are not about the built engine, with the reason (the test checks this list is complete)
NOT_BUILT = {
    "--device": "one device here (cpu); cuda needs a GPU, dla is the emulated DLA that --use-dla-core covers",
    "--ignore-timing-cache-mismatch": "decides whether a mismatched cache may load (tested in tests/tactics)",
    "--no-tf32": "the default (the off spelling of --tf32)",
    "--ignore-fingerprint": "about loading plans built elsewhere, not building",
}
# (command, flag) -> exit code: the command refuses the option, saying why, rather than dropping it
REFUSED = {(cmd, flag): 2 for cmd in ("debug build", "debug tactics", "debug reduce")
           for flag in ("--load-tactics", "--save-tactics")}
REFUSED[("debug reduce", "--calibration-cache")] = 2
# (command, flag): options whose subject is the command's own (the search's low precision is the build's flag)
SUBJECT = {("debug precision", f) for f in ("--fp16", "--bf16", "--int8", "--fp8")}


def _build_rows():
    rows = []
    for cmd in BUILD_COMMANDS:
        for flag, argv, base in BUILD_OPTIONS:
            if (cmd, flag) in SUBJECT:
                continue
            rows.append(Row(cmd, f"honours {flag}", argv, ("honours", flag, tuple(base))))
    return rows


ROWS += _build_rows()


def _expand(ctx, parts):
    return [p.replace("{m}", ctx.chain).replace("{t}", ctx.tmp) for p in parts]


def _built_config(ctx, cmd, options, monkeypatch, cli):
    """(exit code or None, effective config text or None) of `cmd` with `options`, stopped at its first build."""
    from backends.engine.builder import Builder
    seen = []

    def hook(self, network, config, *a, **kw):
        seen.append(effective_config(config))
        raise _Built()
    monkeypatch.setattr(Builder, "build_graph", hook)
    before, _ = BUILD_COMMANDS[cmd]
    try:
        code = cli(*_expand(ctx, before), *options)[0]
    except _Built:
        return None, seen[0]
    finally:
        monkeypatch.undo()
    return code, seen[0] if seen else None


@pytest.fixture
def ctx(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    c = Ctx(str(tmp_path))
    yield c
    from native.tactic_modules import unload_tactics_module
    for m in c.modules:
        unload_tactics_module(m)


_BASELINES = {}   # (command, base options) -> the config its first build got (no files of a row's tmp dir in it)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: r.id)
def test_contract(row, ctx, cli, monkeypatch):
    for k, v in row.env.items():
        monkeypatch.setenv(k, v)
    if isinstance(row.expect, tuple) and row.expect[0] == "honours":
        _, flag, base = row.expect
        expected = REFUSED.get((row.command, flag))
        # the command's own required options (debug precision's low precision), unless the row brings one
        needed = [] if set(base) & {"--fp16", "--bf16", "--int8", "--fp8"} else list(BUILD_COMMANDS[row.command][1])
        base = list(base) + needed
        key = (row.command, tuple(base))
        if key not in _BASELINES:
            _BASELINES[key] = _built_config(ctx, row.command, base, monkeypatch, cli)
        code0, plain = _BASELINES[key]
        assert plain is not None, f"{row.command} {' '.join(base)} did not reach the builder (exit {code0})"
        code, given = _built_config(ctx, row.command, base + row.argv(ctx), monkeypatch, cli)
        if expected is not None:
            assert code == expected, f"{row.command} should refuse {flag} (exit {expected}), got {code}"
            return
        assert given is not None, f"{row.command} with {flag} did not reach the builder (exit {code})"
        assert given != plain, f"{row.command} dropped {flag}: the builder got the same config without it"
        return
    argv = row.argv(ctx)
    runs = argv if isinstance(argv, tuple) else (argv,)
    for pre in runs[:-1]:
        assert cli(*pre)[0] == 0, pre
    r = Result(*cli(*runs[-1]))
    if callable(row.expect):
        row.expect(r, ctx)
    elif isinstance(row.expect, (set, frozenset)):
        assert r.code in row.expect, (r.code, r.out[-600:], r.err[-600:])
    else:
        assert r.code == row.expect, (r.code, r.out[-600:], r.err[-600:])


def test_every_build_option_has_a_row():
    """A build option added to debugkit/options.py without a row here (or a reason it builds nothing) fails."""
    from debugkit.options import BUILD
    flags = {f for o in BUILD for f in o.flags if f.startswith("--")} | {"--ignore-fingerprint"}
    covered = {f for f, _, _ in BUILD_OPTIONS} | set(NOT_BUILT)
    assert flags - covered == set(), f"build options without a contract row: {sorted(flags - covered)}"


def test_options_fingerprint_names_what_differs(tmp_path):
    """describe() names each option and the content of files: a changed loader script with the same path changes
    the fingerprint; paths() lists inputs, outputs and files updated in place (for the one output-path check)."""
    from debugkit.cli.main import build_parser
    from debugkit.options import Options
    script = tmp_path / "dl.py"
    script.write_text("def load_data():\n    yield {}\n")
    p = build_parser()
    argv = ["run", "m.onnx", "--engine", "--data-loader-script", str(script), "--atol", "1e-3",
            "--timing-cache", str(tmp_path / "tc.json"), "--save-outputs", str(tmp_path / "o.h5")]
    a = Options.from_args(p.parse_args(argv))
    b = Options.from_args(p.parse_args(argv[:-6] + ["--atol", "1e-2"] + argv[-4:]))
    diff = {k for k in a.describe() if a.describe()[k] != b.describe()[k]}
    assert diff == {"--atol"} and a.fingerprint() != b.fingerprint()
    fp = a.fingerprint()
    script.write_text("def load_data():\n    yield {'x': 1}\n")
    assert Options.from_args(p.parse_args(argv)).fingerprint() != fp
    paths = a.paths()
    assert ("--data-loader-script", str(script)) in paths["inputs"] and ("model", "m.onnx") in paths["inputs"]
    assert ("--save-outputs", str(tmp_path / "o.h5")) in paths["outputs"]
    assert ("--timing-cache", str(tmp_path / "tc.json")) in paths["updates"]
    b = Options.from_args(p.parse_args(["bench", "m.onnx", "--load-engine", "e.plan", "--dump-profile", "prof.json",
                                        "--json", "-", "--log-file", "log.txt"])).paths()
    assert ("--load-engine", "e.plan") in b["inputs"] and ("--dump-profile", "prof.json") in b["outputs"]
    assert ("--log-file", "log.txt") in b["appends"] and not [x for x in b["outputs"] if x[1] == "-"]


def test_aliases_and_deprecated_spellings(cli, tmp_path, capsys):
    """--art-dir is --artifacts-dir; convert's --profile is --shape-profiles (deprecated, says so); run's --profile
    is --profile-layers."""
    from debugkit.cli.main import build_parser
    p = build_parser()
    a = p.parse_args(["debug", "repeat", "m.onnx", "--art-dir", "D"])
    assert a.artifacts_dir == "D"
    a = p.parse_args(["convert", "m.onnx", "-o", "x.plan", "--profile", "x:[1,4]:[2,4]:[4,4]"])
    assert a.shape_profiles == ["x:[1,4]:[2,4]:[4,4]"] and "--shape-profiles" in capsys.readouterr().err
    a = p.parse_args(["run", "m.onnx", "--engine", "--profile"])
    assert a.profile_layers is True
    assert np.isscalar(0)
