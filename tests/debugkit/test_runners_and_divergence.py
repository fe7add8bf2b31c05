import numpy as np
import pytest

from backends.runners import EngineRunner, OnnxrtRunner
from debugkit.compare import Comparator, LiveSource, Tolerances, first_divergence, compare_simple
from native.errors import UsageError
from tests.debugkit.conftest import chain_model


def test_runner_names_lifecycle_and_taps():
    m = chain_model()
    x = {"x": np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)}
    with EngineRunner(m) as eng, OnnxrtRunner(m, mark="all") as ort:
        assert (eng.name, ort.name) == ("engine-runner", "onnxrt-runner")
        assert list(ort.input_metadata()) == ["x"]
        a, b = eng.infer(x), ort.infer(x, taps=["t_add"])
        assert set(a) == {"y"} and set(b) == {"y", "t_add"}
        np.testing.assert_allclose(a["y"], b["y"], rtol=1e-5, atol=1e-6)
        obs = eng.observable_tensors()
        assert "y" in obs and set(obs) <= {"t_mm", "t_add", "t_relu", "y"}
        got = eng.infer(x, taps=obs)
        for t in obs:
            np.testing.assert_allclose(got[t], ort.infer(x, taps=[t])[t], rtol=1e-5, atol=1e-6)
        assert eng.inference_time is not None
    assert not eng.is_active
    with pytest.raises(UsageError):
        eng.infer(x)


def test_first_divergence_on_synthetic_results():
    m = chain_model()
    ok = compare_simple("t", np.ones(2), np.ones(2))
    bad = compare_simple("t", np.ones(2), np.zeros(2))
    d = first_divergence(m, {"t_mm": ok, "t_add": bad, "t_relu": bad, "y": bad})
    assert (d.tensor, d.node, d.op_type, d.born_here) == ("t_add", "add", "Add", True)
    # t_add unobservable (fused): the region spans add and relu, the nearest observed input t_mm agrees
    d = first_divergence(m, {"t_mm": ok, "t_relu": bad, "y": bad})
    assert d.tensor == "t_relu" and d.region == ["add", "relu"] and d.inputs["t_mm"] == "agrees"
    assert first_divergence(m, {"t_mm": ok, "y": ok}) is None


def test_comparator_layerwise_names_the_perturbed_node():
    good, bad = chain_model(), chain_model(scale=1.5)
    feeds = [{"x": np.random.default_rng(2).standard_normal((2, 4)).astype(np.float32)}]
    with EngineRunner(bad, name="engine-runner") as eng, OnnxrtRunner(good, mark="all") as ort:
        ref = LiveSource(ort)
        summary = Comparator(Tolerances(), layerwise=True, model=good).run([LiveSource(eng), ref], ref, feeds)
    pair = summary.pairs[0]
    assert not summary.passed
    d = pair.divergence
    assert d.born_here and "mm" in d.region
    assert d.tensor in ("t_mm", "t_add", "t_relu")
