"""Every public corpus model parses, builds, serialises, loads, runs and matches ONNX Runtime (FP32)."""
import os

import numpy as np
import pytest

from backends.engine import Runtime, build_plan_from_onnx
from tests.corpus.corpus import compare, make_feeds, manifest, model_path, run_onnxrt

MODELS = manifest()
EXPORTED = [m for m in MODELS if m["source"] == "exported"]
SHIPPED = [m for m in MODELS if m["source"] == "pypi"]


def check_model(entry, tmp_path):
    path = model_path(entry)
    feeds = make_feeds(entry)
    ref = run_onnxrt(path, feeds)
    plan = build_plan_from_onnx(path, shapes={k: v.shape for k, v in feeds.items()})
    plan_file = tmp_path / f"{entry['name']}.plan"
    plan_file.write_bytes(plan)
    ctx = Runtime().deserialize_engine(str(plan_file)).create_execution_context()
    ours = ctx.execute(feeds)
    problems = compare(ref, ours)
    assert not problems, f"{entry['name']}: " + "; ".join(problems)
    # a second context on the same engine gives the same answer
    ours2 = ctx.engine.create_execution_context().execute(feeds)
    for k in ref:
        np.testing.assert_array_equal(ours[k], ours2[k])
    # the first context again (from its second execution at these shapes its activations live in its arena), after
    # other inputs: the same answer, and the results it returned before are unchanged
    kept = {k: v.copy() for k, v in ours.items()}
    ctx.execute(make_feeds(entry, seed=1))
    again = ctx.execute(feeds)
    for k in ref:
        np.testing.assert_array_equal(again[k], kept[k])
        np.testing.assert_array_equal(ours[k], kept[k])


@pytest.mark.parametrize("entry", EXPORTED, ids=[m["name"] for m in EXPORTED])
def test_exported_model_matches_onnxrt(entry, tmp_path):
    check_model(entry, tmp_path)


@pytest.mark.parametrize("entry", SHIPPED, ids=[m["name"] for m in SHIPPED])
def test_shipped_model_matches_onnxrt(entry, tmp_path):
    check_model(entry, tmp_path)


def test_exported_models_agree_with_framework_outputs(tmp_path):
    """The exporter's own outputs (NAME_io.npz) are a second oracle for resnet18."""
    entry = next(m for m in EXPORTED if m["name"] == "timm-resnet18")
    path = model_path(entry)
    io = np.load(path.replace(".onnx", "_io.npz"))
    feeds = {k[3:]: io[k] for k in io.files if k.startswith("in_")}
    plan = build_plan_from_onnx(path, shapes={k: v.shape for k, v in feeds.items()})
    out = Runtime().deserialize_engine(plan).create_execution_context().execute(feeds)
    ref = {k[4:]: io[k] for k in io.files if k.startswith("out_")}
    (name, want), = ref.items()
    got = next(iter(out.values()))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)
