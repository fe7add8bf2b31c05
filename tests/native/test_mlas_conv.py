"""FP32 convolution in ONNX Runtime's (MLAS's) rounding order, bit for bit: against a scalar reference that spells
the order out, and against ONNX Runtime itself (one thread; see native/cpu/kernels/mlas_conv.py)."""
import numpy as np
import pytest

from native.cpu.kernels import mlas_conv
from native.cpu.kernels.conv.geometry import geometry

f32 = np.float32


def fma(a, b, c):
    return f32(np.float64(a) * np.float64(b) + np.float64(c))


def ref_general(w, cols, block):
    """One FMA chain per output over each K block, blocks added: C = C + block."""
    m, k = w.shape
    out = np.zeros((m, cols.shape[1]), f32)
    for i in range(m):
        for j in range(cols.shape[1]):
            c = None
            for k0 in range(0, k, block):
                acc = f32(0)
                for kk in range(k0, min(k, k0 + block)):
                    acc = fma(w[i, kk], cols[kk, j], acc)
                c = acc if c is None else f32(c + acc)
            out[i, j] = c
    return out


def ref_m1(w, cols):
    """M = 1: rounded products summed ((p0 + p1) + p2) + p3 per group of four, then a pair, then a single."""
    k = w.shape[0]
    out = np.zeros(cols.shape[1], f32)
    for j in range(cols.shape[1]):
        p = [f32(w[kk] * cols[kk, j]) for kk in range(k)]
        c, kk = f32(0), 0
        while kk + 4 <= k:
            c = f32(f32(f32(f32(p[kk] + p[kk + 1]) + p[kk + 2]) + p[kk + 3]) + c)
            kk += 4
        if k - kk >= 2:
            c = f32(f32(p[kk] + p[kk + 1]) + c)
            kk += 2
        if k - kk == 1:
            c = f32(p[kk] + c)
        out[j] = c
    return out


def ref_n1(w, x):
    """N = 1: eight lanes (k mod 8), reduced by row blocks of 4, then 2, then 1."""
    m, k = w.shape
    lanes = np.zeros((m, 8), f32)
    for i in range(m):
        for kk in range(k):
            lanes[i, kk % 8] = f32(lanes[i, kk % 8] + f32(w[i, kk] * x[kk]))
    out = np.zeros(m, f32)
    m4 = m // 4 * 4
    for i in range(m):
        a = lanes[i]
        if i < m4:
            out[i] = f32(f32(f32(f32(a[0] + a[1]) + a[2]) + a[3]) + f32(f32(f32(a[4] + a[5]) + a[6]) + a[7]))
        elif m - m4 >= 2 and i < m4 + 2:
            out[i] = f32(f32(f32(a[0] + a[2]) + f32(a[4] + a[6])) + f32(f32(a[1] + a[3]) + f32(a[5] + a[7])))
        else:
            out[i] = f32(f32(f32(a[0] + a[1]) + f32(a[2] + a[3])) + f32(f32(a[4] + a[5]) + f32(a[6] + a[7])))
    return out


def data(shape, seed):
    # dequantized int8 values: what the emulated layers read
    return (np.random.default_rng(seed).integers(-128, 128, shape) * f32(0.0173)).astype(f32)


def test_general_gemm_fma_chains_in_k_blocks_of_128():
    w, cols = data((2, 300), 0), data((300, 130), 1)   # N < K, N > 64: StrideK stays 128 -> blocks 128, 128, 44
    got = mlas_conv.sgemm(w[None], cols[None])[0]
    assert np.array_equal(got, ref_general(w, cols, 128))
    assert not np.array_equal(got, ref_general(w, cols, 300))   # the blocking is visible in the bits
    w, cols = data((2, 300), 0), data((300, 5), 1)     # N = 5: StrideK doubles to 1024 -> one chain
    assert np.array_equal(mlas_conv.sgemm(w[None], cols[None])[0], ref_general(w, cols, 300))


def test_m1_groups_of_four_without_fma():
    w, cols = data((27,), 2), data((27, 40), 3)                # 6 groups of 4, a pair, a single
    got = mlas_conv.sgemm(w[None, None], cols[None])[0, 0]
    assert np.array_equal(got, ref_m1(w, cols))


def test_n1_eight_lanes_and_row_remainders():
    w, x = data((7, 37), 4), data((37,), 5)                     # rows: a block of 4, a pair, a single
    got = mlas_conv.sgemm(w[None], x[None, :, None], n_is_contiguous_column=True)[0, :, 0]
    assert np.array_equal(got, ref_n1(w, x))


def ort_conv(x, w, b, strides, pads, group, dilations):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], strides=strides, pads=pads, group=group,
                            dilations=dilations, kernel_shape=list(w.shape[2:]))
    g = helper.make_graph([node], "c", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                                        helper.make_tensor_value_info("w", TensorProto.FLOAT, w.shape),
                                        helper.make_tensor_value_info("b", TensorProto.FLOAT, b.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL   # weights as inputs: no NCHWc
    sess = ort.InferenceSession(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString(),
                                opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x, "w": w, "b": b})[0]


@pytest.mark.parametrize("n,c,hw,m,k,stride,pad,group,dil", [
    (1, 3, 20, 16, 3, 2, 1, 1, 1),      # stem: im2col, K = 27
    (1, 72, 9, 24, 1, 1, 0, 1, 1),      # pointwise, one K block
    (1, 288, 7, 10, 1, 1, 0, 1, 1),     # pointwise, N = 49 < K: StrideK 256 -> blocks 256 + 32
    (1, 40, 9, 40, 5, 2, 2, 40, 1),     # depthwise 5x5: M = 1 per group
    (1, 150, 1, 7, 1, 1, 0, 1, 1),      # 1x1 output: N = 1 path, rows 4 + 2 + 1
    (2, 30, 9, 15, 3, 1, 2, 3, 2),      # batch 2, groups, dilation
])
def test_matches_onnxruntime_bit_for_bit(n, c, hw, m, k, stride, pad, group, dil):
    x = data((n, c, hw, hw), 6)
    w = (data((m, c // group, k, k), 7) * f32(0.3)).astype(f32)
    b = data((m,), 8)
    want = ort_conv(x, w, b, [stride] * 2, [pad] * 4, group, [dil] * 2)
    st, dl, pre, post, out = geometry({"strides": [stride] * 2, "dilations": [dil] * 2, "pre_padding": [pad] * 2,
                                       "post_padding": [pad] * 2}, x.shape, [k, k])
    got = (mlas_conv.conv2d(x, w, st, dl, pre, post, out, group) + b.reshape(1, -1, 1, 1)).astype(f32)
    assert np.array_equal(got, want)
