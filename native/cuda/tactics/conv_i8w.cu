// nvrtc-arch: a   (Hopper's arch-specific instructions: compiled for sm_90a, see nvrtc.compile_source)
// INT8 convolutions on int8 NHWC tensors as implicit GEMMs on Hopper's warpgroup tensor cores (wgmma.mma_async
// m64nNk32 s8 x s8 -> s32, both operands read from shared memory), with conv_i8.cu's fused INT8 I/O epilogue (the
// same float32 arithmetic in the same order: bit-equal to the contract).
//
// A block of two warpgroups computes a 128-pixel x BN-channel tile; each warpgroup owns 64 pixel rows. K (KH*KW*C,
// the KRSC kernel's order) advances 128 at a time through STAGES shared-memory stages filled by cp.async (16-byte
// chunks, each gathered from its own filter tap, zero-filled in the padding and past K), laid out as wgmma's
// 128-byte-swizzled K-major tiles: row r's 16-byte chunk j sits at r * 128 + ((j ^ (r & 7)) << 4).
#include "common.cuh"
#include "int8_io.cuh"

#define WBM 128
#define WBK 128
#define WTHREADS 256

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp16w(unsigned dst, const void* gmem, bool valid) {
    int n = valid ? 16 : 0;            // src-size 0: the 16 bytes are zero-filled, nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_commit_w() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait_w() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// a K-major operand tile in shared memory, 128-byte swizzle, 8-row groups 1024 bytes apart
__device__ __forceinline__ unsigned long long desc128(unsigned addr) {
    return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)(1024 >> 4) << 32) |
           (1ull << 62);
}

#define WG_REGS8(o) "+r"(d[o]), "+r"(d[o + 1]), "+r"(d[o + 2]), "+r"(d[o + 3]), "+r"(d[o + 4]), "+r"(d[o + 5]), \
                    "+r"(d[o + 6]), "+r"(d[o + 7])

__device__ __forceinline__ void wgmma_n128(int* d, unsigned long long da, unsigned long long db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, "
                 "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, "
                 "%59, %60, %61, %62, %63}, %64, %65, 1;\n"
                 : WG_REGS8(0), WG_REGS8(8), WG_REGS8(16), WG_REGS8(24), WG_REGS8(32), WG_REGS8(40), WG_REGS8(48),
                   WG_REGS8(56)
                 : "l"(da), "l"(db));
}

__device__ __forceinline__ void wgmma_n64(int* d, unsigned long long da, unsigned long long db) {
    asm volatile("wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, "
                 "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, 1;\n"
                 : WG_REGS8(0), WG_REGS8(8), WG_REGS8(16), WG_REGS8(24)
                 : "l"(da), "l"(db));
}

template <int BN> __device__ __forceinline__ void wgmma_tile(int* d, unsigned long long da, unsigned long long db) {
    if (BN == 128) wgmma_n128(d, da, db); else wgmma_n64(d, da, db);
}

// RES: the residual [N*OH*OW, M]: 0 none, 1 int8, 2 float32, 3 float16; OUT: 0 int8, 1 float32.
// Dynamic shared memory: STAGES x (A 128 x 128 + B BN x 128) bytes, then the output tile, then the channel vectors.
template <int BN, int STAGES, int RES, int OUT>
__device__ __forceinline__ void conv_i8w(
        const signed char* __restrict__ x, const signed char* __restrict__ w, const float* __restrict__ bias,
        const float* __restrict__ scale, const void* __restrict__ res, const float* __restrict__ rscale,
        void* __restrict__ y, int N, int H, int W, int C, int M, int KH, int KW, int OH, int OW, int sh, int sw,
        int ph, int pw, int dh, int dw, int relu) {
    constexpr int A_BYTES = WBM * WBK, B_BYTES = BN * WBK, STAGE = A_BYTES + B_BYTES;
    constexpr int OROW = BN + 16, CHUNKS = BN / 16, NACC = BN / 2;
    extern __shared__ unsigned char dsmem[];
    const unsigned raw = smem_addr(dsmem);
    unsigned char* base = dsmem + (((raw + 1023) & ~1023u) - raw);        // 1024-aligned for the swizzle
    unsigned char* O = base + STAGES * STAGE;                              // [WBM][OROW] int8 output tile
    float* s_bias = (float*)(O + WBM * OROW);
    float* s_scale = s_bias + BN;
    float* s_rs = s_scale + BN;
    const unsigned sbase = smem_addr(base);

    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, wi = (tid >> 5) & 3;
    const int g = lane >> 2, tig = lane & 3;
    const int P = N * OH * OW;
    const int m0 = blockIdx.x * WBM;
    const int n0 = blockIdx.y * BN;
    const int K = KH * KW * C, KC = (K + WBK - 1) / WBK;

    if (OUT == 0 && RES == 1) {      // the int8 residual tile, fetched while the GEMM runs
        const signed char* r8 = (const signed char*)res;
        for (int i = tid; i < WBM * CHUNKS; i += WTHREADS) {
            int row = i / CHUNKS, ch = i - row * CHUNKS;
            int pp = m0 + row;
            cp16w(smem_addr(O + row * OROW + ch * 16), pp < P ? r8 + (long long)pp * M + n0 + ch * 16 : r8, pp < P);
        }
    }
    for (int i = tid; i < BN; i += WTHREADS) {
        s_bias[i] = bias[n0 + i];
        s_scale[i] = scale[n0 + i];
        s_rs[i] = rscale[n0 + i];
    }
    // this thread's A row (the same pixel at every K step): half the row's 8 chunks
    const int arow = tid >> 1, c0 = (tid & 1) * 4;
    const int p = m0 + arow;
    const bool prow = p < P;
    int an = 0, aoh = 0, aow = 0;
    if (prow) {
        an = p / (OH * OW);
        int rem = p - an * OH * OW;
        aoh = rem / OW;
        aow = rem - aoh * OW;
    }
    const int ih0 = aoh * sh - ph, iw0 = aow * sw - pw;
    const int sw7 = arow & 7;

    // each of this thread's 4 chunks walks K in steps of WBK: its filter tap (r, s) and channel c, advanced
    // incrementally (no divisions per step); chunks past K and taps in the padding are zero-filled
    int ck[4], cc[4], cr[4], cs[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
        int k = (c0 + q) * 16, tap = k / C;
        ck[q] = k;
        cc[q] = k - tap * C;
        cr[q] = tap / KW;
        cs[q] = tap - cr[q] * KW;
    }
    const signed char* wrow = w + (long long)(n0 + (arow < BN ? arow : 0)) * K;
    const long long xrow = (long long)an * H * W;

    auto load = [&](int stage) {
        const unsigned a_s = sbase + stage * STAGE + arow * WBK, b_s = sbase + stage * STAGE + A_BYTES + arow * WBK;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const int j = c0 + q;
            const bool in_k = ck[q] < K;
            const int ih = ih0 + cr[q] * dh, iw = iw0 + cs[q] * dw;
            const bool v = prow && in_k && ih >= 0 && ih < H && iw >= 0 && iw < W;
            cp16w(a_s + ((j ^ sw7) << 4), v ? x + ((xrow + (long long)ih * W + iw) * C + cc[q]) : x, v);
            if (arow < BN) cp16w(b_s + ((j ^ sw7) << 4), in_k ? wrow + ck[q] : w, in_k);
            ck[q] += WBK;
            cc[q] += WBK;
            while (cc[q] >= C) {
                cc[q] -= C;
                if (++cs[q] == KW) {
                    cs[q] = 0;
                    ++cr[q];
                }
            }
        }
    };

    int acc[NACC];
#pragma unroll
    for (int i = 0; i < NACC; ++i) acc[i] = 0;

#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KC) load(s);
        cp_commit_w();
    }
    for (int kc = 0; kc < KC; ++kc) {
        cp_wait_w<STAGES - 2>();                                       // stage kc's chunks (this thread's) landed
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // visible to wgmma's async proxy
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); // step kc-1's wgmmas done reading
        __syncthreads();
        if (kc + STAGES - 1 < KC) load((kc + STAGES - 1) % STAGES);
        cp_commit_w();
        const unsigned st = sbase + (kc % STAGES) * STAGE;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int kk = 0; kk < WBK / 32; ++kk)
            wgmma_tile<BN>(acc, desc128(st + wg * 64 * WBK + kk * 32), desc128(st + A_BYTES + kk * 32));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    cp_wait_w<0>();
    __syncthreads();

    // epilogue: accumulator j*4 + e holds row 16*wi + g (+8 for e >= 2), column 8j + 2*tig (+1 for odd e)
    const int lo = relu ? 0 : -128;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = j * 8 + tig * 2;
        const float b0 = s_bias[col], b1 = s_bias[col + 1], k0 = s_scale[col], k1 = s_scale[col + 1];
        const float q0 = s_rs[col], q1 = s_rs[col + 1];
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
            const int row = wg * 64 + wi * 16 + g + hh * 8;
            const int pp = m0 + row;
            int8_io_pair<RES, OUT>(acc[j * 4 + hh * 2], acc[j * 4 + hh * 2 + 1], b0, b1, k0, k1, q0, q1,
                                   O + row * OROW + col, pp < P, (long long)pp * M + n0 + col, res, y, lo, relu);
        }
    }
    if (OUT == 0) {
        __syncthreads();
        signed char* y8 = (signed char*)y;
        for (int i = tid; i < WBM * CHUNKS; i += WTHREADS) {
            int row = i / CHUNKS, ch = i - row * CHUNKS;
            int pp = m0 + row;
            if (pp < P) *(int4*)(y8 + (long long)pp * M + n0 + ch * 16) = *(const int4*)(O + row * OROW + ch * 16);
        }
    }
}

#define CONV_I8W_ARGS                                                                                                \
    const signed char *x, const signed char *w, const float *bias, const float *scale, const void *res,            \
        const float *rscale, void *y, int N, int H, int W, int C, int M, int KH, int KW, int OH, int OW, int sh,      \
        int sw, int ph, int pw, int dh, int dw, int relu
#define CONV_I8W_PASS x, w, bias, scale, res, rscale, y, N, H, W, C, M, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, relu
// conv_i8w_bn<BN>_s<STAGES>_r<RES>_o<OUT>
#define CONV_I8W_KERNEL(BN_, S_, RES_, OUT_)                                                                         \
    extern "C" __global__ void __launch_bounds__(WTHREADS) conv_i8w_bn##BN_##_s##S_##_r##RES_##_o##OUT_(            \
        CONV_I8W_ARGS) { conv_i8w<BN_, S_, RES_, OUT_>(CONV_I8W_PASS); }
#define CONV_I8W_KERNELS(BN_, S_)                                                                                    \
    CONV_I8W_KERNEL(BN_, S_, 0, 0) CONV_I8W_KERNEL(BN_, S_, 1, 0) CONV_I8W_KERNEL(BN_, S_, 2, 0)                    \
    CONV_I8W_KERNEL(BN_, S_, 3, 0) CONV_I8W_KERNEL(BN_, S_, 0, 1) CONV_I8W_KERNEL(BN_, S_, 1, 1)                    \
    CONV_I8W_KERNEL(BN_, S_, 2, 1) CONV_I8W_KERNEL(BN_, S_, 3, 1)
CONV_I8W_KERNELS(128, 2)
CONV_I8W_KERNELS(64, 3)
