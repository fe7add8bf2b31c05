// INT8 convolutions on int8 NHWC tensors as implicit GEMMs fed by Hopper's Tensor Memory Accelerator: wgmma
// m64nNk32 s8 x s8 -> s32 and int8_io.cuh's fused epilogue, so the outputs equal native/shared/int8_io.py bit for
// bit. Templates instantiated by conv_i8t.py, one kernel per generated program (CONV_I8T_KERNEL / CONV_I8P_KERNEL):
// each program compiles only the kernel it runs.
//
// Why: a kernel whose threads gather their operands with cp.async (16 bytes and one address computation per chunk
// per thread, one stage in flight) read latency-bound at 25% occupancy in Nsight Compute, issue slots going to
// addresses. Here one producer thread asks the TMA for whole tiles (a box of the 4-D NHWC input per filter tap,
// zero-filled in the padding and past the channels; a box of the KRSC kernel), BK (128 or 64) channels a step,
// STAGES deep, each stage behind a pair of mbarriers (full: its bytes landed; empty: every consumer warp's wgmmas
// finished reading it). The consumer warpgroups only issue wgmma and run the epilogue.
//
// A block's 128 output pixels are a box of BW x BH pixels of BI images (BW * BH * BI = 128, powers of two, chosen
// by the host to waste the fewest pixels at this output size); a 1x1 stride-1 convolution is given as one image of
// one row of N*H*W pixels, so its tiles are 128 consecutive pixels and waste nothing. Strides are the TMA's element
// strides. The smem tiles land in wgmma's BK-byte swizzle, which is the TMA's SWIZZLE_128B / SWIZZLE_64B (BK = 64
// for 64-channel inputs, where a 128-wide step would multiply zeros half the time).
#pragma once
#include "common.cuh"
#include "int8_io.cuh"

#define TBM 128
#define TCONSUMERS 256
#define TTHREADS (TCONSUMERS + 32)

struct alignas(64) TmaDesc { unsigned long long v[16]; };   // a CUtensorMap, passed by value (__grid_constant__)

__device__ __forceinline__ unsigned t_smem(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void t_bar_init(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void t_bar_expect(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void t_bar_arrive(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(bar) : "memory");
}
__device__ __forceinline__ void t_bar_wait(unsigned bar, unsigned parity) {
    unsigned done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}
__device__ __forceinline__ void t_load_4d(unsigned dst, const TmaDesc* map, int c, int x, int y, int z, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4, %5}], [%6];\n"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(c), "r"(x), "r"(y), "r"(z), "r"(bar) : "memory");
}
__device__ __forceinline__ void t_load_2d(unsigned dst, const TmaDesc* map, int k, int n, unsigned bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(dst), "l"((unsigned long long)map), "r"(k), "r"(n), "r"(bar) : "memory");
}
__device__ __forceinline__ void t_cp16(unsigned dst, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void t_consumers_sync() { asm volatile("bar.sync 1, 256;\n" ::: "memory"); }

// a K-major operand tile in shared memory, rows of BK bytes in the BK-byte swizzle (what the TMA's SWIZZLE_128B /
// SWIZZLE_64B write), 8-row groups 8 * BK bytes apart
template <int BK> __device__ __forceinline__ unsigned long long t_desc(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((8 * BK) >> 4) << 32) |
           ((BK == 128 ? 1ull : 2ull) << 62);
}

#define T_R8(o) "+r"(d[o]), "+r"(d[o + 1]), "+r"(d[o + 2]), "+r"(d[o + 3]), "+r"(d[o + 4]), "+r"(d[o + 5]), \
                "+r"(d[o + 6]), "+r"(d[o + 7])
#define T_R16(o) T_R8(o), T_R8(o + 8)
#define T_R32(o) T_R8(o), T_R8(o + 8), T_R8(o + 16), T_R8(o + 24)

__device__ __forceinline__ void t_mma32(int* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\nwgmma.mma_async.sync.aligned.m64n32k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p;\n}\n"
                 : T_R16(0) : "l"(a), "l"(b), "r"(acc));
}

__device__ __forceinline__ void t_mma64(int* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\nwgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p;\n}\n"
                 : T_R32(0) : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void t_mma128(int* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\nwgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63}, %64, %65, p;\n}\n"
                 : T_R32(0), T_R32(32) : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void t_mma256(int* d, unsigned long long a, unsigned long long b, int acc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\nwgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, "
                 "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, "
                 "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, "
                 "%114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p;\n}\n"
                 : T_R32(0), T_R32(32), T_R32(64), T_R32(96) : "l"(a), "l"(b), "r"(acc));
}
// d (+)= a * b: acc 0 starts the accumulators (wgmma's scale-d), so a tile's first K step needs no zeroed registers
template <int BN>
__device__ __forceinline__ void t_mma(int* d, unsigned long long a, unsigned long long b, int acc) {
    if (BN == 256) t_mma256(d, a, b, acc); else if (BN == 128) t_mma128(d, a, b, acc);
    else if (BN == 64) t_mma64(d, a, b, acc); else t_mma32(d, a, b, acc);
}

// The stage ring both kernels share: STAGES slots of A (128 x BK) + B (BN x BK), a full and an empty mbarrier
// each; `stage` / `round` is a side's position in it (the producer's and the consumers' advance alike). RB: the
// weights are resident (conv_i8p loads a block's BN columns of every K step once, at `bres`, step k at
// bres + k * BN * BK), so the slots hold A only.
template <int BN, int BK, int STAGES, int RB = 0>
struct TRing {
    static constexpr int A_BYTES = TBM * BK, STAGE = A_BYTES + (RB ? 0 : BN * BK);
    unsigned base, full0, empty0, bres = 0;
    int stage = 0, round = 0, step = 0;

    // the producer: one tile's K steps (filter taps x BK-channel steps), each once its slot is free
    __device__ __forceinline__ void produce(const TmaDesc* ta, const TmaDesc* tb, int C, int KH, int KW, int x0,
                                            int y0, int i0, int n0, int dh, int dw) {
        for (int r = 0; r < KH; ++r)
            for (int s = 0; s < KW; ++s)
                for (int c0 = 0; c0 < C; c0 += BK, ++step) {
                    if (step >= STAGES) t_bar_wait(empty0 + stage * 8, (round - 1) & 1);
                    const unsigned fb = full0 + stage * 8, st = base + stage * STAGE;
                    t_bar_expect(fb, STAGE);
                    t_load_4d(st, ta, c0, x0 + s * dw, y0 + r * dh, i0, fb);
                    if (!RB) t_load_2d(st + A_BYTES, tb, (r * KW + s) * C + c0, n0, fb);
                    if (++stage == STAGES) { stage = 0; ++round; }
                }
    }

    // a consumer warpgroup: `steps` (>= 1) K steps into acc, which the first one overwrites (rows wm.., columns wn.. of the tile, WN wide); each slot is
    // given back (one arrival per warp) once the step after it has been issued and it is done, the last at the end
    template <int WN>
    __device__ __forceinline__ void consume(int* acc, int steps, int wm, int wn, int lane) {
        int prev = 0;
        for (int k = 0; k < steps; ++k) {
            t_bar_wait(full0 + stage * 8, round & 1);
            const unsigned st = base + stage * STAGE, sb = RB ? bres + k * (BN * BK) : st + A_BYTES;
            asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
            for (int kk = 0; kk < BK / 32; ++kk)
                t_mma<WN>(acc, t_desc<BK>(st + wm * BK + kk * 32), t_desc<BK>(sb + wn * BK + kk * 32), k + kk);
            asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
            asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");   // the step before this one is done
            if (k > 0 && lane == 0) t_bar_arrive(empty0 + prev * 8);           // ... so its slot may be refilled
            prev = stage;
            if (++stage == STAGES) { stage = 0; ++round; }
        }
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#pragma unroll
        for (int i = 0; i < WN / 2; ++i) asm volatile("" : "+r"(acc[i]) :: "memory");   // read after the wait only
        if (steps > 0 && lane == 0) t_bar_arrive(empty0 + prev * 8);
    }
};

// the output pixel (flat index into [N, OH, OW]) of tile row `row`, or -1 past the map
struct TilePixels {
    int n0, oh0, ow0, lbw, lbh, N, OH, OW;
    __device__ __forceinline__ long long at(int row) const {
        const int wi = row & ((1 << lbw) - 1), hi = (row >> lbw) & ((1 << lbh) - 1), ni = row >> (lbw + lbh);
        const int n = n0 + ni, oh = oh0 + hi, ow = ow0 + wi;
        return (n < N && oh < OH && ow < OW) ? ((long long)n * OH + oh) * OW + ow : -1;
    }
};

// ta: the input [N][H][W][C] int8 (dims C, W, H, N; box BK x BW*sw x BH*sh x BI, element strides 1, sw, sh, 1);
// tb: the KRSC kernel [M][KH*KW*C] int8 (box BK x BN). Grid: (pixel tiles, M / BN).
// Dynamic shared memory: STAGES x (A 128 x BK + B BN x BK), the output tile, three channel vectors, the barriers.
template <int BN, int BK, int STAGES, int RES, int OUT>
__device__ __forceinline__ void conv_i8t(
        const TmaDesc* ta, const TmaDesc* tb, const float* __restrict__ bias, const float* __restrict__ scale,
        const void* __restrict__ res, const float* __restrict__ rscale, void* __restrict__ y, int N, int C, int M,
        int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw, int lbw, int lbh, int tw,
        int th, int relu) {
    constexpr int STAGE = TRing<BN, BK, STAGES>::STAGE;
    constexpr int OROW = BN + 16, CHUNKS = BN / 16, NACC = BN / 2;
    extern __shared__ unsigned char dsmem[];
    const unsigned raw = t_smem(dsmem);
    unsigned char* base = dsmem + (((raw + 1023) & ~1023u) - raw);        // 1024-aligned for the swizzle
    unsigned char* O = base + STAGES * STAGE;                              // [TBM][OROW] int8 output tile
    float* s_bias = (float*)(O + TBM * OROW);
    float* s_scale = s_bias + BN;
    float* s_rs = s_scale + BN;
    unsigned long long* bars = (unsigned long long*)(s_rs + BN);           // full[STAGES], empty[STAGES]
    const unsigned sbase = t_smem(base), full0 = t_smem(bars), empty0 = full0 + STAGES * 8;
    TRing<BN, BK, STAGES> ring{sbase, full0, empty0};

    const int tid = threadIdx.x;
    const int bw = 1 << lbw, bh = 1 << lbh, bi = TBM >> (lbw + lbh);
    const int tile = blockIdx.x;
    TilePixels pix;
    pix.ow0 = (tile % tw) * bw;
    pix.oh0 = ((tile / tw) % th) * bh;
    pix.n0 = (tile / (tw * th)) * bi;
    pix.lbw = lbw; pix.lbh = lbh; pix.N = N; pix.OH = OH; pix.OW = OW;
    const int n0 = blockIdx.y * BN;
    const int kc = (C + BK - 1) / BK, steps = KH * KW * kc;

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            t_bar_init(full0 + s * 8, 1);
            t_bar_init(empty0 + s * 8, TCONSUMERS / 32);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    if (tid >= TCONSUMERS) {                           // the producer warp: one thread issues every load
        if (tid == TCONSUMERS) {
            asm volatile("prefetch.tensormap [%0];\n" :: "l"((unsigned long long)ta) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" :: "l"((unsigned long long)tb) : "memory");
            ring.produce(ta, tb, C, KH, KW, pix.ow0 * sw - pw, pix.oh0 * sh - ph, pix.n0, n0, dh, dw);
        }
        return;
    }

    // consumers: the epilogue's channel vectors and the int8 residual tile first (they land while the GEMM runs)
    if (OUT == 0 && RES == 1) {
        const signed char* r8 = (const signed char*)res;
        for (int i = tid; i < TBM * CHUNKS; i += TCONSUMERS) {
            const int row = i / CHUNKS, ch = i - row * CHUNKS;
            const long long pp = pix.at(row);
            t_cp16(t_smem(O + row * OROW + ch * 16), pp >= 0 ? r8 + pp * M + n0 + ch * 16 : r8, pp >= 0);
        }
        asm volatile("cp.async.commit_group;\n" ::);
    }
    for (int i = tid; i < BN; i += TCONSUMERS) {
        s_bias[i] = bias[n0 + i];
        s_scale[i] = scale[n0 + i];
        s_rs[i] = rscale[n0 + i];
    }

    const int wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3;
    int acc[NACC];
    ring.template consume<BN>(acc, steps, wg * 64, 0, lane);
    if (OUT == 0 && RES == 1) asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    t_consumers_sync();

    // epilogue: accumulator j*4 + e holds row 16*wi + g (+8 for e >= 2), column 8j + 2*tig (+1 for odd e)
    const int g = lane >> 2, tig = lane & 3;
    const int lo = relu ? 0 : -128;
    long long rowpix[2];
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) rowpix[hh] = pix.at(wg * 64 + wi * 16 + g + hh * 8);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = j * 8 + tig * 2;
        const float b0 = s_bias[col], b1 = s_bias[col + 1], k0 = s_scale[col], k1 = s_scale[col + 1];
        const float q0 = s_rs[col], q1 = s_rs[col + 1];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = wg * 64 + wi * 16 + g + hh * 8;
            const long long pp = rowpix[hh];
            int8_io_pair<RES, OUT>(acc[j * 4 + hh * 2], acc[j * 4 + hh * 2 + 1], b0, b1, k0, k1, q0, q1,
                                   O + row * OROW + col, pp >= 0, (pp >= 0 ? pp : 0) * M + n0 + col, res, y, lo,
                                   relu);
        }
    }
    if (OUT == 0) {
        t_consumers_sync();
        signed char* y8 = (signed char*)y;
        for (int i = tid; i < TBM * CHUNKS; i += TCONSUMERS) {
            const int row = i / CHUNKS, ch = i - row * CHUNKS;
            const long long pp = pix.at(row);
            if (pp >= 0) *(int4*)(y8 + pp * M + n0 + ch * 16) = *(const int4*)(O + row * OROW + ch * 16);
        }
    }
}

// conv_i8t_bn<BN>_k<BK>_s<STAGES>_r<RES>_o<OUT>; MINB blocks per SM (the register budget)
#define CONV_I8T_KERNEL(BN_, BK_, S_, MINB_, RES_, OUT_)                                                             \
    extern "C" __global__ void __launch_bounds__(TTHREADS, MINB_)                                                   \
        conv_i8t_bn##BN_##_k##BK_##_s##S_##_r##RES_##_o##OUT_(                                                      \
        const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb, const float* bias,                  \
        const float* scale, const void* res, const float* rscale, void* y, int N, int C, int M, int KH, int KW,     \
        int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw, int lbw, int lbh, int tw, int th,           \
        int relu) {                                                                                                 \
        conv_i8t<BN_, BK_, S_, RES_, OUT_>(&ta, &tb, bias, scale, res, rscale, y, N, C, M, KH, KW, OH, OW, sh, sw,  \
                                           ph, pw, dh, dw, lbw, lbh, tw, th, relu);                                 \
    }

// ---------------------------------------------------------------------------------------------------------------
// The persistent form for int8 in -> int8 out with no residual or an int8 one (the inside of an INT8 chain, where
// ResNet's residual 1x1 convolutions are memory-bound): each block walks tiles (pixel tile x BN channels) with
// gridDim.x blocks in all, and the bytes that the epilogue moves go through the TMA too. The producer loads each tile's
// int8 residual into one of OB output buffers (boxes of 128 rows x 128 bytes, 128-byte swizzle; 64 bytes and the
// 64-byte swizzle when BN is 64) OB - 2 tiles ahead of the consumers; the consumers write the int8 output over the
// residual in place and one thread stores the buffer with the TMA while they go on to the next tile. A buffer is free
// again once its store has read it: the storing thread checks that for the store before last (no wait on the newest)
// and says so on the buffer's `oempty` barrier.
__device__ __forceinline__ void t_store_4d(const TmaDesc* map, unsigned src, int c, int x, int y, int z) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n"
                 :: "l"((unsigned long long)map), "r"(src), "r"(c), "r"(x), "r"(y), "r"(z) : "memory");
}
__device__ __forceinline__ void t_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void t_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory");
}
template <int N> __device__ __forceinline__ void t_store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;\n" :: "n"(N) : "memory");
}
// byte (row, col) of a 128-row output buffer held as swizzled boxes of 128 x OBW bytes (OBW 128: the TMA's 128-byte
// swizzle, chunk ^ row % 8; OBW 64: its 64-byte swizzle, chunk ^ (row / 2) % 4)
template <int OBW> __device__ __forceinline__ int t_obyte(int row, int col) {
    const int sw = OBW == 128 ? (row & 7) : ((row >> 1) & 3);
    return (col / OBW) * (TBM * OBW) + row * OBW + ((((col % OBW) >> 4) ^ sw) << 4) + (col & 15);
}

// ta, tb as conv_i8t; to / tr: the output / int8 residual [N][OH][OW][M] (dims M, OW, OH, N; box OBW x BW x BH x BI
// with OBW = min(BN, 128); a flat 1x1 convolution: M, P, 1, 1). Tiles: pixel tiles (tw x th x image groups) x M / BN
// channel tiles, channel tile fastest. CW consumer warpgroups (2 or 4): warpgroup w multiplies rows (w % 2) * 64 .. +
// 64 by columns (w / 2) * WN .. + WN (WN = 2 * BN / CW); four of them halve each thread's epilogue and double the warps
// that hide its latencies. Dynamic shared memory: STAGES x (A + B), OB (>= 3) output buffers of 128 x BN, the barriers.
// RB (resident weights): a block keeps one channel tile (the host launches a multiple of M / BN blocks), so the
// producer loads its BN columns of the kernel once, before the first tile (steps x BN x BK bytes ahead of the stages,
// behind their own mbarrier), and the stages carry A alone: the per-tile loads of the weights were most of what a tile
// waited for where K is long.
template <int BN, int BK, int STAGES, int OB, int CW, int RES, int RB = 0>
__device__ __forceinline__ void conv_i8p(
        const TmaDesc* ta, const TmaDesc* tb, const TmaDesc* to, const TmaDesc* tr, const float* __restrict__ bias,
        const float* __restrict__ scale, const float* __restrict__ rscale, int N, int C, int M, int KH, int KW,
        int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw, int lbw, int lbh, int tw, int th, int tiles,
        int relu) {
    constexpr int STAGE = TRing<BN, BK, STAGES, RB>::STAGE, OBUF = TBM * BN;
    constexpr int CT = CW * 128, WN = 2 * BN / CW, NACC = WN / 2;
    constexpr int OBW = BN < 128 ? BN : 128, NBOX = BN / OBW;     // an output buffer's boxes: bytes wide, count
    const int ntiles = M / BN, kc = (C + BK - 1) / BK, steps = KH * KW * kc;
    const int bbytes = RB ? steps * BN * BK : 0;                           // the resident weights
    extern __shared__ unsigned char dsmem[];
    const unsigned raw = t_smem(dsmem);
    unsigned char* base = dsmem + (((raw + 1023) & ~1023u) - raw);
    unsigned char* O = base + bbytes + STAGES * STAGE;                     // OB x [BN / 128][128][128] swizzled
    unsigned long long* bars = (unsigned long long*)(O + OB * OBUF);
    const unsigned sbase = t_smem(base), obase = t_smem(O), full0 = t_smem(bars), empty0 = full0 + STAGES * 8,
                   ofull0 = empty0 + STAGES * 8, oempty0 = ofull0 + OB * 8, bfull = oempty0 + OB * 8,
                   sfull0 = bfull + 8;
    TRing<BN, BK, STAGES, RB> ring{sbase + bbytes, full0, empty0, sbase};
    const int tid = threadIdx.x;
    const int bw = 1 << lbw, bh = 1 << lbh, bi = TBM >> (lbw + lbh);

    if (tid == 0) {
        for (int s = 0; s < STAGES; ++s) {
            t_bar_init(full0 + s * 8, 1);
            t_bar_init(empty0 + s * 8, CT / 32);
        }
        for (int b = 0; b < OB; ++b) {
            t_bar_init(ofull0 + b * 8, 1);
            t_bar_init(oempty0 + b * 8, 1);
            t_bar_init(sfull0 + b * 8, CT / 32);
        }
        if (RB) t_bar_init(bfull, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    }
    __syncthreads();

    if (tid >= CT) {
        if (tid == CT) {
            asm volatile("prefetch.tensormap [%0];\n" :: "l"((unsigned long long)ta) : "memory");
            asm volatile("prefetch.tensormap [%0];\n" :: "l"((unsigned long long)tb) : "memory");
            if (RB) {           // this block's channel tile of every K step, once
                const int n0 = (blockIdx.x % ntiles) * BN;
                t_bar_expect(bfull, bbytes);
                int k = 0;
                for (int r = 0; r < KH; ++r)
                    for (int s = 0; s < KW; ++s)
                        for (int c0 = 0; c0 < C; c0 += BK, ++k)
                            t_load_2d(sbase + k * (BN * BK), tb, (r * KW + s) * C + c0, n0, bfull);
            }
            int local = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
                const int n0 = (t % ntiles) * BN, pt = t / ntiles;
                const int ow0 = (pt % tw) * bw, oh0 = ((pt / tw) % th) * bh, i0 = (pt / (tw * th)) * bi;
                if (RES == 1) {
                    const int b = local % OB;
                    if (local >= OB) t_bar_wait(oempty0 + b * 8, (local / OB - 1) & 1);
                    t_bar_expect(ofull0 + b * 8, OBUF);
#pragma unroll
                    for (int h = 0; h < NBOX; ++h)
                        t_load_4d(obase + b * OBUF + h * TBM * OBW, tr, n0 + h * OBW, ow0, oh0, i0, ofull0 + b * 8);
                }
                ring.produce(ta, tb, C, KH, KW, ow0 * sw - pw, oh0 * sh - ph, i0, n0, dh, dw);
            }
        } else if (tid == CT + 32) {        // the storer: each buffer out once every consumer warp has written it
            int local = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
                const int b = local % OB, n0 = (t % ntiles) * BN, pt = t / ntiles;
                const int ow0 = (pt % tw) * bw, oh0 = ((pt / tw) % th) * bh, i0 = (pt / (tw * th)) * bi;
                t_bar_wait(sfull0 + b * 8, (local / OB) & 1);
#pragma unroll
                for (int h = 0; h < NBOX; ++h)
                    t_store_4d(to, obase + b * OBUF + h * TBM * OBW, n0 + h * OBW, ow0, oh0, i0);
                t_store_commit();
                if (local >= 1) {       // the store before this one has read its buffer: it may be refilled
                    t_store_wait_read<1>();
                    t_bar_arrive(oempty0 + ((local - 1) % OB) * 8);
                }
            }
            t_store_wait<0>();
        }
        return;
    }

    const int wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3, g = lane >> 2, tig = lane & 3;
    const int wm = (wg & 1) * 64, wn = (wg >> 1) * WN;     // this warpgroup's rows and columns of the tile
    const int lo = relu ? 0 : -128;
    // where this thread's pairs sit in an output buffer, worked out once: accumulator j*4 + e is row r0 (+8 for
    // e >= 2), column wn + 8j + 2*tig (+1 for odd e); each 16-byte chunk q (j = 2q, 2q + 1) of its columns has one
    // swizzled offset, and the rest is an immediate (+8 for odd j, +8 OBW for the row 8 below: the same swizzle)
    const int r0 = wm + wi * 16 + g;
    int qoff[WN / 16];
#pragma unroll
    for (int q = 0; q < WN / 16; ++q) qoff[q] = t_obyte<OBW>(r0, wn + q * 16 + tig * 2);
    int local = 0;
    int acc[NACC];
    if (RB) t_bar_wait(bfull, 0);
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, ++local) {
        const int n0 = ntiles == 1 ? 0 : (t % ntiles) * BN;    // (the storer works out its pixels)
        const int b = local % OB;
        ring.template consume<WN>(acc, steps, wm, wn, lane);
        if (RES == 1) t_bar_wait(ofull0 + b * 8, (local / OB) & 1);              // its residual landed
        else if (local >= OB) t_bar_wait(oempty0 + b * 8, (local / OB - 1) & 1);  // its last store read it
        unsigned char* ob = O + b * OBUF;
        const float2* bias2 = (const float2*)(bias + n0 + wn + tig * 2);     // column pairs 8 floats apart
        const float2* scale2 = (const float2*)(scale + n0 + wn + tig * 2);
        const float2* rscale2 = (const float2*)(rscale + n0 + wn + tig * 2);
#pragma unroll
        for (int q = 0; q < WN / 16; ++q) {
            unsigned char* cell = ob + qoff[q];
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int j = 2 * q + jj;
                const float2 bb = __ldg(bias2 + 4 * j), kk = __ldg(scale2 + 4 * j), qq = __ldg(rscale2 + 4 * j);
#pragma unroll
                for (int hh = 0; hh < 2; ++hh)
                    int8_io_pair<RES, 0>(acc[j * 4 + hh * 2], acc[j * 4 + hh * 2 + 1], bb.x, bb.y, kk.x, kk.y,
                                                qq.x, qq.y, cell + jj * 8 + hh * 8 * OBW, true, 0, nullptr, nullptr, lo,
                                                relu);
            }
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");    // the writes, visible to the TMA store
        __syncwarp();
        if (lane == 0) t_bar_arrive(sfull0 + b * 8);       // this warp's part is written: no wait on the others
    }
}

// conv_i8p_bn<BN>_k<BK>_s<STAGES>_o<OB>_w<CW>_r<RES>_rb<RB> (RB: resident weights)
#define CONV_I8P_KERNEL(BN_, BK_, S_, OB_, CW_, RES_, RB_)                                                           \
    extern "C" __global__ void __launch_bounds__(CW_ * 128 + 64, 1)                                                 \
        conv_i8p_bn##BN_##_k##BK_##_s##S_##_o##OB_##_w##CW_##_r##RES_##_rb##RB_(                                    \
        const __grid_constant__ TmaDesc ta, const __grid_constant__ TmaDesc tb, const __grid_constant__ TmaDesc to,  \
        const __grid_constant__ TmaDesc tr, const float* bias, const float* scale, const float* rscale, int N,       \
        int C, int M, int KH, int KW, int OH, int OW, int sh, int sw, int ph, int pw, int dh, int dw, int lbw,       \
        int lbh, int tw, int th, int tiles, int relu) {                                                             \
        conv_i8p<BN_, BK_, S_, OB_, CW_, RES_, RB_>(&ta, &tb, &to, &tr, bias, scale, rscale, N, C, M, KH, KW, OH,   \
                                                    OW, sh, sw, ph, pw, dh, dw, lbw, lbh, tw, th, tiles, relu);     \
    }
