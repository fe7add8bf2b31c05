"""The plugin registry's user story and the built-in plugins' numerics (values checked by hand or by identity)."""
import os
import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

from backends.engine import Runtime, build_plan_from_onnx
from backends.engine.onnx_backend import Backend
from native.errors import DebugkitError, PlanError
from native.plugins import Plugin, find_plugin, register_plugin, registered_plugins, unregister_plugin

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class ScaleShift(Plugin):
    """y = x * alpha + table (a tensor attribute, so it travels as a weight)."""

    name = "MyOp"

    def enqueue(self, inputs, fields):
        return [inputs[0] * np.float32(fields["alpha"]) + fields["table"]]


def _my_model():
    node = helper.make_node("MyOp", ["x"], ["y"], name="my1", domain="custom.ops", alpha=2.5,
                            table=helper.make_tensor("t", TensorProto.FLOAT, [3], [1, 2, 3]))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)])


@pytest.fixture
def my_op():
    register_plugin("MyOp", ScaleShift)
    yield
    unregister_plugin("MyOp")


def test_unknown_op_fails_to_parse_without_plugin():
    with pytest.raises(DebugkitError, match="MyOp"):
        Backend.prepare(_my_model())


def test_user_plugin_parses_builds_serializes_and_runs(my_op, tmp_path):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    plan = build_plan_from_onnx(_my_model(), shapes={"x": (2, 3)})
    path = tmp_path / "my.plan"
    path.write_bytes(plan)
    ctx = Runtime().deserialize_engine(path.read_bytes()).create_execution_context()
    np.testing.assert_allclose(ctx.execute({"x": x})["y"], x * 2.5 + np.array([1, 2, 3], np.float32))

    # a fresh process without the plugin cannot load the plan, and says which plugin is missing
    code = ("import sys; from backends.engine import Runtime\n"
            "try:\n    Runtime().deserialize_engine(open(sys.argv[1], 'rb').read())\n"
            "except Exception as e:\n    print(type(e).__name__, e); sys.exit(3)\n")
    r = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "PlanError" in r.stdout and "'MyOp'" in r.stdout and "register_plugin" in r.stdout

    # ... and one that registers it first can
    code2 = ("import sys, numpy as np\nsys.path.insert(0, sys.argv[2])\n"
             "from test_plugins import ScaleShift\nfrom native.plugins import register_plugin\n"
             "register_plugin(ScaleShift)\nfrom backends.engine import Runtime\n"
             "ctx = Runtime().deserialize_engine(open(sys.argv[1], 'rb').read()).create_execution_context()\n"
             "print(ctx.execute({'x': np.ones((2, 3), np.float32)})['y'].tolist())\n")
    r = subprocess.run([sys.executable, "-c", code2, str(path), os.path.dirname(__file__)], capture_output=True,
                       text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[[3.5, 4.5, 5.5], [3.5, 4.5, 5.5]]"


def test_missing_plugin_in_process_fails_at_load(my_op):
    plan = build_plan_from_onnx(_my_model(), shapes={"x": (2, 3)})
    unregister_plugin("MyOp")
    with pytest.raises(PlanError, match="needs plugin 'MyOp'"):
        Runtime().deserialize_engine(plan)
    register_plugin(ScaleShift)


def test_registry_rules():
    assert {"NonMaxSuppression", "RoiAlign", "STFT", "DFT", "Attention", "TfIdfVectorizer"} <= set(registered_plugins())
    with pytest.raises(ValueError, match="already registered"):
        register_plugin("NonMaxSuppression", ScaleShift)
    with pytest.raises(ValueError, match="needs a name"):
        register_plugin(type("Anon", (Plugin,), {}))
    with pytest.raises(TypeError, match="enqueue"):
        register_plugin("NoEnqueue", object)
    assert find_plugin("NoSuchOp") is None


def _run(op, inputs, outputs, attrs=None, opset=17, n_out=1, domain=""):
    """Run one node through the Backend; inputs as (name, array) pairs, ("", None) for an empty optional."""
    node = helper.make_node(op, [n for n, _ in inputs], [f"o{i}" for i in range(n_out)], domain=domain,
                            **(attrs or {}))
    inputs = [(n, a) for n, a in inputs if n]
    vi = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs]
    outs = [helper.make_tensor_value_info(f"o{i}", t, None) for i, t in enumerate(outputs)]
    ops = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 4)] if domain else [])
    m = helper.make_model(helper.make_graph([node], "g", vi, outs), opset_imports=ops)
    return Backend.prepare(m).run([a for _, a in inputs])


def test_nms_suppresses_overlaps_and_orders_by_score():
    # the last box is the first one with its corners swapped
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 10, 1, 11], [1, 1, 0, 0]]], np.float32)
    scores = np.array([[[0.9, 0.95, 0.5, 0.3]]], np.float32)
    (sel,) = _run("NonMaxSuppression", [("b", boxes), ("s", scores), ("m", np.array([3], np.int64)),
                                         ("i", np.array([0.5], np.float32))], [TensorProto.INT64])
    assert sel.dtype == np.int64 and sel.tolist() == [[0, 0, 1], [0, 0, 2]]


def test_roialign_avg_of_constant_and_ramp():
    x = np.tile(np.arange(8, dtype=np.float32), (1, 1, 8, 1))  # value = column index
    rois = np.array([[2, 2, 6, 6]], np.float32)
    (y,) = _run("RoiAlign", [("x", x), ("r", rois), ("b", np.zeros(1, np.int64))], [TensorProto.FLOAT],
                {"output_height": 1, "output_width": 2, "sampling_ratio": 2}, opset=16)
    # half_pixel: the roi spans columns 1.5..5.5; bins centre on 2.5 and 4.5
    np.testing.assert_allclose(y.reshape(-1), [2.5, 4.5], rtol=1e-6)


def test_dft_matches_numpy_fft_both_opsets():
    x = np.random.default_rng(0).standard_normal((2, 8, 1)).astype(np.float32)
    (y17,) = _run("DFT", [("x", x)], [TensorProto.FLOAT], {"onesided": 1, "axis": 1}, opset=17)
    (y20,) = _run("DFT", [("x", x), ("", None), ("a", np.array(1, np.int64))], [TensorProto.FLOAT],
                  {"onesided": 1}, opset=20)
    ref = np.fft.rfft(x[..., 0], axis=1)
    for y in (y17, y20):
        assert y.shape == (2, 5, 2)
        np.testing.assert_allclose(y[..., 0] + 1j * y[..., 1], ref, rtol=1e-5, atol=1e-5)
    (back,) = _run("DFT", [("y", y20), ("", None), ("a", np.array(1, np.int64))], [TensorProto.FLOAT],
                   {"onesided": 1, "inverse": 1}, opset=20)
    np.testing.assert_allclose(back, x, rtol=1e-5, atol=1e-5)  # IRFFT of the RFFT: the signal again


def test_windows_and_stft():
    (h,) = _run("HannWindow", [("n", np.array(4, np.int64))], [TensorProto.DOUBLE],
                {"output_datatype": TensorProto.DOUBLE})
    assert h.dtype == np.float64
    np.testing.assert_allclose(h, [0, 0.5, 1, 0.5], atol=1e-12)
    sig = np.sin(np.arange(64) * 2 * np.pi / 8).astype(np.float32).reshape(1, 64, 1)
    (s,) = _run("STFT", [("s", sig), ("st", np.array(8, np.int64)), ("w", np.ones(16, np.float32))],
                [TensorProto.FLOAT])
    mag = np.hypot(s[..., 0], s[..., 1])
    assert s.shape == (1, 7, 9, 2) and np.all(np.argmax(mag, axis=-1) == 2)  # period 8 in a 16-frame = bin 2


def test_attention_gqa_causal_matches_explicit_softmax():
    rng = np.random.default_rng(1)
    q = rng.standard_normal((1, 4, 3, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    (y,) = _run("Attention", [("q", q), ("k", k), ("v", v)], [TensorProto.FLOAT], {"is_causal": 1}, opset=23)
    kk, vv = np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1)
    s = q @ kk.transpose(0, 1, 3, 2) / np.sqrt(8) + np.triu(np.full((3, 3), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    np.testing.assert_allclose(y, (p / p.sum(-1, keepdims=True)) @ vv, rtol=1e-5, atol=1e-6)


def test_random_ops_respect_seed_shape_and_dtype():
    p = np.full((1000,), 0.25, np.float32)
    (a,) = _run("Bernoulli", [("p", p)], [TensorProto.FLOAT], {"seed": 3.0}, opset=15)
    (b,) = _run("Bernoulli", [("p", p)], [TensorProto.FLOAT], {"seed": 3.0}, opset=15)
    assert a.dtype == np.float32 and set(np.unique(a)) <= {0.0, 1.0} and np.array_equal(a, b)
    assert 0.18 < a.mean() < 0.32
    (u,) = _run("RandomUniformLike", [("x", np.zeros((50, 4), np.float64))], [TensorProto.DOUBLE],
                {"low": 2.0, "high": 3.0, "seed": 1.0})
    assert u.dtype == np.float64 and u.shape == (50, 4) and 2 <= u.min() and u.max() < 3
    (m,) = _run("Multinomial", [("l", np.log(np.array([[0.0001, 0.9999]], np.float32)))], [TensorProto.INT32],
                {"sample_size": 20, "seed": 0.0}, opset=7)
    assert m.dtype == np.int32 and m.shape == (1, 20) and m.sum() >= 18


def test_string_ops():
    x = np.array(["Monday", "tuesday", "MONDAY"], dtype=object)
    (y,) = _run("StringNormalizer", [("x", x)], [TensorProto.STRING],
                {"stopwords": ["monday"], "case_change_action": "UPPER"}, opset=10)
    assert y.tolist() == ["TUESDAY"]
    (parts, counts) = _run("StringSplit", [("x", np.array(["a,b,,c", "d"], dtype=object))],
                           [TensorProto.STRING, TensorProto.INT64], {"delimiter": ","}, opset=20, n_out=2)
    assert parts.tolist() == [["a", "b", "", "c"], ["d", "", "", ""]] and counts.tolist() == [4, 1]
    (m,) = _run("RegexFullMatch", [("x", np.array(["ab12", "ab"], dtype=object))], [TensorProto.BOOL],
                {"pattern": r"[a-z]+\d+"}, opset=20)
    assert m.tolist() == [True, False]


def test_tfidf_counts_skip_bigrams():
    x = np.array([94, 17, 36, 12, 28], np.int64)
    (y,) = _run("TfIdfVectorizer", [("x", x)], [TensorProto.FLOAT],
                {"mode": "TF", "min_gram_length": 2, "max_gram_length": 2, "max_skip_count": 2,
                 "ngram_counts": [0, 0], "ngram_indexes": [0, 1], "pool_int64s": [94, 12, 17, 28]}, opset=9)
    assert y.tolist() == [1.0, 1.0]  # [94, 12] and [17, 28] are 2-grams with 2 skipped items


def test_label_encoder_string_to_int():
    (y,) = _run("LabelEncoder", [("x", np.array(["a", "z", "b"], dtype=object))], [TensorProto.INT64],
                {"keys_strings": ["a", "b"], "values_int64s": [5, 6], "default_int64": -7}, domain="ai.onnx.ml")
    assert y.tolist() == [5, -7, 6]


def test_image_decoder_bmp_roundtrip():
    img = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    stride = 12
    rows = b"".join(img[r, :, ::-1].tobytes().ljust(stride, b"\0") for r in (1, 0))  # BGR, bottom-up
    header = b"BM" + (54 + len(rows)).to_bytes(4, "little") + b"\0" * 4 + (54).to_bytes(4, "little")
    info = (40).to_bytes(4, "little") + (3).to_bytes(4, "little") + (2).to_bytes(4, "little") + \
        (1).to_bytes(2, "little") + (24).to_bytes(2, "little") + b"\0" * 24
    data = np.frombuffer(header + info + rows, np.uint8)
    (y,) = _run("ImageDecoder", [("d", data)], [TensorProto.UINT8], {"pixel_format": "RGB"}, opset=20)
    assert np.array_equal(y, img)
