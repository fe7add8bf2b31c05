"""Attention on the GPU: cuDNN's fused SDPA (cudnn-sdpa) and cublas-softmax against numpy attention, in [B,H,S,D]
and heads mode (q/k/v as column ranges of one QKV tensor), and engines whose heads fold into the layer.
Skipped without a GPU (the `cuda` marker)."""
import numpy as np
import onnx
import pytest

pytestmark = pytest.mark.cuda
RNG = np.random.default_rng(24)
B, H, S, D = 2, 3, 40, 64


def _op(precision, **params):
    from native.tactics import Op
    base = {"scale": 0.125, "mask_kind": "add", "transpose_k": True, "nan_to_zero": False, "softmax_axis": -1}
    return Op("Attention", "att", dict(base, **params), {}, precision=precision)


def _gpu(name):
    from native.tactics import tactics_for
    return next(t for t in tactics_for("Attention", "cuda") if t.name == name)


def _up(x):
    from native.cuda.array import GpuArray
    return GpuArray.from_host(np.ascontiguousarray(x))


def _dtype(name):
    from native import numerics
    return numerics.storage_numpy_dtype(name)


def _ctx(arrays):
    from native.tactics import LayerContext
    return LayerContext([list(a.shape) for a in arrays], dtypes=[np.dtype(a.dtype).name for a in arrays])


def _attention(q, k, v, mask, scale):
    """float64 numpy reference: softmax(q k^T * scale + mask) v over [B, H, S, D]."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    s = q @ np.swapaxes(k, -1, -2) * scale + np.asarray(mask, np.float64)
    s = np.exp(s - s.max(-1, keepdims=True))
    return (s / s.sum(-1, keepdims=True)) @ v


def _mask():
    m = np.zeros((B, 1, 1, S), np.float32)
    m[1, ..., S * 3 // 4:] = -10000.0
    m[0, ..., :3] = -10000.0
    return m


@pytest.mark.parametrize("precision", ["float16", "bfloat16"])
def test_sdpa_matches_numpy_attention_with_scale_and_broadcast_mask(precision):
    dt = _dtype(precision)
    q, k, v = (RNG.standard_normal((B, H, S, D)).astype(dt) for _ in range(3))
    mask = _mask()
    op, t = _op(precision), _gpu("cudnn-sdpa")
    args = [q, k, v, mask]
    assert t.supports(op, _ctx(args)) is None
    got = t.run(op, [_up(a) for a in args])[0].get()
    assert got.shape == (B, H, S, D) and got.dtype == dt
    ref = _attention(q, k, v, mask, 0.125)
    tol = 1e-2 if precision == "float16" else 4e-2
    np.testing.assert_allclose(got.astype(np.float32), ref, atol=tol, rtol=tol)


def test_sdpa_reads_pre_transposed_k_or_refuses_at_build():
    q, k, v = (RNG.standard_normal((B, H, S, D)).astype(np.float16) for _ in range(3))
    kt = np.ascontiguousarray(np.swapaxes(k, -1, -2))
    op, t = _op("float16", transpose_k=False), _gpu("cudnn-sdpa")
    args = [q, kt, v, _mask()]
    why = t.supports(op, _ctx(args))
    if why is not None:      # the build decides (cuDNN may want D-contiguous K): cublas-softmax takes the layer
        assert "cuDNN" in why
        return
    got = t.run(op, [_up(a) for a in args])[0].get()
    np.testing.assert_allclose(got.astype(np.float32), _attention(q, k, v, _mask(), 0.125), atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", ["cudnn-sdpa", "cublas-softmax"])
def test_heads_mode_reads_columns_of_the_qkv_tensor_and_writes_merged_heads(name):
    """One [B, S, 3C] QKV tensor passed three times, read at its column ranges; output [B, S, H*D]."""
    c = H * D
    qkv = RNG.standard_normal((B, S, 3 * c)).astype(np.float16)
    op = _op("float16", heads=H, columns=[0, c, c, 2 * c, 2 * c, 3 * c])
    args = [qkv, qkv, qkv, _mask()]
    t = _gpu(name)
    assert t.supports(op, _ctx(args)) is None
    got = t.run(op, [_up(a) for a in args])[0].get()
    heads = [qkv[..., i * c:(i + 1) * c].reshape(B, S, H, D).transpose(0, 2, 1, 3) for i in range(3)]
    ref = _attention(*heads, _mask(), 0.125).transpose(0, 2, 1, 3).reshape(B, S, c)
    assert got.shape == (B, S, c)
    np.testing.assert_allclose(got.astype(np.float32), ref, atol=1e-2, rtol=1e-2)


def test_sdpa_refuses_what_cudnn_cannot_take():
    t = _gpu("cudnn-sdpa")
    q = np.zeros((B, H, S, D), np.float32)
    assert "FP16/BF16" in t.supports(_op("float32"), _ctx([q, q, q, _mask()]))
    assert "nan_to_zero" in t.supports(_op("float16", nan_to_zero=True), None)
    assert "mask kind" in t.supports(_op("float16", mask_kind="bool"), None)
    bad = np.zeros((B, 2, S, S), np.float32)       # 2 heads of mask for 3 heads of scores
    q16 = q.astype(np.float16)
    assert "broadcast" in t.supports(_op("float16"), _ctx([q16, q16, q16, bad]))


def _cos(a, b):
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.mark.parametrize("tactic", ["cudnn-sdpa", "cublas-softmax"])
def test_engine_folds_heads_and_matches_the_cpu_engine(tmp_path, tactic):
    """A BERT-style block built FP16 on the GPU: q/k/v split, head split and merge fold into the Attention layer,
    which runs on `tactic` (the other one excluded); cosine vs the CPU FP32 engine >= 0.9999."""
    from backends.engine.builder import BuilderConfig
    from backends.engine.builder.config import BuilderFlag
    from backends.runners import EngineRunner
    from native.tactics import all_tactic_names
    from tests.backends.test_attention_heads import _block, _feeds
    path = tmp_path / "block.onnx"
    onnx.save(_block(), path)
    feeds = _feeds()
    other = {"cudnn-sdpa": "cublas-softmax", "cublas-softmax": "cudnn-sdpa"}[tactic]
    config = BuilderConfig()
    config.set_flag(BuilderFlag.FP16)
    config.tactic_sources = sorted(all_tactic_names("cuda") - {other})
    with EngineRunner(str(path), device="cuda", config=config) as gpu, EngineRunner(str(path)) as cpu:
        y, ref = gpu.infer(feeds)["y"], cpu.infer(feeds)["y"]
        nodes = gpu.engine.graph.nodes
    att = [n for n in nodes if n.kind == "Attention"]
    assert len(att) == 1 and att[0].params.get("heads") and att[0].tactic_name == tactic, \
        [(n.kind, n.tactic_name) for n in nodes]
    assert not [n for n in nodes if n.kind in ("Shuffle", "Split")]
    assert _cos(y, ref) > 0.9999
