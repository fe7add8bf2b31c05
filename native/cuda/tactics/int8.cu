// INT8 layers on the GPU with the numerics of the CPU's INT8 kernels (native/cpu/kernels/conv_int8.py and
// native/numerics.py): symmetric quantization clamp(round(x / s)) with IEEE division and the layer's rounding mode,
// exact int32 accumulation (cuBLASLt), then dequantization (or requantization) in float32.
#include "common.cuh"

// rounding: 0 half_even (rint), 1 half_up (floor(v) + (v - floor(v) >= 0.5)), 2 half_away (ties away from zero)
__device__ __forceinline__ float round_mode(float v, int mode) {
    if (mode == 0) return rintf(v);
    if (mode == 1) { float lo = floorf(v); return lo + ((v - lo) >= 0.5f ? 1.0f : 0.0f); }
    float w = truncf(v);
    float f = v - w;
    return w + (fabsf(f) >= 0.5f ? copysignf(1.0f, v) : 0.0f);
}

__device__ __forceinline__ signed char saturate_i8(float v, int narrow) {
    if (isnan(v)) return 0;
    float lo = narrow ? -127.0f : -128.0f;
    return (signed char)fminf(fmaxf(v, lo), 127.0f);
}

extern "C" __global__ void quantize_i8(signed char* out, const float* x, long long n, float s, int mode,
                                       int narrow) {
    GRID_LOOP(n) { out[i] = saturate_i8(round_mode(__fdiv_rn(x[i], s), mode), narrow); }
}

// im2col of a quantized NCHW image into pixel-major rows: cols[p, k], k = (c * kh + i) * kw + j for k < K, zero for
// K <= k < Kp (the GEMM's K padded for cuBLASLt's INT8 alignment) and in the padding
extern "C" __global__ void im2col_rows_i8(signed char* cols, const signed char* x, long long C, long long H,
                                          long long W, long long kh, long long kw, long long sh, long long sw,
                                          long long ph, long long pw, long long dh, long long dw, long long oh,
                                          long long ow, long long Kp) {
    long long K = C * kh * kw;
    GRID_LOOP(oh * ow * Kp) {
        long long k = i % Kp, p = i / Kp;
        signed char v = 0;
        if (k < K) {
            long long j = k % kw, t = k / kw, r = t % kh, c = t / kh;
            long long y = (p / ow) * sh - ph + r * dh, xx = (p % ow) * sw - pw + j * dw;
            if (y >= 0 && y < H && xx >= 0 && xx < W) v = x[(c * H + y) * W + xx];
        }
        cols[i] = v;
    }
}

// the same rows for a whole batch: cols[(b * oh * ow + p), k] from image b of x (N images of C*H*W)
extern "C" __global__ void im2col_rows_batch_i8(signed char* cols, const signed char* x, long long N, long long C,
                                                long long H, long long W, long long kh, long long kw, long long sh,
                                                long long sw, long long ph, long long pw, long long dh,
                                                long long dw, long long oh, long long ow, long long Kp) {
    long long K = C * kh * kw, P = oh * ow;
    GRID_LOOP(N * P * Kp) {
        long long k = i % Kp, q = i / Kp;
        long long p = q % P, b = q / P;
        signed char v = 0;
        if (k < K) {
            long long j = k % kw, t = k / kw, r = t % kh, c = t / kh;
            long long y = (p / ow) * sh - ph + r * dh, xx = (p % ow) * sw - pw + j * dw;
            if (y >= 0 && y < H && xx >= 0 && xx < W) v = x[((b * C + c) * H + y) * W + xx];
        }
        cols[i] = v;
    }
}

// int8_finish for a channel-major accumulator acc[c, b * P + p] (channels x all pixels of the batch) into NCHW
// out[(b * M + c) * P + p]: reads and writes run along p. mode 0 and 1 as int8_finish; mode 2 (a residual add
// [+ ReLU] epilogue, fused): v = (acc + bias[c]) * scale[c] + res[i] (two float32 roundings, as the separate
// kernels: no FMA), ReLU'd when relu (NaN kept, as act_relu), then fake-quantized to s_y when s_y > 0
extern "C" __global__ void int8_finish_cm(float* out, const int* acc, const int* bias, const float* scale,
                                          long long M, long long NP, long long P, float s_y, int mode, int relu,
                                          int rounding, const float* res) {
    GRID_LOOP(M * NP) {
        long long p = i % P, t = i / P;
        long long c = t % M, b = t / M;
        int a = acc[c * NP + b * P + p] + (bias ? bias[c] : 0);
        float v = __fmul_rn((float)a, scale[c]);
        if (mode == 1) {
            signed char q = saturate_i8(round_mode(v, rounding), 0);
            if (relu && q < 0) q = 0;
            v = (float)q * s_y;
        } else if (mode == 2) {
            v = __fadd_rn(v, res[i]);
            if (relu) v = (v > 0.f || v != v) ? v : 0.f;
            if (s_y > 0.f) v = (float)saturate_i8(round_mode(__fdiv_rn(v, s_y), rounding), 0) * s_y;
        }
        out[i] = v;
    }
}

// an int32 accumulator acc[r, c] (row-major, `cols` columns = channels) into float32 out[r * rs + c * cs]:
// mode 0: (acc + bias[c]) * scale[c]; mode 1 (requantize, ReLU-only epilogue): q = sat(round((acc + bias[c]) *
// scale[c])), ReLU'd when relu, times s_y
extern "C" __global__ void int8_finish(float* out, const int* acc, const int* bias, const float* scale,
                                       long long rows, long long cols, long long rs, long long cs, float s_y,
                                       int mode, int relu, int rounding) {
    GRID_LOOP(rows * cols) {
        long long c = i % cols, r = i / cols;
        int a = acc[i] + (bias ? bias[c] : 0);
        float v = (float)a * scale[c];
        if (mode == 1) {
            signed char q = saturate_i8(round_mode(v, rounding), 0);
            if (relu && q < 0) q = 0;
            v = (float)q * s_y;
        }
        out[r * rs + c * cs] = v;
    }
}

// quantize-dequantize in place (an INT8 output whose epilogue ran in float32)
extern "C" __global__ void fake_quant_i8(float* y, long long n, float s, int mode) {
    GRID_LOOP(n) { y[i] = (float)saturate_i8(round_mode(__fdiv_rn(y[i], s), mode), 0) * s; }
}

// Reformat layers at the edges of INT8 I/O chains (int8 tensors between INT8 layers): quantize a float16 tensor
// (float32 ones use quantize_i8), and dequantize int8 values q * s into float32 / float16
extern "C" __global__ void quantize_f16_i8(signed char* out, const unsigned short* x, long long n, float s,
                                           int mode) {
    GRID_LOOP(n) { out[i] = saturate_i8(round_mode(__fdiv_rn(F16::ld(x[i]), s), mode), 0); }
}

extern "C" __global__ void dequantize_i8_f32(float* out, const signed char* q, long long n, float s) {
    GRID_LOOP(n) { out[i] = __fmul_rn((float)q[i], s); }
}

extern "C" __global__ void dequantize_i8_f16(unsigned short* out, const signed char* q, long long n, float s) {
    GRID_LOOP(n) { out[i] = F16::st(__fmul_rn((float)q[i], s)); }
}

// the same four, 8 elements a thread (16-byte float16 / 8-byte int8 / 2 x 16-byte float32 accesses; n8 = n / 8,
// the pointers aligned for them): the Reformats are memory-bound, and one byte or half a thread left the memory
// system two to three times under its bandwidth (ResNet-50 b128: 0.06-0.08 ms for a [128, 56, 56, 64] tensor)
__device__ __forceinline__ unsigned pack4_i8(signed char a, signed char b, signed char c, signed char d) {
    return (unsigned)(unsigned char)a | ((unsigned)(unsigned char)b << 8) | ((unsigned)(unsigned char)c << 16) |
           ((unsigned)(unsigned char)d << 24);
}
__device__ __forceinline__ signed char q8(float v, float s, int mode) {
    return saturate_i8(round_mode(__fdiv_rn(v, s), mode), 0);
}
extern "C" __global__ void quantize_i8_x8(signed char* out, const float* x, long long n8, float s, int mode) {
    GRID_LOOP(n8) {
        const float4 a = ((const float4*)x)[2 * i], b = ((const float4*)x)[2 * i + 1];
        ((uint2*)out)[i] = make_uint2(pack4_i8(q8(a.x, s, mode), q8(a.y, s, mode), q8(a.z, s, mode), q8(a.w, s, mode)),
                                      pack4_i8(q8(b.x, s, mode), q8(b.y, s, mode), q8(b.z, s, mode), q8(b.w, s, mode)));
    }
}
extern "C" __global__ void quantize_f16_i8_x8(signed char* out, const unsigned short* x, long long n8, float s,
                                              int mode) {
    GRID_LOOP(n8) {
        const uint4 v = ((const uint4*)x)[i];
        const unsigned w[4] = {v.x, v.y, v.z, v.w};
        signed char r[8];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            r[2 * k] = q8(F16::ld((unsigned short)(w[k] & 0xFFFF)), s, mode);
            r[2 * k + 1] = q8(F16::ld((unsigned short)(w[k] >> 16)), s, mode);
        }
        ((uint2*)out)[i] = make_uint2(pack4_i8(r[0], r[1], r[2], r[3]), pack4_i8(r[4], r[5], r[6], r[7]));
    }
}
extern "C" __global__ void dequantize_i8_f32_x8(float* out, const signed char* q, long long n8, float s) {
    GRID_LOOP(n8) {
        const uint2 v = ((const uint2*)q)[i];
        float f[8];
#pragma unroll
        for (int k = 0; k < 8; ++k)
            f[k] = __fmul_rn((float)(signed char)(((k < 4 ? v.x : v.y) >> (8 * (k & 3))) & 0xFF), s);
        ((float4*)out)[2 * i] = make_float4(f[0], f[1], f[2], f[3]);
        ((float4*)out)[2 * i + 1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}
extern "C" __global__ void dequantize_i8_f16_x8(unsigned short* out, const signed char* q, long long n8, float s) {
    GRID_LOOP(n8) {
        const uint2 v = ((const uint2*)q)[i];
        unsigned h[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned word = k < 2 ? v.x : v.y, sh = 16 * (k & 1);
            const unsigned lo = F16::st(__fmul_rn((float)(signed char)((word >> sh) & 0xFF), s));
            const unsigned hi = F16::st(__fmul_rn((float)(signed char)((word >> (sh + 8)) & 0xFF), s));
            h[k] = lo | (hi << 16);
        }
        ((uint4*)out)[i] = make_uint4(h[0], h[1], h[2], h[3]);
    }
}

// INT8 calibration statistics of a float32 tensor on the device (backends/engine/calibration/histogram.py's
// TensorStats without downloading it): the largest finite |x| as its float bits (non-negative floats order as their
// bits) by atomicMax, and the histogram of the finite non-zero |x| into `bins` bins, bin = min(trunc(|x| * scale),
// bins - 1) with scale = float32(bins / amax) multiplied in float32: numpy's arithmetic in observe_histogram
extern "C" __global__ void abs_max_f32(const float* x, long long n, unsigned int* out) {
    unsigned int m = 0;
    GRID_LOOP(n) {
        float a = fabsf(x[i]);
        if (a <= 3.402823466e38f) m = max(m, __float_as_uint(a));   // finite (NaN compares false)
    }
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_down_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, m);
}

extern "C" __global__ void abs_hist_f32(const float* x, long long n, float scale, int bins,
                                        unsigned long long* hist) {
    __shared__ unsigned int sh[4096];
    for (int b = threadIdx.x; b < bins; b += blockDim.x) sh[b] = 0;
    __syncthreads();
    GRID_LOOP(n) {
        float a = fabsf(x[i]);
        if (a != 0.0f && a <= 3.402823466e38f) {
            float v = __fmul_rn(a, scale);
            int idx = v >= (float)bins ? bins - 1 : (int)v;
            atomicAdd(&sh[idx], 1u);
        }
    }
    __syncthreads();
    for (int b = threadIdx.x; b < bins; b += blockDim.x)
        if (sh[b]) atomicAdd(&hist[b], (unsigned long long)sh[b]);
}

// the INT8 stem's quantizing Reformat (native/shared/int8_stem.py), second pass: pack a quantized NCHW / NHWC image
// (its element strides sN, sC, sH, sW) into [N, rows, ow, cp] int8; zero outside the image and in the padding
// channels. Channel k = ((b * 2 + dy) * 2 + dx) * C + c reads x[n, c, 2 (r + a_min) + dy, 2 (X + b + b_min) + dx].
struct StemPack {
    int sN, sC, sH, sW;
    int N, H, W, C, rows, ow, cp, kw2, a_min, b_min;
};
// A thread per packed pixel (n, r, X) of the quantized image writes its cp channels as 16-byte stores; for each
// (b, dy, dx, c) the warp's threads read columns two apart. 32-bit index arithmetic (the caller checks the sizes).
extern "C" __global__ void stem_pack_i8(uint4* __restrict__ out, const signed char* __restrict__ x, const StemPack p) {
    const int CV = p.cp / 16;
    const int total = p.N * p.rows * p.ow;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        int X = i % p.ow, t = i / p.ow;
        int r = t % p.rows, n = t / p.rows;
        const signed char* xn = x + n * p.sN;
        int c = 0, rest = 0;                       // channel k = rest * C + c, rest = (b * 2 + dy) * 2 + dx
        for (int cv = 0; cv < CV; ++cv) {
            unsigned w[4] = {0u, 0u, 0u, 0u};
#pragma unroll
            for (int e = 0; e < 16; ++e) {
                int dx = rest & 1, dy = (rest >> 1) & 1, b = rest >> 2;
                if (b < p.kw2) {
                    int iy = 2 * (r + p.a_min) + dy, ix = 2 * (X + b + p.b_min) + dx;
                    if (iy >= 0 && iy < p.H && ix >= 0 && ix < p.W)
                        w[e >> 2] |= (unsigned)(unsigned char)xn[c * p.sC + iy * p.sH + ix * p.sW] << (8 * (e & 3));
                }
                if (++c == p.C) { c = 0; ++rest; }
            }
            out[i * CV + cv] = make_uint4(w[0], w[1], w[2], w[3]);
        }
    }
}

// The same Reformat in one pass: a block per packed row (n, r) quantizes the two input rows it reads (each input
// element once: every input row belongs to one packed row; a thread loads one column pair of 4 lines (c, dy) before it
// quantizes any, at up to 10 blocks an SM: one dependent load a thread had left it latency-bound) into shared memory as
// S[xx][dy][dx][c] (xx counted from b_min), the order of a packed pixel's channels, so packed pixel X's first 4 * C *
// kw2 channels are S's bytes from xx = X on; its threads then write packed pixels as 16-byte stores. Dynamic shared
// memory: (ow + kw2 - 1) * 4 * C bytes. Quantized as quantize_i8 / quantize_f16_i8 (IEEE division, the rounding mode,
// saturation).
template <typename T>
__device__ __forceinline__ void stem_pack_q(uint4* __restrict__ out, const T* __restrict__ x, const StemPack& p,
                                            float s, int mode) {
    extern __shared__ unsigned int stem_smem[];
    unsigned char* S = (unsigned char*)stem_smem;
    const int span = p.ow + p.kw2 - 1, run = 4 * p.C, used = run * p.kw2, CV = p.cp / 16;
    const int n = blockIdx.x / p.rows, r = blockIdx.x - n * p.rows;
    const T* xn = x + (long long)n * p.sN;
    const int iy0 = 2 * (r + p.a_min), lines = 2 * p.C;                  // input lines (c, dy), dy fastest
    for (int xx = threadIdx.x; xx < span; xx += blockDim.x) {              // a thread: column pair xx of each line
        const int ix = 2 * (xx + p.b_min);
        const bool in0 = ix >= 0 && ix < p.W, in1 = ix + 1 < p.W;          // (ix + 1 >= 0 when ix >= -1: even ix)
        for (int t0 = 0; t0 < lines; t0 += 4) {                           // 4 lines' loads in flight, then quantize
            T v[8];
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int t = t0 + u, iy = iy0 + (t & 1);
                const bool ok = t < lines && iy >= 0 && iy < p.H;
                const T* row = xn + (t >> 1) * p.sC + iy * p.sH;
                v[2 * u] = ok && in0 ? row[ix * p.sW] : T(0);
                v[2 * u + 1] = ok && in0 && in1 ? row[(ix + 1) * p.sW] : T(0);
            }
#pragma unroll
            for (int u = 0; u < 4; ++u) {
                const int t = t0 + u, iy = iy0 + (t & 1);
                if (t >= lines) break;
                const bool ok = iy >= 0 && iy < p.H;
#pragma unroll
                for (int dx = 0; dx < 2; ++dx) {
                    signed char q = 0;
                    if (ok && in0 && (dx == 0 || in1)) {
                        float f;
                        if constexpr (sizeof(T) == 4) f = (float)v[2 * u + dx]; else f = F16::ld(v[2 * u + dx]);
                        q = q8(f, s, mode);
                    }
                    S[xx * run + ((t & 1) * 2 + dx) * p.C + (t >> 1)] = (unsigned char)q;
                }
            }
        }
    }
    __syncthreads();
    uint4* o = out + (long long)blockIdx.x * p.ow * CV;
    for (int i = threadIdx.x; i < p.ow * CV; i += blockDim.x) {
        const int X = i / CV, k = (i - X * CV) * 16;
        const unsigned* w = (const unsigned*)(S + X * run + k);        // run and k are multiples of 4
        o[i] = make_uint4(k < used ? w[0] : 0u, k + 4 < used ? w[1] : 0u, k + 8 < used ? w[2] : 0u,
                          k + 12 < used ? w[3] : 0u);
    }
}
extern "C" __global__ void __launch_bounds__(128, 10)
    stem_pack_q_f32(uint4* out, const float* x, const StemPack p, float s, int mode) {
    stem_pack_q<float>(out, x, p, s, mode);
}
extern "C" __global__ void __launch_bounds__(128, 10)
    stem_pack_q_f16(uint4* out, const unsigned short* x, const StemPack p, float s, int mode) {
    stem_pack_q<unsigned short>(out, x, p, s, mode);
}
