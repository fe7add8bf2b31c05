"""Our implicit-GEMM INT8 convolutions on int8 NHWC tensors (native/cuda/tactics/conv_i8.py: mma.sync and Hopper's
wgmma kernels): each one's output equals the
INT8 I/O contract (tests.backends.test_int8_io.NumpyInt8IO: the fused epilogue in float32, in its order) bit for
bit — 1x1 and 3x3 windows, strides, padding, partial pixel tiles, int8 / float32 / float16 residuals, int8 and
float32 outputs — and it refuses channel counts its tiles do not take. Skipped without a GPU."""
import numpy as np
import pytest

from tests.backends.test_int8_io import NumpyInt8IO
from tests.native.cuda.test_cuda_int8_io import _op

pytestmark = pytest.mark.cuda


NAMES = ["mma-int8-128x128", "mma-int8-128x64", "tma-int8-128x128-s2", "tma-int8-128x64-s4", "tma-int8-128x64-k64-s6",
         "tma-int8-persistent-128x128-s4"]
TMA = ["tma-int8-128x128-s2", "tma-int8-128x256-s3", "tma-int8-128x64-s4", "tma-int8-128x64-k64-s6",
       "tma-int8-persistent-128x128-s4", "tma-int8-persistent-128x256-s2-w4", "tma-int8-persistent-128x256-k64-s4-w4",
       "tma-int8-resident-128x256-s3-w4", "tma-int8-resident-128x256-k64-s4-w4", "tma-int8-resident-128x128-s3",
       "tma-int8-resident-128x64-k64-s8", "tma-int8-resident-128x64-s6", "tma-int8-persistent-128x128-s4-w4",
       "tma-int8-persistent-128x128-k64-s8-w4", "tma-int8-resident-128x128-k64-s8-w4",
       "tma-int8-resident-128x64-k64-s8-w4", "tma-int8-resident-128x64-s6-w4"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("c,m,k,stride,residual,relu,out,n,h", [
    (64, 128, 1, 1, None, True, "int8", 2, 9), (32, 128, 3, 1, None, True, "int8", 2, 9),
    (64, 128, 1, 2, None, False, "int8", 3, 15), (96, 128, 3, 2, None, True, "int8", 1, 17),
    (64, 128, 1, 1, "int8", True, "int8", 2, 12), (64, 128, 1, 1, "int8", False, "int8", 1, 5),
    (64, 128, 1, 1, "float32", True, "int8", 2, 9), (64, 128, 1, 1, "float16", False, "int8", 2, 9),
    (32, 128, 3, 2, None, True, "float32", 2, 9), (64, 256, 1, 1, "int8", False, "float32", 2, 9),
    (128, 256, 1, 1, "int8", True, "int8", 4, 16)])
def test_mma_int8_conv_equals_the_int8_io_contract_bit_for_bit(name, c, m, k, stride, residual, relu, out, n, h):
    _check(name, c, m, k, stride, residual, relu, out, n, h)


@pytest.mark.parametrize("name", NAMES[2:])
@pytest.mark.parametrize("c,m,k,stride,residual,relu,out,n,h", [
    (16, 128, 3, 1, "int8", True, "int8", 2, 9), (48, 128, 3, 2, None, False, "int8", 2, 11),
    (1024, 256, 1, 1, None, True, "int8", 2, 7), (512, 128, 3, 1, "float32", True, "float32", 1, 7)])
def test_wgmma_int8_conv_takes_16_channel_steps_and_long_k(name, c, m, k, stride, residual, relu, out, n, h):
    """K that is not a multiple of the 128-deep step (16 and 48 channels: zero-filled tails, chunks from several
    taps in one step) and K of 1024 and 4608 (many stages through the pipeline)."""
    _check(name, c, m, k, stride, residual, relu, out, n, h)


@pytest.mark.parametrize("name", TMA)
@pytest.mark.parametrize("c,m,k,stride,dil,residual,relu,out,n,h", [
    (64, 256, 1, 1, 1, "int8", True, "int8", 3, 11),      # flat 1x1: tiles of 128 consecutive pixels, a partial one
    (256, 256, 1, 2, 1, None, False, "int8", 4, 13),      # 1x1 stride 2 (a downsample): a box with element strides
    (192, 256, 3, 1, 1, "int8", True, "int8", 5, 7),      # 7x7 maps: boxes spanning images; 192 = 1.5 K steps a tap
    (64, 256, 3, 2, 1, "float32", True, "float32", 2, 29),  # 3x3 stride 2, odd map, padding on both sides
    (48, 256, 3, 1, 2, None, True, "int8", 2, 12),        # dilation 2: taps two pixels apart, zero fill at the edges
    (512, 256, 3, 1, 1, "float16", False, "int8", 3, 14),  # K of 4608 through the stages many times over
    (16, 256, 7, 2, 1, None, True, "int8", 1, 40),         # a 7x7 stride-2 stem on 16 channels
    (64, 256, 1, 1, 1, "int8", True, "int8", 4, 100),     # 313 x 2 tiles: a persistent block takes several, its
    (64, 256, 3, 1, 1, "int8", False, "int8", 8, 40),     # two output buffers reused (flat, then 8 x 8 x 2 boxes)
    (128, 512, 1, 1, 1, "int8", True, "int8", 3, 50),     # 2 or 4 channel tiles: a resident block keeps its own
    (64, 64, 3, 1, 1, "int8", True, "int8", 4, 24),       # 64 outputs (64-byte output boxes), 8 x 8 x 2 pixel boxes
    (256, 64, 1, 1, 1, "int8", False, "int8", 2, 33),     # 64 outputs of a wider input, flat, a partial last tile
    (64, 64, 1, 1, 1, None, True, "int8", 3, 56)])        # 64 -> 64 1x1 over many tiles per block
def test_tma_int8_conv_boxes_strides_dilation_and_images(name, c, m, k, stride, dil, residual, relu, out, n, h):
    """The TMA kernels' own geometry: output boxes of several images, element strides, dilated taps, zero fill in
    the padding and past the channels, long K."""
    _check(name, c, m, k, stride, residual, relu, out, n, h, dil)


def _check(name, c, m, k, stride, residual, relu, out, n, h, dil=1):
    from native.cuda.array import GpuArray
    from native.tactics import LayerContext, tactics_for
    rng = np.random.default_rng(11)
    op = _op(c, m, k, stride, residual, relu, out, rng)
    pad = dil * (k // 2)
    op.params.update(dilations=[dil, dil], pre_padding=[pad, pad], post_padding=[pad, pad])
    if residual == "float16":
        op.params["int8"].pop("residual_scales", None)
    x = rng.integers(-128, 128, (n, h, h, c)).astype(np.int8)
    oh = (h + 2 * pad - dil * (k - 1) - 1) // stride + 1
    r = None
    if residual == "int8":
        r = rng.integers(-128, 128, (n, oh, oh, m)).astype(np.int8)
    elif residual:
        r = (rng.standard_normal((n, oh, oh, m)) * 2).astype(residual)
    inputs = [x, None, None] + ([r] if r is not None else [])
    want = NumpyInt8IO().run(op, inputs)[0]
    tactic = next(t for t in tactics_for("ConvolutionNHWC", "cuda") if t.name == name)
    dev = [GpuArray.from_host(a) if a is not None else None for a in inputs]
    why = tactic.supports(op, LayerContext.of(dev))
    refusals = []   # what the tactic does not take: refused, and it says why
    if name.startswith(("tma-int8-persistent", "tma-int8-resident")) and \
            (out != "int8" or residual not in (None, "int8")):
        refusals.append("this kernel writes int8" if out != "int8" else "reads an int8 residual only")
    if "-resident-" in name:
        from native.cuda.tactics.conv_i8t import SMEM_MAX
        if tactic.shared_bytes(tactic.weight_bytes(op, c)) > SMEM_MAX:
            refusals.append("KiB of shared memory")
    if "-k64-" in name and c > 64:
        refusals.append("are for inputs of at most 64")
    if m % tactic.bn:
        refusals.append(f"not a multiple of this tile's {tactic.bn}")
    if refusals:
        assert why and any(r in why for r in refusals), (why, refusals)
        return
    assert why is None, why
    got = tactic.run(op, dev)[0].get()
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype)
    np.testing.assert_array_equal(got, want)
    if out == "int8":       # the values are not all saturated: the test sees the epilogue, not just the clamp
        assert len(np.unique(got)) > 50


def test_mma_int8_conv_refuses_channels_its_tiles_do_not_take():
    from native.tactics import tactics_for
    rng = np.random.default_rng(0)
    by = {t.name: t for t in tactics_for("ConvolutionNHWC", "cuda")}
    assert "multiple of 32" in by["mma-int8-128x64"].supports(_op(48, 64, 1, 1, None, True, "int8", rng),
                                                              [[2, 9, 9, 48]])
    assert "multiple of this tile's 128" in by["mma-int8-128x128"].supports(
        _op(64, 64, 1, 1, None, True, "int8", rng), [[2, 9, 9, 64]])
    assert by["mma-int8-128x64"].supports(_op(64, 64, 1, 1, None, True, "int8", rng), [[2, 9, 9, 64]]) is None
    assert "multiple of 16" in by["tma-int8-128x64-s4"].supports(_op(24, 64, 1, 1, None, True, "int8", rng),
                                                                 [[2, 9, 9, 24]])
    assert by["tma-int8-128x64-s4"].supports(_op(48, 64, 1, 1, None, True, "int8", rng), [[2, 9, 9, 48]]) is None
    assert "at most 8" in by["tma-int8-128x128-s2"].supports(_op(64, 128, 1, 9, None, True, "int8", rng),
                                                            [[1, 40, 40, 64]])
