// Pointwise and row kernels of the CUDA device (float32), compiled at build time with NVRTC.
// Semantics follow the CPU kernels: NaN propagates through max/min/relu/clip as numpy's do.

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

#define GRID_LOOP(n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
                          i += (long long)gridDim.x * blockDim.x)

#define BINARY(NAME, EXPR)                                                                          \
extern "C" __global__ void NAME(float* __restrict__ out, const float* __restrict__ a,               \
                                const float* __restrict__ b, Bcast s) {                             \
    GRID_LOOP(s.n) { long long ia, ib; offsets(s, i, ia, ib); float x = a[ia], y = b[ib]; out[i] = (EXPR); } \
}

BINARY(ew_sum, x + y)
BINARY(ew_sub, x - y)
BINARY(ew_prod, x * y)
BINARY(ew_div, x / y)
BINARY(ew_max, (x > y || x != x) ? x : y)
BINARY(ew_min, (x < y || x != x) ? x : y)
BINARY(ew_pow, powf(x, y))

#define UNARY(NAME, EXPR)                                                                           \
extern "C" __global__ void NAME(float* __restrict__ out, const float* __restrict__ in, long long n,   \
                                float alpha, float beta) {                                          \
    GRID_LOOP(n) { float x = in[i]; out[i] = (EXPR); }                                              \
}

UNARY(act_relu, (x > 0.f || x != x) ? x : 0.f)
UNARY(act_sigmoid, 0.5f * tanhf(0.5f * x) + 0.5f)
UNARY(act_tanh, tanhf(x))
UNARY(act_leaky_relu, x < 0.f ? x * alpha : x)
UNARY(act_elu, x < 0.f ? alpha * expm1f(x) : x)
UNARY(act_clip, x != x ? x : fminf(fmaxf(x, alpha), beta))
UNARY(act_hard_sigmoid, fminf(fmaxf(alpha * x + beta, 0.f), 1.f))
UNARY(act_gelu_erf, 0.5f * x * (1.f + erff(x * 0.7071067811865476f)))
UNARY(act_gelu_tanh, 0.5f * x * (1.f + tanhf(0.7978845608028654f * x * (1.f + 0.044715f * x * x))))
UNARY(act_silu, 0.5f * x + 0.5f * x * tanhf(0.5f * x))
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

// softmax over the last (contiguous) axis: one block per row, two passes (max, then sum of exp)
extern "C" __global__ void softmax_rows(float* __restrict__ out, const float* __restrict__ in,
                                        long long rows, long long cols, int log_softmax) {
    __shared__ float red[256];
    long long r = blockIdx.x;
    if (r >= rows) return;
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float m = __int_as_float(0xff800000);   // -inf
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) m = fmaxf(m, x[j]);
    red[threadIdx.x] = m;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    m = red[0];
    __syncthreads();
    float sum = 0.f;
    for (long long j = threadIdx.x; j < cols; j += blockDim.x) sum += expf(x[j] - m);
    red[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
        __syncthreads();
    }
    sum = red[0];
    if (log_softmax) {
        float ls = logf(sum);
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) y[j] = x[j] - m - ls;
    } else {
        float inv = 1.f / sum;
        for (long long j = threadIdx.x; j < cols; j += blockDim.x) y[j] = expf(x[j] - m) * inv;
    }
}

// im2col for 2-D convolution (NCHW, one batch item): cols[c*kh*kw + ky*kw + kx][oy*ow + ox]
extern "C" __global__ void im2col2d(float* __restrict__ cols, const float* __restrict__ x,
                                    long long C, long long H, long long W, long long kh, long long kw,
                                    long long sh, long long sw, long long ph, long long pw,
                                    long long dh, long long dw, long long oh, long long ow) {
    long long total = C * kh * kw * oh * ow;
    GRID_LOOP(total) {
        long long ox = i % ow, t = i / ow;
        long long oy = t % oh; t /= oh;
        long long kx = t % kw; t /= kw;
        long long ky = t % kh;
        long long c = t / kh;
        long long iy = oy * sh - ph + ky * dh, ix = ox * sw - pw + kx * dw;
        cols[i] = (iy >= 0 && iy < H && ix >= 0 && ix < W) ? x[(c * H + iy) * W + ix] : 0.f;
    }
}
