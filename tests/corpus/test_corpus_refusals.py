"""Build decides, runtime obeys: on every corpus model, every layer's chosen tactic accepts what the runtime hands it
(the shapes and storage types of a real execution: `unsupported_reason(tactic, op, LayerContext.of(inputs))` is
None), and the execution raises no refusal. On the CPU (test_corpus_lint.py) tactics are not timed (each layer
keeps its first candidate: the choice an untimed build makes, the one a missing dtype check would get wrong); the
cuda-marked test here builds as users do, timing tactics on the GPU."""
import pytest

from backends.engine import BuilderConfig
from backends.engine.build import parse_onnx, profile_from_shapes
from backends.engine.builder import Builder
from backends.engine.engine_graph import node_op
from backends.engine.runtime.executor import GraphExecutor
from native.tactics import LayerContext, tactic_by_id, unsupported_reason
from tests.corpus.corpus import make_feeds, manifest, model_path

MODELS = manifest()


def refusals(graph, device, feeds) -> list:
    """Each layer whose chosen tactic refuses what one execution of `graph` hands it, with the reason."""
    executor = GraphExecutor(graph, device, keep_all=True)
    env = executor.run(feeds if executor.device.host_memory else
                       {k: executor.device.copy_to_device(v) for k, v in feeds.items()})
    assert all(o in env for o in graph.output_names)      # the execution reached every output
    found = []
    for node in graph.nodes:
        tactic = tactic_by_id(node.kind, node.tactic_id, device)
        ctx = LayerContext.of([env[i] if i is not None else None for i in node.inputs])
        why = unsupported_reason(tactic, node_op(node), ctx)
        if why is not None:
            found.append(f"{node.name} ({node.kind}): {tactic.name}: {why}")
    return found


# the CPU check runs in test_corpus_lint.py, on the graph it builds anyway (one build per model)

@pytest.mark.cuda
@pytest.mark.parametrize("entry", MODELS, ids=[m["name"] for m in MODELS])
def test_cuda_every_chosen_tactic_accepts_what_the_runtime_gives_it(entry):
    path, feeds = model_path(entry), make_feeds(entry)
    net, _ = parse_onnx(path)
    config = BuilderConfig()
    config.device = "cuda"
    profile = profile_from_shapes(net, {k: v.shape for k, v in feeds.items()})
    if profile is not None:
        config.add_optimization_profile(profile)
    graph = Builder().build_graph(net, config, timing_feeds=feeds)
    assert refusals(graph, "cuda", feeds) == []
