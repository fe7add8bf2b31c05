"""Algorithm selector objects, tactic replay files, the timing cache file and user tactics modules."""
import json
import os

import numpy as np
import pytest

from backends.engine.build import parse_onnx
from backends.engine.builder import Builder, BuilderConfig, BuilderFlag, TimingCache
from backends.engine.builder.algorithm_selector import Algorithm, AlgorithmContext, AlgorithmSelectionError
from backends.engine.builder.tactic_replay import ReplayError, TacticRecorder, TacticReplayer
from backends.engine.builder.timing_cache_file import TimingCacheError, load_timing_cache, save_timing_cache
from backends.engine.runtime.executor import GraphExecutor
from debugkit.cli.main import main
from native.tactic_modules import load_tactics_module, unload_tactics_module
from tests.tactics.models import conv_chain, save

FAULTY = os.path.join(os.path.dirname(__file__), "faulty_tactics.py")
X = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)


def build(path, selector=None, cache=None, flags=()):
    network, _ = parse_onnx(path)
    config = BuilderConfig()
    config.algorithm_selector = selector
    config.timing_cache = cache
    for f in flags:
        config.set_flag(f)
    return Builder().build_graph(network, config, timing_feeds={"x": X}), config


@pytest.fixture
def model(tmp_path):
    return save(conv_chain(), tmp_path)


def test_selector_sees_typed_context_and_choices(model):
    seen = []

    class Spy:
        def select_algorithms(self, context, choices):
            seen.append((context, choices))
            return []

        def report_algorithms(self, contexts, choices):
            seen.append(("report", len(contexts), choices))

    build(model, Spy())
    ctx, choices = next((c, ch) for c, ch in seen if isinstance(c, AlgorithmContext) and c.kind == "Convolution")
    assert ctx.onnx_nodes[0].startswith("conv") and ctx.input_shapes[0][1] in (3, 16, 24, 32, 40, 48, 56)
    assert ctx.formats[0] == "NCHW" and ctx.dtypes[0] == "float32" and len(ctx.signature) == 16
    assert all(isinstance(a, Algorithm) and a.tactic_id and a.inputs[0].strides for a in choices)
    report = seen[-1]
    assert report[0] == "report" and all(a.timing_ms is None or a.timing_ms > 0 for a in report[2])


@pytest.mark.parametrize("answer,match", [([999], "out-of-range indices \\[999\\]"), ([], "no choice")])
def test_selector_bad_answers_are_clear_errors(model, answer, match):
    class Bad:
        def select_algorithms(self, context, choices):
            return answer if context.kind == "Convolution" else [0]

        def report_algorithms(self, contexts, choices):
            pass

    with pytest.raises(AlgorithmSelectionError, match=match):
        build(model, Bad(), flags=[BuilderFlag.REJECT_EMPTY_ALGORITHMS])


def test_replay_gives_identical_tactics_and_bit_identical_output(model, tmp_path):
    rec = TacticRecorder(str(tmp_path / "t.json"))
    first, _ = build(model, rec)
    again, _ = build(model, TacticReplayer(str(tmp_path / "t.json")), cache=TimingCache())
    assert [n.tactic_id for n in first.nodes] == [n.tactic_id for n in again.nodes]
    a, b = GraphExecutor(first).run({"x": X}), GraphExecutor(again).run({"x": X})
    assert np.array_equal(a["y"], b["y"])
    doc = json.load(open(tmp_path / "t.json"))
    assert doc["version"] == 1 and set(doc["layers"]) == {n.name for n in first.nodes}


def test_stale_replay_names_the_layers(model, tmp_path):
    rec = TacticRecorder(str(tmp_path / "t.json"))
    build(model, rec)
    doc = json.load(open(tmp_path / "t.json"))
    conv = next(k for k, v in doc["layers"].items() if v["kind"] == "Convolution")
    doc["layers"][conv]["signature"] = "0" * 16
    with pytest.raises(ReplayError, match="1 layer\\(s\\) no longer match.*signature changed"):
        build(model, TacticReplayer(doc))


def test_replay_for_another_model_or_version_is_refused(model, tmp_path):
    other = save(conv_chain([3, 8, 8]), tmp_path, "other.onnx")
    TacticRecorder(str(tmp_path / "o.json")).report_algorithms([], [])  # empty doc is not another model
    build(other, TacticRecorder(str(tmp_path / "o.json")))
    with pytest.raises(ReplayError, match="recorded for another model"):
        build(model, TacticReplayer(str(tmp_path / "o.json")))
    doc = json.load(open(tmp_path / "o.json"))
    doc["version"] = 99
    json.dump(doc, open(tmp_path / "v.json", "w"))
    with pytest.raises(ReplayError, match="version 99"):
        TacticReplayer(str(tmp_path / "v.json"))
    plan = tmp_path / "m.plan"
    assert main(["convert", other, "-o", str(plan), "--load-tactics", str(tmp_path / "v.json")]) == 2
    assert main(["convert", model, "-o", str(plan), "--load-tactics", str(tmp_path / "o.json")]) == 2
    assert not plan.exists()


def test_timing_cache_file_roundtrip_mismatch_and_corruption(model, tmp_path):
    path = str(tmp_path / "cache.json")
    _, config = build(model, cache=TimingCache())
    save_timing_cache(config.timing_cache, path, config)
    cache = load_timing_cache(path, BuilderConfig())
    assert cache.entries == config.timing_cache.entries and cache.entries
    build(model, cache=cache)
    assert cache.hits >= 1 and cache.misses == 0
    fp16 = BuilderConfig()
    fp16.set_flag(BuilderFlag.FP16)
    with pytest.raises(TimingCacheError, match="another device or config.*flags"):
        load_timing_cache(path, fp16)
    assert load_timing_cache(path, fp16, ignore_mismatch=True).entries == cache.entries
    with open(path, "r+b") as f:
        f.truncate(40)
    with pytest.raises(TimingCacheError, match="corrupt"):
        load_timing_cache(path, BuilderConfig())
    assert main(["convert", model, "-o", str(tmp_path / "m.plan"), "--timing-cache", path]) == 2


def test_the_timing_cache_file_keeps_what_builds_learnt_about_the_device(model, tmp_path, monkeypatch):
    """Device.build_notes (the CUDA device: cuDNN plans that do not build) go into the file and come back to the
    next build with it through Device.begin_build; not under another header; malformed notes are corruption."""
    device = BuilderConfig().device
    notes = {"cudnn_failed_plans": {"('float32', True)": {"failed": ["eng4_k24=39"], "built": 0, "failures": 4}}}
    monkeypatch.setattr(type(device), "build_notes", lambda self: notes)
    seen = []
    monkeypatch.setattr(type(device), "begin_build", lambda self, got=None: seen.append(got))
    path = str(tmp_path / "cache.json")
    _, config = build(model, cache=TimingCache())
    assert seen == [{}]                       # a fresh cache: nothing learnt yet
    save_timing_cache(config.timing_cache, path, config)
    cache = load_timing_cache(path, BuilderConfig())
    assert cache.device_notes == notes
    build(model, cache=cache)
    assert seen[-1] == notes
    fp16 = BuilderConfig()
    fp16.set_flag(BuilderFlag.FP16)
    assert load_timing_cache(path, fp16, ignore_mismatch=True).device_notes == {}
    with open(path) as f:
        doc = json.load(f)
    doc["device_notes"] = ["not", "an", "object"]
    with open(path, "w") as f:
        json.dump(doc, f)
    with pytest.raises(TimingCacheError, match="device_notes"):
        load_timing_cache(path, BuilderConfig())


def test_cli_save_load_tactics_and_timing_cache(model, tmp_path, capsys):
    t, c = str(tmp_path / "t.json"), str(tmp_path / "c.json")
    assert main(["convert", model, "-o", str(tmp_path / "a.plan"), "--save-tactics", t, "--timing-cache", c]) == 0
    assert json.load(open(c))["entries"] and json.load(open(t))["layers"]
    assert main(["convert", model, "-o", str(tmp_path / "b.plan"), "--load-tactics", t, "--timing-cache", c]) == 0
    assert main(["inspect", "tactics", t]) == 0
    out = capsys.readouterr().out
    assert "tactic=" in out and "Layer(s)" in out


def test_tactics_module_registers_and_unregisters(tmp_path):
    from native.tactics import tactics_for
    added = load_tactics_module(FAULTY)
    try:
        names = {t.name for t in added}
        assert {"faulty-conv", "faulty-matmul", "flaky-conv"} <= names
        assert "faulty-conv" in {t.name for t in tactics_for("Convolution")}
        assert load_tactics_module(FAULTY) == added   # a second load is the same module
    finally:
        unload_tactics_module(FAULTY)
    assert "faulty-conv" not in {t.name for t in tactics_for("Convolution")}


def test_unknown_tactic_source_is_a_usage_error(model, tmp_path, capsys):
    assert main(["convert", model, "-o", str(tmp_path / "a.plan"), "--tactic-sources", "nope"]) == 2
    assert "unknown tactic name(s) ['nope']" in capsys.readouterr().err
