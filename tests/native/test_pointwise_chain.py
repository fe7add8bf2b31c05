"""A Pointwise program run as one compiled pass (native/cpu/kernels/pointwise_chain.py, the numba extra) gives the
interpreter's floats bit for bit, specials included; programs it cannot run exactly fall back to the interpreter."""
import numpy as np
import pytest

from native import config
from native.cpu.kernels import fused, pointwise_chain
from native.tactics import Op

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45, 3.0, -3.0, 6.0, -6.0, 3e38, -3e38]


def _x(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x.reshape(-1)[:len(SPECIALS)] = SPECIALS
    return x


def _interpreted(monkeypatch, op, inputs):
    monkeypatch.setenv("DEBUGKIT_JIT", "0")
    config.reload()
    try:
        assert pointwise_chain.run(op, inputs) is None
        return fused.pointwise(op, inputs)[0]
    finally:
        monkeypatch.delenv("DEBUGKIT_JIT")
        config.reload()


def _step(kind, args, **params):
    return {"op": kind, "args": list(args), "params": params}


HARD_SWISH = [_step("ElementWise", ["in:0", "w:c0"], op="SUM"),
              _step("Activation", ["s:0"], type="CLIP", alpha=0.0, beta=6.0),
              _step("ElementWise", ["in:0", "s:1"], op="PROD"), _step("ElementWise", ["s:2", "w:c1"], op="DIV")]
# the same chain spelled otherwise: operands swapped, a RELU6 as min / max, times 1/6, on the second input
HARD_SWISH_FORMS = {
    "swapped operands": [_step("ElementWise", ["w:c0", "in:0"], op="SUM"), _step("Activation", ["s:0"], type="RELU"),
                         _step("ElementWise", ["s:1", "in:0"], op="PROD"), _step("ElementWise", ["w:c2", "s:2"],
                                                                                 op="PROD")],
    "times a constant": HARD_SWISH[:3] + [_step("ElementWise", ["s:2", "w:c3"], op="PROD")],
    "second input": [_step("ElementWise", ["in:1", "w:c0"], op="SUM"),
                     _step("Activation", ["s:0"], type="CLIP", alpha=-1.0, beta=6.0),
                     _step("ElementWise", ["in:1", "s:1"], op="PROD"), _step("ElementWise", ["s:2", "w:c1"], op="DIV")],
}
PROGRAMS = {
    "paddle hard-swish": (HARD_SWISH, 1),
    **{f"hard-swish, {k}": (v, 2) for k, v in HARD_SWISH_FORMS.items()},
    "hard-swish then scale and shift": (HARD_SWISH + [_step("ElementWise", ["w:c2", "s:3"], op="PROD"),
                                                      _step("ElementWise", ["s:4", "w:c3"], op="SUM")], 1),
    "hard-swish then a shift": (HARD_SWISH + [_step("ElementWise", ["w:c3", "s:3"], op="SUM")], 1),
    "hard-swish times a constant, then a scale": (HARD_SWISH_FORMS["times a constant"]
                                                 + [_step("ElementWise", ["s:3", "w:c2"], op="PROD")], 1),
    "gate and residuals": ([_step("ElementWise", ["in:0", "in:1"], op="PROD"),
                            _step("ElementWise", ["in:0", "s:0"], op="SUM"),
                            _step("ElementWise", ["s:1", "in:2"], op="SUM")], 3),
    "leaky then max": ([_step("Activation", ["in:0"], type="LEAKY_RELU", alpha=0.2),
                        _step("ElementWise", ["s:0", "w:c4"], op="MAX")], 1),
    "min, sub, relu, hard sigmoid, abs, neg, sqrt": (
        [_step("ElementWise", ["in:1", "in:0"], op="MIN"), _step("ElementWise", ["w:c0", "s:0"], op="SUB"),
         _step("Activation", ["s:1"], type="RELU"), _step("Activation", ["s:2"], type="HARD_SIGMOID", alpha=0.2, beta=0.5),
         _step("Unary", ["s:3"], op="ABS"), _step("Unary", ["s:4"], op="NEG"), _step("Unary", ["s:1"], op="SQRT"),
         _step("ElementWise", ["s:5", "s:6"], op="DIV"), _step("Activation", ["s:7"], type="HARD_SWISH")], 2),
    "STFT magnitude: squares, sum, sqrt": (
        [_step("ElementWise", ["in:0", "w:c5"], op="POW"), _step("ElementWise", ["in:1", "w:c6"], op="POW"),
         _step("ElementWise", ["s:0", "s:1"], op="SUM"), _step("Unary", ["s:2"], op="SQRT")], 2),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(1, 200, 2, 96), (2, 3, 5), (3000,)])
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_compiled_chain_matches_the_interpreter_bit_for_bit(monkeypatch, name, shape, dtype):
    pytest.importorskip("numba")
    config.reload()
    program, n_in = PROGRAMS[name]
    weights = {"c0": np.array(3.0, dtype), "c1": np.array(6.0, dtype), "c2": np.array([0.7], dtype),
               "c3": np.array([-0.25], dtype), "c4": np.full((1,) * len(shape), 0.1, dtype),
               "c5": np.array(2.0, dtype), "c6": np.array([2.0])}
    op = Op("Pointwise", "pw", {"program": program}, weights)
    inputs = [_x(shape, dtype, i) for i in range(n_in)]
    with np.errstate(all="ignore"):
        got = pointwise_chain.run(op, inputs)
        want = _interpreted(monkeypatch, Op("Pointwise", "pw", {"program": program}, weights), inputs)
    assert got is not None and got.dtype == want.dtype == dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()
    assert fused.pointwise(op, inputs)[0].tobytes() == want.tobytes()    # the tactic takes the compiled pass


@pytest.mark.parametrize("name,program", [("paddle", HARD_SWISH)] + list(HARD_SWISH_FORMS.items()) + [
    ("times the other input", HARD_SWISH[:2] + [_step("ElementWise", ["in:1", "s:1"], op="PROD"), HARD_SWISH[3]]),
    ("constant over the product", HARD_SWISH[:3] + [_step("ElementWise", ["w:c1", "s:2"], op="DIV")]),
    ("subtract", [_step("ElementWise", ["in:0", "w:c0"], op="SUB")] + HARD_SWISH[1:]),
    ("clip of the input", [HARD_SWISH[0], _step("Activation", ["in:0"], type="CLIP", alpha=0.0, beta=6.0)]
     + HARD_SWISH[2:])])
def test_hand_written_hard_swish_runs_as_one_loop(name, program):
    """The chain `x + a, clip, times x, / d (or * d)` is recognised (jit_chain.relu6_swish runs it); near misses
    are not (the general chain runs them): the floats are pinned by the bit-for-bit test above."""
    pytest.importorskip("numba")
    weights = {"c0": np.array(3.0, np.float32), "c1": np.array(6.0, np.float32), "c2": np.array([0.7], np.float32),
               "c3": np.array([-0.25], np.float32)}
    code, fval, _ = pointwise_chain.encode(program, weights, (2, 3), np.dtype(np.float32))
    spec = pointwise_chain.relu6_swish(code, fval, np.dtype(np.float32))
    near_miss = name in ("times the other input", "constant over the product", "subtract", "clip of the input")
    assert (spec is None) == near_miss
    if not near_miss:
        lo = -1.0 if name == "second input" else 0.0
        hi = np.inf if name == "swapped operands" else 6.0
        d, divide = {"swapped operands": (0.7, False), "times a constant": (-0.25, False)}.get(name, (6.0, True))
        assert spec == (1 if name == "second input" else 0, np.float32(3.0), np.float32(lo), np.float32(hi),
                        np.float32(d), divide)


@pytest.mark.parametrize("why,program,inputs,weights", [
    ("a transcendental", [_step("Activation", ["in:0"], type="SIGMOID")], [(4, 5)], {}),
    ("a broadcast input", [_step("ElementWise", ["in:0", "in:1"], op="PROD")], [(4, 5), (4, 1)], {}),
    ("POW 3", [_step("ElementWise", ["in:0", "w:c0"], op="POW")], [(4, 5)], {"c0": np.array(3.0, np.float32)}),
    ("POW of a tensor exponent", [_step("ElementWise", ["in:0", "in:1"], op="POW")], [(4, 5), (4, 5)], {}),
    ("a float64 constant", [_step("ElementWise", ["in:0", "w:c0"], op="SUM")], [(4, 5)], {"c0": np.array(2.0)}),
    ("a tensor constant", [_step("ElementWise", ["in:0", "w:c0"], op="SUM")], [(4, 5)],
     {"c0": np.ones(5, np.float32)}),
])
def test_chains_it_cannot_run_exactly_go_to_the_interpreter(why, program, inputs, weights):
    op = Op("Pointwise", "pw", {"program": program}, weights)
    xs = [np.ones(s, np.float32) for s in inputs]
    assert pointwise_chain.run(op, xs) is None, why
    assert fused.pointwise(op, xs)[0].shape == np.broadcast_shapes(*inputs)


def test_strided_inputs_are_copied_and_give_the_interpreters_floats(monkeypatch):
    """An STFT's real and imaginary halves arrive as slices of one tensor: the chain still runs compiled."""
    pytest.importorskip("numba")
    config.reload()
    program, _ = PROGRAMS["STFT magnitude: squares, sum, sqrt"]
    weights = {"c5": np.array(2.0, np.float32), "c6": np.array([2.0], np.float32)}
    spec = _x((1, 1, 97, 514), np.float32, 3)
    inputs = [spec[..., :257], spec[..., 257:]]
    assert not inputs[0].flags.c_contiguous
    with np.errstate(all="ignore"):
        got = pointwise_chain.run(Op("Pointwise", "pw", {"program": program}, weights), inputs)
        want = _interpreted(monkeypatch, Op("Pointwise", "pw", {"program": program}, weights), inputs)
    assert got is not None and got.tobytes() == want.tobytes()


LSTM_CELL = [_step("Activation", ["in:0"], type="SIGMOID"), _step("Activation", ["in:1"], type="SIGMOID"),
             _step("Activation", ["in:2"], type="TANH"), _step("ElementWise", ["s:1", "in:3"], op="PROD"),
             _step("ElementWise", ["s:0", "s:2"], op="PROD"), _step("ElementWise", ["s:3", "s:4"], op="SUM")]


def _polyexp_chain():
    from native.tactics import tactics_for
    return next(t for t in tactics_for("Pointwise", "cpu") if t.name == "polyexp-chain")


def test_polyexp_chain_runs_an_lstm_cell_to_the_reference():
    """silero-vad's LSTM cell as ONNX ops (sigmoid, sigmoid, tanh, two products, a sum over four inputs)."""
    pytest.importorskip("numba")
    from native.tactics import LayerContext
    config.reload()
    ins = [_x((1, 128), np.float32, i) for i in range(4)]
    op = Op("Pointwise", "pw", {"program": LSTM_CELL}, {})
    assert _polyexp_chain().supports(op, LayerContext([[1, 128]] * 4, ["float32"] * 4)) is None
    with np.errstate(all="ignore"):
        got = _polyexp_chain().run(op, ins)[0]
        x = [v.astype(np.float64) for v in ins]
        sig = lambda v: 1 / (1 + np.exp(-v))   # noqa: E731
        want = sig(x[0]) * np.tanh(x[2]) + sig(x[1]) * x[3]
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2e-6, atol=1e-7)
    assert np.array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("why,program,shapes,dtype", [
    ("no SIGMOID / TANH", HARD_SWISH, [[4, 5]], "float32"),
    ("float32", LSTM_CELL, [[4, 5]] * 4, "float64"),
    ("one known shape", LSTM_CELL, [[4, 5], [4, 5], [4, 1], [4, 5]], "float32"),
    ("outside", [_step("Activation", ["in:0"], type="SIGMOID"), _step("Unary", ["s:0"], op="EXP")], [[4, 5]],
     "float32"),
])
def test_polyexp_chain_refuses_with_a_reason(why, program, shapes, dtype):
    from native.tactics import LayerContext
    op = Op("Pointwise", "pw", {"program": program}, {"c0": np.array(3.0, np.float32), "c1": np.array(6.0, np.float32)})
    reason = _polyexp_chain().supports(op, LayerContext(shapes, [dtype] * len(shapes)))
    assert isinstance(reason, str) and why in reason


@pytest.mark.parametrize("name,tail,want", [
    ("scale and shift", [_step("ElementWise", ["w:c2", "s:3"], op="PROD"),
                         _step("ElementWise", ["s:4", "w:c3"], op="SUM")], (3, 0.7, 1, -0.25)),
    ("shift", [_step("ElementWise", ["s:3", "w:c3"], op="SUM")], (1, -0.25, 0, 0.0)),
    ("shift of the input", [_step("ElementWise", ["in:0", "w:c3"], op="SUM")], None),
    ("times a tensor step", [_step("ElementWise", ["s:3", "s:2"], op="PROD")], None),
    ("a step before the last", [_step("ElementWise", ["s:2", "w:c3"], op="SUM")], None),
    ("divide", [_step("ElementWise", ["s:3", "w:c2"], op="DIV")], None),
    ("three more steps", [_step("ElementWise", ["s:3", "w:c3"], op="SUM")] * 1
     + [_step("ElementWise", ["s:4", "w:c3"], op="SUM"), _step("ElementWise", ["s:5", "w:c3"], op="SUM")], None)])
def test_hard_swish_with_an_affine_tail_runs_as_one_loop(name, tail, want):
    """PaddleOCR v4's hard-swish + learnable affine block (`* s, + t`) is recognised (jit_chain.relu6_swish_affine
    runs it); a tail that reads anything but the previous step and a scalar is not (the floats: the bit-for-bit
    test above)."""
    pytest.importorskip("numba")
    weights = {"c0": np.array(3.0, np.float32), "c1": np.array(6.0, np.float32), "c2": np.array([0.7], np.float32),
               "c3": np.array([-0.25], np.float32)}
    code, fval, _ = pointwise_chain.encode(HARD_SWISH + tail, weights, (2, 3), np.dtype(np.float32))
    spec = pointwise_chain.relu6_swish_affine(code, fval, np.dtype(np.float32))
    if want is None:
        assert spec is None
    else:
        head = (0, np.float32(3.0), np.float32(0.0), np.float32(6.0), np.float32(6.0), True)
        assert spec == head + (want[0], np.float32(want[1]), want[2], np.float32(want[3]))


@pytest.mark.parametrize("name", ["paddle hard-swish", "hard-swish then scale and shift", "gate and residuals"])
def test_a_chain_split_over_the_pool_gives_the_same_floats(monkeypatch, name):
    """From SPLIT_MIN elements the compiled chain runs in parts over the pool: each element alone, the same bits."""
    pytest.importorskip("numba")
    from native.cpu import threads
    config.reload()
    program, n_in = PROGRAMS[name]
    weights = {"c0": np.array(3.0, np.float32), "c1": np.array(6.0, np.float32), "c2": np.array([0.7], np.float32),
               "c3": np.array([-0.25], np.float32)}
    inputs = [_x((3, 1001), np.float32, i) for i in range(n_in)]
    op = Op("Pointwise", "pw", {"program": program}, weights)
    with np.errstate(all="ignore"):
        whole = pointwise_chain.run(op, inputs)
        monkeypatch.setattr(pointwise_chain, "SPLIT_MIN", 1)
        monkeypatch.setattr(pointwise_chain, "num_threads", lambda: 3)
        monkeypatch.setattr(threads, "num_threads", lambda: 3)
        calls = []
        real = pointwise_chain.parallel_for
        monkeypatch.setattr(pointwise_chain, "parallel_for",
                            lambda fn, items: calls.append(len(items)) or real(fn, items))
        parts = pointwise_chain.run(op, inputs)
    assert calls == [3]
    assert parts.tobytes() == whole.tobytes()


def test_a_held_one_block_chain_gives_the_first_calls_floats(monkeypatch):
    """From the second call at a shape, a one-block chain runs its held call (_one_block): the interpreter's bits;
    a strided input takes run's copies again, the same bits."""
    pytest.importorskip("numba")
    config.reload()
    program, _ = PROGRAMS["STFT magnitude: squares, sum, sqrt"]
    weights = {"c5": np.array(2.0, np.float32), "c6": np.array([2.0], np.float32)}
    spec = _x((1, 258, 3), np.float32, 5)
    inputs = [spec[:, :129], spec[:, 129:]]          # contiguous halves (silero-vad's [1, 129, 3])
    op = Op("Pointwise", "pw", {"program": program}, weights)
    with np.errstate(all="ignore"):
        first = pointwise_chain.run(op, inputs)
        assert op.__dict__["_pointwise_chain"][4] is not None
        held = [pointwise_chain.run(op, inputs) for _ in range(2)]
        strided = _x((1, 129, 6), np.float32, 5)[..., ::2]
        want = _interpreted(monkeypatch, Op("Pointwise", "pw", {"program": program}, weights), inputs)
        config.reload()
        got_strided = pointwise_chain.run(op, [strided, strided])
        want_strided = _interpreted(monkeypatch, Op("Pointwise", "pw", {"program": program}, weights),
                                    [strided, strided])
    assert first.tobytes() == want.tobytes()
    assert all(h.tobytes() == want.tobytes() for h in held)
    assert got_strided.tobytes() == want_strided.tobytes()
