"""Explicit quantization: Q/DQ import (opsets 10..21, per tensor / per axis), zero-point rule, propagation through
commuting layers, fusion into INT8 layers; results against ONNX Runtime's run of the same QDQ model.

The reference is the QDQ model as ONNX defines it: ONNX Runtime with graph optimizations off runs each
QuantizeLinear, DequantizeLinear and float operator by itself. Its default session fuses Q/DQ groups into integer
kernels whose results depend on the release and the CPU (on an AVX2-only x86-64 CPU, 1.30.0's and 1.32.0's fused
QLinearConv of qdq_model differs from the definition by dozens of steps), so no test asserts them except where a
release was verified (ORT_X86_VERIFIED)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.runners.engine import EngineRunner
from native.errors import BuildError

# onnxruntime releases on which --qdq-emulation onnxruntime-x86 was checked bit for bit (x86-64, AVX2, one thread);
# docs/PRECISION.md and --qdq-emulation's help name the same releases
ORT_X86_VERIFIED = ("1.30.0", "1.32.0")


def onnx_defined(ort, model, feeds, optimized=False, threads=None):
    """ONNX Runtime's outputs for `model`: with `optimized` False, every node by itself (no Q/DQ fusion), i.e. the
    ONNX definition; True: its default session (fused integer kernels, the x86-64 S8->U8 rewrite)."""
    opts = ort.SessionOptions()
    if not optimized:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if threads:
        opts.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def qdq_model(opset=13, zp_value=0, zp_type=np.int8, per_channel=True):
    """x -> Q/DQ -> conv1 (DQ'd int8 weights) -> Q/DQ -> maxpool -> Q/DQ -> relu -> Q/DQ -> conv2 -> y."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((7, 6, 3, 3)).astype(np.float32)
    w2 = rng.standard_normal((5, 7, 1, 1)).astype(np.float32)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qdq(x, scale, tag, zp=0, ztype=np.int8):
        s = const(f"{tag}_s", np.float32(scale))
        z = const(f"{tag}_z", np.asarray(zp, ztype))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, z], [f"{tag}_dq"], name=f"{tag}_DQ"))
        return f"{tag}_dq"

    def weight(w, tag):
        if per_channel:
            s = (np.abs(w).reshape(w.shape[0], -1).max(1) / 127).astype(np.float32)
            wq = np.clip(np.rint(w / s[:, None, None, None]), -127, 127).astype(np.int8)
            attrs = {"axis": 0}
        else:
            s = np.float32(np.abs(w).max() / 127)
            wq = np.clip(np.rint(w / s), -127, 127).astype(np.int8)
            attrs = {}
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_wq", wq), const(f"{tag}_ws", s),
                                                           const(f"{tag}_wz", np.zeros(np.shape(s), np.int8))],
                                      [f"{tag}_w"], name=f"{tag}_wDQ", **attrs))
        return f"{tag}_w"

    x = qdq("x", 0.04, "in", zp_value, zp_type)
    nodes.append(helper.make_node("Conv", [x, weight(w1, "c1"), const("b1", rng.standard_normal(7).astype(np.float32))],
                                  ["c1"], name="conv1", pads=[1, 1, 1, 1]))
    c1 = qdq("c1", 0.2, "c1o")
    nodes.append(helper.make_node("MaxPool", [c1], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]))
    p = qdq("p", 0.2, "po")
    nodes.append(helper.make_node("Relu", [p], ["r"], name="relu"))
    r = qdq("r", 0.2, "ro")
    nodes.append(helper.make_node("Conv", [r, weight(w2, "c2")], ["y"], name="conv2"))
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6, 9, 10])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=7 if opset < 21 else 10)


@pytest.mark.parametrize("opset,per_channel", [(11, False), (13, True), (21, True)])
def test_qdq_fused_into_int8_layers_matches_onnxruntime(opset, per_channel):
    ort = pytest.importorskip("onnxruntime")
    model = qdq_model(opset, per_channel=per_channel)
    x = np.random.default_rng(1).standard_normal((2, 6, 9, 10)).astype(np.float32) * 2
    want = onnx_defined(ort, model, {"x": x})[0]
    with EngineRunner(model, flags=("int8",)) as r:
        got = r.infer({"x": x})["y"]
        nodes = r.engine.graph.nodes
        assert [n.precision for n in nodes if n.kind == "Convolution"] == ["int8", "int8"]
        # every Q/DQ pair is gone: fused into the convs, or an identity after max-pool / ReLU (same scale)
        assert not [n for n in nodes if n.kind in ("Quantize", "Dequantize")]
        conv1 = next(n for n in nodes if n.kind == "Convolution")
        assert conv1.params["int8"]["output_scale"] == pytest.approx(0.2)
        assert conv1.params["int8"]["weight_rounding"] == "half_even"   # the model's own int8 weights
    cos = float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos >= 0.9999
    # the requantized conv1 output may differ from ONNX Runtime's by one step at rounding ties, nowhere more:
    # then conv2 differs by at most 0.2 * max|w2| in a few places
    assert np.abs(got - want).max() <= 0.2 * 3.5


@pytest.mark.parametrize("zp,ztype,match", [(3, np.int8, "zero point 0"), (128, np.uint8, "uint8")])
def test_qdq_zero_point_must_be_zero_int8(zp, ztype, match):
    model = qdq_model(13, zp_value=zp, zp_type=ztype)
    with pytest.raises(BuildError, match=match) as e:
        with EngineRunner(model, flags=("int8",)):
            pass
    assert "in_Q" in str(e.value)


def test_qdq_without_int8_flag_runs_as_onnx_defines():
    """No --int8: Q/DQ layers are their ONNX float definitions (fake quantization), even with a zero point."""
    ort = pytest.importorskip("onnxruntime")
    model = qdq_model(13, zp_value=3)
    x = np.random.default_rng(2).standard_normal((2, 6, 9, 10)).astype(np.float32)
    want = onnx_defined(ort, model, {"x": x})[0]
    with EngineRunner(model) as r:
        np.testing.assert_allclose(r.infer({"x": x})["y"], want, rtol=1e-5, atol=1e-5)


def test_qdq_opset10_per_tensor_builds_int8():
    """Opset 10's QuantizeLinear/DequantizeLinear (no axis attribute): per-tensor scales only. (ONNX Runtime itself
    rejects this model's bias rewrite at opset 10, so the check is against the opset-13 twin.)"""
    x = np.random.default_rng(4).standard_normal((2, 6, 9, 10)).astype(np.float32)
    outs = []
    for opset in (10, 13):
        with EngineRunner(qdq_model(opset, per_channel=False), flags=("int8",)) as r:
            outs.append(r.infer({"x": x})["y"])
            assert sum(n.precision == "int8" for n in r.engine.graph.nodes) == 2
    np.testing.assert_array_equal(outs[0], outs[1])


def _concat_model(s2):
    """x1, x2 -> Q/DQ (0.05, s2) -> Concat -> Reshape (identity shape) -> Q/DQ(0.05) -> conv (int8 weights) -> y."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 4, 1, 1)).astype(np.float32)
    sw = (np.abs(w).reshape(3, -1).max(1) / 127).astype(np.float32)
    inits = [numpy_helper.from_array(v, k) for k, v in {
        "s1": np.float32(0.05), "s2": np.float32(s2), "z": np.int8(0), "shape": np.array([2, 4, 5, 5], np.int64),
        "wq": np.clip(np.rint(w / sw[:, None, None, None]), -127, 127).astype(np.int8), "ws": sw,
        "wz": np.zeros(3, np.int8)}.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x1", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"]),
             helper.make_node("QuantizeLinear", ["x2", "s2", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["d2"]),
             helper.make_node("Concat", ["d1", "d2"], ["cat"], axis=1),
             helper.make_node("Reshape", ["cat", "shape"], ["rs"]),
             helper.make_node("QuantizeLinear", ["rs", "s1", "z"], ["q3"], name="requant"),
             helper.make_node("DequantizeLinear", ["q3", "s1", "z"], ["d3"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
             helper.make_node("Conv", ["d3", "w"], ["y"], name="conv"),
             helper.make_node("Relu", ["d3"], ["y2"], name="relu")]     # a second, float reader of d3
    g = helper.make_graph(nodes, "cat", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 2, 5, 5])
                                         for n in ("x1", "x2")],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "y2")], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("s2,pair_kept", [(0.05, False), (0.07, True)])
def test_qdq_propagates_through_concat_and_reshape_of_equal_scales(s2, pair_kept):
    ort = pytest.importorskip("onnxruntime")
    model = _concat_model(s2)
    rng = np.random.default_rng(6)
    feeds = {n: rng.standard_normal((2, 2, 5, 5)).astype(np.float32) for n in ("x1", "x2")}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with EngineRunner(model, flags=("int8",)) as r:
        out = r.infer(feeds)
        sources = {s for n in r.engine.graph.nodes for s in n.source_nodes}
        assert [n.precision for n in r.engine.graph.nodes if n.kind == "Convolution"] == ["int8"]
        # equal scales: the Q/DQ after concat + reshape re-quantizes INT8 values with their own scale: dropped
        assert ("requant" in sources) == pair_kept
    np.testing.assert_allclose(out["y"], want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out["y2"], want[1], rtol=1e-6, atol=1e-7)


def test_qdq_global_average_pool_runs_in_int8_like_onnxruntime():
    """DQ -> GlobalAveragePool -> Q/DQ: one INT8 pooling layer (integer sum, one requantization), equal to ONNX
    Runtime's QLinearGlobalAveragePool bit for bit."""
    ort = pytest.importorskip("onnxruntime")
    inits = [numpy_helper.from_array(v, k) for k, v in
             {"s1": np.float32(0.05), "s2": np.float32(0.0031), "z": np.int8(0)}.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"]),
             helper.make_node("GlobalAveragePool", ["d1"], ["p"], name="gap"),
             helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"])]
    g = helper.make_graph(nodes, "gap", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7, 5, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = (np.random.default_rng(8).standard_normal((3, 7, 5, 6)) * 0.4).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with EngineRunner(model, flags=("int8",)) as r:
        got = r.infer({"x": x})["y"]
        assert [n.precision for n in r.engine.graph.nodes if n.kind == "Pooling"] == ["int8"]
    q = np.clip(np.rint(x / np.float32(0.05)), -128, 127).astype(np.int64).sum(axis=(2, 3), keepdims=True)
    ref = np.clip(np.rint(q.astype(np.float32) * (np.float32(0.05) / (np.float32(0.0031) * np.float32(30)))),
                  -128, 127).astype(np.float32) * np.float32(0.0031)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_allclose(got, want, atol=0.0031 * 1.01)    # ONNX Runtime: at most a tie apart


def test_qdq_window_average_pool_keeps_the_taps_in_order_tactic():
    """DQ -> AveragePool(3x3) -> Q: the pool runs in FP32 between Q/DQ, where its summation order decides which side
    of a quantization tie an output lands on; the builder keeps it on strided-taps (ONNX Runtime's order), not on a
    faster tactic that sums in another order."""
    inits = [numpy_helper.from_array(v, k) for k, v in
             {"s1": np.float32(0.05), "s2": np.float32(0.02), "z": np.int8(0)}.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z"], ["q1"]),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z"], ["d1"]),
             helper.make_node("AveragePool", ["d1"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["p", "s2", "z"], ["q2"]),
             helper.make_node("DequantizeLinear", ["q2", "s2", "z"], ["y"])]
    g = helper.make_graph(nodes, "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 40, 40])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    x = (np.random.default_rng(9).standard_normal((2, 16, 40, 40)) * 0.4).astype(np.float32)
    with EngineRunner(model, flags=("int8",)) as r:
        r.infer({"x": x})
        pools = [(n.tactic_name, n.precision) for n in r.engine.graph.nodes if n.kind == "Pooling"]
    assert pools == [("strided-taps", "float32")], pools


def fan_out_model():
    """x -> Q/DQ -> conv1 -> Q/DQ read twice (relu, add) -> Q/DQ -> conv2 (1x1) -> Q/DQ -> y, and relu's Q/DQ as a
    second output. conv1's output pair feeds two layers, so ONNX Runtime's x86-64 CPU EP keeps conv1 in FP32 (MLAS);
    conv2 becomes its QLinearConv."""
    rng = np.random.default_rng(3)
    inits, nodes = [], []

    def const(name, value):
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def qdq(x, scale, tag):
        s, z = const(f"{tag}_s", np.float32(scale)), const(f"{tag}_z", np.int8(0))
        nodes.append(helper.make_node("QuantizeLinear", [x, s, z], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", s, z], [f"{tag}_dq"], name=f"{tag}_DQ"))
        return f"{tag}_dq"

    def weight(shape, tag):
        wq = rng.integers(-127, 128, shape).astype(np.int8)
        s = rng.uniform(0.0005, 0.002, shape[0]).astype(np.float32)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_wq", wq), const(f"{tag}_ws", s)],
                                      [f"{tag}_w"], name=f"{tag}_wDQ", axis=0))
        return f"{tag}_w"

    def bias(n, s_x, tag):   # int32 bias of scale s_x * s_w, as quantize_static writes it
        s_w = numpy_helper.to_array(next(i for i in inits if i.name == f"{tag}_ws"))
        q = rng.integers(-3000, 3000, n).astype(np.int32)
        nodes.append(helper.make_node("DequantizeLinear", [const(f"{tag}_bq", q),
                                                           const(f"{tag}_bs", (np.float32(s_x) * s_w))],
                                      [f"{tag}_b"], name=f"{tag}_bDQ", axis=0))
        return f"{tag}_b"

    x = qdq("x", 0.0173, "in")
    w1 = weight((32, 32, 3, 3), "c1")
    nodes.append(helper.make_node("Conv", [x, w1, bias(32, 0.0173, "c1")], ["c1"], name="conv1", pads=[1, 1, 1, 1]))
    c1 = qdq("c1", 0.0137, "c1o")
    nodes.append(helper.make_node("Relu", [c1], ["r"], name="relu"))
    r = qdq("r", 0.0137, "ro")
    nodes.append(helper.make_node("Add", [c1, r], ["a"], name="add"))
    a = qdq("a", 0.08, "ao")
    w2 = weight((7, 32, 1, 1), "c2")
    nodes.append(helper.make_node("Conv", [a, w2, bias(7, 0.08, "c2")], ["c2"], name="conv2"))
    y = qdq("c2", 0.04, "yo")
    g = helper.make_graph(nodes, "fan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 48, 48])],
                          [helper.make_tensor_value_info(r, TensorProto.FLOAT, None),     # conv1's values >= 0
                           helper.make_tensor_value_info(y, TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)


def test_qdq_emulation_onnxruntime_x86_keeps_its_fp32_groups_and_matches_it_bit_for_bit():
    """conv1 (a Q/DQ group ONNX Runtime's x86-64 CPU EP keeps in FP32, summed by MLAS) equals its default session bit
    for bit on the releases verified (ORT_X86_VERIFIED), at most one quantization step apart in 0.1% of values on
    others (MLAS may change its order). conv2 (fused into ONNX Runtime's QLinearConv) is checked against the ONNX
    definition: that kernel's u8s8 arithmetic depends on the CPU (AVX2 vs VNNI) and is not emulated."""
    ort = pytest.importorskip("onnxruntime")
    from backends.engine import BuilderConfig, BuilderFlag
    model = fan_out_model()
    xs = [np.random.default_rng(s).standard_normal((1, 32, 48, 48)).astype(np.float32) * 1.5 for s in range(6)]
    want = [onnx_defined(ort, model, {"x": x}, optimized=True, threads=1) for x in xs]
    defined = [onnx_defined(ort, model, {"x": x}) for x in xs]
    with EngineRunner(model, flags=("int8",)) as r:    # default: TensorRT's fusion, both convs INT8
        assert [n.precision for n in r.engine.graph.nodes if n.kind == "Convolution"] == ["int8", "int8"]
        default = [[r.infer({"x": x})[k] for k in ("ro_dq", "yo_dq")] for x in xs]
    config = BuilderConfig()
    config.set_flag(BuilderFlag.INT8)
    config.qdq_emulation = "onnxruntime-x86"
    with EngineRunner(model, config=config) as r:
        convs = [n for n in r.engine.graph.nodes if n.kind == "Convolution"]
        assert [n.precision for n in convs] == ["float32", "int8"]
        assert convs[0].tactic_name == "mlas-order" and convs[0].params["emulate"] == "onnxruntime-mlas"
        got = [[r.infer({"x": x})[k] for k in ("ro_dq", "yo_dq")] for x in xs]
    step0, step1 = np.float32(0.0137), np.float32(0.04)
    fp32_group = np.concatenate([np.abs(g[0] - w[0]).ravel() for g, w in zip(got, want)])
    if ort.__version__ in ORT_X86_VERIFIED:
        assert not fp32_group.any(), f"{int((fp32_group > 0).sum())} values differ from onnxruntime {ort.__version__}"
        # the default (exact INT8 conv1) differs from ONNX Runtime's FP32 conv1 by a rounding step here and there:
        # what the emulation is for
        assert any(not np.array_equal(d[0], w[0]) for d, w in zip(default, want))
    else:
        assert fp32_group.max() <= step0 * 1.01 and (fp32_group > 0).mean() <= 1e-3
    int8_group = np.concatenate([np.abs(g[1] - d[1]).ravel() for g, d in zip(got, defined)])
    assert int8_group.max() <= step1 * 1.01 and (int8_group > 0).mean() <= 1e-4, (int8_group.max(),
                                                                                  (int8_group > 0).sum())


def test_qdq_emulation_unknown_value_is_an_error():
    from backends.engine import BuilderConfig
    from native.errors import UsageError
    with pytest.raises(UsageError, match="onnxruntime-x86"):
        BuilderConfig().qdq_emulation = "onnxruntime-arm"


def _qdq_linear(form):
    """A Q/DQ nn.Linear as exporters write it: x -> Q/DQ -> Gemm(transB=1, bias) (2-D, torch's export) or
    MatMul + Add (3-D input) with DQ'd per-channel int8 weights -> Q/DQ -> relu -> y."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((8, 16)).astype(np.float32)          # [out, in]
    sw = (np.abs(w).max(1) / 127).astype(np.float32)
    wq = np.clip(np.rint(w / sw[:, None]), -127, 127).astype(np.int8)
    vals = {"xs": np.float32(0.03), "ys": np.float32(0.05), "z": np.int8(0), "b": rng.standard_normal(8).astype(
        np.float32), "ws": sw, "wz": np.zeros(8, np.int8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "z"], ["xd"])]
    if form == "gemm":
        vals["wq"], shape = wq, [4, 16]
        nodes += [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=0),
                  helper.make_node("Gemm", ["xd", "w", "b"], ["g"], transB=1, name="fc")]
    else:
        vals["wq"], shape = np.ascontiguousarray(wq.T), [2, 3, 16]     # MatMul's [in, out]
        nodes += [helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["w"], axis=1),
                  helper.make_node("MatMul", ["xd", "w"], ["mm"], name="fc"),
                  helper.make_node("Add", ["mm", "b"], ["g"], name="fc_bias")]
    nodes += [helper.make_node("QuantizeLinear", ["g", "ys", "z"], ["gq"]),
              helper.make_node("DequantizeLinear", ["gq", "ys", "z"], ["gd"]),
              helper.make_node("Relu", ["gd"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [numpy_helper.from_array(v, k) for k, v in vals.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), shape


@pytest.mark.parametrize("form", ["gemm", "matmul_add"])
def test_qdq_linear_with_bias_runs_in_int8(form, caplog):
    """A Q/DQ nn.Linear WITH a bias is one INT8 layer (bias in the int32 accumulator, requantized output), as
    TensorRT runs it; it used to stay FP32 ("0 layers fused into INT8 kernels"). Against ONNX Runtime's run of the
    Q/DQ definition: at most one output step apart (a requantization tie)."""
    ort = pytest.importorskip("onnxruntime")
    model, shape = _qdq_linear(form)
    x = (np.random.default_rng(12).standard_normal(shape) * 1.5).astype(np.float32)
    want = onnx_defined(ort, model, {"x": x})[0]
    with EngineRunner(model, flags=("int8",)) as r:
        got = r.infer({"x": x})["y"]
        fc = [n for n in r.engine.graph.nodes if n.kind == "MatrixMultiply"]
        assert [n.precision for n in fc] == ["int8"]
        assert fc[0].params["int8"]["output_scale"] == pytest.approx(0.05)
        assert "bias_q" in fc[0].weights
        assert not [n for n in r.engine.graph.nodes if n.kind in ("Quantize", "Dequantize")]
    assert np.abs(got - want).max() <= 0.05 * 1.01
    assert np.mean(got == want) > 0.95
