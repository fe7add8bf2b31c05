"""User code cannot end debugkit: sys.exit() / KeyboardInterrupt in a tactics module (at import, inside a tactic's
run or supports) or a data-loader script (at import, inside its function, inside its generator) is that file's
error: exit 2 naming the file, never a silent exit 0."""
import textwrap

import pytest

from debugkit.cli.main import main
from native.errors import UserCodeExit
from native.tactic_modules import load_tactics_module, unload_tactics_module
from tests.tactics.models import conv_chain, save

TACTIC = """
import sys
from native.cpu.kernels.conv import Im2colGemm
from native.tactics import register_tactic
{at_import}

@register_tactic
class Quitter(Im2colGemm):
    name = "quitter-conv"

    def supports(self, op, input_shapes):
        {in_supports}
        return None

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        {in_run}
        return super().run(op, inputs, outputs, workspace, stream)
"""


def _module(tmp_path, at_import="pass", in_supports="pass", in_run="pass", name="quit_tactics.py"):
    path = tmp_path / name
    path.write_text(TACTIC.format(at_import=at_import, in_supports=in_supports, in_run=in_run))
    return str(path)


@pytest.fixture
def model(tmp_path):
    return save(conv_chain([3, 8, 8], hw=6), tmp_path)


@pytest.mark.parametrize("where,code,said", [
    ("at_import", "sys.exit(0)", "(at import) called sys.exit(0)"),
    ("in_run", "sys.exit(0)", "(tactic Quitter.run) called sys.exit(0)"),
    ("in_supports", "sys.exit()", "(tactic Quitter.supports) called sys.exit()"),
    ("in_run", "raise KeyboardInterrupt", "(tactic Quitter.run) raised KeyboardInterrupt"),
])
def test_a_tactics_module_that_exits_is_its_error(tmp_path, model, capsys, where, code, said):
    module = _module(tmp_path, **{where: code})
    try:
        rc = main(["run", model, "--engine", "--onnxrt", "--tactics-module", module, "--tactic-sources",
                   "quitter-conv"])
    finally:
        unload_tactics_module(module)
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--tactics-module {module} {said}" in err


def test_debug_tactics_with_an_exiting_tactic_exits_2(tmp_path, model, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    module = _module(tmp_path, in_run="sys.exit(0)")
    try:
        rc = main(["debug", "tactics", model, "--tactics-module", module, "--tactic-sources", "quitter-conv"])
    finally:
        unload_tactics_module(module)
    assert rc == 2 and f"--tactics-module {module}" in capsys.readouterr().err


def test_the_api_raises_user_code_exit_and_registers_nothing(tmp_path):
    from native.tactic_modules import known_tactic_names
    module = _module(tmp_path, at_import="sys.exit(3)")
    with pytest.raises(UserCodeExit, match=r"called sys.exit\(3\)"):
        load_tactics_module(module)
    assert "quitter-conv" not in known_tactic_names()


@pytest.mark.parametrize("body,said", [
    ("import sys\nsys.exit(0)\ndef load_data():\n    return {}\n", "(at import) called sys.exit(0)"),
    ("import sys\ndef load_data():\n    sys.exit(0)\n", "called sys.exit(0)"),
    ("import numpy as np\ndef load_data():\n    yield {'x': np.zeros((1, 3, 6, 6), np.float32)}\n"
     "    raise KeyboardInterrupt\n", "raised KeyboardInterrupt"),
])
def test_a_data_loader_script_that_exits_is_its_error(tmp_path, model, capsys, body, said):
    script = tmp_path / "loader.py"
    script.write_text(textwrap.dedent(body))
    rc = main(["run", model, "--engine", "--onnxrt", "--data-loader-script", str(script)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"--data-loader-script {script}" in err and said in err


def test_a_data_loader_function_that_raises_names_the_script(tmp_path, model, capsys):
    script = tmp_path / "loader.py"
    script.write_text("def load_data():\n    raise ValueError('no such dataset')\n")
    rc = main(["run", model, "--engine", "--onnxrt", "--data-loader-script", str(script)])
    err = capsys.readouterr().err
    assert rc == 2 and "no such dataset" in err and str(script) in err
