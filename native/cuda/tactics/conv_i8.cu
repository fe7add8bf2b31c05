// INT8 convolutions on int8 NHWC tensors as implicit GEMMs on the integer tensor cores (mma.sync m16n8k32, s8 x s8
// -> s32), with the INT8 I/O epilogue fused (native/shared/int8_io.py): v = (float(acc) + bias_q[c]) * scale[c]
// (+ r * rs[c]), then ReLU / saturation and the int8 output (round to nearest even) or a float32 one, evaluated in
// float32 in that order with no contraction, so the result equals the numpy contract bit for bit.
//
// GEMM view: rows are output pixels (N*OH*OW), columns output channels (M), K = KH*KW*C in the KRSC kernel's order.
// A block computes a BM x BN tile with 8 warps (4 along the pixels, 2 along the channels); K advances BK = 32
// (one mma k-step) at a time, the next slice loaded by cp.async while this one is multiplied. C % 32 == 0, so a K
// slice lies inside one filter tap: each thread gathers its pixel row's 16 bytes (zero-filled in the padding).
// The int8 output tile (and an int8 residual tile) go through shared memory, so global reads and writes are 16-byte
// vectors along the channels.
#include "common.cuh"
#include "int8_io.cuh"

#define BM 128
#define BK 32
#define SROW 48             // bytes per shared row: BK + 16 (the fragment reads of 8 rows hit 32 distinct banks)
#define NTHREADS 256

__device__ __forceinline__ void cp16(void* smem, const void* gmem, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;            // src-size 0: the 16 bytes are zero-filled, nothing is read
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

__device__ __forceinline__ void mma_s8(int* d, const unsigned* a, const unsigned* b) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// RES: the residual [N*OH*OW, M]: 0 none, 1 int8, 2 float32, 3 float16; OUT: 0 int8, 1 float32
template <int BN, int RES, int OUT>
__device__ __forceinline__ void conv_i8(
        const signed char* __restrict__ x, const signed char* __restrict__ w, const float* __restrict__ bias,
        const float* __restrict__ scale, const void* __restrict__ res, const float* __restrict__ rscale,
        void* __restrict__ y, int N, int H, int W, int C, int M, int KH, int KW, int OH, int OW, int sh, int sw,
        int ph, int pw, int dh, int dw, int relu) {
    constexpr int WN = BN / 2, NT = WN / 8, MT = 2, OROW = BN + 16, CHUNKS = BN / 16;
    __shared__ __align__(16) unsigned char smem[2 * (BM + BN) * SROW];
    __shared__ __align__(16) unsigned char O[OUT == 0 ? BM * OROW : 16];   // the int8 output tile (residual first)
    __shared__ float s_bias[BN], s_scale[BN], s_rs[BN];
    unsigned char* As = smem;                       // [2][BM][SROW]
    unsigned char* Bs = smem + 2 * BM * SROW;       // [2][BN][SROW]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int g = lane >> 2, tig = lane & 3;
    const int P = N * OH * OW;                      // (the tactic refuses P >= 2^31)
    const int m0 = blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int K = KH * KW * C, KC = K / BK;

    // the int8 residual tile, fetched while the GEMM runs (it lands where the output tile is written)
    if (OUT == 0 && RES == 1) {
        const signed char* r8 = (const signed char*)res;
        for (int i = tid; i < BM * CHUNKS; i += NTHREADS) {
            int row = i / CHUNKS, ch = i - row * CHUNKS;
            int pp = m0 + row;
            cp16(O + row * OROW + ch * 16, pp < P ? r8 + (long long)pp * M + n0 + ch * 16 : r8, pp < P);
        }
    }
    // this thread's A row (the same pixel at every K slice) and its B row
    const int arow = tid >> 1, half = tid & 1;
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
    for (int i = tid; i < BN; i += NTHREADS) {
        s_bias[i] = bias[n0 + i];
        s_scale[i] = scale[n0 + i];
        s_rs[i] = rscale[n0 + i];
    }

    // the K slice this thread's row walks: its filter tap (r, s) and channel c, advanced incrementally by BK
    int kr = 0, ks = 0, kcn = 0;
    const signed char* wrow = w + (long long)(n0 + (arow < BN ? arow : 0)) * K + half * 16;
    const long long xrow = (long long)an * H * W;

    auto load = [&](int stage, int kc) {
        int ih = ih0 + kr * dh, iw = iw0 + ks * dw;
        bool v = prow && ih >= 0 && ih < H && iw >= 0 && iw < W;
        const signed char* src = v ? x + (xrow + (long long)ih * W + iw) * C + kcn + half * 16 : x;
        cp16(As + (stage * BM + arow) * SROW + half * 16, src, v);
        if (tid < 2 * BN) cp16(Bs + (stage * BN + arow) * SROW + half * 16, wrow + kc * BK, true);
        kcn += BK;
        if (kcn == C) {
            kcn = 0;
            if (++ks == KW) {
                ks = 0;
                ++kr;
            }
        }
    };

    int acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0;

    load(0, 0);
    cp_commit();
    for (int kc = 0; kc < KC; ++kc) {
        if (kc + 1 < KC) {
            load((kc + 1) & 1, kc + 1);
            cp_commit();
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        __syncthreads();
        const unsigned char* a_s = As + (kc & 1) * BM * SROW;
        const unsigned char* b_s = Bs + (kc & 1) * BN * SROW;
        unsigned af[MT][4], bf[NT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            int r0 = wm * 32 + mt * 16 + g;
            af[mt][0] = *(const unsigned*)(a_s + r0 * SROW + tig * 4);
            af[mt][1] = *(const unsigned*)(a_s + (r0 + 8) * SROW + tig * 4);
            af[mt][2] = *(const unsigned*)(a_s + r0 * SROW + 16 + tig * 4);
            af[mt][3] = *(const unsigned*)(a_s + (r0 + 8) * SROW + 16 + tig * 4);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int c = wn * WN + nt * 8 + g;
            bf[nt][0] = *(const unsigned*)(b_s + c * SROW + tig * 4);
            bf[nt][1] = *(const unsigned*)(b_s + c * SROW + 16 + tig * 4);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) mma_s8(acc[mt][nt], af[mt], bf[nt]);
        __syncthreads();
    }

    // epilogue: each thread holds pairs of adjacent channels (col, col + 1) of rows g and g + 8 of each m16 tile
    const int lo = relu ? 0 : -128;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        const int col = wn * WN + nt * 8 + tig * 2;
        const float b0 = s_bias[col], b1 = s_bias[col + 1], k0 = s_scale[col], k1 = s_scale[col + 1];
        const float q0 = s_rs[col], q1 = s_rs[col + 1];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hh = 0; hh < 2; ++hh) {
                const int row = wm * 32 + mt * 16 + g + hh * 8;
                const int pp = m0 + row;
                int8_io_pair<RES, OUT>(acc[mt][nt][hh * 2], acc[mt][nt][hh * 2 + 1], b0, b1, k0, k1, q0, q1,
                                       O + row * OROW + col, pp < P, (long long)pp * M + n0 + col, res, y, lo, relu);
            }
    }
    if (OUT == 0) {
        __syncthreads();
        signed char* y8 = (signed char*)y;
        for (int i = tid; i < BM * CHUNKS; i += NTHREADS) {
            int row = i / CHUNKS, ch = i - row * CHUNKS;
            int pp = m0 + row;
            if (pp < P) *(int4*)(y8 + (long long)pp * M + n0 + ch * 16) = *(const int4*)(O + row * OROW + ch * 16);
        }
    }
}

#define CONV_I8_ARGS                                                                                                 \
    const signed char *x, const signed char *w, const float *bias, const float *scale, const void *res,            \
        const float *rscale, void *y, int N, int H, int W, int C, int M, int KH, int KW, int OH, int OW, int sh,      \
        int sw, int ph, int pw, int dh, int dw, int relu
#define CONV_I8_PASS x, w, bias, scale, res, rscale, y, N, H, W, C, M, KH, KW, OH, OW, sh, sw, ph, pw, dh, dw, relu
// conv_i8_nhwc_bn<BN>_r<RES>_o<OUT>
#define CONV_I8_KERNEL(BN_, RES_, OUT_)                                                                              \
    extern "C" __global__ void __launch_bounds__(NTHREADS, 2) conv_i8_nhwc_bn##BN_##_r##RES_##_o##OUT_(CONV_I8_ARGS) \
    { conv_i8<BN_, RES_, OUT_>(CONV_I8_PASS); }
#define CONV_I8_KERNELS(BN_)                                                                                         \
    CONV_I8_KERNEL(BN_, 0, 0) CONV_I8_KERNEL(BN_, 1, 0) CONV_I8_KERNEL(BN_, 2, 0) CONV_I8_KERNEL(BN_, 3, 0)        \
    CONV_I8_KERNEL(BN_, 0, 1) CONV_I8_KERNEL(BN_, 1, 1) CONV_I8_KERNEL(BN_, 2, 1) CONV_I8_KERNEL(BN_, 3, 1)
CONV_I8_KERNELS(128)
CONV_I8_KERNELS(64)
