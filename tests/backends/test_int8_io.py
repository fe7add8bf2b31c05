"""INT8 I/O (passes/int8_io.py): int8 tensors between INT8 convolutions, Reformat layers at the chains' edges.

The pass runs on devices with an int8-I/O convolution tactic (CUDA's cuDNN INT8 graphs). Here it runs on the CPU
with a numpy tactic of the same contract registered for the test (int8 NHWC in, the fused epilogue, int8 or
float32 out), so the graph rewriting, the scales the tactic is handed and the Reformat numerics are checked
without a GPU; tests/native/cuda/test_cuda_int8_io.py runs the cuDNN tactic itself."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from native import numerics
from native.tactics import _REGISTRY, Tactic, register_tactic


def _conv_nhwc_int(xq, wq, params):
    """Exact int64 accumulators of an NHWC int8 convolution (x [N,H,W,C], w [M,KH,KW,C])."""
    n, h, w, c = xq.shape
    m, kh, kw, _ = wq.shape
    (sh, sw), (dh, dw) = params.get("strides") or [1, 1], params.get("dilations") or [1, 1]
    pre, post = params.get("pre_padding") or [0, 0], params.get("post_padding") or [0, 0]
    xp = np.pad(xq.astype(np.int64), ((0, 0), (pre[0], post[0]), (pre[1], post[1]), (0, 0)))
    oh = (h + pre[0] + post[0] - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pre[1] + post[1] - (kw - 1) * dw - 1) // sw + 1
    acc = np.zeros((n, oh, ow, m), np.int64)
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw, :]
            acc += np.einsum("nhwc,mc->nhwm", patch, wq[:, i, j, :].astype(np.int64))
    return acc


class NumpyInt8IO(Tactic):
    """The cuDNN INT8 tactic's contract in numpy: the graph it fuses, evaluated in float32 in its order."""

    kind, name, device = "ConvolutionNHWC", "test-int8-io", "cpu"
    precisions, formats = ("int8",), ("nhwc",)
    honours = frozenset({"post_ops"})
    int8_io = True
    seen: list = []

    def supports(self, op, input_shapes):
        from native.shared.int8_io import io_of
        return None if io_of(op).get("input") == "int8" else "not prepared for int8 I/O"

    def run(self, op, inputs):
        from native.shared.int8_io import epilogue_plan, io_of, prepared_weights
        w = prepared_weights(op)
        x = np.asarray(inputs[0])
        assert x.dtype == np.int8, x.dtype
        NumpyInt8IO.seen.append((op.name, dict(op.params["int8"])))
        v = (_conv_nhwc_int(x, w["int8_krsc"], op.params).astype(np.float32) + w["int8_bias"].reshape(-1)) \
            * w["int8_scale"].reshape(-1)
        res, relu = epilogue_plan(op)
        if res is not None:
            r = np.asarray(inputs[res])
            v = v + r.astype(np.float32) * w["int8_res_scale"].reshape(-1)
        if io_of(op)["output"] == "int8":
            return [np.clip(np.rint(v), 0 if relu else -128, 127).astype(np.int8)]
        return [np.maximum(v, 0) if relu else v]


@pytest.fixture
def int8_io_on_cpu(monkeypatch):
    """The pass enabled on the CPU with NumpyInt8IO registered (removed afterwards)."""
    from backends.engine.builder.passes import int8_io
    register_tactic(NumpyInt8IO)
    NumpyInt8IO.seen = []
    monkeypatch.setattr(int8_io, "enabled", lambda config: True)
    try:
        yield
    finally:
        bucket = _REGISTRY[("cpu", "ConvolutionNHWC")]
        bucket[:] = [t for t in bucket if t.name != NumpyInt8IO.name]


def _resnet_block():
    """conv1 3x3 (8->16) + ReLU -> conv2 3x3 (16->16) + r1 + ReLU -> conv3 1x1 (16->8) -> y; conv0 3 input
    channels (not a multiple of 4: keeps float tensors)."""
    rng = np.random.default_rng(5)
    w = {f"w{i}": (rng.standard_normal(s) * 0.15).astype(np.float32)
         for i, s in ((0, (8, 3, 3, 3)), (1, (16, 8, 3, 3)), (2, (16, 16, 3, 3)), (3, (8, 16, 1, 1)))}
    w["b1"] = rng.standard_normal(16).astype(np.float32) * 0.1
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c0", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "r1"], ["a2"], name="add2"),
             helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    g = helper.make_graph(nodes, "res", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    batches = [{"x": rng.standard_normal((2, 3, 10, 10)).astype(np.float32)} for _ in range(3)]
    return model, batches, rng.standard_normal((2, 3, 10, 10)).astype(np.float32)


def test_int8_io_build_stores_int8_between_int8_convolutions(int8_io_on_cpu, tmp_path):
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.runners import EngineRunner
    model, batches, x = _resnet_block()
    cache = tmp_path / "calib.cache"
    config = BuilderConfig()
    config.prefer_nhwc = True
    config.precision_by_timing = False   # the rule: every layer the tactic runs (timing: the next test)
    reference = BuilderConfig()          # the CPU INT8 engine (NCHW: the layout pass does not run on the CPU)
    reference.precision_by_timing = False
    with EngineRunner(model, flags=("int8",), config=reference, calibrator=Calibrator(batches, cache=cache)) as plain, \
            EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches, cache=cache)) as io:
        want, got = plain.infer({"x": x})["y"], io.infer({"x": x})["y"]
        nodes = io.engine.graph.nodes
        kinds = {n.name: (n.kind, n.precision, n.tactic_name) for n in nodes}
        reformats = [(n.params["from"], n.params["to"], n.params.get("scale")) for n in nodes
                     if n.kind == "Reformat"]
        conv = {n.name.split(" ")[0]: n for n in nodes if n.kind == "ConvolutionNHWC"}
        scales = {n.name: n for n in plain.engine.graph.nodes if n.precision == "int8"}
    # conv1 and conv2 run on int8 NHWC tensors; conv0 (3 input channels) keeps float ones, conv3 (the last before
    # the FP32 output) reads int8 and writes float32
    io_layers = {k: v for k, v in kinds.items() if v[2] == "test-int8-io"}
    assert len(io_layers) == 3, kinds
    p1, p2, p3 = (next(v for k, v in conv.items() if k.startswith(name)).params["int8"]
                  for name in ("conv1", "conv2", "conv3"))
    assert p1["io"] == {"input": "int8", "output": "int8"} and p2["io"] == p1["io"], (p1, p2)
    assert p3["io"] == {"input": "int8", "output": "float32"}, p3
    # conv2 adds r1 (conv1's int8 output) as an int8 residual of conv1's output scale
    assert p2["residual_scales"] == {"3": p1["output_scale"]}, p2
    assert p2["input_scale"] == p1["output_scale"] and p3["input_scale"] == p2["output_scale"]
    # one quantizing Reformat (conv0's float32 output into conv1), no dequantizing one: y is conv3's float32
    quant = [r for r in reformats if r[1] == "int8"]
    assert quant == [("float32", "int8", pytest.approx(p1["input_scale"]))], reformats
    assert not [r for r in reformats if r[0] == "int8"], reformats
    # the numerics: the int8 values agree with the CPU INT8 engine except where the fused residual rounds apart
    assert got.dtype == np.float32 and got.shape == want.shape
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.999, cos
    assert np.mean(np.abs(got - want) <= 1e-6 + 1e-5 * np.abs(want)) > 0.9


@pytest.mark.parametrize("int8_ms,float_ms,marked", [(1.0, 2.0, 3), (1.02, 1.0, 3), (3.0, 1.0, 0)])
def test_int8_io_layers_are_chosen_by_timing_against_float(int8_io_on_cpu, monkeypatch, tmp_path, int8_ms,
                                                           float_ms, marked):
    """A layer reads and writes int8 tensors only where its INT8 tactic times no slower than float (3% margin);
    the others are INT8 layers on float tensors, timed as before."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.runners import EngineRunner
    asked = []
    monkeypatch.setattr(int8_io, "time_against_float",
                        lambda probe, node, op, shape, config: asked.append(node.name) or (int8_ms, float_ms, "float32"))
    monkeypatch.setattr(int8_io, "_reformat_ms", lambda probe, shape, src, dst: 0.0)   # (the next test's subject)
    model, batches, x = _resnet_block()
    config = BuilderConfig()
    config.prefer_nhwc = True
    with EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches)) as io:
        io.infer({"x": x})
        nodes = io.engine.graph.nodes
        got = sum(n.tactic_name == NumpyInt8IO.name for n in nodes)
        ms = [n.meta.get("precision_ms") for n in nodes if n.tactic_name == NumpyInt8IO.name]
        left = [n for n in nodes if "not INT8: float32 is faster" in (n.meta.get("int8_note") or "")]
    assert len(asked) == 3 and got == marked, (asked, got)
    assert all(m == {"int8": int8_ms, "float32": float_ms} for m in ms), ms
    # slower in INT8 on int8 tensors: the layer leaves INT8 (a float layer, its timings kept for the inspector)
    assert len(left) == 3 - marked and all(n.precision == "float32" and "int8" not in n.params for n in left)
    assert all(n.meta["precision_ms"]["int8"] == int8_ms for n in left), [n.meta.get("precision_ms") for n in left]


@pytest.mark.parametrize("reformat_ms,marked", [(0.01, 3), (0.2, 0)])
def test_int8_io_chain_leaves_int8_when_its_reformats_cost_more_than_it_saves(int8_io_on_cpu, monkeypatch,
                                                                             reformat_ms, marked):
    """Each layer is timed alone as if its neighbours were INT8 too; the chain conv1 -> conv2 -> conv3 then pays a
    quantizing Reformat (conv0's float output) and a dequantizing one (y): at 0.1 ms saved per layer, two
    Reformat layers of 0.2 ms make the chain slower than float, and all three layers leave INT8."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.runners import EngineRunner
    monkeypatch.setattr(int8_io, "time_against_float", lambda probe, node, op, shape, config: (1.0, 1.1, "float32"))
    reformats = []
    monkeypatch.setattr(int8_io, "_reformat_ms",
                        lambda probe, shape, src, dst: reformats.append((shape, src, dst)) or reformat_ms)
    model, batches, x = _resnet_block()
    config = BuilderConfig()
    config.prefer_nhwc = True
    with EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches)) as io:
        y = io.infer({"x": x})["y"]
        nodes = io.engine.graph.nodes
        got = sum(n.tactic_name == NumpyInt8IO.name for n in nodes)
        notes = [n.meta.get("int8_note") or "" for n in nodes
                 if "Convolution" in n.kind and n.name.split(" ")[0] in ("conv1", "conv2", "conv3")]
    assert sorted(reformats) == [((2, 8, 10, 10), "float32", "int8"), ((2, 8, 10, 10), "int8", "float32")]
    assert got == marked and np.isfinite(y).all()
    if not marked:
        assert len(notes) == 3 and all("chain of 3 INT8 layer(s) saves 0.300 ms" in s and "cost 0.400 ms" in s
                                       for s in notes), notes


@pytest.mark.parametrize("reformat_ms,marked", [(0.05, 3), (0.0, 2)])
def test_int8_io_layer_slower_alone_joins_when_its_reformats_cost_more(int8_io_on_cpu, monkeypatch, reformat_ms,
                                                                      marked):
    """conv2 is 0.05 ms slower in INT8 alone, conv1 and conv3 0.1 ms faster: with conv2 in float, conv1 and conv3
    are two chains of one (the cost model's 4 edge Reformats: c0 and r2 quantized, r1 and y dequantized; the engine
    quantizes c0 and r2 at least); with conv2 INT8, one chain of three (2 edges,
    the engine quantizes c0). At 0.05 ms a Reformat conv2 runs INT8, and says why; at no cost it stays float."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.runners import EngineRunner
    monkeypatch.setattr(int8_io, "time_against_float", lambda probe, node, op, shape, config:
                        (1.05, 1.0, "float32") if node.name.startswith("conv2") else (1.0, 1.1, "float32"))
    monkeypatch.setattr(int8_io, "_reformat_ms", lambda probe, shape, src, dst: reformat_ms)
    model, batches, x = _resnet_block()
    config = BuilderConfig()
    config.prefer_nhwc = True
    with EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches)) as io:
        y = io.infer({"x": x})["y"]
        nodes = io.engine.graph.nodes
        io_layers = {n.name.split(" ")[0] for n in nodes if n.tactic_name == NumpyInt8IO.name}
        conv2 = next(n for n in nodes if "Convolution" in n.kind and n.name.split(" ")[0] == "conv2")
        reformats = [n for n in nodes if n.kind == "Reformat" and "int8" in (n.params["from"], n.params["to"])]
    assert np.isfinite(y).all()
    if marked == 3:
        assert io_layers == {"conv1", "conv2", "conv3"} and len(reformats) == 1, (io_layers, len(reformats))
        assert "INT8 though float32 is faster alone (1.000 ms vs INT8 1.050 ms)" in conv2.meta["int8_note"] and \
            "cost 0.100 ms more" in conv2.meta["int8_note"], conv2.meta["int8_note"]
    else:
        assert io_layers == {"conv1", "conv3"} and len(reformats) >= 2, (io_layers, len(reformats))
        assert conv2.meta["int8_note"].startswith("not INT8: float32 is faster"), conv2.meta["int8_note"]


def test_int8_io_run_of_slower_layers_joins_together(int8_io_on_cpu, monkeypatch):
    """conv1 and conv2 are each 0.05 ms slower in INT8 alone, conv3 1 ms faster; a Reformat costs 1e-4 ms an element
    (c0 and y: 0.16 ms, r1 and r2: 0.32 ms). Alone neither joins (conv2 would trade r2's quantizing for r1's; conv1
    would add a chain of its own), together they trade r2's for c0's: 0.16 ms saved for 0.10 ms, so both run INT8."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.runners import EngineRunner
    monkeypatch.setattr(int8_io, "time_against_float", lambda probe, node, op, shape, config:
                        (1.0, 2.0, "float32") if node.name.startswith("conv3") else (1.05, 1.0, "float32"))
    monkeypatch.setattr(int8_io, "_reformat_ms", lambda probe, shape, src, dst: 1e-4 * float(np.prod(shape)))
    model, batches, x = _resnet_block()
    config = BuilderConfig()
    config.prefer_nhwc = True
    with EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches)) as io:
        assert np.isfinite(io.infer({"x": x})["y"]).all()
        nodes = io.engine.graph.nodes
        io_layers = {n.name.split(" ")[0] for n in nodes if n.tactic_name == NumpyInt8IO.name}
        notes = [n.meta["int8_note"] for n in nodes if "Convolution" in n.kind and n.name.split(" ")[0] in
                 ("conv1", "conv2")]
    assert io_layers == {"conv1", "conv2", "conv3"}, io_layers
    assert len(notes) == 2 and all("INT8 though float32 is faster alone" in t and "cost 0.160 ms more" in t
                                   and "around 'conv1" in t for t in notes), notes


def test_int8_io_timing_runs_the_int8_and_float_variants(int8_io_on_cpu):
    """The real timing (no stand-in): each candidate, residual ones too, is timed in INT8 on int8 tensors and in the
    float precision, and both times are recorded on the layer (precision_ms)."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.runners import EngineRunner
    timed = []
    real = int8_io.time_against_float

    def spy(probe, node, op, shape, config):
        out = real(probe, node, op, shape, config)
        timed.append((node.name, out))
        return out
    int8_io.time_against_float = spy
    try:
        model, batches, x = _resnet_block()
        config = BuilderConfig()
        config.prefer_nhwc = True
        with EngineRunner(model, flags=("int8",), config=config, calibrator=Calibrator(batches)) as io:
            io.infer({"x": x})
    finally:
        int8_io.time_against_float = real
    assert [name.split(" ")[0] for name, _ in timed] == ["conv1", "conv2", "conv3"], timed
    for name, (ms8, msf, fp) in timed:
        assert fp == "float32" and ms8 is not None and ms8 > 0 and msf is not None and msf > 0, (name, ms8, msf)


def test_int8_io_leaves_explicit_qdq_and_untimed_builds_alone():
    """Explicit Q/DQ layers are not marked (they stay bit-equal to the CPU), nor is any layer of a build that does
    not choose by timing (the CPU's)."""
    from backends.engine.builder.config import BuilderConfig
    from backends.engine.builder.passes import int8_io
    from backends.engine.engine_graph import Node
    n = Node(name="c", kind="Convolution", inputs=["x"], outputs=["y"],
             params={"int8": {"input_scale": 0.1, "output_scale": 0.2, "narrow_weights": False},
                     "post_ops": []},
             weights={"kernel": np.ones((8, 8, 3, 3), np.float32)}, precision="int8")
    assert "explicit Q/DQ" in int8_io.why_not(n, None)
    n.params["int8"]["narrow_weights"] = True
    assert int8_io.why_not(n, None) is None
    n.weights["kernel"] = np.ones((8, 3, 3, 3), np.float32)
    assert "multiples of 4" in int8_io.why_not(n, None)
    n.weights["kernel"] = np.ones((8, 8, 3, 3), np.float32)
    n.params["post_ops"] = [{"op": "activation", "type": "SIGMOID"}]
    assert "epilogue" in int8_io.why_not(n, None)
    assert not int8_io.enabled(BuilderConfig())


@pytest.mark.parametrize("src", ["float32", "float16"])
def test_int8_reformats_quantize_and_dequantize_like_numerics(src):
    from native.cpu.kernels.reformat import Reformat
    from native.tactics import Op
    x = (np.array([0.05, 0.15, 0.25, -0.05, -0.35, 30.0, -30.0, 1.0], np.float32)).astype(src)
    q = Reformat().run(Op("Reformat", "r", {"from": src, "to": "int8", "scale": 0.1}), [x])[0]
    assert q.dtype == np.int8
    np.testing.assert_array_equal(q, numerics.quantize(x.astype(np.float32), np.float32(0.1)))
    assert q[5] == 127 and q[6] == -128
    back = Reformat().run(Op("Reformat", "r", {"from": "int8", "to": "float16", "scale": 0.1}), [q])[0]
    assert back.dtype == np.float16
    np.testing.assert_array_equal(back, (q.astype(np.float32) * np.float32(0.1)).astype(np.float16))


def test_probe_random_values_are_views_of_one_seeded_buffer_per_dtype():
    """Timing inputs cost no fresh draw per layer: one seeded buffer per dtype, grown to the largest size asked."""
    from backends.engine.builder.timed_choice import Probe
    p = object.__new__(Probe)      # (random() needs none of a probe's run)
    a = p.random((2, 3, 4), np.int8)
    b = p.random((4, 6), np.int8)
    assert a.shape == (2, 3, 4) and b.shape == (4, 6) and a.dtype == b.dtype == np.int8
    assert np.shares_memory(a, b) and a.min() >= -127 and a.max() <= 127
    big = p.random((10, 10), np.float16)
    assert big.dtype == np.float16 and abs(float(big.astype(np.float32).std()) - 1.0) < 0.3
    assert np.array_equal(p.random((5,), np.float16), big.reshape(-1)[:5])
    q = object.__new__(Probe)
    np.testing.assert_array_equal(q.random((2, 3, 4), np.int8), a)   # seeded: every build draws the same values


def _pooled_block(c_in=3, pool_stride=1):
    """x (c_in channels) -> conv0 3x3 (c_in->8) + ReLU -> max pool 3x3 -> conv1 3x3 (8->16) and a 1x1 shortcut
    (8->16) -> add -> ReLU -> conv3 1x1 (16->8): ResNet's stem, where two INT8 layers read the max pool's output
    (c_in = 3: conv0 stays float; 4: it writes int8 too)."""
    rng = np.random.default_rng(7)
    w = {f"w{i}": (rng.standard_normal(s) * 0.2).astype(np.float32)
         for i, s in ((0, (8, c_in, 3, 3)), (1, (16, 8, 3, 3)), (2, (16, 8, 1, 1)), (3, (8, 16, 1, 1)))}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["c0"], name="conv0", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
             helper.make_node("MaxPool", ["r0"], ["p0"], name="pool", kernel_shape=[3, 3],
                              strides=[pool_stride, pool_stride], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p0", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p0", "w2"], ["d1"], name="down"),
             helper.make_node("Add", ["c1", "d1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w3"], ["y"], name="conv3")]
    shape = (2, c_in, 12, 12)
    g = helper.make_graph(nodes, "pooled", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in w.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    batches = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    return model, batches, rng.standard_normal(shape).astype(np.float32)


def _io_build(model, batches, x, cache, flags=("int8",), **kw):
    """(y, the engine's layers) of an INT8 I/O build that takes every layer the rule allows."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.runners import EngineRunner
    config = BuilderConfig()
    config.prefer_nhwc = True
    config.precision_by_timing = False
    with EngineRunner(model, flags=flags, config=config, calibrator=Calibrator(batches, cache=cache), **kw) as r:
        return r.infer({"x": x})["y"], list(r.engine.graph.nodes)


def test_int8_io_max_pool_read_by_int8_layers_runs_int8(int8_io_on_cpu, monkeypatch, tmp_path):
    """A stride-1 max pool after a float layer, whose readers are all INT8 layers, runs on int8 tensors: the
    quantizing Reformat moves in front of it (quantize-then-max = max-then-quantize), so the output is
    bit-identical to the build that pools in float."""
    from backends.engine.builder.passes import int8_io
    model, batches, x = _pooled_block()
    cache = tmp_path / "calib.cache"

    def build():
        y, nodes = _io_build(model, batches, x, cache)
        pool = next(n for n in nodes if n.kind.startswith("Pooling"))
        quant = [n for n in nodes if n.kind == "Reformat" and n.params["to"] == "int8"]
        assert len(quant) == 1, [(n.name, n.params) for n in nodes if n.kind == "Reformat"]
        return y, nodes, pool, quant[0]
    y, nodes, pool, quant = build()
    assert (pool.kind, pool.precision, pool.tactic_name) == ("PoolingNHWC", "int8", "int8-max-nhwc")
    assert quant.outputs == pool.inputs, (quant.outputs, pool.inputs)
    readers = [n for n in nodes if n.tactic_name == NumpyInt8IO.name and n.inputs[0] == pool.outputs[0]]
    assert len(readers) == 2 and all(n.params["int8"]["input_scale"] == pool.params["int8"]["scale"]
                                     for n in readers), [n.name for n in readers]
    monkeypatch.setattr(int8_io, "int8_pools", lambda *a: [])     # the pool in float, its output quantized
    y_float_pool, _, pool_f, quant_f = build()
    assert pool_f.precision != "int8" and quant_f.inputs == pool_f.outputs
    assert y.dtype == np.float32 and np.array_equal(y, y_float_pool), np.abs(y - y_float_pool).max()


def test_int8_io_max_pool_between_int8_layers_reads_their_int8_output(int8_io_on_cpu, tmp_path):
    """conv0 (INT8, int8 out) -> max pool -> two INT8 layers: the pool reads conv0's int8 tensor and writes int8 at
    its scale, and its readers take that scale: no Reformat between them; a pool that shrinks a float tensor stays
    float (quantizing its input would move more bytes)."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    model, batches, x = _pooled_block(c_in=4, pool_stride=2)
    cache = tmp_path / "calib.cache"
    y, nodes = _io_build(model, batches, x, cache)
    pool = next(n for n in nodes if n.kind.startswith("Pooling"))
    conv0 = next(n for n in nodes if "Convolution" in n.kind and n.name.startswith("conv0"))
    reformats = [(n.params["from"], n.params["to"]) for n in nodes if n.kind == "Reformat"]
    assert (pool.precision, pool.tactic_name) == ("int8", "int8-max-nhwc") and pool.inputs == conv0.outputs
    s_p = conv0.params["int8"]["output_scale"]
    readers = [n for n in nodes if n.inputs and n.inputs[0] == pool.outputs[0]]
    assert len(readers) == 2 and all(n.params["int8"]["input_scale"] == s_p == pool.params["int8"]["scale"]
                                     for n in readers)
    assert reformats == [("float32", "int8")], reformats      # x in; y is conv3's float32 output
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu:
        want = cpu.infer({"x": x})["y"]
    cos = float(np.dot(y.ravel(), want.ravel()) / (np.linalg.norm(y) * np.linalg.norm(want)))
    assert cos > 0.995, cos
    # the same pool after a float layer (3 input channels) halves each side: it stays float
    model, batches, x = _pooled_block(c_in=3, pool_stride=2)
    _, nodes = _io_build(model, batches, x, tmp_path / "calib2.cache")
    pool = next(n for n in nodes if n.kind.startswith("Pooling"))
    assert pool.precision == "float32", pool.precision


def _stem_block(h=20, w=18):
    """ResNet's stem at a small size: conv1 7x7/2 pad 3 over RGB (3 -> 8) + ReLU -> max pool 3x3/2 -> conv2 3x3
    (8 -> 8) + ReLU -> conv3 1x1 (8 -> 4)."""
    rng = np.random.default_rng(11)
    w_ = {"w1": (rng.standard_normal((8, 3, 7, 7)) * 0.1).astype(np.float32),
          "b1": (rng.standard_normal(8) * 0.1).astype(np.float32),
          "w2": (rng.standard_normal((8, 8, 3, 3)) * 0.15).astype(np.float32),
          "w3": (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[3, 3, 3, 3], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Conv", ["r2", "w3"], ["y"], name="conv3")]
    shape = (2, 3, h, w)
    g = helper.make_graph(nodes, "stem", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in w_.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    batches = [{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(3)]
    return model, batches, rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("h,w", [(20, 18), (17, 23)])
def test_int8_io_stem_packs_its_rgb_input_and_runs_int8(int8_io_on_cpu, tmp_path, h, w):
    """A 7x7/2 convolution over 3 channels runs INT8 as the stem: one Reformat quantizes and packs the NCHW input
    (space-to-depth, its horizontal taps folded into channels: 64 of them), the layer is a 4x1 convolution over
    them, the max pool after it reads its int8 output, and the engine agrees with the CPU's INT8 engine."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    from native.shared import int8_stem
    model, batches, x = _stem_block(h, w)
    cache = tmp_path / "calib.cache"
    y, nodes = _io_build(model, batches, x, cache)
    conv1 = next(n for n in nodes if "Convolution" in n.kind and n.name.startswith("conv1"))
    pack = [n for n in nodes if n.kind == "Reformat" and n.params.get("pack")]
    pool = next(n for n in nodes if n.kind.startswith("Pooling"))
    assert len(pack) == 1 and pack[0].inputs == ["x"] and pack[0].params["pack"]["layout"] == "nchw", \
        [(n.name, n.inputs) for n in nodes]
    want_pack = int8_stem.plan([7, 7], [2, 2], [3, 3], [3, 3], [1, 1], 1, 3, h, w)
    assert {k: v for k, v in pack[0].params["pack"].items() if k != "layout"} == want_pack
    assert conv1.tactic_name == NumpyInt8IO.name and conv1.inputs[0] == pack[0].outputs[0]
    assert conv1.params["kernel_spatial"] == [4, 1] and conv1.params["strides"] == [1, 1]
    assert np.shape(conv1.weights["kernel_hwio"]) == (4 * 64, 8)
    assert "INT8 stem" in conv1.meta["int8_note"], conv1.meta["int8_note"]
    assert (pool.precision, pool.inputs) == ("int8", conv1.outputs), (pool.precision, pool.inputs)
    assert [(n.params["from"], n.params["to"]) for n in nodes if n.kind == "Reformat"] == [("float32", "int8")]
    # the packed layer's int8 output is the 7x7/2 layer's, bit for bit (same accumulators, same channel scales)
    from native.cpu.kernels.reformat import Reformat
    from native.tactics import Op
    w1 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "w1"))
    b1 = numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == "b1"))
    packed_op = Op("ConvolutionNHWC", "c", conv1.params, {"kernel_hwio": conv1.weights["kernel_hwio"], "bias": b1},
                   precision="int8", format="nhwc")
    plain_op = Op("ConvolutionNHWC", "c", dict(conv1.params, kernel_spatial=[7, 7], strides=[2, 2],
                                               pre_padding=[3, 3], post_padding=[3, 3]),
                  {"kernel_hwio": w1.transpose(2, 3, 1, 0).reshape(-1, 8), "bias": b1}, precision="int8",
                  format="nhwc")
    x_packed = Reformat().run(Op("Reformat", "q", pack[0].params, {}), [x])[0]
    x_nhwc = Reformat().run(Op("Reformat", "q", {k: v for k, v in pack[0].params.items() if k != "pack"}, {}),
                            [x.transpose(0, 2, 3, 1)])[0]
    y_packed = NumpyInt8IO().run(packed_op, [x_packed, None, None])[0]
    y_plain = NumpyInt8IO().run(plain_op, [x_nhwc, None, None])[0]
    assert y_packed.dtype == np.int8 and y_packed.shape == y_plain.shape and np.array_equal(y_packed, y_plain)
    # and the engine as a whole agrees with the CPU's INT8 engine (the pool's output keeps conv1's scale: TensorRT's
    # scale propagation, so the two engines' grids differ after it)
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu:
        want = cpu.infer({"x": x})["y"]
    assert y.shape == want.shape
    cos = float(np.dot(y.ravel(), want.ravel()) / (np.linalg.norm(y) * np.linalg.norm(want)))
    assert cos > 0.995, cos


@pytest.mark.parametrize("k,pad,c,h,w", [(7, 3, 3, 16, 16), (7, 3, 3, 15, 13), (3, 1, 3, 10, 9), (5, 2, 1, 11, 12),
                                         (3, 0, 2, 9, 9), (4, 1, 3, 12, 12), (7, (3, 2), 4, 14, 15)])
def test_int8_stem_packing_keeps_every_product(k, pad, c, h, w):
    """The packed convolution's exact integer accumulators equal the original stride-2 convolution's, at even and
    odd sizes, asymmetric padding and every packed channel count (16, 32, 64)."""
    from native.shared import int8_stem
    rng = np.random.default_rng(k * 100 + c)
    pre = [pad, pad] if isinstance(pad, int) else list(pad)
    post = pre[::-1]
    pk = int8_stem.plan([k, k], [2, 2], pre, post, [1, 1], 1, c, h, w)
    assert pk is not None and pk["cp"] in (16, 32, 64)
    x = rng.integers(-128, 128, (2, h, w, c))
    wt = rng.integers(-127, 128, (5, k, k, c))
    want = _conv_nhwc_int(x, wt, {"strides": [2, 2], "pre_padding": pre, "post_padding": post})
    packed = int8_stem.pack_values(x, pk)
    assert packed.shape == int8_stem.packed_shape(pk, 2)
    kernel = int8_stem.packed_kernel(wt.transpose(1, 2, 3, 0).reshape(-1, 5), [k, k], pre, pk)
    got = _conv_nhwc_int(packed, kernel.reshape(pk["k2"][0], 1, pk["cp"], 5).transpose(3, 0, 1, 2),
                         int8_stem.packed_conv_params({}, pk))
    np.testing.assert_array_equal(got, want)
    assert int8_stem.plan([k, k], [1, 1], pre, post, [1, 1], 1, c, h, w) is None       # stride 1: nothing to fold
    assert int8_stem.plan([k, k], [2, 2], pre, post, [1, 1], 1, 16, h, w) is None      # aligned channels
