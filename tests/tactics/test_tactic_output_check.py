"""A user tactic whose output is not what its layer declares (shape, dtype, count) is named, with its layer, where
it happens, instead of a later layer being blamed for reading it."""
import pytest

from debugkit.cli.main import main
from native.tactic_modules import unload_tactics_module
from tests.tactics.models import conv_chain, save

TACTIC = """
import numpy as np
from native.cpu.kernels.conv import Im2colGemm
from native.tactics import register_tactic


@register_tactic
class Wrong(Im2colGemm):
    name = "wrong-conv"

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        out = super().run(op, inputs, None, workspace, stream)
        {change}
"""


@pytest.mark.parametrize("change,said", [
    ("return [out[0][..., :-1]]", "returned 'c0' of shape [1, 8, 6, 5]; the layer declares shape [1, 8, 6, 6]"),
    ("return [out[0].astype(np.float64)]", "returned 'c0' as float64; the layer declares float32"),
    ("return [out[0], out[0]]", "returned 2 output(s); the layer has 1"),
])
def test_a_wrong_user_tactic_output_names_the_tactic_and_layer(tmp_path, capsys, change, said):
    model = save(conv_chain([3, 8, 8], hw=6), tmp_path)
    module = tmp_path / "wrong.py"
    module.write_text(TACTIC.replace("{change}", change))
    try:
        rc = main(["run", model, "--engine", "--onnxrt", "--tactics-module", str(module), "--tactic-sources",
                   "wrong-conv", "--disable-fusion"])
    finally:
        unload_tactics_module(str(module))
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "tactic 'wrong-conv' of layer 'conv0'" in err and said in err, err
