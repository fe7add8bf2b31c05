"""LayerNorm kernels on an empty batch return empty outputs of the right shapes (they used to fail reshaping to -1)."""
import numpy as np
import pytest

from native.device import get_device
from native.tactics import Op, tactics_for


@pytest.mark.parametrize("name", [t.name for t in tactics_for("Normalization", "cpu")])
def test_layer_norm_of_an_empty_batch(name):
    tactic = next(t for t in tactics_for("Normalization", "cpu") if t.name == name)
    op = Op("Normalization", "ln", {"axes": [-1], "epsilon": 1e-5, "kind": "layer"})
    x = np.zeros((0, 3, 8), np.float32)
    if tactic.supports(op, [x.shape, (8,), (8,)]) is not None:
        pytest.skip(f"{name} does not take this layer")
    y = get_device("cpu").run(tactic, op, [x, np.ones(8, np.float32), np.zeros(8, np.float32)])
    assert y[0].shape == (0, 3, 8) and y[0].dtype == np.float32
