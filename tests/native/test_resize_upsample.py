"""Resize's integer nearest upsampling (native/cpu/kernels/resize.py `integer_upsample`, the compiled
`upsample_nearest` copy): the bits of the general gather path for every coordinate transformation and rounding that
maps output o to input o // f, and the general path wherever it does not (downscales, fractional scales, a resized
channel axis, crop-and-resize, scales given as data)."""
import numpy as np
import pytest

from native import config
from native.cpu import jit
from native.cpu.kernels import resize as R
from native.tactics import Op, tactics_for

RNG = np.random.default_rng(3)


def _tactic():
    return next(t for t in tactics_for("Resize", "cpu") if t.name == "separable-gather")


def _x(shape, dtype=np.float32):
    x = RNG.standard_normal(shape).astype(dtype)
    if dtype == np.float32:   # specials and a NaN payload survive the copy bit for bit
        flat = x.reshape(-1)
        flat[:4] = [np.nan, -np.inf, -0.0, np.inf]
        flat.view(np.uint32)[4] = 0x7FC12345
    return x


def _params(scales, ctm="asymmetric", rounding="floor"):
    return {"mode": "NEAREST", "coordinate_transformation": ctm, "nearest_rounding": rounding,
            "scales": list(scales)}


@pytest.mark.parametrize("shape,scales", [((1, 4, 5, 6), (1, 1, 2, 2)), ((2, 3, 4, 5), (1, 1, 3, 1)),
                                          ((1, 2, 3, 7), (1, 1, 1, 2)), ((3, 5, 4), (1, 2, 3)),
                                          ((1, 3, 10, 10), (1, 1, 4, 3))])
@pytest.mark.parametrize("ctm,rounding", [("asymmetric", "floor"), ("half_pixel", "round_prefer_floor"),
                                          ("asymmetric", "round_prefer_ceil"), ("pytorch_half_pixel", "floor")])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_integer_upsampling_gives_the_general_paths_bits(shape, scales, ctm, rounding, dtype):
    config.reload()
    x = _x(shape, dtype)
    p = _params(scales, ctm, rounding)
    want = R._resize(x, p, None, np.array(scales, np.float64), None)
    op = Op("Resize", "r", p, {})
    got = _tactic().run(op, [x])[0]
    assert got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
    assert _tactic().run(op, [np.asfortranarray(x)])[0].tobytes() == want.tobytes()   # not contiguous
    plan = R.integer_upsample(x, p, None, p["scales"], None)
    if jit.available() and plan is not None:
        assert op.__dict__["_upsample"][2] == plan    # the fast path ran (worked out once for the layer)


def test_which_resizes_are_integer_upsampling():
    x = np.zeros((1, 2, 4, 6), np.float32)
    assert R.integer_upsample(x, _params((1, 1, 2, 2)), None, [1, 1, 2, 2], None) == (2, 2)
    assert R.integer_upsample(x, _params((1, 1, 1, 3)), None, [1, 1, 1, 3], None) == (1, 3)
    for scales in [(1, 1, 0.5, 0.5), (1, 1, 1.5, 2), (1, 2, 2, 2), (1, 1, 1, 1)]:
        assert R.integer_upsample(x, _params(scales), None, list(scales), None) is None
    # align_corners maps o to o * (in - 1) / (out - 1), rounded: o // f with round_prefer_floor here, not with floor
    # (the indices decide, not the names)
    assert R.integer_upsample(x, _params((1, 1, 2, 2), "align_corners", "round_prefer_floor"), None,
                              [1, 1, 2, 2], None) == (2, 2)
    assert R.integer_upsample(x, _params((1, 1, 2, 2), "align_corners", "floor"), None, [1, 1, 2, 2], None) is None
    assert R.integer_upsample(x, dict(_params((1, 1, 2, 2)), mode="LINEAR"), None, [1, 1, 2, 2], None) is None


@pytest.mark.parametrize("scales", [(1, 1, 0.5, 0.5), (1, 1, 1.5, 2.0), (1, 2, 2, 2)])
def test_other_resizes_keep_the_general_path(scales):
    x = _x((1, 2, 4, 6))
    p = _params(scales)
    op = Op("Resize", "r", p, {})
    got = _tactic().run(op, [x])[0]
    assert got.tobytes() == R._resize(x, p, None, np.array(scales), None).tobytes()
    assert op.__dict__.get("_upsample", (None, None, None))[2] is None


def test_scales_given_as_data_are_read_each_run():
    x = _x((1, 2, 3, 4))
    op = Op("Resize", "r", {"mode": "NEAREST", "coordinate_transformation": "asymmetric",
                            "nearest_rounding": "floor"}, {})
    for s in ([1, 1, 2, 2], [1, 1, 3, 1], [1, 1, 0.5, 1], [1, 1, 2, 2]):
        got = _tactic().run(op, [x, None, np.array(s, np.float32)])[0]
        assert got.tobytes() == R._resize(x, op.params, None, np.array(s, np.float32), None).tobytes()
        if jit.available():
            assert op.__dict__["_upsample"][2] == R.integer_upsample(x, op.params, None, s, None)
