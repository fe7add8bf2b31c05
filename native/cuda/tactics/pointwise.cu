// Pointwise and row kernels of the CUDA device, compiled at build time with NVRTC. Every kernel exists for
// float32 storage (plain name), float16 storage (name + "_h") and bfloat16 storage (name + "_b"); all compute in
// float32, so an FP16 / BF16 layer rounds once, when it stores its result (as the CPU's emulation does).
// Semantics follow the CPU kernels: NaN propagates through max/min/relu/clip as numpy's do.
#include "common.cuh"

struct Bcast {            // output index -> element offsets of the two operands (stride 0 = broadcast)
    long long rank, n;
    long long dims[8], sa[8], sb[8];
};

__device__ __forceinline__ void offsets(const Bcast& s, long long i, long long& ia, long long& ib) {
    ia = 0; ib = 0;
    for (int d = (int)s.rank - 1; d >= 0; --d) {
        long long q = i % s.dims[d];
        i /= s.dims[d];
        ia += q * s.sa[d];
        ib += q * s.sb[d];
    }
}

template <class D, class O>
__device__ __forceinline__ void binary_k(typename D::T* __restrict__ out, const typename D::T* __restrict__ a,
                                         const typename D::T* __restrict__ b, const Bcast& s) {
    GRID_LOOP(s.n) {
        long long ia, ib;
        offsets(s, i, ia, ib);
        out[i] = D::st(O::f(D::ld(a[ia]), D::ld(b[ib])));
    }
}

// the same with 32-bit index arithmetic (tensors under 2^31 elements: integer division is several times cheaper)
template <class D, class O>
__device__ __forceinline__ void binary_s(typename D::T* __restrict__ out, const typename D::T* __restrict__ a,
                                         const typename D::T* __restrict__ b, const Bcast& s) {
    int rank = (int)s.rank, n = (int)s.n;
    int dims[8], sa[8], sb[8];
    for (int d = 0; d < rank; ++d) { dims[d] = (int)s.dims[d]; sa[d] = (int)s.sa[d]; sb[d] = (int)s.sb[d]; }
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        int r = i, ia = 0, ib = 0;
        for (int d = rank - 1; d >= 0; --d) {
            int q = r % dims[d];
            r /= dims[d];
            ia += q * sa[d];
            ib += q * sb[d];
        }
        out[i] = D::st(O::f(D::ld(a[ia]), D::ld(b[ib])));
    }
}

// same-shape operands (flat) and a bias along the last axis (b[i % cols]): no index arithmetic beyond that
template <class D, class O>
__device__ __forceinline__ void binary_flat(typename D::T* __restrict__ out, const typename D::T* __restrict__ a,
                                            const typename D::T* __restrict__ b, long long n, long long cols) {
    GRID_LOOP(n) { out[i] = D::st(O::f(D::ld(a[i]), D::ld(b[cols ? i % cols : i]))); }
}

// one op's entry points for one storage type D (kernel-name suffix SFX: "" float32, _h float16, _b bfloat16)
#define BINARY_T(NAME, SFX, D)                                                                                \
extern "C" __global__ void NAME##SFX(D::T* out, const D::T* a, const D::T* b, Bcast s) {                     \
    binary_k<D, op_##NAME>(out, a, b, s); }                                                                   \
extern "C" __global__ void NAME##SFX##_s(D::T* out, const D::T* a, const D::T* b, Bcast s) {                 \
    binary_s<D, op_##NAME>(out, a, b, s); }                                                                   \
extern "C" __global__ void NAME##SFX##_f(D::T* out, const D::T* a, const D::T* b, long long n, long long cols) { \
    binary_flat<D, op_##NAME>(out, a, b, n, cols); }

#define BINARY(NAME, EXPR)                                                                                    \
struct op_##NAME { __device__ static __forceinline__ float f(float x, float y) { return (EXPR); } };          \
BINARY_T(NAME, _f32, F32) BINARY_T(NAME, _f16, F16) BINARY_T(NAME, _bf16, BF16)

BINARY(ew_sum, x + y)
BINARY(ew_sub, x - y)
BINARY(ew_prod, x * y)
BINARY(ew_div, x / y)
BINARY(ew_max, (x > y || x != x) ? x : y)
BINARY(ew_min, (x < y || x != x) ? x : y)
BINARY(ew_pow, powf(x, y))

template <class D, class O>
__device__ __forceinline__ void unary_k(typename D::T* __restrict__ out, const typename D::T* __restrict__ in,
                                        long long n, float alpha, float beta) {
    GRID_LOOP(n) { out[i] = D::st(O::f(D::ld(in[i]), alpha, beta)); }
}

#define UNARY_T(NAME, SFX, D)                                                                                 \
extern "C" __global__ void NAME##SFX(D::T* out, const D::T* in, long long n, float alpha, float beta) {         \
    unary_k<D, op_##NAME>(out, in, n, alpha, beta); }

#define UNARY(NAME, EXPR)                                                                                     \
struct op_##NAME { __device__ static __forceinline__ float f(float x, float alpha, float beta) { return (EXPR); } }; \
UNARY_T(NAME, _f32, F32) UNARY_T(NAME, _f16, F16) UNARY_T(NAME, _bf16, BF16)

UNARY(act_relu, (x > 0.f || x != x) ? x : 0.f)
// e/(1+e) below 0, 1/(1+e) from 0 up (e = expf(-|x|)): small values keep their relative precision, unlike
// 0.5f*tanhf(0.5f*x)+0.5f (absolute error ~3e-8); the CPU kernel computes the same (docs/PRECISION.md)
UNARY(act_sigmoid, x >= 0.f ? 1.f / (1.f + expf(-x)) : expf(x) / (1.f + expf(x)))
UNARY(act_tanh, tanhf(x))
UNARY(act_leaky_relu, x < 0.f ? x * alpha : x)
UNARY(act_elu, x < 0.f ? alpha * expm1f(x) : x)
UNARY(act_clip, x != x ? x : fminf(fmaxf(x, alpha), beta))
UNARY(act_hard_sigmoid, fminf(fmaxf(alpha * x + beta, 0.f), 1.f))
UNARY(act_gelu_erf, 0.5f * x * erfcf(x * -0.7071067811865476f))   // erfc: no cancellation for x << 0
UNARY(act_gelu_tanh, 0.5f * x * (1.f + tanhf(0.7978845608028654f * x * (1.f + 0.044715f * x * x))))
UNARY(act_silu, 0.5f * x + 0.5f * x * tanhf(0.5f * x))
UNARY(act_hard_swish, x * fminf(fmaxf(x * (1.f / 6.f) + 0.5f, 0.f), 1.f))
UNARY(un_exp, expf(x))
UNARY(un_log, logf(x))
UNARY(un_sqrt, sqrtf(x))
UNARY(un_recip, 1.f / x)
UNARY(un_abs, fabsf(x))
UNARY(un_neg, -x)
UNARY(un_erf, erff(x))
UNARY(un_sin, sinf(x))
UNARY(un_cos, cosf(x))
UNARY(un_floor, floorf(x))
UNARY(un_ceil, ceilf(x))
UNARY(un_rsqrt, 1.f / sqrtf(x))

// softmax over the last (contiguous) axis: one block per row, two passes (max, then sum of exp). Optional scale
// and additive mask (mask offsets from a Bcast over [rows * cols]; has_mask 0 = none) for attention; a row that
// is all -inf gives 0 when nan_to_zero (a fully masked query), NaN otherwise (as numpy).
template <class DI, class DO>
__device__ void softmax_k(typename DO::T* __restrict__ out, const typename DI::T* __restrict__ in,
                          long long rows, long long cols, int log_softmax, float scale,
                          const typename DI::T* __restrict__ mask, Bcast ms, int nan_to_zero) {
    __shared__ float red[256];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const typename DI::T* x = in + r * cols;
    typename DO::T* y = out + r * cols;
    long long mb = 0, ms_last = 0;    // the mask's offset at (row r, column 0) and its stride along the columns
    if (mask) { long long ia; offsets(ms, r * cols, ia, mb); ms_last = ms.sb[ms.rank - 1]; }
    float m = __int_as_float(0xff800000);   // -inf
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = DI::ld(x[j]) * scale;
        if (mask) v += DI::ld(mask[mb + j * ms_last]);
        m = fmaxf(m, v);
    }
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = DI::ld(x[j]) * scale;
        if (mask) v += DI::ld(mask[mb + j * ms_last]);
        sum += expf(v - m);
    }
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    bool dead = nan_to_zero && m == __int_as_float(0xff800000);
    float ls = logf(sum), inv = 1.f / sum;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
        float v = DI::ld(x[j]) * scale;
        if (mask) v += DI::ld(mask[mb + j * ms_last]);
        float o = log_softmax ? v - m - ls : expf(v - m) * inv;
        y[j] = DO::st(dead ? 0.f : o);
    }
}

// rows of at most 1024 columns: one warp per row, values kept in registers, shuffle reductions (no block syncs)
template <class DI, class DO>
__device__ void softmax_warp_k(typename DO::T* __restrict__ out, const typename DI::T* __restrict__ in,
                               long long rows, long long cols, int log_softmax, float scale,
                               const typename DI::T* __restrict__ mask, const Bcast& ms, int nan_to_zero) {
    int lane = threadIdx.x & 31;
    long long r = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (r >= rows) return;
    const typename DI::T* x = in + r * cols;
    typename DO::T* y = out + r * cols;
    long long mb = 0, ms_last = 0;
    if (mask) { long long ia; offsets(ms, r * cols, ia, mb); ms_last = ms.sb[ms.rank - 1]; }
    float v[32];
    float m = __int_as_float(0xff800000);
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        long long j = lane + 32 * k;
        v[k] = __int_as_float(0xff800000);
        if (j < cols) {
            float t = DI::ld(x[j]) * scale;
            if (mask) t += DI::ld(mask[mb + j * ms_last]);
            v[k] = t;
            m = fmaxf(m, t);
        }
    }
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float sum = 0.f;
#pragma unroll
    for (int k = 0; k < 32; ++k) if (lane + 32 * k < cols) sum += expf(v[k] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    bool dead = nan_to_zero && m == __int_as_float(0xff800000);
    float ls = logf(sum), inv = 1.f / sum;
#pragma unroll
    for (int k = 0; k < 32; ++k) {
        long long j = lane + 32 * k;
        if (j < cols) {
            float o = log_softmax ? v[k] - m - ls : expf(v[k] - m) * inv;
            y[j] = DO::st(dead ? 0.f : o);
        }
    }
}

// entry points of both row softmaxes: "_w" = a warp per row (rows of up to 1024 columns), "" = a block per row.
// softmax_rows[_h|_b]: a Softmax layer (float32 / float16 / bfloat16 storage); attn_softmax[_h|_b]: attention scores
// (float32, from the GEMM) with scale and additive mask -> probabilities in the layer's storage type.
#define SOFTMAX_T(KERNEL, SFX, TS, D)                                                                           \
extern "C" __global__ void softmax_rows##TS##SFX(D::T* out, const D::T* in, long long rows, long long cols,      \
                                                int log_softmax) {                                              \
    Bcast none; none.rank = 0;                                                                                \
    KERNEL<D, D>(out, in, rows, cols, log_softmax, 1.f, (const D::T*)0, none, 0); }                            \
extern "C" __global__ void attn_softmax##TS##SFX(D::T* out, const float* in, long long rows, long long cols,      \
                                                float scale, const float* mask, Bcast ms, int nan_to_zero) {    \
    KERNEL<F32, D>(out, in, rows, cols, 0, scale, mask, ms, nan_to_zero); }
#define SOFTMAX_ENTRIES(KERNEL, SFX) \
SOFTMAX_T(KERNEL, SFX, _f32, F32) SOFTMAX_T(KERNEL, SFX, _f16, F16) SOFTMAX_T(KERNEL, SFX, _bf16, BF16)

SOFTMAX_ENTRIES(softmax_warp_k, _w)
SOFTMAX_ENTRIES(softmax_k, )

// im2col for 2-D convolution (NCHW, one batch item): cols[c*kh*kw + ky*kw + kx][oy*ow + ox]; it only moves
// elements, so one body serves every storage type of an element size (zero bits are +0 in float16 and bfloat16)
template <typename T>
__device__ __forceinline__ void im2col_k(T* __restrict__ cols, const T* __restrict__ x, long long C, long long H,
                                         long long W, long long kh, long long kw, long long sh, long long sw,
                                         long long ph, long long pw, long long dh, long long dw, long long oh,
                                         long long ow) {
    long long total = C * kh * kw * oh * ow;
    GRID_LOOP(total) {
        long long ox = i % ow, t = i / ow;
        long long oy = t % oh; t /= oh;
        long long kx = t % kw; t /= kw;
        long long ky = t % kh;
        long long c = t / kh;
        long long iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
        cols[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(c * H + iy) * W + ix] : (T)0;
    }
}
#define IM2COL(NAME, T) \
extern "C" __global__ void NAME(T* cols, const T* x, long long C, long long H, long long W, long long kh,         \
                                long long kw, long long sh, long long sw, long long ph, long long pw, long long dh, \
                                long long dw, long long oh, long long ow) {                                       \
    im2col_k<T>(cols, x, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow); }
IM2COL(im2col2d, float)
IM2COL(im2col2d_2, unsigned short)

// im2col for 2-D convolution (NHWC, one batch item): cols[oy*ow + ox][(ky*kw + kx)*C + c], the rows a GEMM with the
// [KH*KW*C, M] kernel turns into the NHWC output
template <typename T>
__device__ __forceinline__ void im2col_nhwc_k(T* __restrict__ cols, const T* __restrict__ x, long long C,
                                              long long H, long long W, long long kh, long long kw, long long sh,
                                              long long sw, long long ph, long long pw, long long dh, long long dw,
                                              long long oh, long long ow) {
    long long total = oh * ow * kh * kw * C;
    GRID_LOOP(total) {
        long long c = i % C, t = i / C;
        long long kx = t % kw; t /= kw;
        long long ky = t % kh; t /= kh;
        long long ox = t % ow;
        long long oy = t / ow;
        long long iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
        cols[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(iy * W + ix) * C + c] : (T)0;
    }
}
#define IM2COL_NHWC(NAME, T) \
extern "C" __global__ void NAME(T* cols, const T* x, long long C, long long H, long long W, long long kh,         \
                                long long kw, long long sh, long long sw, long long ph, long long pw, long long dh, \
                                long long dw, long long oh, long long ow) {                                       \
    im2col_nhwc_k<T>(cols, x, C, H, W, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow); }
IM2COL_NHWC(im2col2d_nhwc, float)
IM2COL_NHWC(im2col2d_nhwc_2, unsigned short)
