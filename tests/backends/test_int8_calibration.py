"""Implicit INT8: calibrators, the calibration cache, dynamic ranges, the builder's INT8 layers against a numpy
reference that uses the same scales."""
import struct

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from backends.engine import (BuilderFlag, Calibrator, IInt8EntropyCalibrator2, IInt8MinMaxCalibrator,
                             build_plan_from_onnx, parse_onnx)
from backends.engine.builder import Builder, BuilderConfig
from backends.engine.calibration import read_cache, write_cache
from backends.engine.calibration.histogram import TensorStats, threshold
from backends.engine.runtime import Runtime
from backends.runners.engine import EngineRunner
from native.errors import BuildError, CalibrationError


def conv_model(bias2=0.0):
    """x[2,3,7,9] -> conv(5, 3x3, pad 1) + relu -> conv(4, 1x1, groups 1) -> y (an FP32 network output)."""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal(5).astype(np.float32)
    w2 = rng.standard_normal((4, 5, 1, 1)).astype(np.float32)
    b2 = np.full(4, bias2, np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["y"], name="conv2")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 7, 9])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4, 7, 9])],
                          [numpy_helper.from_array(v, k) for k, v in
                           {"w1": w1, "b1": b1, "w2": w2, "b2": b2}.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), (w1, b1, w2, b2)


def batches(n=3, seed=1):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((2, 3, 7, 9)).astype(np.float32)} for _ in range(n)]


# numpy reference of the two INT8 layers -----------------------------------------------------------------------

def q(x, s, lo=-128):
    return np.clip(np.rint(np.asarray(x, np.float32) / np.float32(s)), lo, 127).astype(np.int64)


def ref_int8_conv(x, w, b, s_x, pad):
    m = w.shape[0]
    s_w = (np.abs(w).reshape(m, -1).max(1) / np.float32(127)).astype(np.float32)
    wq = np.clip(np.rint(w / s_w[:, None, None, None]), -127, 127).astype(np.int64)
    xq = np.pad(q(x, s_x), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    ho, wo = xq.shape[2] - kh + 1, xq.shape[3] - kw + 1
    acc = np.zeros((x.shape[0], m, ho, wo), np.int64)
    for i in range(kh):
        for j in range(kw):
            acc += np.einsum("nchw,mc->nmhw", xq[:, :, i:i + ho, j:j + wo], wq[:, :, i, j])
    acc += np.rint(b.astype(np.float64) / (np.float64(np.float32(s_x)) * s_w)).astype(np.int64)[None, :, None, None]
    return acc, (np.float32(s_x) * s_w).astype(np.float32)


def reference(x, params, scales):
    w1, b1, w2, b2 = params
    acc, comb = ref_int8_conv(x, w1, b1, scales["x"], 1)
    s_r = np.float32(scales["r1"])
    r1 = np.maximum(q(acc.astype(np.float32) * (comb / s_r)[None, :, None, None], 1), 0).astype(np.float32) * s_r
    acc2, comb2 = ref_int8_conv(r1, w2, b2, scales["r1"], 0)
    return acc2.astype(np.float32) * comb2[None, :, None, None]        # last layer: FP32 output (smoothing)


def test_implicit_int8_engine_matches_numpy_reference_with_the_cached_scales(tmp_path):
    model, params = conv_model()
    cache = tmp_path / "calib.cache"
    cal = Calibrator(batches(), algorithm="minmax", cache=cache)
    with EngineRunner(model, flags=("int8",), calibrator=cal) as r:
        x = batches(1, seed=9)[0]["x"]
        y = r.infer({"x": x})["y"]
        layers = [n for n in r.engine.graph.nodes if n.kind == "Convolution"]
        assert [n.precision for n in layers] == ["int8", "int8"]
        assert layers[1].params["int8"]["output_scale"] is None          # BLD-54: FP32 output before the output
    algo, scales = read_cache(cache.read_bytes())
    assert algo == "MinMaxCalibration" and {"x", "c1", "r1", "y"} <= set(scales)
    amax_x = max(float(np.abs(b["x"]).max()) for b in batches())
    assert scales["x"] == float(np.float32(amax_x) / np.float32(127))
    np.testing.assert_array_equal(y, reference(x, params, scales))


def test_cache_reads_back_bit_identically_and_second_build_does_not_calibrate(tmp_path):
    model, _ = conv_model()
    cache = tmp_path / "calib.cache"
    first = Calibrator(batches(), algorithm="entropy2", cache=cache)
    plan1 = build_plan_from_onnx(model, flags=("int8",), config=_config(first))
    data = cache.read_bytes()
    assert first.batches_read == 3 and data.splitlines()[0] == b"TRT-8601-EntropyCalibration2"
    algo, scales = read_cache(data)
    assert write_cache(scales, "entropy2") == data                     # bit-identical round trip
    for line in data.decode().splitlines()[1:]:
        name, hexbits = line.rsplit(": ", 1)
        assert struct.pack(">f", scales[name]).hex() == hexbits

    def no_batches():
        raise AssertionError("calibration ran although the cache exists")
        yield

    second = Calibrator(no_batches(), algorithm="entropy2", cache=cache)
    config = _config(second)
    plan2 = build_plan_from_onnx(model, flags=("int8",), config=config)
    assert second.batches_read == 0 and config.calibration_report["source"] == "cache"
    assert cache.read_bytes() == data
    x = {"x": batches(1, seed=5)[0]["x"]}
    out = [Runtime().deserialize_engine(p).create_execution_context().execute(x)["y"] for p in (plan1, plan2)]
    np.testing.assert_array_equal(out[0], out[1])


def _config(cal):
    c = BuilderConfig()
    c.int8_calibrator = cal
    return c


def test_corrupt_cache_names_the_line(tmp_path):
    cache = tmp_path / "bad.cache"
    cache.write_bytes(b"TRT-8601-EntropyCalibration2\nx: 3c010204\nc1 3c0102zz\n")
    model, _ = conv_model()
    with pytest.raises(CalibrationError, match=r"line 3.*c1 3c0102zz"):
        build_plan_from_onnx(model, flags=("int8",), config=_config(Calibrator(batches(), cache=cache)))
    with pytest.raises(CalibrationError, match="line 1"):
        read_cache(b"x: 3c010204\n")


def test_user_calibrator_protocol_and_tensorrt_names():
    """A TensorRT-style subclass: get_batch(names) returns arrays in `names` order, None when exhausted."""
    class MyCalibrator(IInt8MinMaxCalibrator):
        def __init__(self):
            self.left = batches(2)
            self.written = None

        def get_batch_size(self):
            return 2

        def get_batch(self, names):
            assert names == ["x"]
            return [self.left.pop()["x"]] if self.left else None

        def write_calibration_cache(self, cache):
            self.written = cache

    cal = MyCalibrator()
    build_plan_from_onnx(conv_model()[0], flags=("int8",), config=_config(cal))
    assert cal.written.startswith(b"TRT-8601-MinMaxCalibration\n") and not cal.left
    assert issubclass(IInt8EntropyCalibrator2, object)


def test_dynamic_range_overrides_calibration_and_no_scales_is_an_error():
    model, _ = conv_model()
    network, _ = parse_onnx(model)
    with pytest.raises(BuildError, match="could not find scales for tensor x"):
        config = BuilderConfig()
        config.set_flag(BuilderFlag.INT8)
        Builder().build_graph(network, config)
    for name, amax in (("x", 4.0), ("c1", 8.0), ("r1", 6.0), ("y", 10.0)):
        network.tensors[name].set_dynamic_range(-amax, amax)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.INT8)
    config.int8_calibrator = Calibrator(batches(), algorithm="minmax")   # the ranges win
    graph = Builder().build_graph(network, config)
    convs = [n for n in graph.nodes if n.kind == "Convolution"]
    assert convs[0].params["int8"]["input_scale"] == float(np.float32(4.0) / np.float32(127))
    assert convs[0].params["int8"]["output_scale"] == float(np.float32(6.0) / np.float32(127))
    assert convs[0].params["int8"]["weight_rounding"] == "half_up"   # weights it scales itself: ties toward +inf


def test_uniformly_zero_warning():
    import io
    from native.logger import G_LOGGER
    model, _ = conv_model()
    zero = [{"x": np.zeros((2, 3, 7, 9), np.float32)}]
    stream = io.StringIO()
    old = G_LOGGER.stream, G_LOGGER.min_severity
    G_LOGGER.stream, G_LOGGER.min_severity = stream, G_LOGGER.WARNING
    try:
        build_plan_from_onnx(model, flags=("int8",), config=_config(Calibrator(zero, algorithm="minmax")))
    finally:
        G_LOGGER.stream, G_LOGGER.min_severity = old
    assert "Tensor x is uniformly zero" in stream.getvalue()


def test_calibration_batch_outside_profile_is_an_error():
    model, _ = conv_model()
    bad = [{"x": np.zeros((2, 3, 7, 8), np.float32)}]
    with pytest.raises(CalibrationError, match=r"input 'x' has shape \[2, 3, 7, 8\]"):
        build_plan_from_onnx(model, flags=("int8",), config=_config(Calibrator(bad)))


def test_thresholds_per_algorithm():
    rng = np.random.default_rng(0)
    x = rng.laplace(0, 1, 200_000).astype(np.float32)
    x[:3] = [60, -55, 58]                                 # rare outliers
    s = TensorStats()
    s.observe_range(x)
    s.observe_histogram(x)
    assert threshold(s, "minmax") == pytest.approx(60.0)
    ent = threshold(s, "entropy2")
    assert 5.0 < ent < 30.0                              # KL clips the outliers, keeps the bulk
    pct = threshold(s, "percentile", 99.99)
    assert abs(pct - np.percentile(np.abs(x), 99.99)) <= 60.0 / 2048 * 1.01


def test_entropy_calibrates_after_fusion_entropy2_before(tmp_path):
    """Entropy (v1) sees the fused network: conv1 + relu1 is one layer, so its pre-ReLU tensor c1 has no scale;
    Entropy2 calibrates the network as parsed and scales c1 too."""
    model, _ = conv_model()
    for algo, has_c1 in (("entropy", False), ("entropy2", True)):
        cache = tmp_path / f"{algo}.cache"
        build_plan_from_onnx(model, flags=("int8",), config=_config(Calibrator(batches(), algo, cache=cache)))
        name, scales = read_cache(cache.read_bytes())
        assert ("c1" in scales) == has_c1 and {"x", "r1"} <= set(scales), (algo, sorted(scales))


def test_calibration_profile_for_dynamic_shapes():
    from backends.engine.builder import OptimizationProfile
    model, _ = conv_model()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    network, _ = parse_onnx(model)
    config = BuilderConfig()
    config.set_flag(BuilderFlag.INT8)
    run_profile = OptimizationProfile()
    run_profile.set_shape("x", (1, 3, 7, 9), (4, 3, 7, 9), (8, 3, 7, 9))
    config.add_optimization_profile(run_profile)
    cal_profile = OptimizationProfile()
    cal_profile.set_shape("x", (2, 3, 7, 9), (2, 3, 7, 9), (2, 3, 7, 9))
    assert config.set_calibration_profile(cal_profile) and config.get_calibration_profile() is cal_profile
    config.int8_calibrator = Calibrator(batches())                 # batch 2: fits the calibration profile
    Builder().build_graph(network, config)
    config.int8_calibrator = Calibrator([{"x": np.zeros((4, 3, 7, 9), np.float32)}])
    with pytest.raises(CalibrationError, match="outside the optimization profile"):
        Builder().build_graph(network, config)


def test_int8_gemm_with_bias_survives_the_plan_file():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((10, 37)).astype(np.float32)
    b = rng.standard_normal(10).astype(np.float32)
    g = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 37])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 10])],
                          [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    data = [{"x": rng.standard_normal((3, 37)).astype(np.float32)} for _ in range(2)]
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(data, "minmax")) as r:
        x = data[0]["x"]
        y = r.infer({"x": x})["y"]
        assert [n.precision for n in r.engine.graph.nodes if n.kind == "MatrixMultiply"] == ["int8"]
    s_x = np.float32(np.abs(np.concatenate([d["x"] for d in data])).max()) / np.float32(127)
    s_w = (np.abs(w).max(1) / np.float32(127)).astype(np.float32)
    acc = q(x, s_x) @ np.clip(np.rint(w / s_w[:, None]), -127, 127).astype(np.int64).T
    acc += np.rint(b.astype(np.float64) / (np.float64(s_x) * s_w)).astype(np.int64)
    np.testing.assert_array_equal(y, acc.astype(np.float32) * (s_x * s_w))


def test_int8_rounding_is_a_device_parameter():
    from backends.engine.builder.passes.int8 import int8_rounding
    assert int8_rounding("cpu") == "half_even" and int8_rounding("dla") == "half_away"


def test_resnet_downsample_block_runs_every_convolution_in_int8():
    """The CPU merges a ResNet projection shortcut into the block's last convolution (fusion_shortcut.py); a merged
    GEMM reads two tensors of different scales and has no INT8 kernel, so an INT8 build keeps them apart and both
    run INT8, as on the GPU and in TensorRT."""
    from tools.make_resnet50 import resnet50
    model = resnet50(size=16, blocks=(1, 1))
    net, _ = parse_onnx(model)
    for t in net.tensors.values():
        t.set_dynamic_range(-4.0, 4.0)
    cfg = BuilderConfig()
    cfg.set_flag(BuilderFlag.INT8)
    g = Builder().build_graph(net, cfg)
    convs = [n for n in g.nodes if n.kind.startswith("Convolution")]
    assert len(convs) == sum(n.op_type == "Conv" for n in model.graph.node) == 9
    assert {n.precision for n in convs} == {"int8"}, {n.name: n.meta.get("int8_note") for n in convs}
    assert not any(n.params.get("side") for n in convs)


class _Held:
    """A tensor that is no numpy array (as a device's are): size, shape, dtype and __array__ only."""

    def __init__(self, a):
        self.a, self.size, self.shape, self.dtype = a, a.size, a.shape, a.dtype

    def __array__(self, dtype=None, copy=None):
        return self.a


def test_calibration_statistics_of_device_tensors_equal_the_host_numbers():
    """Tensors that are not numpy arrays (a GPU's) are counted through the device's abs_max / abs_histogram, with
    the numbers TensorStats' numpy path gives (the CUDA device reduces them on the GPU: test_cuda_int8_io.py)."""
    from backends.engine.calibration.histogram import TensorStats
    from native.device import get_device
    rng = np.random.default_rng(7)
    batches = [(rng.standard_normal(5000) * s).astype(np.float32) for s in (1.0, 3.0)]
    batches[0][:300] = 0.0
    host, held = TensorStats(), TensorStats()
    dev = get_device("cpu")
    for b in batches:
        host.observe_range(b)
        held.observe_range(_Held(b), dev)
    for b in batches:
        host.observe_histogram(b)
        held.observe_histogram(_Held(b), dev)
    assert held.amax == host.amax == float(np.abs(np.concatenate(batches)).max())
    np.testing.assert_array_equal(held.hist, host.hist)
    assert held.nonzero == host.nonzero == 10000 - 300 and held.count == host.count == 10000


def test_kl_threshold_is_the_per_bin_loops_answer_to_the_bit():
    """kl_threshold_bins finds the minimum for every i at once and decides among the i near it with the per-i
    arithmetic (_kl_at): the same answer as trying every i = 128..2048 in turn, ties (a tensor of few distinct
    values) and heavy tails included."""
    from backends.engine.calibration.histogram import BINS, LEVELS, _kl_at, kl_threshold_bins

    def every_i(hist):
        hist = np.asarray(hist, np.float64)
        tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])
        best_i, best = BINS, np.inf
        for i in range(LEVELS, BINS + 1):
            kl = _kl_at(hist, tail, i)
            if kl is not None and kl < best:
                best_i, best = i, kl
        return best_i

    def hist_of(a):
        a = np.abs(a)
        a = a[a != 0]
        idx = np.minimum((a * np.float32(BINS / a.max())).astype(np.int64), BINS - 1)
        return np.bincount(idx, minlength=BINS)
    rng = np.random.default_rng(3)
    hists = [hist_of(np.maximum(rng.standard_normal(200000), 0)),      # a ReLU output
             hist_of(rng.standard_t(2, 100000)),                         # heavy tails
             hist_of(rng.integers(0, 7, 50000).astype(float)),          # 6 values: exact ties between i
             hist_of(np.concatenate([rng.standard_normal(80000), [400.0]])),   # one outlier
             np.ones(BINS, np.int64)]
    got = [kl_threshold_bins(h) for h in hists]
    assert got == [every_i(h) for h in hists]
    assert got[3] < BINS // 4 and got[4] == BINS     # the outlier clipped; a flat histogram kept whole
