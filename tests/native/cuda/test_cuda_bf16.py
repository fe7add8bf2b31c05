"""BF16 on the GPU: every bfloat16 kernel against the CPU device's BF16 tactic on the same op (storage bfloat16,
float32 compute, one RNE rounding per stored output), and whole BF16 engines (a conv net, a transformer block)
against the CPU's BF16 engine with no host layers. Skipped without a GPU (the `cuda` marker).

Tolerances: bit-exact where the GPU computes the same float32 value as numpy before the one rounding (IEEE + - * /
sqrt, max/min, comparisons, data movement, casts); one bfloat16 ulp (2^-7 relative) where the float32 value comes
from a transcendental (exp, tanh, erf) or a sum in another order (softmax, pooling averages, reductions, layer
norm, GEMMs), since two float32 values a few float32 ulps apart can round to neighbouring bfloat16 values."""
import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

pytestmark = pytest.mark.cuda

BF16 = np.dtype(ml_dtypes.bfloat16)
ULP = 2.0 ** -7          # one bfloat16 ulp, relative (8 significant bits)
RNG = np.random.default_rng(19)


def _op(kind, weights=None, n_out=1, **params):
    from native.tactics import Op
    return Op(kind, "t", params, dict(weights or {}), precision="bfloat16", output_types=("bfloat16",) * n_out)


def _gpu(kind, name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for(kind, "cuda") if t.name == name)


def _cpu(op, inputs):
    """The CPU device's BF16 answer: its first tactic for the kind, through the CPU's precision adapter."""
    from native.device import get_device
    from native.tactics import tactics_for
    return get_device("cpu").run(tactics_for(op.kind, "cpu")[0], op, inputs)


def _up(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(np.ascontiguousarray(x))


def _bf(shape, scale=1.0, shift=0.0):
    return (RNG.standard_normal(shape) * scale + shift).astype(np.float32).astype(BF16)


def _exact(got, ref):
    got = got.get() if hasattr(got, "get") else got
    assert got.dtype == BF16, got.dtype
    assert got.shape == ref.shape, (got.shape, ref.shape)
    np.testing.assert_array_equal(got.astype(np.float32), np.asarray(ref).astype(np.float32))


def _ulp(got, ref, ulps=1, atol=0.0):
    got = got.get() if hasattr(got, "get") else got
    assert got.dtype == BF16, got.dtype
    g, r = got.astype(np.float32), np.asarray(ref).astype(np.float32)
    np.testing.assert_allclose(g, r, rtol=ulps * ULP, atol=atol, equal_nan=True)


@pytest.mark.parametrize("op", ["SUM", "SUB", "PROD", "DIV", "MAX", "MIN"])
@pytest.mark.parametrize("sa,sb", [((3, 1, 7, 5), (4, 1, 5)),        # broadcast (32-bit index path)
                                   ((6, 40), (6, 40)),                # same shape (flat path)
                                   ((2, 3, 40), (40,)),               # bias along the last axis
                                   ((0, 5), (1, 5))])                 # empty
def test_bf16_elementwise_bit_exact(op, sa, sb):
    a, b = _bf(sa), _bf(sb, shift=3.0)
    o = _op("ElementWise", op=op)
    got = _gpu("ElementWise", "nvrtc-pointwise").run(o, [_up(a), _up(b)])[0]
    _exact(got, _cpu(o, [a, b])[0])


def test_bf16_elementwise_mixed_storage_converts_to_the_layer_type():
    a, b = _bf((4, 8)), RNG.standard_normal((4, 8)).astype(np.float32)
    got = _gpu("ElementWise", "nvrtc-pointwise").run(_op("ElementWise", op="SUM"), [_up(a), _up(b)])[0].get()
    ref = (a.astype(np.float32) + b.astype(BF16).astype(np.float32)).astype(BF16)
    _exact(got, ref)


@pytest.mark.parametrize("kind,params,exact", [
    ("Activation", {"type": "RELU"}, True), ("Activation", {"type": "LEAKY_RELU", "alpha": 0.125}, True),
    ("Activation", {"type": "CLIP", "alpha": -0.5, "beta": 0.75}, True),
    ("Activation", {"type": "HARD_SWISH"}, False), ("Activation", {"type": "SIGMOID"}, False),
    ("Activation", {"type": "TANH"}, False), ("Activation", {"type": "GELU_ERF"}, False),
    ("Activation", {"type": "SILU"}, False),
    ("Unary", {"op": "ABS"}, True), ("Unary", {"op": "NEG"}, True), ("Unary", {"op": "FLOOR"}, True),
    ("Unary", {"op": "SQRT"}, True), ("Unary", {"op": "EXP"}, False), ("Unary", {"op": "ERF"}, False)])
def test_bf16_activation_and_unary_match_cpu(kind, params, exact):
    x = _bf((5, 301), scale=3.0)
    if params.get("op") == "SQRT":
        x = np.abs(x)
    o = _op(kind, **params)
    got = _gpu(kind, "nvrtc-pointwise").run(o, [_up(x)])[0]
    ref = _cpu(o, [x])[0]
    # (the CPU's GELU and erf are polynomial approximations good to 1e-6 absolute: tiny outputs differ by that much)
    _exact(got, ref) if exact else _ulp(got, ref, atol=1e-6)


@pytest.mark.parametrize("cols", [1, 33, 1000, 1500])
@pytest.mark.parametrize("log", [False, True])
def test_bf16_softmax_warp_and_block_paths(cols, log):
    x = _bf((3, 4, cols), scale=4.0)
    o = _op("Softmax", axis=-1, log=log)
    got = _gpu("Softmax", "nvrtc-rows").run(o, [_up(x)])[0]
    _ulp(got, _cpu(o, [x])[0], atol=1e-6)


def test_bf16_empty_tensors_keep_shape_and_type():
    cases = [("Activation", "nvrtc-pointwise", {"type": "GELU_ERF"}, (0, 7)),
             ("Unary", "nvrtc-pointwise", {"op": "EXP"}, (3, 0)),
             ("Softmax", "nvrtc-rows", {"axis": -1}, (0, 5)),
             ("Pooling", "window-kernel", {"type": "MAX", "window": [2, 2], "strides": [2, 2]}, (0, 3, 4, 4)),
             ("Reduce", "axes-kernel", {"op": "SUM", "axes": [1], "keep_dims": True}, (0, 4, 3))]
    for kind, name, params, shape in cases:
        x = np.zeros(shape, BF16)
        o = _op(kind, **params)
        got = _gpu(kind, name).run(o, [_up(x)])[0].get()
        ref = _cpu(o, [x])[0]
        assert got.shape == ref.shape and got.dtype == BF16 and got.size == 0, (kind, got.shape, ref.shape)


def test_bf16_casts_round_to_nearest_even_in_every_direction():
    x = np.array([1.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -8 + 2 ** -20, -2.5e-39, 3.4e38, -3.4e38, 1e-45,
                  np.inf, -np.inf, np.nan, 0.0, -0.0] + list(RNG.standard_normal(200) * 1e3), np.float32)
    ref = x.astype(BF16)
    tac = _gpu("Reformat", "cast-kernel")
    b = tac.run(_op("Reformat", **{"from": "float32", "to": "bfloat16"}), [_up(x)])[0].get()
    np.testing.assert_array_equal(b.view(np.uint16)[~np.isnan(x)], ref.view(np.uint16)[~np.isnan(x)])
    assert np.isnan(b.astype(np.float32)[np.isnan(x)]).all()
    back = tac.run(_op("Reformat", **{"from": "bfloat16", "to": "float32"}), [_up(b)])[0].get()
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, b.astype(np.float32))
    h = x.astype(np.float16)
    hb = tac.run(_op("Reformat", **{"from": "float16", "to": "bfloat16"}), [_up(h)])[0].get()
    np.testing.assert_array_equal(hb.astype(np.float32), h.astype(np.float32).astype(BF16).astype(np.float32))
    bh = tac.run(_op("Reformat", **{"from": "bfloat16", "to": "float16"}), [_up(b)])[0].get()
    assert bh.dtype == np.float16
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bh, b.astype(np.float32).astype(np.float16))
    empty = tac.run(_op("Reformat", **{"from": "float32", "to": "bfloat16"}), [_up(np.zeros((0, 3), np.float32))])
    assert empty[0].shape == (0, 3) and empty[0].dtype == BF16


def test_bf16_onnx_cast_to_and_from_integers_and_bool():
    cast = _gpu("Cast", "cast-kernel")
    x = np.array([-2.75, -0.5, 0.0, 0.5, 7.9, 300.0], np.float32).astype(BF16)
    for to, ref in (("int64", x.astype(np.float32).astype(np.int64)), ("int32", x.astype(np.float32).astype(np.int32)),
                    ("bool", x.astype(np.float32) != 0)):
        got = cast.run(_op("Cast", to=to), [_up(x)])[0].get()
        assert got.dtype == np.dtype(to)
        np.testing.assert_array_equal(got, ref)
    i = np.array([-3, 0, 5, 257, 1 << 20], np.int64)
    _exact(cast.run(_op("Cast", to="bfloat16"), [_up(i)])[0], i.astype(np.float32).astype(BF16))
    f = _bf((7,))
    got = cast.run(_op("Cast", to="float32"), [_up(f)])[0].get()
    np.testing.assert_array_equal(got, f.astype(np.float32))


def test_bf16_data_movement_is_bit_exact():
    x = _bf((4, 9, 6))
    o = _op("Shuffle", first_transpose=[2, 0, 1], reshape_dims=[6, -1], second_transpose=[1, 0],
            zero_is_placeholder=True)
    _exact(_gpu("Shuffle", "strided-copy").run(o, [_up(x)])[0], _cpu(o, [x])[0])
    o = _op("Split", n_out=3, axis=1, split=[2, 3, 4])
    for g, c in zip(_gpu("Split", "strided-copy").run(o, [_up(x)]), _cpu(o, [x])):
        _exact(g, c)
    o = _op("Concatenation", axis=2)
    _exact(_gpu("Concatenation", "strided-copy").run(o, [_up(x[..., :2].copy()), _up(x[..., 2:].copy())])[0], x)
    o = _op("Slice", starts=[-1], ends=[-100], axes=[1], steps=[-2])
    _exact(_gpu("Slice", "strided-copy").run(o, [_up(x)])[0], _cpu(o, [x])[0])
    table, idx = _bf((50, 8)), np.array([[3, -1], [0, 49]], np.int64)
    _exact(_gpu("Gather", "index-kernel").run(_op("Gather", axis=0, mode="DEFAULT"), [_up(table), _up(idx)])[0],
           table[idx])
    cond = RNG.standard_normal((2, 1, 6)) > 0
    a, b = _bf((4, 6)), np.full((1,), -7, np.float32).astype(BF16)
    _exact(_gpu("Select", "index-kernel").run(_op("Select"), [_up(cond), _up(a), _up(b)])[0], np.where(cond, a, b))


@pytest.mark.parametrize("on_gpu", [False, True])
def test_split_sizes_and_slice_bounds_given_as_tensors(on_gpu):
    """Sizes / bounds from inputs (a Concat-folded constant, or a value computed on the device) as the CPU reads
    them: a rotary embedding splits [8, 0] along its last axis."""
    x = _bf((2, 3, 4, 8))
    put = _up if on_gpu else (lambda v: v)
    sizes = np.array([8, 0], np.int64)
    o = _op("Split", n_out=2, axis=-1, split=None, num_outputs=2)
    got = _gpu("Split", "strided-copy").run(o, [_up(x), put(sizes)])
    ref = _cpu(o, [x, sizes])
    assert [g.shape for g in got] == [(2, 3, 4, 8), (2, 3, 4, 0)]
    for g, c in zip(got, ref):
        _exact(g, c)
    o = _op("Slice", starts=None, ends=None, axes=None, steps=None)
    for b in ([[1], [100], [-1], [2]], [[-1, 0], [-100, 1], [3, 0], [-2, 1]], [[0], [4], [2], [1]],
              [[2], [0], [0], [1]]):      # (the last one empty)
        bounds = [np.array(v, np.int64) for v in b]
        got = _gpu("Slice", "strided-copy").run(o, [_up(x)] + [put(v) for v in bounds])[0]
        _exact(got, _cpu(o, [x] + bounds)[0])


@pytest.mark.parametrize("kind,params", [("MAX", {"window": [3, 3], "strides": [2, 2], "pre_padding": [1, 1],
                                                  "post_padding": [1, 1]}),
                                         ("AVERAGE", {"window": [2, 3], "strides": [1, 2], "pre_padding": [0, 1],
                                                      "post_padding": [1, 0]}),
                                         ("AVERAGE", {"global": True}), ("MAX", {"global": True})])
def test_bf16_pooling_nchw_and_nhwc_match_cpu(kind, params):
    x = _bf((2, 5, 9, 7))
    o = _op("Pooling", type=kind, **params)
    ref = _cpu(o, [x])[0]
    check = _exact if kind == "MAX" else _ulp
    check(_gpu("Pooling", "window-kernel").run(o, [_up(x)])[0], ref)
    nhwc = _gpu("PoolingNHWC", "window-kernel").run(_op("PoolingNHWC", type=kind, **params),
                                                    [_up(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))])[0].get()
    check(np.ascontiguousarray(nhwc.transpose(0, 3, 1, 2)), ref)


@pytest.mark.parametrize("op,axes,keep", [("AVG", [2, 3], True), ("SUM", [1], False), ("MAX", [0, 1], True),
                                          ("MIN", [-1], False)])
def test_bf16_reduce_matches_cpu(op, axes, keep):
    x = _bf((3, 4, 5, 6))
    o = _op("Reduce", op=op, axes=axes, keep_dims=keep)
    ref = _cpu(o, [x])[0]
    (_exact if op in ("MAX", "MIN") else _ulp)(_gpu("Reduce", "axes-kernel").run(o, [_up(x)])[0], ref)


@pytest.mark.parametrize("cols", [96, 1000])
def test_bf16_layernorm_matches_cpu(cols):
    x, g, b = _bf((3, 7, cols), scale=3.0, shift=1.0), _bf((cols,)), _bf((cols,))
    o = _op("Normalization", axes=[-1], epsilon=1e-5)
    y = _gpu("Normalization", "row-kernel").run(o, [_up(x), _up(g), _up(b)])[0]
    _ulp(y, _cpu(o, [x, g, b])[0], atol=1e-2)


def test_bf16_fused_pointwise_program_matches_cpu():
    prog = [{"op": "ElementWise", "args": ["in:0", "w:c0"], "params": {"op": "SUM"}},
            {"op": "Activation", "args": ["s:0"], "params": {"type": "RELU"}},
            {"op": "ElementWise", "args": ["s:1", "in:1"], "params": {"op": "PROD"}}]
    x, z = _bf((4, 1, 16)), _bf((3, 16))
    c0 = RNG.standard_normal(16).astype(np.float32).astype(BF16).astype(np.float32)   # as the builder rounds it
    o = _op("Pointwise", weights={"c0": c0}, program=prog)
    got = _gpu("Pointwise", "nvrtc-fused").run(o, [_up(x), _up(z)])[0]
    _exact(got, _cpu(o, [x, z])[0])      # + relu * in float32, one rounding: the same value as numpy's


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BF16])
def test_fused_programs_with_the_same_operands_get_their_own_kernels(dtype):
    """Two programs over the same operand names compile to two kernels (the module cache is keyed by the source)."""
    from native.tactics import Op
    prec = "bfloat16" if dtype == BF16 else "float32"
    x, z = (RNG.standard_normal((3, 16)) * 2).astype(dtype), RNG.standard_normal((3, 16)).astype(dtype)
    tactic = _gpu("Pointwise", "nvrtc-fused")
    for act in ("RELU", "GELU_ERF", "TANH"):
        prog = [{"op": "Activation", "args": ["in:0"], "params": {"type": act}},
                {"op": "ElementWise", "args": ["s:0", "in:1"], "params": {"op": "SUM"}}]
        o = Op("Pointwise", "t", {"program": prog}, {}, precision=prec, output_types=(prec,))
        got = tactic.run(o, [_up(x), _up(z)])[0].get().astype(np.float32)
        ref = _cpu(o, [x, z])[0].astype(np.float32)
        np.testing.assert_allclose(got, ref, rtol=ULP if dtype == BF16 else 1e-6, atol=1e-6, err_msg=act)


def test_bf16_matmul_and_attention_match_cpu():
    from native.cuda.tactics.gemm import matmul
    a, b = _bf((2, 33, 64)), _bf((64, 40))
    got = matmul(_up(a), _up(b))
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32)).astype(BF16)
    _ulp(got, ref, atol=1e-2)
    q, k, v = (_bf((2, 3, 17, 8)) for _ in range(3))
    mask = np.where(RNG.standard_normal((2, 1, 1, 17)) > 0.5, -1e4, 0).astype(np.float32)
    o = _op("Attention", scale=0.3, mask_kind="add", transpose_k=True, nan_to_zero=True)
    got = _gpu("Attention", "cublas-softmax").run(o, [_up(q), _up(k), _up(v), _up(mask)])[0]
    _ulp(got, _cpu(o, [q, k, v, mask])[0], ulps=2, atol=2e-2)   # + the probabilities' bfloat16 rounding


def _conv_case(dtype, groups=1, stride=1, kind="Convolution"):
    """(op for the GPU, inputs, the CPU device's answer in `dtype` storage): 3x3 conv + bias + residual + ReLU."""
    import dataclasses

    from native.device import get_device
    from native.tactics import Op, tactics_for
    prec = "bfloat16" if dtype == BF16 else "float16"
    x = (RNG.standard_normal((2, 8, 11, 9))).astype(np.float32).astype(dtype)
    oh, ow = (11 + 2 - 3) // stride + 1, (9 + 2 - 3) // stride + 1
    r = RNG.standard_normal((2, 16, oh, ow)).astype(np.float32).astype(dtype)
    w = RNG.standard_normal((16, 8 // groups, 3, 3)).astype(np.float32) * 0.2
    bias = RNG.standard_normal(16).astype(np.float32)
    post = [{"op": "add", "input": 1}, {"op": "activation", "type": "RELU"}]
    params = dict(kernel_shape=[3, 3], strides=[stride, stride], dilations=[1, 1], pre_padding=[1, 1],
                  post_padding=[1, 1], groups=groups, post_ops=post)
    o = Op("Convolution", "t", params, {"kernel": w, "bias": bias}, precision=prec, output_types=(prec,))
    cpu = get_device("cpu")
    ct = tactics_for("Convolution", "cpu")[0]
    ref = cpu.run(ct, dataclasses.replace(o, weights=cpu.prepare(ct, o)), [x, r])[0]
    if kind == "ConvolutionNHWC":
        hwio = np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(-1, 16))
        o = Op(kind, "t", dict(params, kernel_spatial=[3, 3]), {"kernel_hwio": hwio, "bias": bias}, precision=prec,
               output_types=(prec,))
        x, r = (np.ascontiguousarray(v.transpose(0, 2, 3, 1)) for v in (x, r))
    return o, [x, r], ref


@pytest.mark.parametrize("kind,name,groups,stride", [("ConvolutionNHWC", "cudnn-plan-0", 1, 1),
                                                     ("ConvolutionNHWC", "im2col-cublas-nhwc", 1, 1),
                                                     ("ConvolutionNHWC", "im2col-cublas-nhwc", 1, 2),
                                                     ("Convolution", "im2col-cublas", 1, 1),
                                                     ("Convolution", "im2col-cublas", 2, 2)])
def test_bf16_convolution_with_fused_epilogue_matches_cpu(kind, name, groups, stride):
    """cuDNN NHWC (BF16 I/O, FP32 compute, fused bias + residual + ReLU) and im2col + cuBLAS (BF16 operands, FP32
    accumulation and epilogue, one rounding) against the CPU's BF16 convolution: within one bfloat16 ulp. (cuDNN 9
    on Hopper has no NCHW BF16 engine for a fused epilogue: such layers get im2col-cublas or go NHWC.)"""
    o, xs, ref = _conv_case(BF16, groups, stride, kind)
    got = _gpu(kind, name).run(o, [_up(v) for v in xs])[0].get()
    if kind == "ConvolutionNHWC":
        got = np.ascontiguousarray(got.transpose(0, 3, 1, 2))
    _ulp(got, ref, atol=2e-2)


def test_fp16_im2col_convolution_rounds_once_like_the_cpu():
    o, xs, ref = _conv_case(np.dtype(np.float16), groups=2, stride=2)
    got = _gpu("Convolution", "im2col-cublas").run(o, [_up(v) for v in xs])[0].get()
    assert got.dtype == np.float16
    np.testing.assert_allclose(got.astype(np.float32), ref.astype(np.float32), rtol=2 ** -10, atol=2e-3)


# whole engines -------------------------------------------------------------------------------------------------

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


def _transformer_block(batch=2, seq=16, hidden=64, heads=4, ffn=128):
    """Pre-norm encoder block: LayerNorm, fused QKV projection, multi-head attention with a padding mask, output
    projection + residual, LayerNorm, GELU (erf) MLP + residual."""
    rng = np.random.default_rng(23)
    d = hidden // heads

    def w(name, *shape, scale=0.1):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    def i64(name, v):
        return numpy_helper.from_array(np.array(v, np.int64), name)

    def f32(name, v):
        return numpy_helper.from_array(np.array(v, np.float32), name)

    n = helper.make_node
    nodes = [n("LayerNormalization", ["x", "g1", "b1"], ["ln1"], name="ln1", axis=-1, epsilon=1e-5),
             n("MatMul", ["ln1", "wqkv"], ["qkv0"], name="qkv"), n("Add", ["qkv0", "bqkv"], ["qkv1"], name="qkv_bias"),
             n("Split", ["qkv1", "split3"], ["q0", "k0", "v0"], name="split", axis=-1)]
    for t in "qkv":
        nodes += [n("Reshape", [f"{t}0", "heads_shape"], [f"{t}1"], name=f"{t}_heads"),
                  n("Transpose", [f"{t}1"], [f"{t}2"], name=f"{t}_t", perm=[0, 2, 3, 1] if t == "k" else [0, 2, 1, 3])]
    nodes += [n("MatMul", ["q2", "k2"], ["sc0"], name="scores"), n("Mul", ["sc0", "scale"], ["sc1"], name="scale"),
              n("Add", ["sc1", "mask"], ["sc2"], name="mask_add"),
              n("Softmax", ["sc2"], ["p"], name="softmax", axis=-1), n("MatMul", ["p", "v2"], ["c0"], name="context"),
              n("Transpose", ["c0"], ["c1"], name="c_t", perm=[0, 2, 1, 3]),
              n("Reshape", ["c1", "hidden_shape"], ["c2"], name="merge"),
              n("MatMul", ["c2", "wo"], ["o0"], name="out_proj"), n("Add", ["o0", "bo"], ["o1"], name="out_bias"),
              n("Add", ["o1", "x"], ["h"], name="residual1"),
              n("LayerNormalization", ["h", "g2", "b2"], ["ln2"], name="ln2", axis=-1, epsilon=1e-5),
              n("MatMul", ["ln2", "w1"], ["f0"], name="fc1"), n("Add", ["f0", "bf1"], ["f1"], name="fc1_bias"),
              n("Div", ["f1", "sqrt2"], ["f2"], name="gelu_div"), n("Erf", ["f2"], ["f3"], name="gelu_erf"),
              n("Add", ["f3", "one"], ["f4"], name="gelu_add"), n("Mul", ["f1", "f4"], ["f5"], name="gelu_mul"),
              n("Mul", ["f5", "half"], ["f6"], name="gelu_half"),
              n("MatMul", ["f6", "w2"], ["f7"], name="fc2"), n("Add", ["f7", "bf2"], ["f8"], name="fc2_bias"),
              n("Add", ["f8", "h"], ["y"], name="residual2")]
    mask = np.zeros((batch, 1, 1, seq), np.float32)
    mask[1, ..., seq - 5:] = -10000.0                    # the second sequence is padded
    inits = [w("g1", hidden, scale=0.2), w("b1", hidden), w("wqkv", hidden, 3 * hidden), w("bqkv", 3 * hidden),
             i64("split3", [hidden] * 3), i64("heads_shape", [batch, seq, heads, d]), f32("scale", 1 / np.sqrt(d)),
             numpy_helper.from_array(mask, "mask"), i64("hidden_shape", [batch, seq, hidden]), w("wo", hidden, hidden),
             w("bo", hidden), w("g2", hidden, scale=0.2), w("b2", hidden), w("w1", hidden, ffn), w("bf1", ffn),
             f32("sqrt2", np.sqrt(2.0)), f32("one", 1.0), f32("half", 0.5), w("w2", ffn, hidden), w("bf2", hidden)]
    g = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, seq, hidden])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, seq, hidden])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)], ir_version=8)


def _cos(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _bf16_config(everywhere: bool):
    """BF16 enabled; `everywhere`: every layer asked for BF16 (PREFER), so each BF16 kernel runs whatever the
    timed precision choice would pick."""
    from backends.engine.builder import BuilderConfig
    from backends.engine.builder.config import BuilderFlag
    from backends.engine.builder.precision_spec import parse_layer_precisions
    c = BuilderConfig()
    c.set_flag(BuilderFlag.BF16)
    if everywhere:
        c.set_flag(BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
        c.layer_precisions = parse_layer_precisions("*:bf16")
    return c


@pytest.mark.parametrize("everywhere", [False, True])
@pytest.mark.parametrize("model,shape", [(_convnet, (4, 16, 32, 32)), (_transformer_block, (2, 16, 64))])
def test_bf16_engine_runs_on_gpu_kernels_and_matches_the_cpu_bf16_engine(tmp_path, model, shape, everywhere):
    from backends.runners import EngineRunner
    path = tmp_path / "model.onnx"
    onnx.save(model(), path)
    x = np.random.default_rng(9).standard_normal(shape).astype(np.float32)
    with EngineRunner(str(path), device="cuda", config=_bf16_config(everywhere)) as gpu, \
            EngineRunner(str(path), config=_bf16_config(everywhere)) as cpu, EngineRunner(str(path)) as fp32:
        y, ref, exact = gpu.infer({"x": x})["y"], cpu.infer({"x": x})["y"], fp32.infer({"x": x})["y"]
        nodes = gpu.engine.graph.nodes
        host = [(n.name, n.kind, n.tactic_name) for n in nodes if (n.tactic_name or "").startswith("host:")]
        assert not host, host
        gpu.context.enable_cuda_graph()              # the BF16 kernels replay from a captured graph
        graphed = [gpu.context.execute({"x": v})["y"] for v in (x, x[::-1].copy(), x)]
    np.testing.assert_array_equal(graphed[0], y)
    np.testing.assert_array_equal(graphed[2], y)
    assert not np.array_equal(graphed[1], y)
    assert _cos(y, ref) >= 0.9999, _cos(y, ref)
    if everywhere:
        compute = [n for n in nodes if n.kind not in ("Reformat", "Shuffle", "Constant", "Identity")]
        assert {n.precision for n in compute} == {"bfloat16"}, [(n.name, n.kind, n.precision) for n in compute]
        assert not np.array_equal(y, exact)              # (it really computed in BF16)
        assert _cos(y, exact) >= 0.999, _cos(y, exact)   # and BF16 is still close to FP32
