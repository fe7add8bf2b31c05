"""The TMA INT8 convolution's output boxes (native/cuda/tactics/conv_i8t.pixel_box), host arithmetic only: 128
pixels a box, the fewest wasted pixels, the TMA's 256-element box limit kept."""
import pytest

from native.cuda.tactics.conv_i8t import pixel_box


def _cover(n, oh, ow, lbw, lbh):
    bw, bh = 1 << lbw, 1 << lbh
    bi = 128 // (bw * bh)
    return -(-ow // bw) * bw * -(-oh // bh) * bh * -(-n // bi) * bi


@pytest.mark.parametrize("n,oh,ow,s,want", [
    (128, 56, 56, 1, (3, 3)),   # 8 x 8 pixels of 2 images: 56 = 7 x 8, nothing wasted; the squarest such box
    (128, 7, 7, 1, (0, 0)),     # one pixel of 128 images: nothing wasted (an 8 x 8 x 2 box would waste 23%)
    (1, 1, 4096, 1, (7, 0)),    # one long row: 128 in a row
    (2, 3, 300, 2, (6, 0)),     # 64 of a row: 300 = 4 x 64 + 44 wastes less than 3 x 128 - 300
])
def test_pixel_box_wastes_the_fewest_pixels(n, oh, ow, s, want):
    got = pixel_box(n, oh, ow, s, s)
    assert got == want
    best = min(_cover(n, oh, ow, a, b) for a in range(8) for b in range(8 - a)
               if (1 << a) * s <= 256 and (1 << b) * s <= 256)
    assert _cover(n, oh, ow, *got) == best
    assert (1 << got[0]) * s <= 256 and (1 << got[1]) * s <= 256


def test_pixel_box_keeps_the_tma_box_limit_at_large_strides():
    lbw, lbh = pixel_box(1, 1, 1000, 8, 8)
    assert (1 << lbw) * 8 <= 256 and (1 << lbh) * 8 <= 256
    assert lbw == 5       # 32 pixels x 8 = 256 elements; 64 would need 512
