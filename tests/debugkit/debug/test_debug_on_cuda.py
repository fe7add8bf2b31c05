"""The debug tools work on the GPU engine unchanged: `debug precision --device cuda` finds the planted FP16-sensitive
layers, and `run --device cuda --fp16 --mark-all` names the first divergence. Skipped without a GPU."""
import json

import pytest

from debugkit.cli.main import main
from tests.debugkit.debug.test_precision import planted  # noqa: F401  (the fixture: two planted FP16 layers)

pytestmark = pytest.mark.cuda


def test_debug_precision_on_the_gpu_finds_the_planted_layers(tmp_path, planted, capsys):
    model, must = planted
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", model, "--fp16", "--device", "cuda", "-o", str(out), "--atol", "1e-2"])
    assert rc == 0, capsys.readouterr()
    res = json.loads(out.read_text())
    assert sorted(res["layer_precisions"]) == must
    assert main(["run", model, "--engine", "--onnxrt", "--fp16", "--device", "cuda", "--atol", "1e-2",
                 "--layer-precisions", str(out)]) == 0


def test_run_mark_all_on_the_gpu_names_the_overflowing_node(cli):
    """The bundled example's FP16 overflow, found and fixed on the GPU engine as on the CPU one."""
    import os
    example = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "example.onnx")
    code, out, _ = cli("run", example, "--engine", "--onnxrt", "--fp16", "--device", "cuda", "--mark-all")
    assert code == 1
    assert "first diverging tensor 'y', produced by node 'reduce' (ReduceSum)" in out
    code, out, _ = cli("run", example, "--engine", "--onnxrt", "--fp16", "--device", "cuda",
                       "--layer-precisions", "reduce:fp32")
    assert code == 0, out


def test_debug_precision_on_the_gpu_with_the_default_check(tmp_path, planted, capsys):  # noqa: F811
    """No tolerance options: the relative-L2/cosine default admits the GPU's all-FP16 engine minus the planted set."""
    model, must = planted
    out = tmp_path / "prec.json"
    rc = main(["debug", "precision", model, "--fp16", "--device", "cuda", "-o", str(out)])
    stdout = capsys.readouterr().out
    assert rc == 0, stdout
    assert "check: every output's relative L2 error <= 0.01" in stdout.splitlines()[0]
    assert sorted(json.loads(out.read_text())["layer_precisions"]) == must


def test_a_cpu_plan_with_device_cuda_is_an_error_and_a_cuda_plan_runs(tmp_path, planted, capsys):  # noqa: F811
    model, _ = planted
    cpu_plan, gpu_plan = str(tmp_path / "cpu.plan"), str(tmp_path / "gpu.plan")
    assert main(["convert", model, "-o", cpu_plan]) == 0
    assert main(["convert", model, "-o", gpu_plan, "--device", "cuda"]) == 0
    capsys.readouterr()
    assert main(["run", model, "--engine", "--load-engine", cpu_plan, "--onnxrt", "--device", "cuda"]) == 2
    assert "built for device 'cpu', but device 'cuda' was asked for" in capsys.readouterr().err
    assert main(["run", model, "--engine", "--load-engine", gpu_plan, "--onnxrt", "--device", "cuda"]) == 0
    assert main(["run", model, "--engine", "--load-engine", gpu_plan, "--onnxrt"]) == 0   # runs where built


@pytest.mark.parametrize("which", ["mlp", "resnet"])
def test_the_gpu_base_build_answers_the_empty_set_bit_for_bit(tmp_path, planted, which):  # noqa: F811
    """On the GPU too the base build (every tensor tapped) computes the empty candidate's outputs to the bit, run
    after run (cuDNN convolutions with residual epilogues, cuBLASLt GEMMs, FP16): the search takes the empty set's
    answer from it instead of building that engine again."""
    import numpy as np

    from backends.runners import OnnxrtRunner
    from debugkit.debug import precision as P
    from debugkit.debug.checks import CompareOptions
    if which == "mlp":
        model, _ = planted
        feeds = {"x": np.random.default_rng(1).random((4, 16), dtype=np.float32)}
    else:
        import onnx

        from tools.make_resnet50 import resnet50
        model = str(tmp_path / "resnet.onnx")
        onnx.save(resnet50(size=32, blocks=(1, 2, 1, 1), classes=64), model)
        feeds = {"input": np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype(np.float32)}
    with OnnxrtRunner(model) as r:
        reference = r.infer(feeds)
    probe = P.PrecisionProbe(model, feeds, reference, CompareOptions(atol={"": 1e-2}), "fp16", "fp32",
                             device="cuda")
    recorder = P.tactic_recorder()
    base = probe.engine_outputs([], taps="all", recorder=recorder)
    probe.replay = recorder.document
    assert len(base) > len(reference)
    for _ in range(2):
        empty = probe.engine_outputs([])
        for k in reference:
            assert base[k].dtype == empty[k].dtype and base[k].tobytes() == empty[k].tobytes(), k
    answer = probe.empty_set_answer(base)
    assert answer["from"] == "base build" and answer["hit"] == probe([])["hit"]
