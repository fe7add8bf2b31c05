"""lstm-direct (a plain forward LSTM's time loop as one compiled call, the numba extra): the values of a float64
reference of ONNX's LSTM, both layouts, initial states or none; its sigmoid / tanh keep small values' relative
precision; the forms it does not take, it refuses with a reason."""
import numpy as np
import pytest

from native.tactics import LayerContext, Op, tactics_for

pytestmark = pytest.mark.jit   # tests/conftest.py: the JIT on whatever DEBUGKIT_JIT says

RNG = np.random.default_rng(7)


def _tactic(name="lstm-direct"):
    return next(t for t in tactics_for("RNN", "cpu") if t.name == name)


def _sig(v):
    return 1 / (1 + np.exp(-v))


def _reference(x, w, r, b, h, c):
    """ONNX LSTM, forward, gates i, o, f, c, float64. x [T, B, I]; returns Y [T, 1, B, H], Y_h, Y_c."""
    x, w, r, b, h, c = (v.astype(np.float64) for v in (x, w[0], r[0], b[0], h, c))
    hidden = r.shape[1]
    ys = []
    for t in range(x.shape[0]):
        g = x[t] @ w.T + h @ r.T + b[:4 * hidden] + b[4 * hidden:]
        i, o, f, cc = (g[:, k * hidden:(k + 1) * hidden] for k in range(4))
        c = _sig(f) * c + _sig(i) * np.tanh(cc)
        h = _sig(o) * np.tanh(c)
        ys.append(h)
    return np.stack(ys)[:, None], h[None], c[None]


@pytest.mark.parametrize("steps,batch,inp,hidden,layout,states", [
    (1, 1, 128, 128, 0, True), (4, 1, 128, 128, 0, True), (5, 3, 7, 6, 0, False), (3, 2, 5, 9, 1, True)])
def test_lstm_direct_matches_the_reference(steps, batch, inp, hidden, layout, states):
    pytest.importorskip("numba")
    x = RNG.standard_normal((steps, batch, inp)).astype(np.float32)
    w = (RNG.standard_normal((1, 4 * hidden, inp)) / np.sqrt(inp)).astype(np.float32)
    r = (RNG.standard_normal((1, 4 * hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = RNG.standard_normal((1, 8 * hidden)).astype(np.float32) * np.float32(0.5)
    h0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if states else None
    c0 = RNG.standard_normal((1, batch, hidden)).astype(np.float32) if states else None
    want = _reference(x, w, r, b, h0[0] if states else np.zeros((batch, hidden)),
                      c0[0] if states else np.zeros((batch, hidden)))
    if layout == 1:
        x = x.transpose(1, 0, 2).copy()
        h0 = None if h0 is None else h0.transpose(1, 0, 2).copy()
        c0 = None if c0 is None else c0.transpose(1, 0, 2).copy()
        want = (want[0].transpose(2, 0, 1, 3), want[1].transpose(1, 0, 2), want[2].transpose(1, 0, 2))
    op = Op("RNN", "lstm", {"cell": "LSTM", "direction": "forward", "layout": layout, "hidden_size": hidden})
    inputs = [x, w, r, b, None, h0, c0]
    assert _tactic().supports(op, LayerContext([list(v.shape) if v is not None else None for v in inputs])) is None
    got = _tactic().run(op, inputs)
    old = _tactic("time-loop").run(op, inputs)
    for g, o, want_v in zip(got, old, want):
        assert g.shape == o.shape == want_v.shape and g.dtype == np.float32
        np.testing.assert_allclose(g, want_v, rtol=1e-5, atol=3e-6)


def test_polyexp_sigmoid_and_tanh_keep_small_values_relative():
    pytest.importorskip("numba")
    from native.cpu import jit_rnn
    v = np.concatenate([np.geomspace(1e-30, 20, 400), -np.geomspace(1e-30, 20, 400)]).astype(np.float32)
    tanh = np.array([jit_rnn.tanh(x) for x in v])
    sig = np.array([jit_rnn.sigmoid(x) for x in v])
    np.testing.assert_allclose(tanh, np.tanh(v.astype(np.float64)), rtol=6e-7)
    np.testing.assert_allclose(sig, _sig(v.astype(np.float64)), rtol=6e-7)
    assert np.isnan(jit_rnn.tanh(np.float32(np.nan))) and jit_rnn.tanh(np.float32(np.inf)) == 1.0
    assert jit_rnn.sigmoid(np.float32(-np.inf)) == 0.0 and jit_rnn.sigmoid(np.float32(np.inf)) == 1.0


@pytest.mark.parametrize("params,why", [
    ({"direction": "reverse"}, "forward"), ({"direction": "bidirectional"}, "forward"), ({"clip": 3.0}, "clip"),
    ({"activations": ["Relu", "Tanh", "Tanh"]}, "default activations"), ({"cell": "GRU"}, "LSTM")])
def test_lstm_direct_refuses_with_a_reason(params, why):
    op = Op("RNN", "lstm", {"cell": "LSTM", "direction": "forward", **params})
    reason = _tactic().supports(op, LayerContext([[1, 1, 4], [1, 16, 4], [1, 16, 4]]))
    assert isinstance(reason, str) and why in reason


def test_lstm_direct_with_short_sequences_takes_the_masking_path():
    pytest.importorskip("numba")
    x = RNG.standard_normal((3, 2, 4)).astype(np.float32)
    w = RNG.standard_normal((1, 20, 4)).astype(np.float32)
    r = RNG.standard_normal((1, 20, 5)).astype(np.float32)
    lens = np.array([3, 1], np.int32)
    op = Op("RNN", "lstm", {"cell": "LSTM", "direction": "forward"})
    got = _tactic().run(op, [x, w, r, None, lens])
    want = _tactic("time-loop").run(op, [x, w, r, None, lens])
    for g, o in zip(got, want):
        assert g.tobytes() == o.tobytes()
    assert not got[0][1:, 0, 1].any()      # past item 1's length its output is zero


@pytest.mark.parametrize("steps,states", [(1, True), (4, True), (2, False)])
def test_lstm_direct_held_call_gives_the_first_runs_bits(steps, states):
    """From the second run at a shape the held call (_held_lstm) runs: the same bits as the first run's path, inputs
    untouched; another shape, other weights or sequence lengths take the full path again."""
    pytest.importorskip("numba")
    hidden, inp = 16, 8
    x = RNG.standard_normal((steps, 1, inp)).astype(np.float32)
    w = RNG.standard_normal((1, 4 * hidden, inp)).astype(np.float32)
    r = RNG.standard_normal((1, 4 * hidden, hidden)).astype(np.float32)
    b = RNG.standard_normal((1, 8 * hidden)).astype(np.float32)
    h0 = RNG.standard_normal((1, 1, hidden)).astype(np.float32) if states else None
    c0 = RNG.standard_normal((1, 1, hidden)).astype(np.float32) if states else None
    op = Op("RNN", "lstm", {"cell": "LSTM", "direction": "forward", "hidden_size": hidden})
    inputs = [x, w, r, b, None, h0, c0, None]
    first = [v.copy() for v in _tactic().run(op, inputs)]
    assert "_lstm_direct_fast" in op.__dict__
    keep = [None if v is None else v.copy() for v in inputs]
    for _ in range(2):
        again = _tactic().run(op, inputs)
        for g, f in zip(again, first):
            assert g.shape == f.shape and g.tobytes() == f.tobytes()
    for v, k in zip(inputs, keep):
        assert v is None or v.tobytes() == k.tobytes()
    from native.cpu.kernels.rnn import _held_lstm
    fast = op.__dict__["_lstm_direct_fast"]
    assert _held_lstm(fast, [x[:1] if steps > 1 else np.concatenate([x, x])] + inputs[1:]) is None
    assert _held_lstm(fast, [x, w.copy()] + inputs[2:]) is None
    assert _held_lstm(fast, inputs[:4] + [np.array([steps], np.int32)] + inputs[5:]) is None
