// Quantize / Dequantize of the CUDA device, as the CPU kernels (native/cpu/kernels/quantize.py) compute them:
// Quantize: r = x / scale in float32, INT8 / UINT8: rint(r) (half to even) + zero point, saturated; FP8 E4M3:
// r + zero point, clamped to +-448 when saturating, rounded to nearest even (overflow without saturation and NaN
// give NaN). Dequantize: (x - zero point) * scale in float64, rounded once to the output type.
// Scale and zero point are per tensor (pstride 0) or per channel: element i uses entry (i / inner) % channels.
#include "common.cuh"

typedef long long i64;

// float32 -> float8_e4m3fn bits, round to nearest even (ml_dtypes' conversion: no infinities, overflow is NaN)
__device__ __forceinline__ unsigned char f32_to_e4m3(float f) {
    unsigned int b = __float_as_uint(f);
    unsigned char sign = (b >> 24) & 0x80;
    float a = fabsf(f);
    if (a != a || a > 464.f) return sign | 0x7f;               // NaN, and values that round past 448
    if (a < 0.015625f) {                                        // below 2^-6: subnormal steps of 2^-9
        return sign | (unsigned char)rintf(a * 512.f);          // (8 steps is the smallest normal, 0x08)
    }
    unsigned int m = __float_as_uint(a);
    m += 0x7FFFFu + ((m >> 20) & 1u);                           // round the 23-bit mantissa to 3 bits, ties even
    m &= ~0xFFFFFu;
    int e = (int)(m >> 23) - 127;
    return sign | (unsigned char)(((e + 7) << 3) | ((m >> 20) & 7u));
}
__device__ __forceinline__ float e4m3_to_f32(unsigned char v) {
    int e = (v >> 3) & 0xF, m = v & 7;
    float r;
    if (e == 0xF && m == 7) r = __int_as_float(0x7fc00000);
    else if (e == 0) r = (float)m * 0.001953125f;               // m * 2^-9
    else r = ldexpf(1.f + (float)m * 0.125f, e - 7);
    return (v & 0x80) ? -r : r;
}
__device__ __forceinline__ unsigned short f64_to_f16(double v) {
    unsigned short h; asm("{cvt.rn.f16.f64 %0, %1;}" : "=h"(h) : "d"(v)); return h;
}

struct QParams {
    i64 n, inner, channels;
    int zp_kind;       // 0 none, 1 int8, 2 uint8, 3 e4m3
    int out_kind;      // quantize: 1 int8, 2 uint8, 3 e4m3; dequantize: 0 float32, 1 float16
    int saturate;
};
__device__ __forceinline__ i64 channel(const QParams& p, i64 i) {
    return p.channels > 1 ? (i / p.inner) % p.channels : 0;
}
__device__ __forceinline__ double zp_at(const void* zp, int kind, i64 c) {
    if (kind == 1) return (double)((const signed char*)zp)[c];
    if (kind == 2) return (double)((const unsigned char*)zp)[c];
    if (kind == 3) return (double)e4m3_to_f32(((const unsigned char*)zp)[c]);
    return 0.0;
}

template <class D, class S>
__device__ __forceinline__ void quantize_k(unsigned char* __restrict__ out, const typename D::T* __restrict__ x,
                                           const typename S::T* __restrict__ scale, const void* __restrict__ zp,
                                           const QParams p) {
    GRID_LOOP(p.n) {
        i64 c = channel(p, i);
        float r = __fdiv_rn(D::ld(x[i]), S::ld(scale[c]));
        if (p.out_kind == 3) {
            double v = (double)r;
            if (p.zp_kind) v = __dadd_rn(v, zp_at(zp, p.zp_kind, c));
            if (p.saturate) v = v != v ? v : fmin(fmax(v, -448.0), 448.0);
            out[i] = f32_to_e4m3((float)v);
        } else {
            double q = rint((double)r);
            if (p.zp_kind) q = __dadd_rn(q, zp_at(zp, p.zp_kind, c));
            double lo = p.out_kind == 1 ? -128.0 : 0.0, hi = p.out_kind == 1 ? 127.0 : 255.0;
            q = q != q ? 0.0 : fmin(fmax(q, lo), hi);             // (NaN converts to 0, as numpy's astype)
            out[i] = p.out_kind == 1 ? (unsigned char)(signed char)(int)q : (unsigned char)(int)q;
        }
    }
}
#define QUANT(NAME, D, S) extern "C" __global__ void NAME(unsigned char* out, const D::T* x, const S::T* scale, \
    const void* zp, QParams p) { quantize_k<D, S>(out, x, scale, zp, p); }
QUANT(quantize_f32_f32, F32, F32)
QUANT(quantize_f16_f32, F16, F32)
QUANT(quantize_f32_f16, F32, F16)
QUANT(quantize_f16_f16, F16, F16)

// x: 1 int8, 2 uint8, 3 e4m3 (x_kind); out float32 (out_kind 0) or float16 (1)
template <class S>
__device__ __forceinline__ void dequantize_k(void* __restrict__ out, const unsigned char* __restrict__ x, int x_kind,
                                             const typename S::T* __restrict__ scale, const void* __restrict__ zp,
                                             const QParams p) {
    GRID_LOOP(p.n) {
        i64 c = channel(p, i);
        double v = zp_at(x + i, x_kind, 0);
        if (p.zp_kind) v = __dsub_rn(v, zp_at(zp, p.zp_kind, c));
        v = __dmul_rn(v, (double)S::ld(scale[c]));
        if (p.out_kind == 0) ((float*)out)[i] = __double2float_rn(v);
        else ((unsigned short*)out)[i] = f64_to_f16(v);
    }
}
extern "C" __global__ void dequantize_f32(void* out, const unsigned char* x, int x_kind, const float* scale,
                                          const void* zp, QParams p) { dequantize_k<F32>(out, x, x_kind, scale, zp, p); }
extern "C" __global__ void dequantize_f16(void* out, const unsigned char* x, int x_kind, const unsigned short* scale,
                                          const void* zp, QParams p) { dequantize_k<F16>(out, x, x_kind, scale, zp, p); }
