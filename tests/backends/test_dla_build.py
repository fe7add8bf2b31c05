"""DLA builds: placement with and without GPU fallback, loadables and reformats, memory pools, standalone loadables,
DLA FP16 numerics against a numpy model of them."""
import numpy as np
import pytest

from backends.engine.builder.builder import Builder
from backends.engine.builder.config import BuilderFlag, DeviceType, EngineCapability, MemoryPoolType
from backends.engine.builder.device_types import TensorFormat
from backends.engine.dtypes import DataType
from backends.engine.plan import deserialize_plan
from backends.engine.runtime import Runtime
from native.dla.formats import pack, unpack
from native.errors import BuildError
from native.numerics import round_fp16

RNG = np.random.default_rng(0)
W1 = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3
W2 = RNG.standard_normal((8, 8, 3, 3)).astype(np.float32) * 0.2


def small_net(extra=None, fmt=TensorFormat.CHW16):
    """conv -> relu -> [extra unary] -> conv, input [1, 3, 8, 8]."""
    b = Builder()
    net = b.create_network()
    x = net.add_input("x", DataType.FLOAT, (1, 3, 8, 8))
    x.allowed_formats = 1 << int(fmt)
    c1 = net.add_convolution(x, 8, (3, 3), W1, pre_padding=[1, 1], post_padding=[1, 1])
    c1.name = "conv1"
    r = net.add_activation(c1.outputs[0], "RELU")
    r.name = "relu1"
    t = r.outputs[0]
    if extra:
        u = net.add_unary(t, extra)
        u.name = "odd_one"
        t = u.outputs[0]
    c2 = net.add_convolution(t, 8, (3, 3), W2, pre_padding=[1, 1], post_padding=[1, 1])
    c2.name = "conv2"
    y = c2.outputs[0]
    y.name = "y"
    y.allowed_formats = 1 << int(fmt)
    net.mark_output(y)
    cfg = b.create_builder_config()
    cfg.set_flag(BuilderFlag.FP16)
    cfg.default_device_type = DeviceType.DLA
    return b, net, cfg


def conv_ref(x, w):
    h, wd = x.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((1, w.shape[0], h, wd), np.float64)
    for i in range(3):
        for j in range(3):
            out += np.einsum("nchw,mc->nmhw", xp[:, :, i:i + h, j:j + wd], w[:, :, i, j])
    return out


def dla_model(x):
    """Our DLA FP16 model in numpy: FP16 inputs and weights, each layer's result rounded to FP16 once."""
    h = round_fp16(np.maximum(conv_ref(round_fp16(x), round_fp16(W1)), 0).astype(np.float32))
    return round_fp16(conv_ref(h, round_fp16(W2)).astype(np.float32))


def run(plan, feeds):
    ctx = Runtime().deserialize_engine(plan).create_execution_context()
    return ctx.execute(feeds)


def test_all_on_dla_one_loadable_matches_numpy_dla_model():
    b, net, cfg = small_net()
    plan = b.build_serialized_network(net, cfg)
    _, g = deserialize_plan(plan)
    assert [n.kind for n in g.nodes] == ["DlaReformat", "DlaLoadable", "DlaReformat"]
    assert g.nodes[0].params["format"] == "chw16" and g.nodes[1].params["batch"] == 1
    x = RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    y = run(plan, {"x": x})["y"]
    ref = dla_model(x)
    # the conv accumulation order differs from numpy's: allow one FP16 ulp
    np.testing.assert_allclose(y, ref, rtol=2 ** -10, atol=1e-6)
    assert not np.allclose(y, conv_ref(np.maximum(conv_ref(x, W1), 0), W2), rtol=1e-6, atol=1e-7)


def test_unsupported_layer_without_fallback_names_layer_and_rule():
    b, net, cfg = small_net(extra="EXP")
    with pytest.raises(BuildError, match=r"layer 'odd_one' \(Unary.*\[unary.op\] unary EXP"):
        b.build_serialized_network(net, cfg)


def test_fallback_splits_into_two_loadables_with_reformats():
    b, net, cfg = small_net(extra="EXP")
    cfg.set_flag(BuilderFlag.GPU_FALLBACK)
    plan = b.build_serialized_network(net, cfg)
    _, g = deserialize_plan(plan)
    kinds = [n.kind for n in g.nodes]
    assert kinds.count("DlaLoadable") == 2 and "Unary" in kinds
    assert kinds == ["DlaReformat", "DlaLoadable", "DlaReformat", "Unary", "DlaReformat", "DlaLoadable", "DlaReformat"]
    x = RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    h = np.exp(round_fp16(np.maximum(conv_ref(round_fp16(x), round_fp16(W1)), 0).astype(np.float32)))
    ref = round_fp16(conv_ref(round_fp16(h), round_fp16(W2)).astype(np.float32))
    np.testing.assert_allclose(run(plan, {"x": x})["y"], ref, rtol=2 ** -10, atol=1e-6)


def test_explicit_gpu_layer_and_device_type_api():
    b, net, cfg = small_net()
    relu = next(layer for layer in net.layers if layer.name == "relu1")
    assert cfg.can_run_on_dla(relu) and cfg.get_device_type(relu) is DeviceType.DLA
    assert not cfg.is_device_type_set(relu)
    cfg.set_device_type(relu, DeviceType.GPU)
    assert cfg.is_device_type_set(relu) and cfg.get_device_type(relu) is DeviceType.GPU
    cfg.set_flag(BuilderFlag.GPU_FALLBACK)
    _, g = deserialize_plan(b.build_serialized_network(net, cfg))
    assert [n.kind for n in g.nodes].count("DlaLoadable") == 2
    cfg.reset_device_type(relu)
    assert not cfg.is_device_type_set(relu) and cfg.get_device_type(relu) is DeviceType.DLA
    assert b.get_max_dla_batch_size() == 4096 and b.num_dla_cores == 2
    cfg.clear_flag(BuilderFlag.FP16)
    assert not cfg.can_run_on_dla(relu) and "FP16 and INT8 only" in cfg.dla_reason(relu)


def test_standalone_loadable_builds_and_executes_in_dla_formats():
    b, net, cfg = small_net()
    cfg.engine_capability = EngineCapability.DLA_STANDALONE
    cfg.set_flag(BuilderFlag.DIRECT_IO)
    loadable = b.build_serialized_network(net, cfg)
    _, g = deserialize_plan(loadable)
    assert [n.kind for n in g.nodes] == ["DlaLoadable"]
    assert g.inputs[0].shape == [1, 1, 8, 8, 16] and g.inputs[0].dtype == "float16"
    x = RNG.uniform(-1, 1, (1, 3, 8, 8)).astype(np.float32)
    y = run(loadable, {"x": pack(x, "chw16")})["y"]
    assert y.shape == (1, 1, 8, 8, 16) and y.dtype == np.float16
    np.testing.assert_allclose(unpack(y, "chw16", (1, 8, 8, 8)), dla_model(x), rtol=2 ** -10, atol=1e-6)


def test_standalone_rejects_unsupported_layer_reformat_and_missing_direct_io():
    b, net, cfg = small_net(extra="SQRT")
    cfg.engine_capability = EngineCapability.DLA_STANDALONE
    cfg.set_flag(BuilderFlag.DIRECT_IO)
    cfg.set_flag(BuilderFlag.GPU_FALLBACK)   # standalone ignores fallback: everything must be on the DLA
    with pytest.raises(BuildError, match=r"layer 'odd_one'.*unary SQRT"):
        b.build_serialized_network(net, cfg)
    b, net, cfg = small_net(fmt=TensorFormat.LINEAR)   # linear FP32 I/O would need a reformat
    cfg.engine_capability = EngineCapability.DLA_STANDALONE
    cfg.set_flag(BuilderFlag.DIRECT_IO)
    with pytest.raises(BuildError, match=r"tensor 'x' allows no DLA format"):
        b.build_serialized_network(net, cfg)
    b, net, cfg = small_net()
    cfg.engine_capability = EngineCapability.DLA_STANDALONE
    with pytest.raises(BuildError, match="DIRECT_IO"):
        b.build_serialized_network(net, cfg)


def test_memory_pool_too_small_names_the_pool_and_invalid_sizes_fail():
    b, net, cfg = small_net()
    # weights (216 + 576) x 2 bytes and one 1x8x8x8 kCHW16 intermediate (2 KiB) fit in 4 KiB pools
    cfg.set_memory_pool_limit(MemoryPoolType.DLA_GLOBAL_DRAM, 4096)
    cfg.set_memory_pool_limit(MemoryPoolType.DLA_LOCAL_DRAM, 4096)
    b.build_serialized_network(net, cfg)
    conv2 = next(layer for layer in net.layers if layer.name == "conv2")
    conv2.weights["kernel"] = np.tile(W2, (4, 1, 1, 1))     # 32 output maps: 2304 x 2 bytes of weights
    conv2.params["num_output_maps"] = 32
    with pytest.raises(BuildError, match=r"global DRAM pool \(DLA_GLOBAL_DRAM\) is too small: needs 5040 bytes, "
                                         r"limit 4096"):
        b.build_serialized_network(net, cfg)
    cfg.set_memory_pool_limit(MemoryPoolType.DLA_GLOBAL_DRAM, 8192)
    b.build_serialized_network(net, cfg)
    cfg.set_memory_pool_limit(MemoryPoolType.DLA_MANAGED_SRAM, 5000)
    with pytest.raises(BuildError, match=r"managed SRAM \(DLA_MANAGED_SRAM\) limit 5000 bytes is invalid"):
        b.build_serialized_network(net, cfg)


def test_local_dram_too_small_falls_back_with_the_pool_named():
    b, net, cfg = small_net()
    cfg.set_memory_pool_limit(MemoryPoolType.DLA_LOCAL_DRAM, 4096)  # at 32x32 the intermediate takes 32 KiB
    cfg.set_flag(BuilderFlag.GPU_FALLBACK)
    from backends.engine.builder.passes.dla import plan_dla
    from backends.engine.builder.lower import lower
    g = lower(net)
    shapes = {"x": [1, 3, 32, 32], g.nodes[0].outputs[0]: [1, 8, 32, 32], g.nodes[1].outputs[0]: [1, 8, 32, 32],
              "y": [1, 8, 32, 32]}
    plan = plan_dla(g, cfg, shapes)
    assert plan.loadables == [] and plan.failed_pools[0][1] is MemoryPoolType.DLA_LOCAL_DRAM
    assert all(e["rule"] == "pool.dla_local_dram" for e in plan.layers)
    assert "needs 65536 bytes of local DRAM" in plan.layers[0]["reason"]


def int8_net(x_range=127.0, y_range=254.0):
    """One INT8 convolution on the DLA: input scale 1, weight scales 1 (each output channel reaches +-127), output
    scale 2, so requantizing the exact accumulator halves it and every odd accumulator is a rounding tie."""
    rng = np.random.default_rng(3)
    w = rng.integers(-3, 4, (8, 4, 3, 3)).astype(np.float32)   # small taps: accumulators stay below saturation
    w[:, 0, 0, 0] = 127.0
    b = Builder()
    net = b.create_network()
    x = net.add_input("x", DataType.FLOAT, (1, 4, 6, 6))
    x.dynamic_range = (-x_range, x_range)
    c = net.add_convolution(x, 8, (3, 3), w, pre_padding=[1, 1], post_padding=[1, 1])
    c.name = "qconv"
    y = c.outputs[0]
    y.name = "y"
    y.dynamic_range = (-y_range, y_range)
    net.mark_output(y)
    cfg = b.create_builder_config()
    cfg.set_flag(BuilderFlag.INT8)
    cfg.default_device_type = DeviceType.DLA
    return b, net, cfg, w


def test_int8_dla_rounds_ties_away_from_zero_bit_for_bit():
    from native.numerics import dequantize, requantize
    b, net, cfg, w = int8_net()
    plan = b.build_serialized_network(net, cfg)
    _, g = deserialize_plan(plan)
    assert [n.kind for n in g.nodes] == ["DlaReformat", "DlaLoadable", "DlaReformat"]
    assert g.nodes[0].params["format"] == "chw32" and g.nodes[0].params["dtype"] == "int8"
    x = np.random.default_rng(4).integers(-1, 2, (1, 4, 6, 6)).astype(np.float32)
    y = run(plan, {"x": x})["y"]
    acc = np.rint(conv_ref(x, w)).astype(np.int32)        # exact: |acc| < 2**24
    dla = dequantize(requantize(acc, 0.5, rounding="half_away"), 2.0)
    gpu = dequantize(requantize(acc, 0.5, rounding="half_even"), 2.0)
    np.testing.assert_array_equal(y, dla)
    ties = (acc % 2 != 0) & (np.abs(acc) < 254)
    differ = dla != gpu
    assert differ.sum() > 10 and np.array_equal(differ, ties & ((np.abs(acc) // 2) % 2 == 0))
    assert np.array_equal(y != gpu, differ)                 # the engine differs from ties-to-even exactly there


def test_int8_dla_needs_dynamic_ranges():
    b, net, cfg, _ = int8_net()
    net.inputs[0].dynamic_range = None
    with pytest.raises(BuildError, match=r"scales for tensor x|needs dynamic ranges for its I/O tensors \['x'\]"):
        b.build_serialized_network(net, cfg)


def test_int8_dla_engine_vs_int8_gpu_rule_engine_differ_exactly_at_rounding_ties():
    """The same INT8 1x1 convolution built for the DLA and for the host (GPU rules): inputs with exact .5 ties on the
    INT8 grid round away from zero on the DLA and to even on the host; each engine matches a numpy reference of its
    own rule bit for bit, and the two differ exactly where those references do."""
    from native.numerics import quantize
    w = np.zeros((8, 5, 1, 1), np.float32)
    w[:, 4, 0, 0] = 127.0                   # per-channel weight scale 1 on every channel (input channel 4 is 0)
    w[:, 0, 0, 0] = 100.0
    w[:, 1:4, 0, 0] = np.random.default_rng(5).integers(-3, 4, (8, 3))   # |accumulator| <= 109: no saturation
    x = np.random.default_rng(6).integers(-1, 2, (1, 5, 6, 6)).astype(np.float32)
    x[0, 4] = 0.0
    x[0, 0] = np.random.default_rng(7).choice([-0.5, 0.0, 0.5, 1.0], (6, 6))   # ties on channel 0

    def build(device_type):
        b = Builder()
        net = b.create_network()
        t = net.add_input("x", DataType.FLOAT, (1, 5, 6, 6))
        t.dynamic_range = (-127.0, 127.0)                          # input scale 1
        c = net.add_convolution(t, 8, (1, 1), w)
        y = c.outputs[0]
        y.name = "y"
        y.dynamic_range = (-127.0, 127.0)                          # output scale 1: no rounding at the output
        net.mark_output(y)
        cfg = b.create_builder_config()
        cfg.set_flag(BuilderFlag.INT8)
        cfg.default_device_type = device_type
        return b.build_serialized_network(net, cfg)

    def reference(rounding):
        q = quantize(x, 1.0, rounding=rounding).astype(np.float64)
        return np.clip(np.einsum("nchw,mc->nmhw", q, w[:, :, 0, 0]), -128, 127).astype(np.float32)

    dla_plan, gpu_plan = build(DeviceType.DLA), build(DeviceType.GPU)
    assert deserialize_plan(gpu_plan)[1].nodes[0].precision == "int8"         # the host conv really runs INT8
    assert "DlaLoadable" in [n.kind for n in deserialize_plan(dla_plan)[1].nodes]
    y_dla, y_gpu = run(dla_plan, {"x": x})["y"], run(gpu_plan, {"x": x})["y"]
    away, even = reference("half_away"), reference("half_even")
    np.testing.assert_array_equal(y_dla, away)
    np.testing.assert_array_equal(y_gpu, even)
    differ = away != even
    assert differ.any() and np.array_equal(y_dla != y_gpu, differ)
    assert np.array_equal(differ[0].any(axis=0), np.abs(x[0, 0]) == 0.5)   # +-0.5: even gives 0, away +-1


def test_explicitly_quantized_network_is_rejected_by_the_dla():
    from onnx import TensorProto, helper, numpy_helper

    from backends.engine.build import parse_onnx
    w = np.round(RNG.uniform(-100, 100, (8, 3, 3, 3))).astype(np.float32)
    inits = [numpy_helper.from_array(np.float32(0.02), "s"), numpy_helper.from_array(np.int8(0), "z"),
             numpy_helper.from_array(w, "w")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("Conv", ["xd", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    network, _ = parse_onnx(model.SerializeToString())
    b = Builder()
    cfg = b.create_builder_config()
    cfg.set_flag(BuilderFlag.INT8)
    cfg.set_flag(BuilderFlag.FP16)
    cfg.default_device_type = DeviceType.DLA
    q = next(layer for layer in network.layers if layer.kind == "Quantize")
    assert not cfg.can_run_on_dla(q) and cfg.dla_reason(q).startswith("[general.qdq]")
    with pytest.raises(BuildError, match=r"layer 'conv'.*\[general.qdq\] the network is explicitly quantized"):
        b.build_serialized_network(network, cfg)


@pytest.mark.parametrize("precision", [["--fp16"], ["--int8", "--fp16"]])
def test_dla_device_engine_hands_back_float32_outputs(tmp_path, capsys, precision):
    """`--device dla` with reduced precision: the network's float32 output is the DLA's FP16 / INT8 output converted
    at the boundary, so the Reformat to float32 the builder adds there runs on the DLA device (it failed tactic
    selection: 'no dla implementation for layer Reformat ... float16->float32')."""
    from debugkit.cli.main import main
    from tests.tactics.models import conv_chain, save
    model = save(conv_chain([3, 8, 8], hw=6), tmp_path)
    rc = main(["run", model, "--engine", "--onnxrt", "--device", "dla", *precision])
    out = capsys.readouterr()
    assert rc == 0 and "PASSED" in out.out, out.err[-2000:]


def test_dla_device_int8_without_fp16_says_to_enable_fp16(tmp_path, capsys):
    """INT8 alone on the DLA device: the layers INT8 does not cover would run float32, which the DLA does not
    compute; the build fails with exit code 2, naming the layer and what to enable."""
    from debugkit.cli.main import main
    from tests.tactics.models import conv_chain, save
    model = save(conv_chain([3, 8, 8], hw=6), tmp_path)
    rc = main(["run", model, "--engine", "--onnxrt", "--device", "dla", "--int8"])
    err = capsys.readouterr().err
    assert rc == 2 and "on device 'dla'" in err and "enable --fp16" in err, err[-2000:]
