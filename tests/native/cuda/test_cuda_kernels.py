"""The CUDA device's data-movement, reduction, FP16, cuDNN and attention tactics against numpy and the CPU kernels,
and whole engines in FP16, in NHWC and under CUDA graphs. Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda


def _op(kind, precision="float32", weights=None, **params):
    from native.tactics import Op
    return Op(kind, "t", params, dict(weights or {}), precision=precision)


def _gpu(kind, name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if t.name == name)


def _cpu(kind):
    from native.tactics import tactics_for
    return tactics_for(kind, "cpu")[0]


def _up(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(np.ascontiguousarray(x))


RNG = np.random.default_rng(11)


@pytest.mark.parametrize("op,fn", [("SUM", np.add), ("PROD", np.multiply), ("MAX", np.maximum), ("DIV", np.divide)])
def test_fp16_elementwise_rounds_once_from_float32(op, fn):
    a = RNG.standard_normal((3, 1, 7, 5)).astype(np.float16)
    b = RNG.standard_normal((4, 1, 5)).astype(np.float16) + np.float16(3)
    got = _gpu("ElementWise", "nvrtc-pointwise").run(_op("ElementWise", "float16", op=op), [_up(a), _up(b)])[0].get()
    ref = fn(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, ref)


def test_fp16_activation_and_softmax():
    x = (RNG.standard_normal((5, 301)) * 4).astype(np.float16)
    y = _gpu("Activation", "nvrtc-pointwise").run(_op("Activation", "float16", type="RELU"), [_up(x)])[0].get()
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    s = _gpu("Softmax", "nvrtc-rows").run(_op("Softmax", "float16", axis=-1), [_up(x)])[0].get()
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(s.astype(np.float64), e / e.sum(-1, keepdims=True), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("params,shape", [({"first_transpose": [0, 2, 3, 1], "reshape_dims": None,
                                             "second_transpose": None}, (2, 3, 5, 7)),
                                          ({"first_transpose": None, "reshape_dims": [0, -1, 4],
                                            "second_transpose": [2, 0, 1]}, (3, 8, 2))])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64])
def test_shuffle_matches_cpu(params, shape, dtype):
    x = (RNG.standard_normal(shape) * 100).astype(dtype)
    op = _op("Shuffle", zero_is_placeholder=True, **params)
    np.testing.assert_array_equal(_gpu("Shuffle", "strided-copy").run(op, [_up(x)])[0].get(),
                                  _cpu("Shuffle").run(op, [x])[0])


def test_split_concat_slice_gather_select_match_cpu():
    x = RNG.standard_normal((4, 9, 6)).astype(np.float16)
    op = _op("Split", axis=1, split=[2, 3, 4])
    for g, c in zip(_gpu("Split", "strided-copy").run(op, [_up(x)]), _cpu("Split").run(op, [x])):
        np.testing.assert_array_equal(g.get(), c)
    parts = [x[:, :2], x[:, 2:]]
    op = _op("Concatenation", axis=1)
    np.testing.assert_array_equal(_gpu("Concatenation", "strided-copy").run(op, [_up(p) for p in parts])[0].get(), x)
    for starts, ends, axes, steps in [([1, 0], [4, 5], [0, 2], [2, 1]), ([-1], [-100], [1], [-2])]:
        op = _op("Slice", starts=starts, ends=ends, axes=axes, steps=steps)
        np.testing.assert_array_equal(_gpu("Slice", "strided-copy").run(op, [_up(x)])[0].get(),
                                      _cpu("Slice").run(op, [x])[0])
    table = RNG.standard_normal((50, 8)).astype(np.float32)
    idx = np.array([[3, -1], [0, 49]], np.int64)
    op = _op("Gather", axis=0, mode="DEFAULT")
    np.testing.assert_array_equal(_gpu("Gather", "index-kernel").run(op, [_up(table), _up(idx)])[0].get(), table[idx])
    cond = RNG.standard_normal((2, 1, 6)) > 0
    a, b = RNG.standard_normal((4, 6)).astype(np.float16), np.full((1,), -7, np.float16)
    got = _gpu("Select", "index-kernel").run(_op("Select"), [_up(cond), _up(a), _up(b)])[0].get()
    np.testing.assert_array_equal(got, np.where(cond, a, b))


def test_reformat_casts_round_to_nearest_even():
    x = np.array([1.0, 1 + 2 ** -11, 1 + 3 * 2 ** -11, 65520.0, -1e-8, np.inf, np.nan], np.float32)
    op = _op("Reformat", **{"from": "float32", "to": "float16"})
    h = _gpu("Reformat", "cast-kernel").run(op, [_up(x)])[0].get()
    np.testing.assert_array_equal(h, x.astype(np.float16))
    back = _gpu("Reformat", "cast-kernel").run(_op("Reformat", **{"from": "float16", "to": "float32"}), [_up(h)])[0]
    np.testing.assert_array_equal(back.get(), h.astype(np.float32))


@pytest.mark.parametrize("kind,params", [("MAX", {"window": [3, 3], "strides": [2, 2], "pre_padding": [1, 1],
                                                  "post_padding": [1, 1]}),
                                         ("AVERAGE", {"window": [2, 3], "strides": [1, 2], "pre_padding": [0, 1],
                                                      "post_padding": [1, 0]}),
                                         ("AVERAGE", {"global": True}), ("MAX", {"global": True})])
def test_pooling_nchw_and_nhwc_match_cpu(kind, params):
    x = RNG.standard_normal((2, 5, 9, 8)).astype(np.float32)
    op = _op("Pooling", type=kind, **params)
    ref = _cpu("Pooling").run(op, [x])[0]
    np.testing.assert_allclose(_gpu("Pooling", "window-kernel").run(op, [_up(x)])[0].get(), ref, rtol=1e-6, atol=1e-6)
    nhwc = _gpu("PoolingNHWC", "window-kernel").run(_op("PoolingNHWC", type=kind, **params),
                                                    [_up(x.transpose(0, 2, 3, 1))])[0].get()
    np.testing.assert_allclose(nhwc.transpose(0, 3, 1, 2), ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float16, 4e-3)])
def test_layernorm_rows(dtype, tol):
    x = (RNG.standard_normal((3, 7, 96)) * 3 + 1).astype(dtype)
    g, b = RNG.standard_normal(96).astype(dtype), RNG.standard_normal(96).astype(dtype)
    y, mean, inv = _gpu("Normalization", "row-kernel").run(_op("Normalization", axes=[-1], epsilon=1e-5),
                                                           [_up(x), _up(g), _up(b)])
    xf = x.astype(np.float64)
    m = xf.mean(-1, keepdims=True)
    ref = (xf - m) / np.sqrt(xf.var(-1, keepdims=True) + 1e-5) * g.astype(np.float64) + b.astype(np.float64)
    np.testing.assert_allclose(y.get().astype(np.float64), ref, rtol=tol, atol=tol * 4)
    np.testing.assert_allclose(mean.get().reshape(-1), m.reshape(-1), rtol=1e-5, atol=1e-5)


def test_fused_pointwise_program_matches_cpu():
    prog = [{"op": "ElementWise", "args": ["in:0", "w:c0"], "params": {"op": "SUM"}},
            {"op": "Activation", "args": ["s:0"], "params": {"type": "GELU_ERF"}},
            {"op": "ElementWise", "args": ["s:1", "in:1"], "params": {"op": "PROD"}}]
    x, z = RNG.standard_normal((4, 1, 16)).astype(np.float32), RNG.standard_normal((3, 16)).astype(np.float32)
    op = _op("Pointwise", weights={"c0": RNG.standard_normal(16).astype(np.float32)}, program=prog)
    ref = _cpu("Pointwise").run(op, [x, z])[0]
    got = _gpu("Pointwise", "nvrtc-fused").run(op, [_up(x), _up(z)])[0].get()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_fp16_matmul_and_attention():
    from native.cuda.tactics.gemm import matmul
    a, b = RNG.standard_normal((2, 33, 64)).astype(np.float16), RNG.standard_normal((64, 40)).astype(np.float16)
    got = matmul(_up(a), _up(b)).get()
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)
    q, k, v = (RNG.standard_normal((2, 3, 17, 8)).astype(np.float32) for _ in range(3))
    mask = np.where(RNG.standard_normal((2, 1, 1, 17)) > 0.5, -1e4, 0).astype(np.float32)
    op = _op("Attention", scale=0.3, mask_kind="add", transpose_k=True, nan_to_zero=True)
    ref = _cpu("Attention").run(op, [q, k, v, mask])[0]
    got = _gpu("Attention", "cublas-softmax").run(op, [_up(q), _up(k), _up(v), _up(mask)])[0].get()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)
    op16 = _op("Attention", "float16", scale=0.3, mask_kind="add", transpose_k=True)
    got16 = _gpu("Attention", "cublas-softmax").run(op16, [_up(q.astype(np.float16)), _up(k.astype(np.float16)),
                                                            _up(v.astype(np.float16)), _up(mask)])[0].get()
    np.testing.assert_allclose(got16.astype(np.float32), ref, rtol=1e-2, atol=1e-2)


def _convnet(c=16, m=32):
    rng = np.random.default_rng(8)
    w = numpy_helper.from_array(rng.standard_normal((m, c, 3, 3)).astype(np.float32) * 0.1, "w")
    b = numpy_helper.from_array(rng.standard_normal(m).astype(np.float32), "b")
    w2 = numpy_helper.from_array(rng.standard_normal((m, m, 3, 3)).astype(np.float32) * 0.05, "w2")
    wf = numpy_helper.from_array(rng.standard_normal((m, 10)).astype(np.float32) * 0.1, "wf")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c2", "p1"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r2"], name="relu2"),
             helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flat"),
             helper.make_node("MatMul", ["f", "wf"], ["y"], name="fc")]
    g = helper.make_graph(nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, c, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], [w, b, w2, wf])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _cos(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("flags", [(), ("fp16",)])
def test_convnet_engine_runs_on_gpu_kernels(tmp_path, flags):
    """FP32 matches the CPU engine to FP32 rounding; FP16 (NHWC, cuDNN, FP16 storage) stays within cosine 0.999."""
    from backends.runners import EngineRunner
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), path)
    x = np.random.default_rng(9).standard_normal((4, 16, 32, 32)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", flags=flags) as gpu, EngineRunner(str(path)) as cpu:
        y, ref = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"]
        nodes = gpu.engine.graph.nodes
    kinds = {n.kind: n.tactic_name for n in nodes}
    host = [(n.kind, n.tactic_name) for n in nodes if (n.tactic_name or "").startswith("host:")]
    assert not host, host
    if flags:
        # layout and precision are chosen by timing (tests/native/cuda/test_timed_choice_cuda.py checks how)
        assert all("precision_ms" in n.meta and "layout_ms" in n.meta for n in nodes
                   if n.kind in ("Convolution", "ConvolutionNHWC")), kinds
        assert all(t.startswith(("cudnn-plan-", "cublaslt-1x1-")) or t == "im2col-cublas-nhwc"   # (by timing)
                   for k, t in kinds.items() if k == "ConvolutionNHWC"), kinds
        assert _cos(y, ref) > 0.999
    else:
        np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("k,stride,pad,post", [(3, 1, 1, [{"op": "add", "input": 3},
                                                            {"op": "activation", "type": "SILU"}]),
                                               (3, 2, 1, [{"op": "activation", "type": "RELU"}]),
                                               (1, 1, 0, [{"op": "activation", "type": "SILU"}])])
def test_nhwc_im2col_convolution_matches_the_cpu_in_fp32(k, stride, pad, post):
    """im2col-cublas-nhwc (the ConvolutionNHWC tactic that needs no cuDNN plan; 1x1 stride 1: one GEMM on the
    input) against the CPU's NHWC convolution: strict FP32 (cuBLAS pedantic), FP32 rounding apart."""
    from native.tactics import Op, tactics_for
    x = RNG.standard_normal((2, 9, 7, 12)).astype(np.float32)
    m = 20
    w = (RNG.standard_normal((m, 12, k, k)) * 0.2).astype(np.float32)
    hwio = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, m))
    oh, ow = (9 + 2 * pad - k) // stride + 1, (7 + 2 * pad - k) // stride + 1
    r = RNG.standard_normal((2, oh, ow, m)).astype(np.float32)
    params = dict(kernel_spatial=[k, k], strides=[stride, stride], dilations=[1, 1], pre_padding=[pad, pad],
                  post_padding=[pad, pad], post_ops=post, num_output_maps=m)
    o = Op("ConvolutionNHWC", "t", params, {"kernel_hwio": hwio, "bias": RNG.standard_normal(m).astype(np.float32)})
    feeds = [x, None, None, r]
    ref = next(t for t in tactics_for("ConvolutionNHWC", "cpu") if t.name == "nhwc-im2col-gemm").run(o, feeds)[0]
    got = _gpu("ConvolutionNHWC", "im2col-cublas-nhwc").run(o, [None if v is None else _up(v) for v in feeds])[0]
    assert got.shape == (2, oh, ow, m)
    np.testing.assert_allclose(got.get(), ref, rtol=1e-4, atol=1e-4)


def test_cuda_graph_replay_matches_plain_execution_and_reports_timings(tmp_path):
    from backends.runners import EngineRunner
    path = tmp_path / "convnet.onnx"
    onnx.save(_convnet(), path)
    rng = np.random.default_rng(10)
    xs = [rng.standard_normal((4, 16, 32, 32)).astype(np.float32) for _ in range(3)]
    with EngineRunner(str(path), device="cuda", flags=("fp16",)) as r:
        plain = [r.infer({"x": x})["y"] for x in xs]
        ctx = r.context
        ctx.enable_cuda_graph()
        graphed = [ctx.execute({"x": x})["y"] for x in xs]
        t = ctx.timings
    for a, b in zip(plain, graphed):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(graphed[0], graphed[1])     # the graph reads the new inputs every launch
    assert set(t) == {"h2d_ms", "compute_ms", "d2h_ms"} and all(v >= 0 for v in t.values())


def test_fast_paths_wide_copies_flat_and_bias_adds():
    """Head-split transposes and last-axis splits move 16-byte rows; same-shape and last-axis-bias adds skip the
    broadcast index arithmetic; all must equal numpy exactly."""
    x = RNG.standard_normal((2, 5, 3, 64)).astype(np.float16)
    op = _op("Shuffle", first_transpose=[0, 2, 1, 3], reshape_dims=None, second_transpose=None)
    np.testing.assert_array_equal(_gpu("Shuffle", "strided-copy").run(op, [_up(x)])[0].get(), x.transpose(0, 2, 1, 3))
    y = RNG.standard_normal((4, 7, 192)).astype(np.float16)
    outs = _gpu("Split", "strided-copy").run(_op("Split", axis=-1, split=[64, 64, 64]), [_up(y)])
    for i, o in enumerate(outs):
        np.testing.assert_array_equal(o.get(), y[..., 64 * i:64 * (i + 1)])
    a = RNG.standard_normal((3, 5, 40)).astype(np.float32)
    for b in (RNG.standard_normal((3, 5, 40)).astype(np.float32), RNG.standard_normal(40).astype(np.float32),
              RNG.standard_normal((1, 1, 40)).astype(np.float32)):
        got = _gpu("ElementWise", "nvrtc-pointwise").run(_op("ElementWise", op="SUB"), [_up(a), _up(b)])[0].get()
        np.testing.assert_array_equal(got, a - b)


@pytest.mark.parametrize("cols", [1, 31, 128, 1000, 1500])
def test_softmax_warp_and_block_paths_match_numpy(cols):
    x = (RNG.standard_normal((3, 5, cols)) * 6).astype(np.float32)
    x[0, 0, :] = -np.inf if cols > 1 else x[0, 0, :]
    y = _gpu("Softmax", "nvrtc-rows").run(_op("Softmax", axis=-1), [_up(x)])[0].get()
    with np.errstate(invalid="ignore"):
        e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
        ref = e / e.sum(-1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-7, equal_nan=True)


def test_loaded_plan_compiles_no_kernels(tmp_path, monkeypatch):
    """The plan carries the cubins of its architecture; loading it in a process that has compiled nothing runs
    without calling NVRTC."""
    from backends.runners import EngineRunner
    from native.cuda import nvrtc
    path, plan = tmp_path / "convnet.onnx", tmp_path / "convnet.plan"
    onnx.save(_convnet(), path)
    x = np.random.default_rng(12).standard_normal((4, 16, 32, 32)).astype(np.float32)
    with EngineRunner(str(path), device="cuda", flags=("fp16",), save_plan=str(plan)) as r:
        ref = r.infer({"x": x})["y"]
    monkeypatch.setattr(nvrtc, "_MODULES", {})
    monkeypatch.setattr(nvrtc, "_CUBINS", {})

    def refuse(*a, **k):
        raise AssertionError("NVRTC compile after loading a plan")
    monkeypatch.setattr(nvrtc, "compile_source", refuse)
    with EngineRunner(str(plan)) as r:
        np.testing.assert_array_equal(r.infer({"x": x})["y"], ref)


@pytest.mark.parametrize("op,axes,keep", [("AVG", [2, 3], True), ("SUM", [1], False), ("MAX", [0, 1], True),
                                          ("MIN", [-1], False)])
def test_reduce_matches_cpu(op, axes, keep):
    x = RNG.standard_normal((3, 4, 5, 6)).astype(np.float32)
    o = _op("Reduce", op=op, axes=axes, keep_dims=keep)
    np.testing.assert_allclose(_gpu("Reduce", "axes-kernel").run(o, [_up(x)])[0].get(), _cpu("Reduce").run(o, [x])[0],
                               rtol=1e-5, atol=1e-6)


def test_hard_swish_matches_cpu():
    x = (RNG.standard_normal((4, 50)) * 5).astype(np.float32)
    o = _op("Activation", type="HARD_SWISH")
    np.testing.assert_allclose(_gpu("Activation", "nvrtc-pointwise").run(o, [_up(x)])[0].get(),
                               _cpu("Activation").run(o, [x])[0], rtol=1e-6, atol=1e-6)
