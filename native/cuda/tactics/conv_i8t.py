"""INT8 convolutions on int8 NHWC tensors through Hopper's Tensor Memory Accelerator (conv_i8t.cuh): the same
implicit GEMM on wgmma and the same fused INT8 I/O epilogue as conv_i8w.cu (bit-equal to native/shared/int8_io.py),
but one producer warp keeps STAGES whole tiles in flight through TMA boxes behind mbarriers while two consumer
warpgroups only multiply, instead of every thread gathering 16-byte chunks with cp.async (which Nsight Compute
read latency-bound at 25% occupancy, docs/PERFORMANCE.md 2026-11-29).

A block's 128 pixels are a box of the output (BW x BH pixels of BI images, chosen per layer to waste the fewest
pixels); padding, strides and dilation are the TMA's coordinates, out-of-bounds zero fill and element strides. A
1x1 stride-1 convolution reads its input as one row of N*H*W pixels (no waste). Each (tile shape, residual,
output) kernel is its own small program (compiled on first use, kept in the kernel cache and in plans)."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from native.cuda.driver import _cu, check
from native.cuda.nvrtc import KERNEL_DIR, allow_dynamic_shared, kernel_from_source, launch, source_key
from native.cuda.tactics.common import on_device, out_array, weight
from native.cuda.tactics.conv_i8 import _OUT, _RES, _WgmmaInt8Conv
from native.shared.int8_io import epilogue_plan, io_of, nhwc_geometry
from native.tactics import TacticRefusal, register_tactic

TBM, TBK, THREADS = 128, 128, 288          # conv_i8t.cuh: pixel tile, K bytes a stage, 2 warpgroups + producer warp
HEADER = "conv_i8t.cuh"
_MAPS_KEPT = 512                           # tensor maps remembered per tactic (by address and geometry)


def pixel_box(n: int, oh: int, ow: int, sh: int, sw: int) -> tuple[int, int]:
    """(log2 BW, log2 BH) of the 128-pixel output box that wastes the fewest pixels over [n, oh, ow] (BI = 128 /
    (BW * BH) images), the TMA's box limit (256 input elements a dimension) respected; ties go to wider boxes."""
    best = None
    for lbw in range(8):
        for lbh in range(8 - lbw):
            bw, bh = 1 << lbw, 1 << lbh
            bi = TBM // (bw * bh)
            if bw * sw > 256 or bh * sh > 256:
                continue
            cover = -(-ow // bw) * bw * -(-oh // bh) * bh * -(-n // bi) * bi
            key = (cover, -lbw, -lbh)
            if best is None or key < best[0]:
                best = (key, (lbw, lbh))
    return best[1]


def _source(bn: int, stages: int, minb: int, res: int, out: int) -> tuple[str, str]:
    with open(os.path.join(KERNEL_DIR, HEADER)) as f:
        header = f.read()
    src = (f"// nvrtc-arch: a\n#include \"{HEADER}\"\nCONV_I8T_KERNEL({bn}, {stages}, {minb}, {res}, {out})\n"
           f"// {HEADER} {hashlib.sha1(header.encode()).hexdigest()}\n")
    return src, source_key(src)


class _TmaInt8Conv(_WgmmaInt8Conv):
    """wgmma INT8 convolution fed by TMA (conv_i8t.cuh). sm_90 only; input channels in steps of 16 (the TMA's
    16-byte strides), output channels in multiples of the tile width."""
    c_align = 16
    minb = 1            # blocks per SM the kernel is compiled for (its register budget)

    def __init__(self):
        super().__init__()
        self._maps: dict = {}
        self._fns: dict = {}

    def supports(self, op, input_shapes):
        why = super().supports(op, input_shapes)
        strides = [int(v) for v in op.params.get("strides") or [1, 1]]
        if why is None and max(strides) > 8:
            return f"strides {tuple(strides)}: the TMA steps at most 8 elements"
        return why

    def shared_bytes(self) -> int:
        """Dynamic shared memory (conv_i8t.cuh's layout): the stages, 1 KiB of alignment slack, the int8 output
        tile, three per-channel float vectors and the 2 x stages mbarriers."""
        return self.stages * (TBM * TBK + self.bn * TBK) + 1023 + TBM * (self.bn + 16) + 3 * self.bn * 4 + \
            16 * self.stages

    def kernel(self, res_kind, out_kind):
        key = (res_kind, out_kind)
        hit = self._fns.get(key)
        if hit is None:
            src, skey = _source(self.bn, self.stages, self.minb, res_kind, out_kind)
            fn = kernel_from_source(src, f"conv_i8t_bn{self.bn}_s{self.stages}_r{res_kind}_o{out_kind}",
                                    "conv_i8t_program.cu", skey)
            allow_dynamic_shared(fn, self.shared_bytes())
            hit = self._fns[key] = (fn, self.shared_bytes())
        return hit

    def _map(self, ptr: int, dims, strides, box, elem_strides) -> np.ndarray:
        """A TMA descriptor (CUtensorMap, 128 bytes) of int8 data at `ptr`, 128-byte swizzle, zero fill outside."""
        key = (ptr, tuple(dims), tuple(strides), tuple(box), tuple(elem_strides))
        hit = self._maps.get(key)
        if hit is None:
            cu = _cu()
            tmap = check(cu.cuTensorMapEncodeTiled(
                cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, len(dims), ptr,
                [cu.cuuint64_t(int(d)) for d in dims], [cu.cuuint64_t(int(s)) for s in strides],
                [cu.cuuint32_t(int(b)) for b in box], [cu.cuuint32_t(int(e)) for e in elem_strides], cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
            hit = np.array([int(v) for v in tmap.opaque], dtype=np.uint64)
            if len(self._maps) >= _MAPS_KEPT:
                self._maps.clear()
            self._maps[key] = hit
        return hit

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        wts = self.prepared(op)
        x = on_device(inputs[0])
        if x.dtype != np.int8:
            raise TacticRefusal(f"the INT8 TMA convolution reads int8 NHWC input, got {x.dtype}")
        n, h, w, c = x.shape
        m = int(op.params["num_output_maps"])
        kh, kw = (int(k) for k in op.params["kernel_spatial"])
        if c % self.c_align or m % self.bn:
            raise TacticRefusal(f"channels {c} -> {m} do not fit this kernel ({self.c_align}-channel input steps, "
                                f"{self.bn}-wide tiles)")
        st, pre, _, dil, (oh, ow) = nhwc_geometry(op, x.shape)
        out = io_of(op)["output"]
        y = out_array(outputs, 0, (n, oh, ow, m), np.dtype(out))
        if y.size == 0:
            return [y]
        res_idx, relu = epilogue_plan(op)
        r = on_device(inputs[res_idx]) if res_idx is not None else None
        res_kind = _RES.get(np.dtype(r.dtype).name if r is not None else None)
        if res_kind is None:
            raise TacticRefusal(f"residual stored {r.dtype}")
        for a in (x, y, r):
            if a is not None and a.ptr % 16:
                raise TacticRefusal("the kernel reads and writes 16-byte aligned tensors")
        p = n * oh * ow
        if p >= 2 ** 31 or n * h * w >= 2 ** 31:
            raise TacticRefusal("more than 2^31 pixels: the kernel indexes pixels with 32-bit integers")
        flat = kh == kw == 1 and tuple(st) == (1, 1) and tuple(pre) == (0, 0)
        if flat:                    # one image of one row of N*H*W pixels: 128 consecutive pixels a tile
            gn, gh, gw, sh, sw, ph, pw = 1, 1, p, 1, 1, 0, 0
            lbw, lbh = 7, 0
            dims, xs = (c, p, 1, 1), (c, p * c, p * c)
        else:
            gn, gh, gw, (sh, sw), (ph, pw) = n, oh, ow, st, pre
            lbw, lbh = pixel_box(n, oh, ow, sh, sw)
            dims, xs = (c, w, h, n), (c, w * c, h * w * c)
        bw, bh = 1 << lbw, 1 << lbh
        bi = TBM // (bw * bh)
        ta = self._map(x.ptr, dims, xs, (TBK, bw * sw, bh * sh, bi), (1, sw, sh, 1))
        krsc = weight(wts["int8_krsc"])
        k = kh * kw * c
        tb = self._map(krsc.ptr, (k, m), (k,), (TBK, self.bn), (1, 1))
        tw, th = -(-gw // bw), -(-gh // bh)
        grid = (tw * th * -(-gn // bi), m // self.bn, 1)
        fn, shared = self.kernel(res_kind, _OUT[out])
        i32 = np.int32
        launch(fn, grid, (THREADS, 1, 1),
               [ta, tb, np.uint64(weight(wts["int8_bias"]).ptr), np.uint64(weight(wts["int8_scale"]).ptr),
                np.uint64(r.ptr if r is not None else 0), np.uint64(weight(wts["int8_res_scale"]).ptr),
                np.uint64(y.ptr), i32(gn), i32(c), i32(m), i32(kh), i32(kw), i32(gh), i32(gw), i32(sh), i32(sw),
                i32(ph), i32(pw), i32(dil[0]), i32(dil[1]), i32(lbw), i32(lbh), i32(tw), i32(th), i32(relu)],
               shared=shared)
        return [y]


@register_tactic
class TmaInt8Conv128x4(_TmaInt8Conv):
    """TMA-fed wgmma INT8 convolution, 128 x 128 tiles, 4 stages (one block per SM)."""
    name = "tma-int8-128x128-s4"
    bn, stages = 128, 4


@register_tactic
class TmaInt8Conv128x2(_TmaInt8Conv):
    """TMA-fed wgmma INT8 convolution, 128 x 128 tiles, 2 stages (two blocks per SM)."""
    name = "tma-int8-128x128-s2"
    bn, stages, minb = 128, 2, 2


@register_tactic
class TmaInt8Conv256x3(_TmaInt8Conv):
    """TMA-fed wgmma INT8 convolution, 128 x 256 tiles, 3 stages (one block per SM): the input read once per 256
    output channels."""
    name = "tma-int8-128x256-s3"
    bn, stages = 256, 3


@register_tactic
class TmaInt8Conv64x4(_TmaInt8Conv):
    """TMA-fed wgmma INT8 convolution, 128 x 64 tiles, 4 stages (two blocks per SM)."""
    name = "tma-int8-128x64-s4"
    bn, stages, minb = 64, 4, 2
