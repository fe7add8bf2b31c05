"""INT8 convolutions on int8 NHWC tensors through Hopper's Tensor Memory Accelerator (conv_i8t.cuh): the same
implicit GEMM on wgmma with the fused INT8 I/O epilogue (int8_io.cuh: bit-equal to native/shared/int8_io.py), one
producer warp keeping STAGES whole tiles in flight through TMA boxes behind mbarriers while the consumer
warpgroups only multiply. (Its cp.async predecessor, every thread gathering 16-byte chunks, read latency-bound at
25% occupancy in Nsight Compute and lost to cuDNN wherever K was large: docs/PERFORMANCE.md, 2026-11-29.)

A block's 128 pixels are a box of the output (BW x BH pixels of BI images, chosen per layer to waste the fewest
pixels); padding, strides and dilation are the TMA's coordinates, out-of-bounds zero fill and element strides. A
1x1 stride-1 convolution reads its input as one row of N*H*W pixels (no waste). Each (tile shape, residual,
output) kernel is its own small program (compiled on first use, kept in the kernel cache and in plans)."""
from __future__ import annotations

import hashlib
import os

import numpy as np

from native.cuda.driver import _cu, check, context
from native.cuda.nvrtc import KERNEL_DIR, allow_dynamic_shared, kernel_from_source, launch, source_key
from native.cuda.tactics.common import weight
from native.cuda.tactics.conv_i8 import _OUT, _RES, _MmaInt8Conv
from native.shared.int8_io import epilogue_plan, io_of, residual_storage
from native.tactics import TacticRefusal, register_tactic

TBM = 128                        # conv_i8t.cuh: the pixel tile
SMEM_MAX = 232448                # dynamic shared memory a block may opt into on sm_90 (227 KiB)
HEADER = "conv_i8t.cuh"
_MAPS_KEPT = 512                           # tensor maps remembered per tactic (by address and geometry)


def pixel_box(n: int, oh: int, ow: int, sh: int, sw: int) -> tuple[int, int]:
    """(log2 BW, log2 BH) of the 128-pixel output box that wastes the fewest pixels over [n, oh, ow] (BI = 128 /
    (BW * BH) images), the TMA's box limit (256 input elements a dimension) respected; among equals the widest,
    then the tallest (the taps' shifted boxes overlap most in L2)."""
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


def _source(instance: str) -> tuple[str, str]:
    """A program of one kernel of the header (`instance`: its CONV_I8T_KERNEL(...) / CONV_I8P_KERNEL(...) line),
    keyed by the text of the header and the headers it includes too (a kernel cached before an edit of
    int8_io.cuh is not the kernel after it)."""
    digest = hashlib.sha1()
    for name in (HEADER, "int8_io.cuh", "common.cuh"):      # the header and what it includes
        with open(os.path.join(KERNEL_DIR, name), "rb") as f:
            digest.update(f.read())
    src = f"// nvrtc-arch: a\n#include \"{HEADER}\"\n{instance}\n// {HEADER} {digest.hexdigest()}\n"
    return src, source_key(src)


class _TmaInt8Conv(_MmaInt8Conv):
    """wgmma INT8 convolution fed by TMA (conv_i8t.cuh). sm_90 only; input channels in steps of 16 (the TMA's
    16-byte strides), output channels in multiples of the tile width."""
    c_align = 16
    stages = 2
    minb = 1            # blocks per SM the kernel is compiled for (its register budget)
    bk = 128            # K bytes (channels) a stage: 128, or 64 for 64-channel inputs
    warpgroups = 2      # consumer warpgroups (conv_i8t: 2, its TCONSUMERS; the persistent conv_i8p: 2 or 4)

    def __init__(self):
        super().__init__()
        self._maps: dict = {}
        self._fns: dict = {}

    def hardware(self):
        try:
            cc = context().cc
        except Exception as e:  # noqa: BLE001 - no GPU: said as the refusal
            return f"no CUDA device ({e})"
        return None if tuple(cc) == (9, 0) else \
            f"wgmma and the TMA need an sm_90 GPU (Hopper), this one is sm_{cc[0]}{cc[1]}"

    def supports(self, op, input_shapes):
        why = super().supports(op, input_shapes)
        strides = [int(v) for v in op.params.get("strides") or [1, 1]]
        if why is None and max(strides) > 8:
            return f"strides {tuple(strides)}: the TMA steps at most 8 elements"
        if why is None and self.bk < 128 and input_shapes and input_shapes[0] is not None and \
                len(input_shapes[0]) == 4 and int(input_shapes[0][3]) > self.bk:
            return f"{input_shapes[0][3]} input channels: {self.bk}-channel steps are for inputs of at most {self.bk}"
        return why

    def threads(self) -> int:
        """The block: the consumer warpgroups and the producer warp."""
        return self.warpgroups * 128 + 32

    def shared_bytes(self) -> int:
        """Dynamic shared memory (conv_i8t.cuh's layout): the stages, 1 KiB of alignment slack, the int8 output
        tile, three per-channel float vectors and the 2 x stages mbarriers."""
        return self.stages * (TBM + self.bn) * self.bk + 1023 + TBM * (self.bn + 16) + 3 * self.bn * 4 + \
            16 * self.stages

    def kernel(self, res_kind, out_kind):
        key = (res_kind, out_kind)
        hit = self._fns.get(key)
        if hit is None:
            src, skey = _source(self.instance(res_kind, out_kind))
            fn = kernel_from_source(src, self.function(res_kind, out_kind), "conv_i8t_program.cu", skey)
            allow_dynamic_shared(fn, self.shared_bytes())
            hit = self._fns[key] = (fn, self.shared_bytes())
        return hit

    def instance(self, res_kind, out_kind) -> str:
        return f"CONV_I8T_KERNEL({self.bn}, {self.bk}, {self.stages}, {self.minb}, {res_kind}, {out_kind})"

    def function(self, res_kind, out_kind) -> str:
        return f"conv_i8t_bn{self.bn}_k{self.bk}_s{self.stages}_r{res_kind}_o{out_kind}"

    def _map(self, ptr: int, dims, strides, box, elem_strides) -> np.ndarray:
        """A TMA descriptor (CUtensorMap, 128 bytes) of int8 data at `ptr`, swizzled by the box's row bytes (128
        or 64), zero fill outside."""
        key = (ptr, tuple(dims), tuple(strides), tuple(box), tuple(elem_strides))
        hit = self._maps.get(key)
        if hit is None:
            cu = _cu()
            tmap = check(cu.cuTensorMapEncodeTiled(
                cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_UINT8, len(dims), ptr,
                [cu.cuuint64_t(int(d)) for d in dims], [cu.cuuint64_t(int(s)) for s in strides],
                [cu.cuuint32_t(int(b)) for b in box], [cu.cuuint32_t(int(e)) for e in elem_strides],
                cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B if box[0] == 128 else
                cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_64B,
                cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE), "cuTensorMapEncodeTiled")
            hit = np.array([int(v) for v in tmap.opaque], dtype=np.uint64)
            if len(self._maps) >= _MAPS_KEPT:
                self._maps.clear()
            self._maps[key] = hit
        return hit

    def _operands(self, op, inputs, outputs):
        """(x, y, residual or None, its kind, output kind, geometry) of a call, or TacticRefusal; geometry is None
        when the output is empty (nothing to launch). Geometry: the kernel's view of the pixels (images, rows,
        columns, strides, pads), its output box (log2 BW, log2 BH, BI), the tile counts along columns and rows, and
        the input's tensor map."""
        c = self.call(op, inputs, outputs)
        x, y, r = c.x, c.y, c.r
        if y.size == 0:
            return x, y, None, None, c.out_kind, None
        n, h, w, ch = x.shape
        (oh, ow), st, pre, dil, kh, kw, relu = c.out_hw, c.strides, c.pre, c.dil, c.kh, c.kw, c.relu
        p = n * oh * ow
        flat = kh == kw == 1 and tuple(st) == (1, 1) and tuple(pre) == (0, 0)
        if flat:                    # one image of one row of N*H*W pixels: 128 consecutive pixels a tile
            gn, gh, gw, sh, sw, ph, pw = 1, 1, p, 1, 1, 0, 0
            lbw, lbh = 7, 0
            dims, xs = (ch, p, 1, 1), (ch, p * ch, p * ch)
        else:
            gn, gh, gw, (sh, sw), (ph, pw) = n, oh, ow, st, pre
            lbw, lbh = pixel_box(n, oh, ow, sh, sw)
            dims, xs = (ch, w, h, n), (ch, w * ch, h * w * ch)
        bw, bh = 1 << lbw, 1 << lbh
        bi = TBM // (bw * bh)
        ta = self._map(x.ptr, dims, xs, (self.bk, bw * sw, bh * sh, bi), (1, sw, sh, 1))
        geo = dict(n=gn, c=ch, m=c.m, kh=kh, kw=kw, oh=gh, ow=gw, sh=sh, sw=sw, ph=ph, pw=pw, dh=int(dil[0]),
                   dw=int(dil[1]), lbw=lbw, lbh=lbh, bi=bi, tw=-(-gw // bw), th=-(-gh // bh), ta=ta, relu=relu)
        return x, y, r, c.res_kind, c.out_kind, geo

    def _weights(self, op, g):
        """The prepared kernel's tensor map and the epilogue's per-channel vectors (bias, scale, residual scale)."""
        wts = self.prepared(op)
        krsc = weight(wts["int8_krsc"])
        k = g["kh"] * g["kw"] * g["c"]
        tb = self._map(krsc.ptr, (k, g["m"]), (k,), (self.bk, self.bn), (1, 1))
        return tb, [np.uint64(weight(wts[name]).ptr) for name in ("int8_bias", "int8_scale", "int8_res_scale")]

    @staticmethod
    def _ints(g, *extra):
        return [np.int32(v) for v in (g["n"], g["c"], g["m"], g["kh"], g["kw"], g["oh"], g["ow"], g["sh"], g["sw"],
                                      g["ph"], g["pw"], g["dh"], g["dw"], g["lbw"], g["lbh"], g["tw"], g["th"],
                                      *extra, g["relu"])]

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x, y, r, res_kind, out, g = self._operands(op, inputs, outputs)
        if g is None:
            return [y]
        tb, (bias, scale, rscale) = self._weights(op, g)
        grid = (g["tw"] * g["th"] * -(-g["n"] // g["bi"]), g["m"] // self.bn, 1)
        fn, shared = self.kernel(res_kind, out)
        launch(fn, grid, (self.threads(), 1, 1),
               [g["ta"], tb, bias, scale, np.uint64(r.ptr if r is not None else 0), rscale, np.uint64(y.ptr)] +
               self._ints(g), shared=shared)
        return [y]


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


@register_tactic
class TmaInt8Conv64k64(_TmaInt8Conv):
    """TMA-fed wgmma INT8 convolution, 128 x 64 tiles, 64 channels a step, 6 stages (two blocks per SM): for
    64-channel inputs (ResNet's first stage), where 128-channel steps multiply zeros half the time."""
    name = "tma-int8-128x64-k64-s6"
    bn, bk, stages, minb = 64, 64, 6, 2


class _TmaPersistentInt8Conv(_TmaInt8Conv):
    """The persistent form (conv_i8t.cuh, conv_i8p): int8 output, no residual or an int8 one (the inside of an INT8
    chain). One block per SM walks the tiles; the residual comes in and the output goes out through the TMA,
    overlapped with the next tiles (the memory-bound residual 1x1 convolutions of ResNet): `out_buffers` output
    buffers, so each residual is asked for two tiles before it is needed. A storer warp stores each buffer once
    every consumer warp has said (on an mbarrier) that its part is written, so the consumers never wait for one
    another between tiles."""
    minb = 1
    out_buffers = 4
    resident = False    # each block keeps its channel tile of the weights in shared memory (conv_i8p's RB)

    def supports(self, op, input_shapes):
        why = super().supports(op, input_shapes)
        if why:
            return why
        if io_of(op).get("output") != "int8":
            return f"writes {io_of(op).get('output')}: this kernel writes int8 only"
        res_idx, _ = epilogue_plan(op)
        res = residual_storage(op, res_idx, getattr(input_shapes, "dtypes", None))
        if res not in (None, "int8"):
            return f"residual stored {res}: this kernel reads an int8 residual only"
        if self.resident and input_shapes and input_shapes[0] is not None and len(input_shapes[0]) == 4:
            need = self.shared_bytes(self.weight_bytes(op, int(input_shapes[0][3])))
            if need > SMEM_MAX:
                return (f"its {self.bn} columns of the weights and its stages need {need // 1024} KiB of shared "
                        f"memory, more than a block's {SMEM_MAX // 1024}")
            tiles = int(op.params["num_output_maps"]) // self.bn
            if tiles > context().sm_count:
                return f"{tiles} channel tiles: more than the SMs, and each block keeps one"
        return None

    def threads(self) -> int:
        """The block: the consumer warpgroups, the producer warp and the storer warp."""
        return self.warpgroups * 128 + 64

    def weight_bytes(self, op, c: int) -> int:
        """The resident weights' bytes: every K step (taps x bk-channel steps) of bn columns; 0 unless resident."""
        if not self.resident:
            return 0
        kh, kw = (int(k) for k in op.params["kernel_spatial"])
        return kh * kw * -(-c // self.bk) * self.bn * self.bk

    def shared_bytes(self, weights: int = 0) -> int:
        """The resident weights (if any), the stages (A, and B unless resident), `out_buffers` 128 x bn output
        buffers, the mbarriers (two a stage, three an output buffer, the weights'), 1 KiB of alignment slack. The
        kernel's attribute is the most a block may take when the weights are resident (their size is the layer's)."""
        if self.resident and weights == 0:
            return SMEM_MAX
        return weights + self.stages * (TBM + (0 if self.resident else self.bn)) * self.bk + \
            self.out_buffers * TBM * self.bn + 8 * (2 * self.stages + 3 * self.out_buffers + 1) + 1023

    def instance(self, res_kind, out_kind) -> str:
        return (f"CONV_I8P_KERNEL({self.bn}, {self.bk}, {self.stages}, {self.out_buffers}, {self.warpgroups}, "
                f"{res_kind}, {int(self.resident)})")

    def function(self, res_kind, out_kind) -> str:
        return (f"conv_i8p_bn{self.bn}_k{self.bk}_s{self.stages}_o{self.out_buffers}_w{self.warpgroups}_r{res_kind}"
                f"_rb{int(self.resident)}")

    def run(self, op, inputs, outputs=None, workspace=None, stream=None):
        x, y, r, res_kind, out, g = self._operands(op, inputs, outputs)
        if g is None:
            return [y]
        if out != _OUT["int8"] or res_kind not in (_RES[None], _RES["int8"]):
            raise TacticRefusal("the persistent INT8 kernel writes int8 and reads no residual or an int8 one")
        tb, (bias, scale, rscale) = self._weights(op, g)
        m, bw, bh, bi = g["m"], 1 << g["lbw"], 1 << g["lbh"], g["bi"]
        # the output (and residual) as the kernel sees the pixels: [N, OH, OW, M], or [1, 1, P, M] when flat
        dims, strides = (m, g["ow"], g["oh"], g["n"]), (m, g["ow"] * m, g["oh"] * g["ow"] * m)
        box, ones = (min(self.bn, 128), bw, bh, bi), (1, 1, 1, 1)     # conv_i8p's output boxes: OBW bytes wide
        to = self._map(y.ptr, dims, strides, box, ones)
        tr = self._map(r.ptr, dims, strides, box, ones) if r is not None else to
        tiles = g["tw"] * g["th"] * -(-g["n"] // bi) * (m // self.bn)
        blocks = context().sm_count
        fn, shared = self.kernel(res_kind, 0)
        if self.resident:       # a block per channel tile and SM group: each keeps its tile of the weights
            blocks -= blocks % (m // self.bn)
            shared = self.shared_bytes(self.weight_bytes(op, g["c"]))
            if blocks == 0 or shared > SMEM_MAX:
                raise TacticRefusal("resident weights: the channel tiles or the weights do not fit this GPU")
        launch(fn, (min(tiles, blocks), 1, 1), (self.threads(), 1, 1),
               [g["ta"], tb, to, tr, bias, scale, rscale] + self._ints(g, tiles), shared=shared)
        return [y]


@register_tactic
class TmaPersistentInt8Conv128(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution, 128 x 128 tiles, 4 stages, TMA residual loads and output stores."""
    name = "tma-int8-persistent-128x128-s4"
    bn, stages = 128, 4


@register_tactic
class TmaPersistentInt8Conv256w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution, 128 x 256 tiles, 2 stages, four consumer warpgroups."""
    name = "tma-int8-persistent-128x256-s2-w4"
    bn, stages, warpgroups = 256, 2, 4


@register_tactic
class TmaPersistentInt8Conv256k64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution, 128 x 256 tiles, 64 channels a step, 4 stages, four consumer warpgroups."""
    name = "tma-int8-persistent-128x256-k64-s4-w4"
    bn, bk, stages, warpgroups = 256, 64, 4, 4


@register_tactic
class TmaResidentInt8Conv256w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights: 128 x 256 tiles, 3 stages of A, 3 output buffers, four
    consumer warpgroups."""
    name = "tma-int8-resident-128x256-s3-w4"
    bn, stages, out_buffers, warpgroups, resident = 256, 3, 3, 4, True


@register_tactic
class TmaResidentInt8Conv256k64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights: 128 x 256 tiles, 64 channels a step, 4 stages of A,
    4 output buffers, four consumer warpgroups (64-channel inputs)."""
    name = "tma-int8-resident-128x256-k64-s4-w4"
    bn, bk, stages, warpgroups, resident = 256, 64, 4, 4, True


@register_tactic
class TmaResidentInt8Conv128(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights: 128 x 128 tiles, 3 stages of A, 4 output buffers."""
    name = "tma-int8-resident-128x128-s3"
    bn, stages, resident = 128, 3, True


@register_tactic
class TmaResidentInt8Conv64k64(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights for 64 output channels of a 64-channel input (ResNet's
    first stage: its 3x3 and 1x1 convolutions): 128 x 64 tiles, 64 channels a step, 8 stages of A, 4 output buffers
    in the 64-byte swizzle, two consumer warpgroups."""
    name = "tma-int8-resident-128x64-k64-s8"
    bn, bk, stages, resident = 64, 64, 8, True


@register_tactic
class TmaResidentInt8Conv64(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights, 128 x 64 tiles, 6 stages of A, 4 output buffers: the
    64-output convolutions of wider inputs (256 -> 64 1x1)."""
    name = "tma-int8-resident-128x64-s6"
    bn, stages, resident = 64, 6, True


@register_tactic
class TmaPersistentInt8Conv128w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution, 128 x 128 tiles, 4 stages, four consumer warpgroups (64 x 64 each): twice
    the warps to hide the memory-bound residual 1x1 convolutions' epilogue latencies."""
    name = "tma-int8-persistent-128x128-s4-w4"
    bn, stages, warpgroups = 128, 4, 4


@register_tactic
class TmaPersistentInt8Conv128k64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution, 128 x 128 tiles, 64 channels a step, 8 stages, four consumer warpgroups: the
    residual 1x1 convolutions of 64-channel inputs (ResNet's first stage), where 128-channel steps multiply zeros
    half the time."""
    name = "tma-int8-persistent-128x128-k64-s8-w4"
    bn, bk, stages, warpgroups = 128, 64, 8, 4


@register_tactic
class TmaResidentInt8Conv128k64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights: 128 x 128 tiles, 64 channels a step, 8 stages of A,
    four consumer warpgroups."""
    name = "tma-int8-resident-128x128-k64-s8-w4"
    bn, bk, stages, warpgroups, resident = 128, 64, 8, 4, True


@register_tactic
class TmaResidentInt8Conv64k64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights for 64 output channels of a 64-channel input: 128 x 64
    tiles, 64 channels a step, 8 stages of A, four consumer warpgroups of 64 x 32 (m64n32 wgmma): twice the warps
    of the two-warpgroup form to hide the epilogue's latencies (ResNet's stem and first-stage 3x3 convolutions are
    bound by their epilogues' issue)."""
    name = "tma-int8-resident-128x64-k64-s8-w4"
    bn, bk, stages, warpgroups, resident = 64, 64, 8, 4, True


@register_tactic
class TmaResidentInt8Conv64w4(_TmaPersistentInt8Conv):
    """Persistent TMA INT8 convolution with resident weights, 128 x 64 tiles, 6 stages of A, four consumer
    warpgroups of 64 x 32: the 64-output convolutions of wider inputs."""
    name = "tma-int8-resident-128x64-s6-w4"
    bn, stages, warpgroups, resident = 64, 6, 4, True
