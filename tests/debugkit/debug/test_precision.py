"""debug precision: finds exactly the planted FP16-sensitive layers within the build budget; bisect gives a prefix;
the answer file is what run --layer-precisions takes; bad input exits 2."""
import importlib.util
import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from debugkit.cli.main import main

pytest.importorskip("backends.engine.builder.precision_spec",
                    reason="needs per-layer precision constraints (reduced-precision issue)")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _tool():
    spec = importlib.util.spec_from_file_location("make_fp16_sensitive",
                                                  os.path.join(ROOT, "tools", "make_fp16_sensitive.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mlp(depth=10, width=16):
    """x → depth × (MatMul 'mm{i}' → Add 'add{i}' → Tanh 'act{i}') → y: every layer is a candidate."""
    rng = np.random.default_rng(0)
    nodes, inits, t = [], [], "x"
    for i in range(depth):
        inits += [numpy_helper.from_array((rng.standard_normal((width, width)) / 4).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array((rng.standard_normal(width) / 4).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [t, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"act{i}")]
        t = f"t{i}"
    nodes.append(helper.make_node("Identity", [t], ["y"], name="out"))
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, width])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, width])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.fixture
def planted(tmp_path):
    from backends.runners import OnnxrtRunner
    model = mlp()
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    with OnnxrtRunner(model, mark=["m2", "m7"]) as r:
        values = r.infer(feeds, taps=["m2", "m7"])
    answer = _tool().plant(model, ["mm2", "mm7"], values)
    path = tmp_path / "planted.onnx"
    onnx.save(model, path)
    must = sorted(x for v in answer.values() for x in v["must_stay_fp32"])
    return str(path), must


def _search(tmp_path, model, *extra):
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", model, "--fp16", "-o", str(out), "--atol", "1e-2", *extra])
    return rc, (json.loads(out.read_text()) if out.exists() else None)


def test_minimal_mode_finds_exactly_the_planted_layers(tmp_path, planted, capsys):
    model, must = planted
    rc, res = _search(tmp_path, model)
    assert rc == 0, capsys.readouterr()
    assert sorted(res["layer_precisions"]) == must
    assert set(res["layer_precisions"].values()) == {"fp32"}
    assert res["probes"] <= res["builds_bound"] <= 2 * 2 * np.log2(res["layers"]) + 6 + 1
    assert res["final_check"]["passed"] is True
    # what the search cost: probes per second and each probe's build and run seconds
    assert res["probes_per_second"] == pytest.approx(res["probes"] / res["seconds"], rel=0.1)
    assert res["probe_build_s_median"] > 0 and res["probe_run_s_median"] > 0
    assert "probes/s; per probe (median) build" in capsys.readouterr().out
    for suffix in ("_sensitivity.json", "_sensitivity.svg", ".html", "_probes.jsonl"):
        assert (tmp_path / f"prec{suffix}").exists()
    ranking = json.loads((tmp_path / "prec_sensitivity.json").read_text())
    assert sorted(r["layer"] for r in ranking[:len(must)]) == must     # the planted layers rank first
    # the answer file is what run takes
    assert main(["run", model, "--engine", "--onnxrt", "--fp16", "--atol", "1e-2",
                 "--layer-precisions", str(tmp_path / "prec.json")]) == 0
    assert main(["run", model, "--engine", "--onnxrt", "--fp16", "--atol", "1e-2"]) == 1


def test_bisect_mode_returns_a_prefix_covering_the_planted_layers(tmp_path, planted):
    model, must = planted
    rc, res = _search(tmp_path, model, "--mode", "bisect")
    assert rc == 0
    count = res["prefix_count"]
    assert len(res["layer_precisions"]) == count
    assert set(must) <= set(res["layer_precisions"]) and count > len(must)
    rc, lin = _search(tmp_path, model, "--mode", "linear", "--log", str(tmp_path / "lin.jsonl"))
    assert lin["prefix_count"] == count


def test_resume_replays_and_refuses_another_model(tmp_path, planted, capsys):
    model, must = planted
    _, first = _search(tmp_path, model)
    # the empty set's record came from the base build (not a probe of its own), and is replayed like the probes
    records = [json.loads(line) for line in (tmp_path / "prec_probes.jsonl").read_text().splitlines()[1:]]
    empty = next(r for r in records if r["artifact"] == [])
    assert empty["result"]["from"] == "base build" and empty["result"]["hit"] is False
    assert first["probes"] == sum(1 for r in records if isinstance(r["artifact"], list)) - 1
    rc, res = _search(tmp_path, model, "--resume")
    assert rc == 0 and res["probes"] == 0 and res["replayed"] == first["probes"] + 1
    assert sorted(res["layer_precisions"]) == must
    other = tmp_path / "other.onnx"
    onnx.save(mlp(depth=3), other)
    rc, _ = _search(tmp_path, str(other), "--resume", "--log", str(tmp_path / "prec_probes.jsonl"))
    assert rc == 2 and "another search" in capsys.readouterr().err


def test_two_workers_give_the_same_answer(tmp_path, planted):
    model, must = planted
    rc, res = _search(tmp_path, model, "--workers", "2")
    assert rc == 0 and sorted(res["layer_precisions"]) == must and res["workers"] == 2
    cp = res["critical_path"]
    assert cp["rounds"] < cp["probes"] and cp["speedup"] > 1.0   # probes ran two at a time
    # what two workers gave, measured: each worker's probes run one after another within the rounds' wall time
    assert cp["wall_s"] > 0 and 0 < cp["wall_speedup"] <= 2.0
    # the ranking: one side-by-side engine per worker (not one build per layer), the same scores as inline
    assert res["ranking_builds"] == 2
    two = json.loads((tmp_path / "prec_sensitivity.json").read_text())
    rc, one = _search(tmp_path, model)
    assert rc == 0 and one["ranking_builds"] == 1
    assert json.loads((tmp_path / "prec_sensitivity.json").read_text()) == two


def test_ray_gives_the_same_answer(tmp_path, planted):
    ray = pytest.importorskip("ray")
    model, must = planted
    try:
        rc, res = _search(tmp_path, model, "--ray", "auto", "--workers", "2")
    finally:
        ray.shutdown()
    assert rc == 0 and sorted(res["layer_precisions"]) == must


def test_a_model_that_fails_even_in_fp32_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(mlp(depth=2), path)
    rc, _ = _search(tmp_path, str(path), "--rtol", "0", "--atol", "0", "--compare", "cosine",
                    "--cosine-threshold", "1.5")
    assert rc == 2 and "even with all" in capsys.readouterr().err


def test_check_command_decides_and_a_missing_one_is_an_error(tmp_path, planted, capsys):
    import sys
    model, must = planted
    rc, _ = _search(tmp_path, model, "--check", "no-such-command-xyz", "{model}")
    assert rc == 2 and "not found" in capsys.readouterr().err
    script = tmp_path / "check.py"   # passes iff the precisions file keeps every planted layer in fp32
    script.write_text("import json, sys\n"
                      f"need = set({must!r})\n"
                      "kept = set(json.load(open(sys.argv[2]))['layer_precisions'])\n"
                      "sys.exit(0 if need <= kept else 1)\n")
    rc, res = _search(tmp_path, model, "--check", sys.executable, str(script), "{model}", "{precisions}")
    assert rc == 0 and sorted(res["layer_precisions"]) == must


def test_int8_search_calibrates_once_and_its_answer_passes_in_run(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(depth=6), path)
    opts = ["--atol", "4e-3", "--rtol", "0"]
    out = tmp_path / "int8.json"
    rc = main(["debug", "precision", str(path), "--int8", "-o", str(out), *opts])
    res = json.loads(out.read_text())
    assert rc == 0 and res["precision"] == "int8" and res["final_check"]["passed"] is True
    assert 0 < len(res["layer_precisions"]) < res["layers"]
    assert (tmp_path / "int8_calibration.cache").exists()
    assert main(["run", str(path), "--engine", "--onnxrt", "--int8", "--layer-precisions", str(out), *opts]) == 0
    assert main(["run", str(path), "--engine", "--onnxrt", "--int8", *opts]) == 1


def test_without_onnxruntime_the_fp64_oracle_is_the_reference(tmp_path, planted, monkeypatch):
    from debugkit.cli import debug_precision
    monkeypatch.setattr(debug_precision, "_have_onnxruntime", lambda: False)
    model, must = planted
    rc, res = _search(tmp_path, model)
    assert rc == 0 and res["reference"] == "fp64" and sorted(res["layer_precisions"]) == must


@pytest.mark.parametrize("low", ["fp8", "bf16"])
def test_fp8_and_bf16_searches_end_to_end(tmp_path, low):
    """The answer passes in run, the low-precision build without it fails, and no layer of it can be dropped."""
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(depth=6), path)
    opts = ["--atol", "1e-3", "--rtol", "0"]
    out = tmp_path / f"{low}.json"
    assert main(["debug", "precision", str(path), f"--{low}", "-o", str(out), *opts]) == 0
    res = json.loads(out.read_text())
    assert res["precision"] == low and res["final_check"]["passed"] is True
    kept = res["layer_precisions"]
    assert 0 < len(kept) < res["layers"] and set(kept.values()) == {"fp32"}
    assert main(["run", str(path), "--engine", "--onnxrt", f"--{low}", "--layer-precisions", str(out), *opts]) == 0
    assert main(["run", str(path), "--engine", "--onnxrt", f"--{low}", *opts]) == 1
    name = sorted(kept)[0]   # 1-minimal: without any one of its layers the check fails again
    smaller = tmp_path / "smaller.json"
    smaller.write_text(json.dumps({"layer_precisions": {k: v for k, v in kept.items() if k != name}}))
    assert main(["run", str(path), "--engine", "--onnxrt", f"--{low}", "--layer-precisions", str(smaller),
                 *opts]) == 1


def test_probes_share_one_parse_and_one_timing_cache(planted, monkeypatch):
    """A probe builds from the model parsed once and times/prepares only layer variants no earlier build of the
    search met: a repeated candidate's build times nothing and packs no weights again."""
    from backends.engine.builder import tactic_selection
    from debugkit.debug import precision as P
    from debugkit.debug.checks import CompareOptions
    import backends.engine.build as build
    model, must = planted
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    parses, timed = [], []
    real_parse, real_time = build.parse_onnx, tactic_selection.time_candidates
    monkeypatch.setattr(build, "parse_onnx", lambda *a, **k: parses.append(1) or real_parse(*a, **k))
    monkeypatch.setattr(tactic_selection, "time_candidates", lambda *a, **k: timed.append(1) or real_time(*a, **k))
    from backends.runners import OnnxrtRunner
    with OnnxrtRunner(model) as r:
        reference = r.infer(feeds)
    probe = P.PrecisionProbe(model, feeds, reference, CompareOptions(atol={"": 1e-2}), "fp16", "fp32")
    first = probe(must)
    n_timed = len(timed)
    second = probe(must)
    assert len(timed) == n_timed, "the repeated candidate timed nothing"
    third = probe([])
    assert first["hit"] and second["hit"] and not third["hit"]
    assert len(parses) == 1
    assert first["build_s"] > 0 and first["run_s"] > 0 and set(second) >= {"build_s", "run_s"}
    import pickle
    assert pickle.loads(pickle.dumps(probe))._network is None   # workers parse their own


def test_without_tolerance_options_the_scale_free_default_finds_the_planted_layers(tmp_path, planted, capsys):
    """No --atol/--rtol: the search judges by relative L2 and cosine against FP32 (an all-FP16 engine of a healthy
    model meets it), says so in its first line, and returns exactly the planted set."""
    model, must = planted
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", model, "--fp16", "-o", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    first = stdout.splitlines()[0]
    assert first.startswith("debug precision --fp16: check: every output's relative L2 error <= 0.01 and cosine")
    res = json.loads(out.read_text())
    assert sorted(res["layer_precisions"]) == must and res["check"] in first
    assert res["probes"] <= 2 * 2 * np.log2(res["layers"]) + 6
    assert res["final_check"]["outputs"]["y"]["rel_l2"] <= 1e-2


def test_the_default_criterion_is_met_by_a_healthy_all_fp16_engine_and_not_by_an_overflow():
    from debugkit.debug.checks import ReducedPrecisionCheck
    check = ReducedPrecisionCheck.for_precision("fp16")
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((4, 1000)).astype(np.float32) * 5
    fp16 = ref.astype(np.float16).astype(np.float32)          # rounding every value: rel L2 ~ 3e-4
    assert not check.judge({"y": fp16}, {"y": ref})["fails"]
    broken = fp16.copy()
    broken[0, 3] = np.inf
    res = check.judge({"y": broken}, {"y": ref})
    assert res["fails"] and "1 NaN/Inf where the reference is finite" in res["reason"]
    noisy = ref + rng.standard_normal(ref.shape).astype(np.float32) * 0.5   # 10% noise
    assert check.judge({"y": noisy}, {"y": ref})["fails"]
    # a reference of a different scale changes nothing: the check is relative
    assert not check.judge({"y": fp16 * 1e4}, {"y": ref * 1e4})["fails"]
    # margin: the fraction of the allowed error used
    out = check.judge({"y": ref + ref * 0.006}, {"y": ref})["outputs"]
    assert 0.55 < check.margin(out) < 0.65


def test_a_barely_passing_all_fp32_probe_is_warned_about(capsys):
    from debugkit.cli.debug_precision import _warn_if_barely
    from debugkit.debug.checks import ReducedPrecisionCheck
    from native.logger import G_LOGGER, Severity
    check = ReducedPrecisionCheck.for_precision("fp16")
    args = type("A", (), {"higher": "fp32"})()
    level = G_LOGGER.min_severity
    G_LOGGER.min_severity = Severity.WARNING
    try:
        _warn_if_barely({"hit": True, "outputs": {"y": {"rel_l2": 8e-3, "cosine": 0.99999}}}, check, args, 12)
        assert "barely passes with all 12 layers in fp32 (it uses 80%" in capsys.readouterr().err
        _warn_if_barely({"hit": True, "outputs": {"y": {"rel_l2": 1e-4, "cosine": 1.0}}}, check, args, 12)
        assert "barely" not in capsys.readouterr().err
    finally:
        G_LOGGER.min_severity = level


def test_run_with_reduced_precision_and_no_tolerances_uses_the_search_check(tmp_path, planted, capsys):
    """run --fp16 given no --atol/--rtol judges by the search's default (relative L2 + cosine) and says so in its
    verdict line: the set the search found passes, the empty set fails, and an FP32 run keeps atol/rtol."""
    model, must = planted
    out = tmp_path / "prec.json"
    assert main(["debug", "precision", model, "--fp16", "-o", str(out)]) == 0
    assert sorted(json.loads(out.read_text())["layer_precisions"]) == must
    capsys.readouterr()
    js = tmp_path / "run.json"
    assert main(["run", model, "--engine", "--onnxrt", "--fp16", "--layer-precisions", str(out),
                 "--json", str(js)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("PASSED") and "check: --fp16 default: relative L2 <= 0.01 and cosine >= 0.9999" in last
    doc = json.loads(js.read_text())
    assert doc["check"].startswith("--fp16 default") and doc["outputs"][0]["check"] == "rel_l2+cosine"
    assert 0 < doc["outputs"][0]["metric"] <= 1e-2        # FP16 rounding is there, and within the check
    assert main(["run", model, "--engine", "--onnxrt", "--fp16"]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("FAILED") and "check: --fp16 default" in last
    # a tolerance given: run's own comparison, as before
    assert main(["run", model, "--engine", "--onnxrt", "--fp16", "--layer-precisions", str(out),
                 "--atol", "1e-9", "--rtol", "0"]) == 1
    assert "check:" not in capsys.readouterr().out.strip().splitlines()[-1]
    assert main(["run", model, "--engine", "--onnxrt"]) == 0
    assert "check:" not in capsys.readouterr().out.strip().splitlines()[-1]


def test_compare_reduced_judges_relative_l2_cosine_and_nonfinite():
    from debugkit.compare.funcs import compare_reduced
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000).astype(np.float32) * 300
    fp16 = ref.astype(np.float16).astype(np.float32)
    r = compare_reduced("y", fp16, ref)
    assert r.passed and 0 < r.metrics["rel_l2"] < 1e-3 and r.metrics["cosine"] > 0.9999 and r.compared == 1000
    r = compare_reduced("y", ref * 1.02, ref)                 # 2% off everywhere: relative L2 0.02
    assert not r.passed and r.metrics["rel_l2"] == pytest.approx(0.02, rel=1e-4) and "relative L2" in r.reason
    broken = fp16.copy()
    broken[7] = np.nan
    r = compare_reduced("y", broken, ref)
    assert not r.passed and r.nonfinite.mismatched == 1 and r.compared == 999


def test_layers_alone_side_by_side_score_as_one_build_per_layer(tmp_path, planted):
    """The ranking's layer-alone errors from one engine (every single-node subgraph side by side, renamed apart)
    equal those of one build per layer, bit for bit, at one build instead of one per layer."""
    from backends.runners import OnnxrtRunner
    from debugkit.debug import precision as P
    from debugkit.debug.reduce import Subgraphs
    model, must = planted
    proto = onnx.load(model)
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    with OnnxrtRunner(proto, mark="all") as r:
        values = {**feeds, **r.infer(feeds, taps=r.observable_tensors())}
    sub = Subgraphs(proto, feeds, values)
    layers = P.candidate_layers(sub)
    one = P.LayerAloneProbe(str(tmp_path), "fp16", ("reduced_probability_outputs",), subgraphs=sub)
    apart = [one(lab) for lab in layers]
    assert one.builds == len(layers)
    together = P.LayerAloneProbe(str(tmp_path), "fp16", ("reduced_probability_outputs",), subgraphs=sub)
    assert together.many(layers) == apart and together.builds == 1
    worst = sorted(layers, key=lambda lab: -apart[layers.index(lab)])[:len(must)]
    assert sorted(worst) == must and all(np.isinf(apart[layers.index(lab)]) for lab in must)


def test_search_builds_do_not_let_timing_raise_a_layers_precision():
    """Every build of the search pins the layers outside the set to the low precision (a GPU build would otherwise
    time FP32 against FP16 per layer and keep the faster, and the answer would hang on timing); the plan says so."""
    from debugkit.debug.precision import make_config
    for low in ("fp16", "bf16", "int8"):
        config = make_config(low, "fp32", ["mm2"])
        assert config.precision_by_timing is False
        assert config.to_json()["precision_by_timing"] is False
    from backends.engine.builder import BuilderConfig
    assert BuilderConfig().precision_by_timing is True and "precision_by_timing" not in BuilderConfig().to_json()


def test_probe_replayer_memo_token_is_the_documents_content():
    """The base build's replay document identifies a probe selector's answers (selection_memo.py): equal content
    gives the same token whatever the object (a worker unpickles a copy per task), other content another one."""
    import copy

    from debugkit.debug.precision import _precision_replayer
    doc = {"format": "debugkit-tactic-replay", "version": 1, "device": "cpu", "model": {},
           "layers": {"a": {"signature": "s1", "tactic_id": 1, "tactic": "x"}}}
    same = _precision_replayer(copy.deepcopy(doc)).memo_token
    assert _precision_replayer(doc).memo_token == same
    other = copy.deepcopy(doc)
    other["layers"]["a"]["tactic_id"] = 2
    assert _precision_replayer(other).memo_token != same


def test_a_saturated_reference_is_no_error_where_the_low_precision_value_is_the_same_infinity():
    """An attention mask's float32 lowest is "minus infinity" to the model: FP16 holding -inf there adds no error
    (the ranking's _rel_err), while an overflow of a finite reference, or the wrong infinity, is still inf."""
    from debugkit.debug.precision import _rel_err
    low = np.finfo(np.float32).min
    ref = np.array([1.0, -2.0, low, 4.0], np.float32)
    with np.errstate(over="ignore"):
        fp16 = ref.astype(np.float16).astype(np.float32)      # -3.4e38 -> -inf
    assert np.isneginf(fp16[2]) and _rel_err(fp16, ref) == 0.0
    near = fp16.copy()
    near[0] = 1.5
    assert _rel_err(near, ref) == pytest.approx(0.5 / 4.0)     # scaled by the largest finite reference
    wrong = fp16.copy()
    wrong[2] = np.inf
    assert _rel_err(wrong, ref) == np.inf                      # the other sign is an error
    over = ref.copy()
    over[3] = np.inf                                           # a finite reference that overflowed
    assert _rel_err(over, ref) == np.inf
    assert _rel_err(np.full(3, -np.inf, np.float32), np.full(3, low, np.float32)) == 0.0


def masked_mlp(depth=4, width=16):
    """mlp(depth) whose last Tanh feeds a masked Softmax: Where(x > 0.3, t, float32 lowest) → Softmax → y, the mask
    computed from the input (so Where is a candidate) as transformer exports write it."""
    model = mlp(depth, width)
    g = model.graph
    out = g.node[-1]
    g.node.remove(out)
    low = numpy_helper.from_array(np.array(np.finfo(np.float32).min, np.float32), "lowest")
    thr = numpy_helper.from_array(np.array(0.3, np.float32), "thr")
    g.initializer.extend([low, thr])
    g.node.extend([helper.make_node("Greater", ["x", "thr"], ["keep"], name="mask_cond"),
                   helper.make_node("Where", ["keep", f"t{depth - 1}", "lowest"], ["masked"], name="mask"),
                   helper.make_node("Softmax", ["masked"], ["y"], name="softmax", axis=-1)])
    return model


def test_an_attention_mask_does_not_outrank_the_overflowing_layers(tmp_path, capsys):
    """The mask's float32 lowest becomes -inf in FP16 (the same to the Softmax): the ranking scores it by what it
    adds, so the planted layers rank first and the search peels them without probing the mask first."""
    from backends.runners import OnnxrtRunner
    model = masked_mlp()
    rng = np.random.default_rng(3)
    feeds = {"x": rng.random((4, 16), dtype=np.float32)}
    with OnnxrtRunner(model, mark=["m1"]) as r:
        values = r.infer(feeds, taps=["m1"])
    answer = _tool().plant(model, ["mm1"], values)
    path = tmp_path / "masked.onnx"
    onnx.save(model, path)
    must = sorted(x for v in answer.values() for x in v["must_stay_fp32"])
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", str(path), "--fp16", "-o", str(out), "--atol", "1e-2"])
    assert rc == 0, capsys.readouterr()
    res = json.loads(out.read_text())
    assert sorted(res["layer_precisions"]) == must
    ranking = json.loads((tmp_path / "prec_sensitivity.json").read_text())
    assert sorted(r["layer"] for r in ranking[:len(must)]) == must
    mask = next(r for r in ranking if r["layer"] == "mask")
    assert mask["score"] < 1e-2                                # FP16 rounding of the kept values only
    # the empty and full sets, then the gallop 1, 2 (hit), the kept layer alone: no probe spent on the mask
    assert res["probes"] <= 5


def test_the_base_build_answers_the_empty_set_bit_for_bit(tmp_path, planted, capsys):
    """The base build (nothing constrained, every tensor tapped) is the empty candidate's engine: its outputs equal
    the empty probe's bit for bit, so the search takes the empty set's answer from it (logged, replayed on resume,
    not counted as a probe) instead of building that engine again."""
    from backends.runners import OnnxrtRunner
    from debugkit.debug import precision as P
    from debugkit.debug.checks import CompareOptions
    model, must = planted
    feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    with OnnxrtRunner(model) as r:
        reference = r.infer(feeds)
    probe = P.PrecisionProbe(model, feeds, reference, CompareOptions(atol={"": 1e-2}), "fp16", "fp32")
    recorder = P.tactic_recorder()
    base = probe.engine_outputs([], taps="all", recorder=recorder)
    probe.replay = recorder.document
    assert len(base) > len(reference)                          # every tensor, not just the outputs
    empty = probe.engine_outputs([])
    assert base["y"].dtype == empty["y"].dtype and base["y"].tobytes() == empty["y"].tobytes()
    answer = probe.empty_set_answer(base)
    assert answer["from"] == "base build" and answer["hit"] is probe([])["hit"] is False
    assert probe.empty_set_answer({}) is None                 # a failed base run answers nothing


def test_a_timing_cache_file_serves_the_search_that_wrote_it(tmp_path, planted):
    """--timing-cache F: the base build writes F with the search's flags; the probes that keep every layer in FP32
    read F too and must not refuse it as "measured for another config" (they did: the all-FP32 probe built with no
    precision flag), and a second search reuses F with the same answer."""
    model, must = planted
    cache = tmp_path / "search.cache"
    rc, res = _search(tmp_path, model, "--timing-cache", str(cache))
    assert rc == 0 and sorted(res["layer_precisions"]) == must and cache.exists()
    doc = json.loads(cache.read_text())
    assert doc["header"]["flags"] == ["fp16"] and doc["entries"]
    rc, again = _search(tmp_path, model, "--timing-cache", str(cache))
    assert rc == 0 and sorted(again["layer_precisions"]) == must


def test_the_overflowing_layers_are_confirmed_as_the_answer_in_one_batch(tmp_path, planted, capsys):
    """The planted layers overflow FP16 (their score is inf): the search guesses them and confirms them with
    |guess| + 1 independent probes (they pass; without any one of them the check fails) instead of peeling the
    ranking one layer per round; the answer is the planted set."""
    model, must = planted
    rc, res = _search(tmp_path, model)
    assert rc == 0 and sorted(res["layer_precisions"]) == must
    assert res["overflow_guess"] == {"layers": len(must), "confirmed": True}
    log = [json.loads(line) for line in open(tmp_path / "prec_probes.jsonl")][1:]
    lists = [sorted(r["artifact"]) for r in log if isinstance(r["artifact"], list)]
    for x in must:   # each leave-one-out probe was made and failed
        rec = [r for r in log if r["artifact"] == sorted(set(must) - {x})]
        assert len(rec) == 1 and rec[0]["result"]["hit"] is False
    assert must in lists and res["probes"] <= 2 + len(must) + 1   # empty + all + the confirmation


def test_confirm_minimal_answers_as_peel_on_a_monotone_property():
    """confirm_minimal(guess) holds exactly when the guess is the unique minimal set of a monotone property, in
    batches as wide as the workers, stopping at the first answer against it; peel finds the same set."""
    from debugkit.debug.strategies import Prober, confirm_minimal, peel
    need = {3, 7}

    def fails(c):
        return need <= set(c)
    assert confirm_minimal([7, 3], fails)
    assert not confirm_minimal([3], fails) and not confirm_minimal([3, 7, 9], fails) and not confirm_minimal([], fails)
    p = Prober(fails)
    # [3, 7, 9] passes, [7, 9] and [3, 9] fail, [3, 7] passes: the guess is not minimal (the fourth probe says so)
    assert not confirm_minimal([3, 7, 9], p) and p.probes == 4
    p2 = Prober(fails)
    assert not confirm_minimal([3, 9], p2) and p2.probes == 1        # the guess itself fails: one probe
    assert sorted(peel([9, 3, 7, 1, 2, 4], p)) == [3, 7]


class _Wide:
    """An inline executor that says it has 3 workers: batches of 3, one round each."""
    workers = 3

    def map(self, fn, items, on_done=None, slots=None):
        return [fn(x) for x in items]


def test_confirm_minimal_runs_in_batches_as_wide_as_the_workers():
    from debugkit.debug.strategies import Prober, confirm_minimal
    p = Prober(lambda c: {1, 2, 3, 4} <= set(c), executor=_Wide())
    assert confirm_minimal([1, 2, 3, 4], p)
    assert p.probes == 5 and p.rounds == 2      # [all, -1, -2] then [-3, -4]
