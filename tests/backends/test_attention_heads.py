"""Attention heads as strides (passes/attention_heads.py): the QKV Split, head split and head merge fold into the
Attention layer (heads, columns) on a device that reads strides; the result equals the unfolded engine."""
import numpy as np
import pytest
from onnx import helper

from backends.engine.builder.passes.attention_heads import fold_attention_heads
from native.device import get_device
from tests.backends.fusion_helpers import RNG, build, const, kinds, model, run

B, S, H, D = 2, 6, 4, 8
C = H * D


def _block(q_perm=(0, 2, 1, 3), q_dims=(B, S, H, D), merged=(B, S, C)):
    """x [B, S, C] -> q/k/v projections (bias) -> heads -> scaled, masked attention -> merged -> output GEMM."""
    nodes = []
    for t in "qkv":
        nodes += [helper.make_node("MatMul", ["x", f"w{t}"], [f"{t}m"], name=f"{t}_proj"),
                  helper.make_node("Add", [f"{t}m", f"b{t}"], [f"{t}b"], name=f"{t}_bias")]
    merge = [helper.make_node("Transpose", ["o"], ["ot"], name="merge", perm=[0, 2, 1, 3])]
    if len(merged) == 2:   # GPT-2's: a no-op reshape fused with the transpose, then a 2-D reshape for a Gemm
        merge = [helper.make_node("Reshape", ["o", "ohshape"], ["o4"], name="merge_noop"),
                 helper.make_node("Transpose", ["o4"], ["ot"], name="merge", perm=[0, 2, 1, 3])]
    nodes += [helper.make_node("Reshape", ["qb", "qshape"], ["qr"], name="q_reshape"),
              helper.make_node("Transpose", ["qr"], ["qh"], name="q_heads", perm=list(q_perm)),
              helper.make_node("Reshape", ["kb", "hshape"], ["kr"], name="k_reshape"),
              helper.make_node("Transpose", ["kr"], ["kh"], name="k_heads", perm=[0, 2, 3, 1]),
              helper.make_node("Reshape", ["vb", "hshape"], ["vr"], name="v_reshape"),
              helper.make_node("Transpose", ["vr"], ["vh"], name="v_heads", perm=[0, 2, 1, 3]),
              helper.make_node("MatMul", ["qh", "kh"], ["s"], name="qk"),
              helper.make_node("Div", ["s", "scale"], ["ss"], name="scale"),
              helper.make_node("Add", ["ss", "mask"], ["sm"], name="mask_add"),
              helper.make_node("Softmax", ["sm"], ["p"], name="softmax", axis=-1),
              helper.make_node("MatMul", ["p", "vh"], ["o"], name="pv")] + merge + [
              helper.make_node("Reshape", ["ot", "oshape"], ["om"], name="merge_reshape"),
              helper.make_node("MatMul", ["om", "wo"], ["y"], name="out_proj")]
    inits = [const(f"w{t}", RNG.standard_normal((C, C)).astype(np.float32) / 4) for t in "qkvo"]
    inits += [const(f"b{t}", RNG.standard_normal(C).astype(np.float32)) for t in "qkv"]
    inits += [const("qshape", np.array(q_dims, np.int64)), const("hshape", np.array([B, S, H, D], np.int64)),
              const("oshape", np.array(merged, np.int64)), const("scale", np.float32(np.sqrt(D))),
              const("ohshape", np.array([B, H, S, D], np.int64))]
    return model(nodes, [("x", [B, S, C]), ("mask", [B, 1, 1, S])], ["y"], inits)


def _feeds():
    mask = np.zeros((B, 1, 1, S), np.float32)
    mask[1, ..., 4:] = -10000.0
    return {"x": RNG.standard_normal((B, S, C)).astype(np.float32), "mask": mask}


@pytest.fixture
def strided(monkeypatch):
    """The CPU device as one whose attention reads strides (its own setting, and the CUDA device's)."""
    monkeypatch.setattr(type(get_device("cpu")), "attention_heads_as_strides", True)


@pytest.fixture
def copies(monkeypatch):
    """The CPU device as one whose attention copies the heads itself."""
    monkeypatch.setattr(type(get_device("cpu")), "attention_heads_as_strides", False)


def test_the_cpu_device_reads_strides():
    assert get_device("cpu").attention_heads_as_strides


def test_heads_fold_into_attention_and_match_the_unfolded_engine(strided):
    m, feeds = _block(), _feeds()
    folded = build(m)
    att = [n for n in folded.nodes if n.kind == "Attention"]
    assert len(att) == 1 and att[0].params["heads"] == H
    assert att[0].params["columns"] == [0, C, C, 2 * C, 2 * C, 3 * C]   # one merged QKV GEMM, read by columns
    assert att[0].inputs[0] == att[0].inputs[1] == att[0].inputs[2]
    assert "Shuffle" not in kinds(folded) and "Split" not in kinds(folded)
    ref = run(build(m, fusion=False), feeds)[0]
    np.testing.assert_allclose(run(folded, feeds)[0], ref, rtol=1e-5, atol=1e-5)


def test_no_fold_on_a_device_that_copies_heads(copies):
    att = [n for n in build(_block()).nodes if n.kind == "Attention"]
    assert len(att) == 1 and not att[0].params.get("heads")


def test_a_reshape_that_is_not_a_head_split_stays(strided):
    """q reshaped to [B, H, S, D] without a transpose reinterprets memory: not a head split, nothing folds."""
    m, feeds = _block(q_perm=(0, 1, 2, 3), q_dims=(B, H, S, D)), _feeds()
    folded = build(m)
    att = [n for n in folded.nodes if n.kind == "Attention"]
    assert len(att) == 1 and not att[0].params.get("heads")
    np.testing.assert_allclose(run(folded, feeds)[0], run(build(m, fusion=False), feeds)[0], rtol=1e-5, atol=1e-5)


def test_pass_is_off_without_the_device_flag(copies):
    class Config:
        device = get_device("cpu")
    assert fold_attention_heads(None, Config(), None) == 0


def test_a_merge_that_ends_in_a_gemms_reshape_folds_and_the_reshape_reads_the_merged_tensor(strided):
    """GPT-2: the head merge reaches the merged order as [B, S, H, D] and a Shuffle then reshapes it to [B*S, C] for
    the output Gemm: the merge folds, that Shuffle reads the layer's [B, S, C] output, the same floats."""
    m, feeds = _block(merged=(B * S, C)), _feeds()
    folded = build(m)
    att = [n for n in folded.nodes if n.kind == "Attention"]
    assert len(att) == 1 and att[0].params["heads"] == H
    out = att[0].outputs[0]
    assert folded.tensor_info[out].shape == [B, S, C]
    readers = [n for n in folded.nodes if out in n.inputs]
    assert [n.kind for n in readers] == ["Shuffle"] and kinds(folded).count("Shuffle") == 1
    assert "Split" not in kinds(folded)
    ref = run(build(m, fusion=False), feeds)[0]
    np.testing.assert_allclose(run(folded, feeds)[0], ref, rtol=1e-5, atol=1e-5)
