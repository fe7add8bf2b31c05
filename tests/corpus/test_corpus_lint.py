"""Graph.lint() holds after every builder pass on every corpus model (issue 14), and every chosen tactic accepts
what an execution hands it (issue 23). Tactics are not timed here (the
selector keeps each layer's first candidate), so this costs one parse, the passes and one timing run per model."""
import pytest

from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx, profile_from_shapes
from backends.engine.builder import Builder
from backends.engine.builder.config import AlgorithmSelector
from backends.engine.builder.pass_manager import TimingInstrument, VerifyInstrument
from backends.engine.builder.pipeline import pipeline
from tests.corpus.corpus import make_feeds, manifest, model_path
from tests.corpus.test_corpus_refusals import refusals

MODELS = manifest()


class FirstChoice(AlgorithmSelector):
    def select_algorithms(self, context, choices):
        return [0]


@pytest.mark.parametrize("entry", MODELS, ids=[m["name"] for m in MODELS])
def test_lint_passes_after_every_pass(entry):
    path = model_path(entry)
    feeds = make_feeds(entry)
    net, _ = parse_onnx(path)
    config = BuilderConfig()
    config.algorithm_selector = FirstChoice()
    profile = profile_from_shapes(net, {k: v.shape for k, v in feeds.items()})
    if profile is not None:
        config.add_optimization_profile(profile)
    verify = VerifyInstrument()
    graph = Builder().build_graph(net, config, timing_feeds=feeds, instruments=[TimingInstrument(), verify])
    expected = [p.name for p in pipeline() if p.enabled(config)]
    assert verify.verified == expected
    graph.lint()
    assert all(n.tactic_id is not None for n in graph.nodes)
    assert refusals(graph, "cpu", feeds) == []    # build decides, runtime obeys (test_corpus_refusals.py)
