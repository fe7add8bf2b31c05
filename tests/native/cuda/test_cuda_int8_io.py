"""INT8 on int8 NHWC tensors on the GPU: cuDNN's INT8 convolution graphs (native/cuda/tactics/cudnn_int8.py) with
the epilogue fused and int8 outputs, the int8 Reformat kernels, and a timed INT8 build that stores int8 tensors
between its convolutions (passes/int8_io.py). cuDNN's epilogue is not bit-equal to the CPU's INT8 kernels: the
checks allow one step of the int8 grid where float32 rounding puts a value on the other side of a tie, and
count how rarely. Skipped without a GPU."""
import numpy as np
import pytest

from tests.backends.test_int8_io import NumpyInt8IO, _pooled_block, _resnet_block, _stem_block

pytestmark = pytest.mark.cuda


def _op(c, m, k, stride, residual, relu, out, rng):
    from native.tactics import Op
    post = ([{"op": "add", "input": 3}] if residual else []) + \
        ([{"op": "activation", "type": "RELU"}] if relu else [])
    p8 = {"input_scale": 0.05, "output_scale": 0.08 if out == "int8" else None, "rounding": "half_even",
          "narrow_weights": True, "weight_rounding": "half_up", "io": {"input": "int8", "output": out}}
    if residual == "int8":
        p8["residual_scales"] = {"3": 0.06}
    pad = k // 2
    params = {"kernel_spatial": [k, k], "num_output_maps": m, "strides": [stride, stride], "pre_padding": [pad, pad],
              "post_padding": [pad, pad], "dilations": [1, 1], "post_ops": post, "int8": p8, "groups": 1}
    w = {"kernel_hwio": (rng.standard_normal((k * k * c, m)) * 0.1).astype(np.float32),
         "bias": rng.standard_normal(m).astype(np.float32)}
    return Op("ConvolutionNHWC", "conv", params, w, precision="int8", format="nhwc")


@pytest.mark.parametrize("c,m,k,stride,residual,relu,out", [
    (16, 32, 3, 1, None, True, "int8"), (32, 16, 1, 1, None, False, "int8"), (8, 32, 3, 2, None, True, "int8"),
    (32, 32, 1, 1, "int8", True, "int8"), (32, 32, 1, 1, "float32", True, "int8"),
    (16, 32, 3, 1, None, True, "float32"), (32, 32, 1, 1, "int8", False, "float32")])
def test_cudnn_int8_conv_computes_the_fused_epilogue(c, m, k, stride, residual, relu, out):
    from native.cuda.array import GpuArray
    from native.tactics import tactics_for
    rng = np.random.default_rng(3)
    op = _op(c, m, k, stride, residual, relu, out, rng)
    n, h = 2, 9
    x = rng.integers(-128, 128, (n, h, h, c)).astype(np.int8)
    oh = (h + 2 * (k // 2) - k) // stride + 1
    r = None
    if residual == "int8":
        r = rng.integers(-128, 128, (n, oh, oh, m)).astype(np.int8)
    elif residual:
        r = rng.standard_normal((n, oh, oh, m)).astype(np.float32) * 2
    inputs = [x, None, None] + ([r] if r is not None else [])
    want = NumpyInt8IO().run(op, inputs)[0]
    tactic = next(t for t in tactics_for("ConvolutionNHWC", "cuda") if t.name == "cudnn-int8-plan-0")
    from native.tactics import LayerContext
    ctx = LayerContext.of([GpuArray.from_host(a) if a is not None else None for a in inputs])
    assert tactic.supports(op, ctx) is None, tactic.supports(op, ctx)
    got = tactic.run(op, [GpuArray.from_host(a) if a is not None else None for a in inputs])[0].get()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
    if out == "int8":
        d = np.abs(got.astype(np.int32) - want.astype(np.int32))
        assert d.max() <= 1 and np.mean(d == 0) >= 0.99, (d.max(), np.mean(d == 0))
    else:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))


@pytest.mark.parametrize("size", [1000, 1003, 8 * 4099])   # 8 a thread, one a thread (not a multiple of 8)
@pytest.mark.parametrize("src", ["float32", "float16"])
def test_int8_reformat_kernels_equal_the_cpu(src, size):
    from native.cpu.kernels.reformat import Reformat
    from native.cuda.array import GpuArray
    from native.cuda.tactics.int8 import GpuInt8Reformat
    from native.tactics import Op
    x = (np.random.default_rng(4).standard_normal(size) * 5).astype(src)
    x[:6] = [0.015, -0.015, 0.045, 6e4, -6e4, 3.81]   # ties (x / 0.03 = 0.5, 1.5: to even), saturation both ways
    to8 = Op("Reformat", "q", {"from": src, "to": "int8", "scale": 0.03, "rounding": "half_even"})
    back = Op("Reformat", "d", {"from": "int8", "to": src, "scale": 0.03})
    q = GpuInt8Reformat().run(to8, [GpuArray.from_host(x)])[0]
    np.testing.assert_array_equal(q.get(), Reformat().run(to8, [x])[0])
    np.testing.assert_array_equal(GpuInt8Reformat().run(back, [q])[0].get(), Reformat().run(back, [q.get()])[0])


def test_timed_int8_build_on_gpu_keeps_int8_tensors_between_convolutions(tmp_path):
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    model, batches, x = _resnet_block()
    cache = tmp_path / "calib.cache"
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu, \
            EngineRunner(model, flags=("int8",), device="cuda", calibrator=Calibrator(batches, cache=cache)) as gpu:
        want, got = cpu.infer({"x": x})["y"], gpu.infer({"x": x})["y"]
        nodes = gpu.engine.graph.nodes
        io = [n for n in nodes if n.tactic_name and n.tactic_name.startswith("cudnn-int8-plan-")]
        int8_out = [n for n in io if (n.meta.get("output_types") or [None])[0] == "int8"]
    assert len(io) == 3, [(n.name, n.kind, n.precision, n.tactic_name) for n in nodes]
    assert len(int8_out) == 2
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.999, cos


@pytest.mark.parametrize("flags", [("int8",), ("int8", "fp16")])
def test_int8_engine_reformats_run_on_the_gpu_and_replay_in_a_cuda_graph(flags):
    """Every Reformat at an int8 chain's edge runs the GPU kernel, not a host layer (the int8 Reformat tactic was
    once registered for the CPU: ResNet-50's INT8 + FP16 engine downloaded every edge tensor, and `bench
    --use-cuda-graph` failed capturing it), and the engine replays from a captured graph with the same outputs."""
    from backends.engine import Calibrator
    from backends.engine.builder.config import BuilderConfig
    from backends.runners import EngineRunner
    model, batches, x = _resnet_block()
    config = BuilderConfig()
    config.prefer_nhwc = True
    config.precision_by_timing = False   # INT8 on every layer the rule allows: int8 chains whatever timing says
    with EngineRunner(model, flags=flags, device="cuda", config=config, calibrator=Calibrator(batches)) as gpu:
        nodes = gpu.engine.graph.nodes
        reformats = [(n.name, n.tactic_name) for n in nodes if n.kind == "Reformat"
                     and "int8" in (n.params.get("from"), n.params.get("to"))]
        host = [(n.name, n.tactic_name) for n in nodes if (n.tactic_name or "").startswith("host:")]
        plain = [gpu.context.execute({"x": v})["y"] for v in (x, x[::-1].copy())]
        gpu.context.enable_cuda_graph()
        graphed = [gpu.context.execute({"x": v})["y"] for v in (x, x[::-1].copy(), x)]
    assert reformats and all(t == "int8-kernel" for _, t in reformats), reformats
    assert host == []
    for want, got in zip(plain + plain[:1], graphed):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_gpu_calibration_counts_every_tensor_on_the_device():
    """The calibration run on the GPU keeps its activations there: each tensor's |x| maximum and histogram are
    reduced by kernels and equal the host's numbers on the same values (before, tensors that were not numpy arrays
    were skipped, and a GPU calibration gave scales only to host layers' outputs)."""
    from backends.engine.calibration.histogram import BINS, TensorStats
    from native.cuda.array import GpuArray
    from native.device import get_device
    rng = np.random.default_rng(8)
    x = (rng.standard_normal(300000) * 2).astype(np.float32)
    x[:1000] = 0.0
    host, dev_stats, gpu = TensorStats(), TensorStats(), get_device("cuda")
    host.observe_range(x)
    dev_stats.observe_range(GpuArray.from_host(x), gpu)
    host.observe_histogram(x)
    dev_stats.observe_histogram(GpuArray.from_host(x), gpu)
    assert dev_stats.amax == host.amax
    assert dev_stats.hist.shape == (BINS,)
    np.testing.assert_array_equal(dev_stats.hist, host.hist)


def test_gpu_calibration_gives_every_conv_input_a_scale():
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    model, batches, x = _resnet_block()
    with EngineRunner(model, flags=("int8", "enable_tactic_heuristic"), device="cuda",
                      calibrator=Calibrator(batches)) as gpu:
        convs = [n for n in gpu.engine.graph.nodes if "Convolution" in n.kind]
        int8 = [n.name for n in convs if n.precision == "int8"]
    assert len(int8) == len(convs) == 4, [(n.name, n.precision, n.meta.get("int8_note")) for n in convs]


@pytest.mark.parametrize("c", [16, 64, 24])      # 16 channels a thread; 24: one element a thread
@pytest.mark.parametrize("window,stride,pad,relu", [(3, 2, 1, True), (3, 2, 1, False), (2, 2, 0, True),
                                                     (3, 1, 1, False)])
def test_int8_max_pool_kernel_equals_the_cpu(c, window, stride, pad, relu):
    from native.cpu.kernels.pooling_int8 import Int8MaxPoolNHWC
    from native.cuda.array import GpuArray
    from native.cuda.tactics.pooling import GpuInt8MaxPoolNHWC
    from native.tactics import LayerContext, Op
    rng = np.random.default_rng(c + window)
    params = {"type": "MAX", "window": [window, window], "strides": [stride, stride], "pre_padding": [pad, pad],
              "post_padding": [pad, pad], "post_ops": [{"op": "activation", "type": "RELU"}] if relu else []}
    op = Op("PoolingNHWC", "pool", params, {}, precision="int8", format="nhwc")
    x = rng.integers(-128, 128, (3, 11, 13, c)).astype(np.int8)
    x[0, :4, :4, :] = -128          # all-negative windows: the ReLU's zeros and the minimum value
    tactic = GpuInt8MaxPoolNHWC()
    assert tactic.supports(op, LayerContext([list(x.shape)], ["int8"])) is None
    got = tactic.run(op, [GpuArray.from_host(x)])[0].get()
    want = Int8MaxPoolNHWC().run(op, [x])[0]
    assert got.dtype == np.int8 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    np.testing.assert_array_equal(got, want)
    assert (want.min() == 0) == relu


@pytest.mark.parametrize("c_in,stride", [(3, 1), (4, 2)])
def test_fp16_int8_engine_runs_the_max_pool_in_int8(tmp_path, c_in, stride):
    """INT8 + FP16 on the GPU, a max pool read by two INT8 layers runs the INT8 max pool. After a float16 layer
    (3 input channels) the one quantizing Reformat reads that layer's float16 output itself, with no float32 copy
    in between (there was one when two layers read the quantized tensor); after an INT8 layer (4 input channels) it
    reads that layer's int8 output, with no Reformat on either side. Outputs stay close to the CPU's INT8 engine."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    from tests.backends.test_int8_io import _io_build
    model, batches, x = _pooled_block(c_in, stride)
    cache = tmp_path / "calib.cache"
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu:
        want = cpu.infer({"x": x})["y"]
    got, nodes = _io_build(model, batches, x, cache, flags=("int8", "fp16"), device="cuda")
    pool = next(n for n in nodes if n.kind.startswith("Pooling"))
    reformats = [(n.params["from"], n.params["to"]) for n in nodes if n.kind == "Reformat"]
    assert (pool.precision, pool.tactic_name) == ("int8", "int8-max-kernel"), (pool.precision, pool.tactic_name)
    src = [n for n in nodes if pool.inputs[0] in n.outputs][0]
    if c_in == 3:
        assert (src.kind, src.params["from"], src.params["to"]) == ("Reformat", "float16", "int8"), src.name
        assert ("float16", "float32") not in reformats[:-1], reformats
    else:
        assert src.kind == "ConvolutionNHWC" and src.params["int8"]["io"]["output"] == "int8", src.name
        assert [r for r in reformats if "int8" in r] == [("float16", "int8")], reformats
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.99, cos


@pytest.mark.parametrize("one_pass", [True, False])
@pytest.mark.parametrize("src,layout", [("float32", "nchw"), ("float16", "nhwc"), ("float32", "nhwc")])
@pytest.mark.parametrize("k,pad,c,h,w", [(7, 3, 3, 30, 28), (7, 3, 3, 29, 31), (3, 1, 3, 18, 17), (5, 2, 1, 13, 12),
                                         (1, 0, 12, 9, 10)])
def test_int8_stem_pack_kernel_equals_the_cpu(src, layout, k, pad, c, h, w, one_pass, monkeypatch):
    """int8.cu's stem pack quantizes and packs like the CPU Reformat (ties included), from float32 / float16 NCHW
    or NHWC images, at odd sizes and 16 / 32 / 64 packed channels: in one pass (stem_pack_q) and, where a packed
    row would not fit in shared memory, in two (quantize, then stem_pack_i8)."""
    from native.cpu.kernels.reformat import Reformat
    from native.cuda.array import GpuArray
    from native.cuda.tactics import int8 as gpu_int8
    from native.cuda.tactics.int8 import GpuInt8Reformat
    from native.shared import int8_stem
    from native.tactics import Op
    if not one_pass:
        monkeypatch.setattr(gpu_int8, "_STEM_SMEM", 0)
    rng = np.random.default_rng(k + c + h)
    pk = int8_stem.plan([k, k], [2, 2], [pad, pad], [pad, pad], [1, 1], 1, c, h, w)
    s = 0.02
    x = (rng.integers(-280, 280, (3, c, h, w)) * (s / 2)).astype(np.float32)    # ties at half steps, saturation
    if layout == "nhwc":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    x = x.astype(src)
    op = Op("Reformat", "pack", {"from": src, "to": "int8", "scale": s, "rounding": "half_even",
                                 "pack": dict(pk, layout=layout)}, {})
    want = Reformat().run(op, [x])[0]
    got = GpuInt8Reformat().run(op, [GpuArray.from_host(x)])[0].get()
    assert got.dtype == np.int8 and got.shape == want.shape == int8_stem.packed_shape(pk, 3)
    np.testing.assert_array_equal(got, want)
    assert (want == 127).any() and (want == -128).any()


def test_int8_fp16_engine_runs_the_stem_int8_on_the_gpu(tmp_path):
    """INT8 + FP16 on the GPU: the 7x7/2 convolution over RGB runs as the INT8 stem (the pack on the GPU, the packed
    layer on an INT8 tensor-core tactic), the max pool after it in INT8, and the engine agrees with the CPU's INT8
    engine."""
    from backends.engine import Calibrator
    from backends.runners import EngineRunner
    from tests.backends.test_int8_io import _io_build
    model, batches, x = _stem_block(40, 36)
    cache = tmp_path / "calib.cache"
    with EngineRunner(model, flags=("int8",), calibrator=Calibrator(batches, cache=cache)) as cpu:
        want = cpu.infer({"x": x})["y"]
    got, nodes = _io_build(model, batches, x, cache, flags=("int8", "fp16"), device="cuda")
    pack = [n for n in nodes if n.kind == "Reformat" and n.params.get("pack")]
    conv1 = next(n for n in nodes if "Convolution" in n.kind and n.name.startswith("conv1"))
    pool = next(n for n in nodes if n.kind.startswith("Pooling"))
    assert len(pack) == 1 and pack[0].tactic_name == "int8-kernel", [(n.name, n.tactic_name) for n in nodes]
    assert pack[0].inputs == ["x"] and pack[0].params["from"] == "float32", pack[0].inputs   # no cast, no transpose
    assert conv1.params["kernel_spatial"] == [4, 1] and conv1.precision == "int8", conv1.params["kernel_spatial"]
    assert (pool.precision, pool.tactic_name) == ("int8", "int8-max-kernel")
    cos = float(np.dot(got.ravel(), want.ravel()) / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.99, cos
