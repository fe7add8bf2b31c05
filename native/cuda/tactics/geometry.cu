// Geometry and data-movement kernels of the CUDA device: padding (constant / reflect / edge / wrap), resize
// (nearest gathers and separable linear / cubic filters from host-built tap tables), the col2im gather of a
// transposed convolution, LRN, and the generators behind Fill and Range. Copies work on raw element bits (suffix
// = bytes per element); float math comes in float32 (plain name), float16 ("_h") and bfloat16 ("_b") storage. Index
// variants: `_s` uses 32-bit index arithmetic (every index below 2^31), the plain ones 64-bit.
#include "common.cuh"

// double <-> storage conversions with one rounding (numpy's float64 -> float32 / float16 casts)
struct D32 {
    typedef float T;
    static __device__ __forceinline__ double ld(float v) { return (double)v; }
    static __device__ __forceinline__ float st(double v) { return __double2float_rn(v); }
};
struct D16 {
    typedef unsigned short T;
    static __device__ __forceinline__ double ld(unsigned short v) { return (double)F16::ld(v); }
    static __device__ __forceinline__ unsigned short st(double v) {
        unsigned short h; asm("{cvt.rn.f16.f64 %0, %1;}" : "=h"(h) : "d"(v)); return h;
    }
};

struct DB16 {   // bfloat16 from float64 through float32, as ml_dtypes converts on the CPU
    typedef unsigned short T;
    static __device__ __forceinline__ double ld(unsigned short v) { return (double)BF16::ld(v); }
    static __device__ __forceinline__ unsigned short st(double v) { return BF16::st(__double2float_rn(v)); }
};

template <int B> struct Bits;
template <> struct Bits<1> { typedef unsigned char T; };
template <> struct Bits<2> { typedef unsigned short T; };
template <> struct Bits<4> { typedef unsigned int T; };
template <> struct Bits<8> { typedef unsigned long long T; };

// padding ---------------------------------------------------------------------------------------------------------
// out (contiguous, dims `od`) from in (element strides `is`, extents `id` after any crop, the crop folded into the
// base pointer): along each axis out index o reads input index o - pre, outside [0, id) by mode
struct PadP {
    long long rank, n;
    long long od[8], id[8], is[8], pre[8];
    long long mode;                // 0 constant, 1 reflect, 2 edge, 3 wrap
    unsigned long long value;      // constant mode: the value's bits in the element type
};

template <typename I>
__device__ __forceinline__ I pad_src(I j, I len, int mode) {   // -1: outside (constant mode)
    if (j >= 0 && j < len) return j;
    if (mode == 0) return -1;
    if (mode == 2) return j < 0 ? 0 : len - 1;
    if (mode == 3) { I r = j % len; return r < 0 ? r + len : r; }
    if (len == 1) return 0;                             // reflect: period 2 (len - 1), mirrored about both edges
    I p = 2 * (len - 1), r = j % p;
    r = r < 0 ? r + p : r;
    return r >= len ? p - r : r;
}

template <int B, typename I>
__device__ __forceinline__ void pad_k(typename Bits<B>::T* __restrict__ out, const typename Bits<B>::T* __restrict__ in,
                                      const PadP& p) {
    typedef typename Bits<B>::T T;
    const int rank = (int)p.rank, mode = (int)p.mode;
    const I n = (I)p.n;
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I r = i, off = 0;
        bool inside = true;
        for (int d = rank - 1; d >= 0; --d) {
            I q = r % (I)p.od[d];
            r /= (I)p.od[d];
            I j = pad_src<I>(q - (I)p.pre[d], (I)p.id[d], mode);
            if (j < 0) { inside = false; break; }
            off += j * (I)p.is[d];
        }
        out[i] = inside ? in[off] : (T)p.value;
    }
}
#define PAD(B) \
extern "C" __global__ void pad_##B(Bits<B>::T* out, const Bits<B>::T* in, PadP p) { pad_k<B, long long>(out, in, p); } \
extern "C" __global__ void pad_s_##B(Bits<B>::T* out, const Bits<B>::T* in, PadP p) { pad_k<B, int>(out, in, p); }
PAD(1) PAD(2) PAD(4) PAD(8)

// resize ----------------------------------------------------------------------------------------------------------
// out (contiguous, dims `od`) from in (contiguous strides `is`). Resized axes are levels 0..R-1 in the order the CPU
// applies them; level k has T[k] taps per output index: source index idx[off[k] + o * T[k] + t] (already clamped)
// and weight w[same]. bad[boff[k] + o] != 0 marks an output index outside tf_crop_and_resize's box (whole output
// element = extrapolation value). Sums run level by level in float64 with separate multiply and add (no FMA), so
// the result is the CPU's axis-by-axis float64 sums rounded once to the storage type.
struct ResizeP {
    long long rank, n;
    long long od[8], is[8];
    long long level[8];            // per axis: its level, -1 when the axis is not resized
    long long R;
    long long T[4], off[4], boff[4];
    long long has_bad;
    double extrap;                  // interpolating modes: the extrapolation value
    unsigned long long extrap_bits; // nearest: the extrapolation value's bits in the element type
};

template <typename I>
__device__ __forceinline__ bool resize_coords(I i, const ResizeP& p, I* o, I& base, const unsigned char* bad) {
    I r = i;
    base = 0;
    bool outside = false;
    for (int d = (int)p.rank - 1; d >= 0; --d) {
        I q = r % (I)p.od[d];
        r /= (I)p.od[d];
        int k = (int)p.level[d];
        if (k < 0) base += q * (I)p.is[d];
        else {
            o[k] = q;
            if (p.has_bad && bad[p.boff[k] + q]) outside = true;
        }
    }
    return outside;
}

template <int B, typename I>
__device__ __forceinline__ void resize_near_k(typename Bits<B>::T* __restrict__ out,
                                              const typename Bits<B>::T* __restrict__ in,
                                              const long long* __restrict__ idx, const unsigned char* __restrict__ bad,
                                              const ResizeP& p) {
    typedef typename Bits<B>::T T;
    const I n = (I)p.n;
    long long axis_stride[4];
    for (int d = 0; d < (int)p.rank; ++d) if (p.level[d] >= 0) axis_stride[p.level[d]] = p.is[d];
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I o[4], base;
        if (resize_coords<I>(i, p, o, base, bad)) { out[i] = (T)p.extrap_bits; continue; }
        for (int k = 0; k < (int)p.R; ++k) base += (I)idx[p.off[k] + o[k]] * (I)axis_stride[k];
        out[i] = in[base];
    }
}
#define RESIZE_NEAR(B) \
extern "C" __global__ void resize_near_##B(Bits<B>::T* out, const Bits<B>::T* in, const long long* idx, \
                                           const unsigned char* bad, ResizeP p) { \
    resize_near_k<B, long long>(out, in, idx, bad, p); } \
extern "C" __global__ void resize_near_s_##B(Bits<B>::T* out, const Bits<B>::T* in, const long long* idx, \
                                             const unsigned char* bad, ResizeP p) { \
    resize_near_k<B, int>(out, in, idx, bad, p); }
RESIZE_NEAR(1) RESIZE_NEAR(2) RESIZE_NEAR(4) RESIZE_NEAR(8)

template <class D, typename I>
__device__ __forceinline__ void resize_interp_k(typename D::T* __restrict__ out, const typename D::T* __restrict__ in,
                                                const long long* __restrict__ idx, const double* __restrict__ w,
                                                const unsigned char* __restrict__ bad, const ResizeP& p) {
    const I n = (I)p.n;
    const int R = (int)p.R;
    long long axis_stride[4];
    for (int d = 0; d < (int)p.rank; ++d) if (p.level[d] >= 0) axis_stride[p.level[d]] = p.is[d];
    for (I i = blockIdx.x * (I)blockDim.x + threadIdx.x; i < n; i += (I)gridDim.x * blockDim.x) {
        I o[4], base;
        if (resize_coords<I>(i, p, o, base, bad)) { out[i] = D::st(p.extrap); continue; }
        double acc[4] = {0.0, 0.0, 0.0, 0.0};
        int t[4] = {0, 0, 0, 0};
        bool first[4] = {true, true, true, true};   // the CPU's sums start from their first term, not from 0
        while (true) {
            I src = base;
            for (int k = 0; k < R; ++k) src += (I)idx[p.off[k] + o[k] * p.T[k] + t[k]] * (I)axis_stride[k];
            double v = D::ld(in[src]);
            int k = 0;
            while (true) {                    // fold v into level k; carry completed levels upwards
                double term = __dmul_rn(v, w[p.off[k] + o[k] * p.T[k] + t[k]]);
                acc[k] = first[k] ? term : __dadd_rn(acc[k], term);
                first[k] = false;
                if (++t[k] < p.T[k]) break;
                t[k] = 0;
                v = acc[k];
                first[k] = true;
                if (++k == R) break;
            }
            if (k == R) { out[i] = D::st(v); break; }
        }
    }
}
#define RESIZE_INTERP(NAME, D, I) \
extern "C" __global__ void NAME(D::T* out, const D::T* in, const long long* idx, const double* w, \
                                const unsigned char* bad, ResizeP p) { resize_interp_k<D, I>(out, in, idx, w, bad, p); }
RESIZE_INTERP(resize_interp_f32, D32, long long)
RESIZE_INTERP(resize_interp_s_f32, D32, int)
RESIZE_INTERP(resize_interp_f16, D16, long long)
RESIZE_INTERP(resize_interp_s_f16, D16, int)
RESIZE_INTERP(resize_interp_bf16, DB16, long long)
RESIZE_INTERP(resize_interp_s_bf16, DB16, int)

// transposed convolution: col2im as a gather ---------------------------------------------------------------------
// cols [N, M, taps, in...] (float32, from the GEMM) -> y [N, M, out...]: y[o] = sum over taps whose input position
// (o + pre - tap * dil) / stride is whole and inside, in tap order, plus bias[m]; float32 sums (the CPU's scatter
// adds taps in the same order). Spatial dims padded to 3 with extent 1.
struct Col2ImP {
    long long N, M;
    long long in[3], out[3], k[3], s[3], d[3], pre[3];
};
template <class D>
__device__ __forceinline__ void col2im_k(typename D::T* __restrict__ y, const float* __restrict__ cols,
                                         const typename D::T* __restrict__ bias, const Col2ImP p) {
    const long long P = p.in[0] * p.in[1] * p.in[2], taps = p.k[0] * p.k[1] * p.k[2];
    const long long n = p.N * p.M * p.out[0] * p.out[1] * p.out[2];
    GRID_LOOP(n) {
        long long r = i;
        long long o2 = r % p.out[2]; r /= p.out[2];
        long long o1 = r % p.out[1]; r /= p.out[1];
        long long o0 = r % p.out[0]; r /= p.out[0];
        long long nm = r;   // n * M + m
        const float* c = cols + nm * taps * P;
        float acc = 0.f;
        for (long long k0 = 0; k0 < p.k[0]; ++k0) {
            long long a0 = o0 + p.pre[0] - k0 * p.d[0];
            if (a0 < 0 || a0 % p.s[0]) continue;
            a0 /= p.s[0];
            if (a0 >= p.in[0]) continue;
            for (long long k1 = 0; k1 < p.k[1]; ++k1) {
                long long a1 = o1 + p.pre[1] - k1 * p.d[1];
                if (a1 < 0 || a1 % p.s[1]) continue;
                a1 /= p.s[1];
                if (a1 >= p.in[1]) continue;
                for (long long k2 = 0; k2 < p.k[2]; ++k2) {
                    long long a2 = o2 + p.pre[2] - k2 * p.d[2];
                    if (a2 < 0 || a2 % p.s[2]) continue;
                    a2 /= p.s[2];
                    if (a2 >= p.in[2]) continue;
                    long long tap = (k0 * p.k[1] + k1) * p.k[2] + k2;
                    acc = __fadd_rn(acc, c[tap * P + (a0 * p.in[1] + a1) * p.in[2] + a2]);
                }
            }
        }
        y[i] = D::st(bias ? __fadd_rn(acc, D::ld(bias[nm % p.M])) : acc);
    }
}
extern "C" __global__ void col2im_f32(float* y, const float* cols, const float* bias, Col2ImP p) {
    col2im_k<F32>(y, cols, bias, p); }
extern "C" __global__ void col2im_f16(unsigned short* y, const float* cols, const unsigned short* bias, Col2ImP p) {
    col2im_k<F16>(y, cols, bias, p); }
extern "C" __global__ void col2im_bf16(unsigned short* y, const float* cols, const unsigned short* bias, Col2ImP p) {
    col2im_k<BF16>(y, cols, bias, p); }

// LRN across channels: y = x / (k + alpha_n * sum of x^2 over the window) ^ beta (alpha_n = alpha / size), in float64
// as the CPU
template <class D>
__device__ __forceinline__ void lrn_k(typename D::T* __restrict__ y, const typename D::T* __restrict__ x,
                                      long long N, long long C, long long inner, long long before, long long size,
                                      double k, double alpha_n, double beta) {
    GRID_LOOP(N * C * inner) {
        long long s = i % inner, c = (i / inner) % C, b = i / (inner * C);
        double acc = 0.0;
        for (long long t = 0; t < size; ++t) {   // the CPU's tap order over the zero-padded window
            long long cc = c - before + t;
            double v = (cc >= 0 && cc < C) ? D::ld(x[(b * C + cc) * inner + s]) : 0.0;
            acc = __dadd_rn(acc, __dmul_rn(v, v));
        }
        double den = pow(__dadd_rn(k, __dmul_rn(alpha_n, acc)), beta);
        y[i] = D::st(D::ld(x[i]) / den);
    }
}
extern "C" __global__ void lrn_f32(float* y, const float* x, long long N, long long C, long long inner, long long before,
                               long long size, double k, double alpha, double beta) {
    lrn_k<D32>(y, x, N, C, inner, before, size, k, alpha, beta); }
extern "C" __global__ void lrn_f16(unsigned short* y, const unsigned short* x, long long N, long long C, long long inner,
                                 long long before, long long size, double k, double alpha, double beta) {
    lrn_k<D16>(y, x, N, C, inner, before, size, k, alpha, beta); }
extern "C" __global__ void lrn_bf16(unsigned short* y, const unsigned short* x, long long N, long long C, long long inner,
                                 long long before, long long size, double k, double alpha, double beta) {
    lrn_k<DB16>(y, x, N, C, inner, before, size, k, alpha, beta); }

// generators: Fill (constant, eye, linspace) and Range --------------------------------------------------------------
#define FILL(B) \
extern "C" __global__ void fill_##B(Bits<B>::T* out, unsigned long long bits, long long n) { \
    GRID_LOOP(n) { out[i] = (Bits<B>::T)bits; } } \
extern "C" __global__ void eye_##B(Bits<B>::T* out, long long rows, long long cols, long long k, \
                                   unsigned long long one, unsigned long long zero) { \
    GRID_LOOP(rows * cols) { out[i] = (Bits<B>::T)((i % cols) - (i / cols) == k ? one : zero); } }
FILL(1) FILL(2) FILL(4) FILL(8)

// linspace: alpha + beta * i in float64 (numpy's float64 arange arithmetic), cast once to the storage type
#define LINSPACE(NAME, T, CONV) \
extern "C" __global__ void NAME(T* out, double alpha, double beta, long long n) { \
    GRID_LOOP(n) { double v = __dadd_rn(alpha, __dmul_rn(beta, (double)i)); out[i] = CONV; } }
LINSPACE(linspace_f32, float, __double2float_rn(v))
LINSPACE(linspace_f16, unsigned short, D16::st(v))
LINSPACE(linspace_f64, double, v)
LINSPACE(linspace_i32, int, (int)v)
LINSPACE(linspace_i64, long long, (long long)v)

// range: start + i * delta in the element type (float32: the product rounded, then the sum; integers wrap)
extern "C" __global__ void range_f32(float* out, float start, float delta, long long n) {
    GRID_LOOP(n) { out[i] = __fadd_rn(start, __fmul_rn((float)i, delta)); } }
extern "C" __global__ void range_f64(double* out, double start, double delta, long long n) {
    GRID_LOOP(n) { out[i] = __dadd_rn(start, __dmul_rn((double)i, delta)); } }
extern "C" __global__ void range_i32(int* out, int start, int delta, long long n) {
    GRID_LOOP(n) { out[i] = (int)((unsigned int)start + (unsigned int)i * (unsigned int)delta); } }
extern "C" __global__ void range_i64(long long* out, long long start, long long delta, long long n) {
    typedef unsigned long long U;
    GRID_LOOP(n) { out[i] = (long long)((U)start + (U)i * (U)delta); } }
