// Index, integer and detection kernels of the CUDA device: integer / boolean elementwise and unary ops, float
// comparisons, gathers (DEFAULT on 1-byte data, ELEMENT, ND), TopK and NMS ordering by rank counting, NonZero
// (count pass + ordered fill), greedy NMS over an IoU bitmask, ArgMax/ArgMin, cumulative sums/products, OneHot and
// scatters. Semantics follow the CPU kernels (native/cpu/kernels/) bit for bit.
// Type codes in kernel names: b (bool / 1-byte), i32, i64, f32, f16 (stored as its bits, computed in float32).
#include "common.cuh"

typedef long long i64;
typedef unsigned long long u64;

struct Bcast {            // output index -> element offsets of the two operands (stride 0 = broadcast)
    i64 rank, n;
    i64 dims[8], sa[8], sb[8];
};

__device__ __forceinline__ void offsets2(const Bcast& s, i64 i, i64& ia, i64& ib) {
    ia = 0; ib = 0;
    for (int d = (int)s.rank - 1; d >= 0; --d) {
        i64 q = i % s.dims[d];
        i /= s.dims[d];
        ia += q * s.sa[d];
        ib += q * s.sb[d];
    }
}

// op codes shared with native/cuda/tactics/index.py (_EW)
enum { OP_SUM = 0, OP_SUB, OP_PROD, OP_DIV, OP_FLOOR_DIV, OP_MOD, OP_FMOD, OP_MAX, OP_MIN, OP_BAND, OP_BOR, OP_BXOR,
       OP_SHL, OP_SHR, OP_AND = 32, OP_OR, OP_XOR, OP_EQ, OP_GT, OP_LT, OP_GE, OP_LE };

// integer arithmetic as numpy does it: wrap-around (computed unsigned), DIV truncates toward zero, MOD takes the
// divisor's sign, FMOD the dividend's, x / 0 == x % 0 == 0, shifts by >= the width give 0 (or -1 for negative
// values shifted right)
template <typename T, typename U>
__device__ __forceinline__ T int_op(int op, T a, T b) {
    const int bits = 8 * sizeof(T);
    switch (op) {
        case OP_SUM: return (T)((U)a + (U)b);
        case OP_SUB: return (T)((U)a - (U)b);
        case OP_PROD: return (T)((U)a * (U)b);
        case OP_DIV: return b == 0 ? (T)0 : (b == (T)-1 ? (T)((U)0 - (U)a) : (T)(a / b));
        case OP_FLOOR_DIV: {
            if (b == 0) return 0;
            if (b == (T)-1) return (T)((U)0 - (U)a);
            T q = a / b;
            return (a % b != 0 && ((a < 0) != (b < 0))) ? (T)(q - 1) : q;
        }
        case OP_MOD: {
            if (b == 0 || b == (T)-1) return 0;
            T r = a % b;
            return (r != 0 && ((r < 0) != (b < 0))) ? (T)(r + b) : r;
        }
        case OP_FMOD: return (b == 0 || b == (T)-1) ? (T)0 : (T)(a % b);
        case OP_MAX: return a > b ? a : b;
        case OP_MIN: return a < b ? a : b;
        case OP_BAND: return a & b;
        case OP_BOR: return a | b;
        case OP_BXOR: return a ^ b;
        case OP_SHL: return ((u64)(i64)b < (u64)bits) ? (T)((U)a << (int)b) : (T)0;
        case OP_SHR: return ((u64)(i64)b < (u64)bits) ? (T)(a >> (int)b) : (T)(a < 0 ? -1 : 0);
    }
    return 0;
}

// boolean values (0 / 1 bytes): numpy's bool arithmetic
__device__ __forceinline__ unsigned char bool_op(int op, unsigned char a, unsigned char b) {
    a = a != 0; b = b != 0;
    switch (op) {
        case OP_SUM: case OP_MAX: case OP_BOR: return a | b;
        case OP_PROD: case OP_MIN: case OP_BAND: return a & b;
        case OP_BXOR: return a ^ b;
    }
    return 0;
}

// float MOD / FMOD / FLOOR_DIV (numpy's divmod rules; the quotient rounds to the storage type before the floor)
template <class D>
__device__ __forceinline__ float float_op(int op, float a, float b) {
    switch (op) {
        case OP_FMOD: return fmodf(a, b);
        case OP_MOD: {
            float m = fmodf(a, b);
            if (b == 0.f) return m;
            if (m != 0.f) { if ((b < 0.f) != (m < 0.f)) m += b; }
            else m = copysignf(0.f, b);
            return m;
        }
        case OP_FLOOR_DIV: return floorf(D::ld(D::st(a / b)));
    }
    return 0.f;
}

template <typename C>
__device__ __forceinline__ unsigned char cmp_op(int op, C a, C b) {
    switch (op) {
        case OP_AND: return (a != 0) && (b != 0);
        case OP_OR: return (a != 0) || (b != 0);
        case OP_XOR: return (a != 0) != (b != 0);
        case OP_EQ: return a == b;
        case OP_GT: return a > b;
        case OP_LT: return a < b;
        case OP_GE: return a >= b;
        case OP_LE: return a <= b;
    }
    return 0;
}

// loaders: storage type T, compute type C; rt rounds a float32 threshold to the storage type
#define RT_ID static __device__ __forceinline__ float rt(float v) { return v; }
struct LdI64 { typedef i64 T; typedef i64 C; static __device__ __forceinline__ i64 ld(i64 v) { return v; } RT_ID };
struct LdI32 { typedef int T; typedef int C; static __device__ __forceinline__ int ld(int v) { return v; } RT_ID };
struct LdB { typedef unsigned char T; typedef int C;
             static __device__ __forceinline__ int ld(unsigned char v) { return v != 0; } RT_ID };
struct LdF32 { typedef float T; typedef float C; static __device__ __forceinline__ float ld(float v) { return v; }
               RT_ID };
struct LdF16 { typedef unsigned short T; typedef float C;
               static __device__ __forceinline__ float ld(unsigned short v) { return F16::ld(v); }
               static __device__ __forceinline__ float rt(float v) { return F16::ld(F16::st(v)); } };

// comparisons and logic: any operand type -> bool
template <class L>
__device__ __forceinline__ void cmp_k(unsigned char* __restrict__ out, const typename L::T* __restrict__ a,
                                      const typename L::T* __restrict__ b, const Bcast& s, int op) {
    GRID_LOOP(s.n) {
        i64 ia, ib;
        offsets2(s, i, ia, ib);
        out[i] = cmp_op<typename L::C>(op, L::ld(a[ia]), L::ld(b[ib]));
    }
}
#define CMP(SFX, L) extern "C" __global__ void icmp_##SFX(unsigned char* out, const L::T* a, const L::T* b, Bcast s, \
                                                            int op) { cmp_k<L>(out, a, b, s, op); }
CMP(i64, LdI64)
CMP(i32, LdI32)
CMP(b, LdB)
CMP(f32, LdF32)
CMP(f16, LdF16)

template <typename T, typename U>
__device__ __forceinline__ void iarith_k(T* __restrict__ out, const T* __restrict__ a, const T* __restrict__ b,
                                         const Bcast& s, int op) {
    GRID_LOOP(s.n) {
        i64 ia, ib;
        offsets2(s, i, ia, ib);
        out[i] = int_op<T, U>(op, a[ia], b[ib]);
    }
}
extern "C" __global__ void iarith_i64(i64* out, const i64* a, const i64* b, Bcast s, int op) {
    iarith_k<i64, u64>(out, a, b, s, op); }
extern "C" __global__ void iarith_i32(int* out, const int* a, const int* b, Bcast s, int op) {
    iarith_k<int, unsigned int>(out, a, b, s, op); }
extern "C" __global__ void iarith_b(unsigned char* out, const unsigned char* a, const unsigned char* b, Bcast s,
                                    int op) {
    GRID_LOOP(s.n) {
        i64 ia, ib;
        offsets2(s, i, ia, ib);
        out[i] = bool_op(op, a[ia], b[ib]);
    }
}
template <class D>
__device__ __forceinline__ void farith_k(typename D::T* __restrict__ out, const typename D::T* __restrict__ a,
                                         const typename D::T* __restrict__ b, const Bcast& s, int op) {
    GRID_LOOP(s.n) {
        i64 ia, ib;
        offsets2(s, i, ia, ib);
        out[i] = D::st(float_op<D>(op, D::ld(a[ia]), D::ld(b[ib])));
    }
}
extern "C" __global__ void farith_f32(float* out, const float* a, const float* b, Bcast s, int op) {
    farith_k<F32>(out, a, b, s, op); }
extern "C" __global__ void farith_f16(unsigned short* out, const unsigned short* a, const unsigned short* b, Bcast s,
                                      int op) { farith_k<F16>(out, a, b, s, op); }

// unary ops on integers, booleans and the float predicates (op codes: index.py _UN)
enum { UN_NOT = 0, UN_ABS, UN_NEG, UN_SIGN, UN_BNOT, UN_ROUND, UN_ISNAN, UN_ISINF, UN_IDENT };
template <typename T, typename U>
__device__ __forceinline__ void iunary_k(T* __restrict__ out, const T* __restrict__ x, i64 n, int op) {
    GRID_LOOP(n) {
        T v = x[i];
        T r = v;
        switch (op) {
            case UN_ABS: r = v < 0 ? (T)((U)0 - (U)v) : v; break;
            case UN_NEG: r = (T)((U)0 - (U)v); break;
            case UN_SIGN: r = (T)((v > 0) - (v < 0)); break;
            case UN_BNOT: r = (T)~v; break;
        }
        out[i] = r;
    }
}
extern "C" __global__ void iunary_i64(i64* out, const i64* x, i64 n, int op) { iunary_k<i64, u64>(out, x, n, op); }
extern "C" __global__ void iunary_i32(int* out, const int* x, i64 n, int op) {
    iunary_k<int, unsigned int>(out, x, n, op); }
// -> bool: NOT (logical) on any type, ISNAN / ISINF (flags: 1 positive, 2 negative) on floats
template <class L>
__device__ __forceinline__ void upred_k(unsigned char* __restrict__ out, const typename L::T* __restrict__ x, i64 n,
                                        int op, int flags) {
    GRID_LOOP(n) {
        typename L::C v = L::ld(x[i]);
        unsigned char r = 0;
        if (op == UN_NOT) r = v == 0;
        else if (op == UN_ISNAN) r = (float)v != (float)v;   // (integers are never NaN or infinite)
        else if (op == UN_ISINF) r = ((float)v == __int_as_float(0x7f800000) && (flags & 1)) ||
                                     ((float)v == __int_as_float(0xff800000) && (flags & 2));
        out[i] = r;
    }
}
#define UPRED(SFX, L) extern "C" __global__ void upred_##SFX(unsigned char* out, const L::T* x, i64 n, int op, \
                                                             int flags) { upred_k<L>(out, x, n, op, flags); }
UPRED(i64, LdI64)
UPRED(i32, LdI32)
UPRED(b, LdB)
UPRED(f32, LdF32)
UPRED(f16, LdF16)
// float SIGN (NaN stays NaN, signed zeros give +0) and ROUND (half to even)
template <class D>
__device__ __forceinline__ void funary_k(typename D::T* __restrict__ out, const typename D::T* __restrict__ x, i64 n,
                                         int op) {
    GRID_LOOP(n) {
        float v = D::ld(x[i]);
        float r = op == UN_SIGN ? (v != v ? v : (float)((v > 0.f) - (v < 0.f))) : rintf(v);
        out[i] = D::st(r);
    }
}
extern "C" __global__ void funary_f32(float* out, const float* x, i64 n, int op) { funary_k<F32>(out, x, n, op); }
extern "C" __global__ void funary_f16(unsigned short* out, const unsigned short* x, i64 n, int op) {
    funary_k<F16>(out, x, n, op); }

// gathers ----------------------------------------------------------------------------------------------------------
// one index per output element: out[i] = x[xoff(i) + k(i) * kstride], where the output index i (shape dims[rank])
// gives xoff through xs[] (element strides of x, 0 on the gathered axis and on broadcast dims) and the index
// tensor's element through is[]; k = idx[...] (+K when negative; out-of-range indices give 0)
struct Gath {
    i64 rank, n, K, kstride;
    i64 dims[8], xs[8], is[8];
};
template <typename T, typename I>
__device__ __forceinline__ void gather1_k(T* __restrict__ out, const T* __restrict__ x, const I* __restrict__ idx,
                                          const Gath& g) {
    GRID_LOOP(g.n) {
        i64 r = i, xo = 0, io = 0;
        for (int d = (int)g.rank - 1; d >= 0; --d) {
            i64 q = r % g.dims[d];
            r /= g.dims[d];
            xo += q * g.xs[d];
            io += q * g.is[d];
        }
        i64 k = (i64)idx[io];
        if (k < 0) k += g.K;
        out[i] = (k >= 0 && k < g.K) ? x[xo + k * g.kstride] : (T)0;
    }
}
#define GATHER1(SZ, T) \
extern "C" __global__ void gather1_##SZ(T* out, const T* x, const i64* idx, Gath g) { gather1_k(out, x, idx, g); } \
extern "C" __global__ void gather1_##SZ##_i32(T* out, const T* x, const int* idx, Gath g) { gather1_k(out, x, idx, g); }
GATHER1(1, unsigned char)
GATHER1(2, unsigned short)
GATHER1(4, unsigned int)
GATHER1(8, u64)

// GatherND: x viewed as [batch, D0..Dm-1, inner], idx as [batch, nidx, m] -> out [batch, nidx, inner]
struct GathND {
    i64 batch, nidx, m, inner, X;    // X = prod(D)
    i64 D[8];
};
template <typename T, typename I>
__device__ __forceinline__ void gathernd_k(T* __restrict__ out, const T* __restrict__ x, const I* __restrict__ idx,
                                           const GathND g) {
    i64 n = g.batch * g.nidx * g.inner;
    GRID_LOOP(n) {
        i64 c = i % g.inner, t = i / g.inner;       // t = bt * nidx + j
        i64 bt = t / g.nidx;
        const I* row = idx + t * g.m;
        i64 off = 0;
        bool ok = true;
        for (int d = 0; d < (int)g.m; ++d) {
            i64 k = (i64)row[d];
            if (k < 0) k += g.D[d];
            ok = ok && k >= 0 && k < g.D[d];
            off = off * g.D[d] + k;
        }
        out[i] = ok ? x[(bt * g.X + off) * g.inner + c] : (T)0;
    }
}
#define GATHERND(SZ, T) \
extern "C" __global__ void gathernd_##SZ(T* out, const T* x, const i64* idx, GathND g) { gathernd_k(out, x, idx, g); } \
extern "C" __global__ void gathernd_##SZ##_i32(T* out, const T* x, const int* idx, GathND g) { \
    gathernd_k(out, x, idx, g); }
GATHERND(1, unsigned char)
GATHERND(2, unsigned short)
GATHERND(4, unsigned int)
GATHERND(8, u64)

// ordering by rank counting (TopK, NMS) ---------------------------------------------------------------------------
// mode 0: descending, NaN first (TopK MAX: numpy's flipped stable argsort); 1: ascending, NaN last (TopK MIN);
// 2: descending, NaN last (NMS: argsort of -score). Equal keys keep the lower index first.
template <typename C>
__device__ __forceinline__ bool before(int mode, C sj, i64 j, C si, i64 i) {
    bool nj = sj != sj, ni = si != si;
    if (nj != ni) return mode == 0 ? nj : ni;
    if (!nj && sj != si) return mode == 1 ? sj < si : sj > si;
    return j < i;
}

// Row r (of `rows`) holds n elements at x[(r / inner) * n * inner + r % inner + j * inner]. Each element counts
// the elements that come before it (tiles of 256 through shared memory); valid elements (all, or those above
// the threshold `thr` when given) with rank < k are written: vals[rank] (when vals is given) and the index to
// idx[rank] (rank-th of k along the row, same row layout with k in place of n). `count[r]` (when given) is
// incremented by the number of valid elements.
template <class L>
__device__ __forceinline__ void rank_k(const typename L::T* __restrict__ x, typename L::T* __restrict__ vals,
                                       i64* __restrict__ idx, int* __restrict__ idx32, int* __restrict__ count,
                                       i64 rows, i64 n, i64 inner, i64 k, int mode, const float* __restrict__ thr) {
    typedef typename L::C C;
    __shared__ C tile[256];
    __shared__ unsigned char tvalid[256];
    i64 r = blockIdx.x;
    if (r >= rows) return;
    const typename L::T* row = x + (r / inner) * n * inner + r % inner;
    i64 i = (i64)blockIdx.y * blockDim.x + threadIdx.x;
    bool have = i < n;
    C si = have ? L::ld(row[i * inner]) : (C)0;
    float th = thr ? L::rt(*thr) : 0.f;   // the threshold in the scores' type, as numpy compares them
    bool vi = have && (!thr || (float)si > th);
    i64 rank = 0;
    for (i64 t0 = 0; t0 < n; t0 += blockDim.x) {
        i64 j = t0 + threadIdx.x;
        if (j < n) {
            C v = L::ld(row[j * inner]);
            tile[threadIdx.x] = v;
            tvalid[threadIdx.x] = !thr || (float)v > th;
        }
        __syncthreads();
        if (vi) {
            i64 m = n - t0 < (i64)blockDim.x ? n - t0 : (i64)blockDim.x;
            for (i64 u = 0; u < m; ++u)
                rank += tvalid[u] && before<C>(mode, tile[u], t0 + u, si, i);
        }
        __syncthreads();
    }
    if (vi && rank < k) {
        i64 o = (r / inner) * k * inner + r % inner + rank * inner;
        if (vals) vals[o] = row[i * inner];
        if (idx) idx[o] = i;
        if (idx32) idx32[o] = (int)i;
    }
    if (count) {
        unsigned ballot = __ballot_sync(0xffffffffu, vi);
        if ((threadIdx.x & 31) == 0 && ballot) atomicAdd(count + r, __popc(ballot));
    }
}
#define RANK(SFX, L) extern "C" __global__ void rank_##SFX(const L::T* x, L::T* vals, i64* idx, int* idx32, \
    int* count, i64 rows, i64 n, i64 inner, i64 k, int mode, const float* thr) { \
    rank_k<L>(x, vals, idx, idx32, count, rows, n, inner, k, mode, thr); }
RANK(i64, LdI64)
RANK(i32, LdI32)
RANK(f32, LdF32)
RANK(f16, LdF16)

// NonZero: count pass (per block of 256 elements) then an ordered fill at each block's offset ------------------
// nonzero: the bits under `mask` are not all zero (floats: every bit but the sign, so -0 is zero and NaN is not)
template <typename T>
__device__ __forceinline__ bool nz(const T* x, i64 i, i64 n, T mask) { return i < n && (x[i] & mask) != 0; }

template <typename T>
__device__ __forceinline__ void nz_count_k(int* __restrict__ counts, const T* __restrict__ x, i64 n, T mask) {
    __shared__ int warps[8];
    i64 i = (i64)blockIdx.x * 256 + threadIdx.x;
    unsigned ballot = __ballot_sync(0xffffffffu, nz(x, i, n, mask));
    if ((threadIdx.x & 31) == 0) warps[threadIdx.x >> 5] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
        int s = 0;
        for (int w = 0; w < 8; ++w) s += warps[w];
        counts[blockIdx.x] = s;
    }
}
struct Dims { i64 rank, total; i64 d[8]; };
template <typename T>
__device__ __forceinline__ void nz_fill_k(i64* __restrict__ out, const T* __restrict__ x, i64 n, T mask,
                                          const i64* __restrict__ offs, const Dims s) {
    __shared__ int warps[8];
    i64 i = (i64)blockIdx.x * 256 + threadIdx.x;
    bool f = nz(x, i, n, mask);
    unsigned ballot = __ballot_sync(0xffffffffu, f);
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (lane == 0) warps[w] = __popc(ballot);
    __syncthreads();
    if (f) {
        i64 pos = offs[blockIdx.x] + __popc(ballot & ((1u << lane) - 1u));
        for (int v = 0; v < w; ++v) pos += warps[v];
        i64 r = i;
        for (int d = (int)s.rank - 1; d >= 0; --d) {
            out[d * s.total + pos] = r % s.d[d];
            r /= s.d[d];
        }
    }
}
#define NONZERO(SZ, T) \
extern "C" __global__ void nz_count_##SZ(int* counts, const T* x, i64 n, T mask) { nz_count_k(counts, x, n, mask); } \
extern "C" __global__ void nz_fill_##SZ(i64* out, const T* x, i64 n, T mask, const i64* offs, Dims s) { \
    nz_fill_k(out, x, n, mask, offs, s); }
NONZERO(1, unsigned char)
NONZERO(2, unsigned short)
NONZERO(4, unsigned int)
NONZERO(8, u64)

// NonMaxSuppression ------------------------------------------------------------------------------------------------
// boxes [B, n, 4] (corners in either order, or center_point_box), candidates of class (b, c) in score order
// order[bc * n + t] (count[bc] of them). IoU in float64 as the CPU plugin computes it (no contraction to FMA).
__device__ __forceinline__ double nmin(double a, double b) { return (a != a || b != b) ? a + b : fmin(a, b); }
__device__ __forceinline__ double nmax(double a, double b) { return (a != a || b != b) ? a + b : fmax(a, b); }
template <class D>
__device__ __forceinline__ void box_of(const typename D::T* bx, int center, double& lx, double& ly, double& hx,
                                       double& hy) {
    double a = D::ld(bx[0]), b = D::ld(bx[1]), c = D::ld(bx[2]), d = D::ld(bx[3]);
    if (center) {
        double wx = c / 2.0, wy = d / 2.0;
        lx = __dsub_rn(a, wx); ly = __dsub_rn(b, wy); hx = __dadd_rn(a, wx); hy = __dadd_rn(b, wy);
    } else {
        lx = nmin(a, c); ly = nmin(b, d); hx = nmax(a, c); hy = nmax(b, d);
    }
}
__device__ __forceinline__ double iou(double alx, double aly, double ahx, double ahy, double aa,
                                      double blx, double bly, double bhx, double bhy, double ba) {
    double wx = __dsub_rn(nmin(ahx, bhx), nmax(alx, blx)), wy = __dsub_rn(nmin(ahy, bhy), nmax(aly, bly));
    wx = wx < 0.0 ? 0.0 : wx;   // numpy's clip: NaN stays NaN (and then the IoU is 0)
    wy = wy < 0.0 ? 0.0 : wy;
    double inter = __dmul_rn(wx, wy);
    double uni = __dsub_rn(__dadd_rn(aa, ba), inter);
    return uni > 0.0 ? __ddiv_rn(inter, uni) : 0.0;
}
// mask[bc][t][w] bit u%64 of word w = (u > t) && iou(order[t], order[u]) > thr, for t, u < count[bc]
template <class D>
__device__ __forceinline__ void nms_mask_k(u64* __restrict__ mask, const typename D::T* __restrict__ boxes,
                                           const int* __restrict__ order, const int* __restrict__ count, i64 C,
                                           i64 n, i64 words, int center, const float* __restrict__ thr) {
    __shared__ double sb[64][5];
    i64 bc = blockIdx.z, b = bc / C;
    i64 cnt = count[bc];
    i64 w = blockIdx.x, t = (i64)blockIdx.y * 64 + threadIdx.x;
    if (w * 64 >= cnt || (i64)blockIdx.y * 64 >= cnt || (w + 1) * 64 <= (i64)blockIdx.y * 64) return;
    const typename D::T* bb = boxes + b * n * 4;
    const int* ord = order + bc * n;
    i64 u = w * 64 + threadIdx.x;
    if (u < cnt) {
        double lx, ly, hx, hy;
        box_of<D>(bb + (i64)ord[u] * 4, center, lx, ly, hx, hy);
        sb[threadIdx.x][0] = lx; sb[threadIdx.x][1] = ly; sb[threadIdx.x][2] = hx; sb[threadIdx.x][3] = hy;
        sb[threadIdx.x][4] = __dmul_rn(__dsub_rn(hx, lx), __dsub_rn(hy, ly));
    }
    __syncthreads();
    if (t >= cnt) return;
    double th = thr ? (double)*thr : 0.0;
    double lx, ly, hx, hy;
    box_of<D>(bb + (i64)ord[t] * 4, center, lx, ly, hx, hy);
    double area = __dmul_rn(__dsub_rn(hx, lx), __dsub_rn(hy, ly));
    u64 bits = 0;
    i64 m = cnt - w * 64 < 64 ? cnt - w * 64 : 64;
    for (i64 j = 0; j < m; ++j) {
        if (w * 64 + j <= t) continue;
        if (iou(lx, ly, hx, hy, area, sb[j][0], sb[j][1], sb[j][2], sb[j][3], sb[j][4]) > th) bits |= 1ull << j;
    }
    mask[(bc * n + t) * words + w] = bits;
}
extern "C" __global__ void nms_mask_f32(u64* mask, const float* boxes, const int* order, const int* count, i64 C, i64 n,
                                        i64 words, int center, const float* thr) {
    nms_mask_k<F32>(mask, boxes, order, count, C, n, words, center, thr); }
extern "C" __global__ void nms_mask_f16(u64* mask, const unsigned short* boxes, const int* order, const int* count,
                                        i64 C, i64 n, i64 words, int center, const float* thr) {
    nms_mask_k<F16>(mask, boxes, order, count, C, n, words, center, thr); }

// greedy pass, one block per class, 64 candidates (one mask word) at a time: thread 0 resolves the chunk in score
// order from the removed bits and the chunk's own diagonal words (kept boxes suppress later ones in the chunk),
// then every thread ORs the kept rows into the later words of the removed set (independent loads, in parallel).
// Stops at max_out. The removed set lives in shared memory (`words` 64-bit words); kept[bc * n + j], nkept[bc]
extern "C" __global__ void nms_scan(int* __restrict__ kept, int* __restrict__ nkept, const u64* __restrict__ mask,
                                    const int* __restrict__ order, const int* __restrict__ count, i64 n, i64 words,
                                    const i64* __restrict__ max_out) {
    extern __shared__ u64 removed[];
    __shared__ u64 diag[64];
    __shared__ u64 keptmask;
    __shared__ i64 nk_s;
    __shared__ int stop;
    i64 bc = blockIdx.x;
    i64 cnt = count[bc];
    i64 limit = max_out ? *max_out : 0;
    i64 chunks = (cnt + 63) / 64;
    for (i64 w = threadIdx.x; w < words; w += blockDim.x) removed[w] = 0;
    if (threadIdx.x == 0) { nk_s = 0; stop = limit <= 0; }
    __syncthreads();
    const u64* m = mask + bc * n * words;
    for (i64 W = 0; W < chunks && !stop; ++W) {
        i64 t0 = W * 64, len = cnt - t0 < 64 ? cnt - t0 : 64;
        if ((i64)threadIdx.x < len) diag[threadIdx.x] = m[(t0 + threadIdx.x) * words + W];
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 rem = removed[W], km = 0;
            i64 nk = nk_s;
            for (i64 j = 0; j < len && nk < limit; ++j) {
                if ((rem >> j) & 1ull) continue;
                km |= 1ull << j;
                kept[bc * n + nk++] = order[bc * n + t0 + j];
                rem |= diag[j];
            }
            keptmask = km;
            nk_s = nk;
            stop = nk >= limit;
        }
        __syncthreads();
        u64 km = keptmask;
        if (km && !stop) {
            for (i64 w = W + 1 + threadIdx.x; w < chunks; w += blockDim.x) {
                u64 acc = removed[w], bits = km;
                while (bits) {
                    int j = __ffsll((long long)bits) - 1;
                    bits &= bits - 1;
                    acc |= m[(t0 + j) * words + w];
                }
                removed[w] = acc;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) nkept[bc] = (int)nk_s;
}
// rows (b, c, box) of every class, classes in order: one block per class, its offset the sum of those before it
extern "C" __global__ void nms_rows(i64* __restrict__ out, const int* __restrict__ kept,
                                    const int* __restrict__ nkept, i64 C, i64 n) {
    i64 bc = blockIdx.x;
    i64 off = 0;
    for (i64 q = 0; q < bc; ++q) off += nkept[q];
    for (i64 j = threadIdx.x; j < nkept[bc]; j += blockDim.x) {
        out[(off + j) * 3 + 0] = bc / C;
        out[(off + j) * 3 + 1] = bc % C;
        out[(off + j) * 3 + 2] = kept[bc * n + j];
    }
}

// ArgMax / ArgMin along an axis: x viewed as [outer, n, inner], one thread per (outer, inner). numpy's rules: the
// first occurrence wins (the last with select_last: the scan runs from the end), and the first NaN is the answer
template <class L>
__device__ __forceinline__ void argreduce_k(i64* __restrict__ out, const typename L::T* __restrict__ x, i64 outer,
                                            i64 n, i64 inner, int is_min, int from_end) {
    GRID_LOOP(outer * inner) {
        const typename L::T* row = x + (i / inner) * n * inner + i % inner;
        i64 j0 = from_end ? n - 1 : 0, step = from_end ? -1 : 1;
        typename L::C best = L::ld(row[j0 * inner]);
        i64 bi = j0;
        for (i64 t = 1; t < n && best == best; ++t) {
            i64 j = j0 + t * step;
            typename L::C v = L::ld(row[j * inner]);
            if (v != v || (is_min ? v < best : v > best)) { best = v; bi = j; }
        }
        out[i] = bi;
    }
}
#define ARGRED(SFX, L) extern "C" __global__ void argreduce_##SFX(i64* out, const L::T* x, i64 outer, i64 n, \
    i64 inner, int is_min, int from_end) { argreduce_k<L>(out, x, outer, n, inner, is_min, from_end); }
ARGRED(i64, LdI64)
ARGRED(i32, LdI32)
ARGRED(f32, LdF32)
ARGRED(f16, LdF16)

// typed accumulation for cumulative sums / products, scatter reductions and integer reductions: floats compute in
// float32 and round to the storage type at every step (numpy's float16 loops do the same); integers wrap
template <typename T> struct Acc;
template <> struct Acc<float> {
    typedef float T;
    static __device__ __forceinline__ float add(float a, float b) { return a + b; }
    static __device__ __forceinline__ float mul(float a, float b) { return a * b; }
    static __device__ __forceinline__ float mx(float a, float b) { return (a >= b || a != a) ? a : b; }
    static __device__ __forceinline__ float mn(float a, float b) { return (a <= b || a != a) ? a : b; }
};
template <> struct Acc<unsigned short> {
    typedef unsigned short T;
    static __device__ __forceinline__ unsigned short add(unsigned short a, unsigned short b) {
        return F16::st(F16::ld(a) + F16::ld(b)); }
    static __device__ __forceinline__ unsigned short mul(unsigned short a, unsigned short b) {
        return F16::st(F16::ld(a) * F16::ld(b)); }
    static __device__ __forceinline__ unsigned short mx(unsigned short a, unsigned short b) {
        float x = F16::ld(a), y = F16::ld(b); return (x >= y || x != x) ? a : b; }
    static __device__ __forceinline__ unsigned short mn(unsigned short a, unsigned short b) {
        float x = F16::ld(a), y = F16::ld(b); return (x <= y || x != x) ? a : b; }
};
template <typename T, typename U> struct AccI {
    typedef T Tt;
    static __device__ __forceinline__ T add(T a, T b) { return (T)((U)a + (U)b); }
    static __device__ __forceinline__ T mul(T a, T b) { return (T)((U)a * (U)b); }
    static __device__ __forceinline__ T mx(T a, T b) { return a >= b ? a : b; }
    static __device__ __forceinline__ T mn(T a, T b) { return a <= b ? a : b; }
};
template <> struct Acc<i64> : AccI<i64, u64> {};
template <> struct Acc<int> : AccI<int, unsigned int> {};

// reduction codes: 0 none (replace), 1 add, 2 mul, 3 max, 4 min
template <typename T>
__device__ __forceinline__ T combine(int red, T a, T b) {
    switch (red) {
        case 1: return Acc<T>::add(a, b);
        case 2: return Acc<T>::mul(a, b);
        case 3: return Acc<T>::mx(a, b);
        case 4: return Acc<T>::mn(a, b);
    }
    return b;
}

// cumulative SUM (red 1) / PROD (red 2) along an axis, x and out viewed as [outer, n, inner], one thread per row,
// in numpy's order (the first element copied, then one rounding per step); exclusive starts from `ident`
template <typename T>
__device__ __forceinline__ void cumulative_k(T* __restrict__ out, const T* __restrict__ x, i64 outer, i64 n,
                                             i64 inner, int red, int exclusive, int reverse, T ident) {
    GRID_LOOP(outer * inner) {
        i64 base = (i / inner) * n * inner + i % inner;
        T acc = ident;
        for (i64 t = 0; t < n; ++t) {
            i64 j = base + (reverse ? n - 1 - t : t) * inner;
            T v = x[j];
            T next = t == 0 ? v : combine<T>(red, acc, v);
            out[j] = exclusive ? (t == 0 ? ident : acc) : next;
            acc = next;
        }
    }
}
#define CUMUL(SFX, T) extern "C" __global__ void cumulative_##SFX(T* out, const T* x, i64 outer, i64 n, i64 inner, \
    int red, int exclusive, int reverse, T ident) { cumulative_k<T>(out, x, outer, n, inner, red, exclusive, reverse, \
                                                                   ident); }
CUMUL(f32, float)
CUMUL(f16, unsigned short)
CUMUL(i64, i64)
CUMUL(i32, int)

// integer SUM / PROD / MAX / MIN over x viewed as [outer, red, inner] (red codes as combine), empty -> ident
template <typename T>
__device__ __forceinline__ void ireduce_k(T* __restrict__ out, const T* __restrict__ x, i64 outer, i64 n, i64 inner,
                                          int red, T ident) {
    GRID_LOOP(outer * inner) {
        const T* row = x + (i / inner) * n * inner + i % inner;
        T acc = ident;
        for (i64 t = 0; t < n; ++t) acc = combine<T>(red, acc, row[t * inner]);
        out[i] = acc;
    }
}
extern "C" __global__ void ireduce_i64(i64* out, const i64* x, i64 outer, i64 n, i64 inner, int red, i64 ident) {
    ireduce_k<i64>(out, x, outer, n, inner, red, ident); }
extern "C" __global__ void ireduce_i32(int* out, const int* x, i64 outer, i64 n, i64 inner, int red, int ident) {
    ireduce_k<int>(out, x, outer, n, inner, red, ident); }

// OneHot: out [outer, depth, inner] = values[1] where index[outer, inner] (+depth when negative) == d, else
// values[0]; indices of any integer type or float32 (truncated, as astype(int64) does)
template <typename I, typename V>
__device__ __forceinline__ void onehot_k(V* __restrict__ out, const I* __restrict__ idx, const V* __restrict__ values,
                                         i64 outer, i64 depth, i64 inner) {
    V off = values[0], on = values[1];
    GRID_LOOP(outer * depth * inner) {
        i64 c = i % inner, t = i / inner;
        i64 d = t % depth, o = t / depth;
        i64 k = (i64)idx[o * inner + c];
        if (k < 0) k += depth;
        out[i] = k == d ? on : off;
    }
}
#define ONEHOT(ISFX, I, SZ, V) extern "C" __global__ void onehot_##ISFX##_##SZ(V* out, const I* idx, const V* values, \
    i64 outer, i64 depth, i64 inner) { onehot_k<I, V>(out, idx, values, outer, depth, inner); }
#define ONEHOT_ALL(ISFX, I) ONEHOT(ISFX, I, 1, unsigned char) ONEHOT(ISFX, I, 2, unsigned short) \
    ONEHOT(ISFX, I, 4, unsigned int) ONEHOT(ISFX, I, 8, u64)
ONEHOT_ALL(i64, i64)
ONEHOT_ALL(i32, int)
ONEHOT_ALL(f32, float)

// Scatter (ND and ELEMENT) in the CPU's sequential order. Update u (of nupd) writes `inner` consecutive elements
// at destination row dest[u]; the first update of each destination (no earlier one has it) applies every update
// of that destination in order: replace (the last wins) or the reduction.
// ND: dest = the index tuple idx[u, 0..m) flattened over D (negative entries + D); ELEMENT: dest = the update's
// own coordinates (strides of out) with idx[u] (+K) on the axis
struct ScatND { i64 nupd, m; i64 D[8]; };
template <typename I>
__device__ __forceinline__ void scatter_dest_nd_k(i64* __restrict__ dest, const I* __restrict__ idx, const ScatND s) {
    GRID_LOOP(s.nupd) {
        i64 off = 0;
        bool ok = true;
        for (int d = 0; d < (int)s.m; ++d) {
            i64 k = (i64)idx[i * s.m + d];
            if (k < 0) k += s.D[d];
            ok = ok && k >= 0 && k < s.D[d];
            off = off * s.D[d] + k;
        }
        dest[i] = ok ? off : -1;
    }
}
struct ScatEl { i64 rank, n, axis, K; i64 dims[8], ostr[8]; };
template <typename I>
__device__ __forceinline__ void scatter_dest_el_k(i64* __restrict__ dest, const I* __restrict__ idx, const ScatEl s) {
    GRID_LOOP(s.n) {
        i64 r = i, off = 0;
        bool ok = true;
        for (int d = (int)s.rank - 1; d >= 0; --d) {
            i64 q = r % s.dims[d];
            r /= s.dims[d];
            if (d == (int)s.axis) {
                q = (i64)idx[i];
                if (q < 0) q += s.K;
                ok = q >= 0 && q < s.K;
            }
            off += q * s.ostr[d];
        }
        dest[i] = ok ? off : -1;
    }
}
#define SCATDEST(ISFX, I) \
extern "C" __global__ void scatter_dest_nd_##ISFX(i64* dest, const I* idx, ScatND s) { scatter_dest_nd_k<I>(dest, idx, s); } \
extern "C" __global__ void scatter_dest_el_##ISFX(i64* dest, const I* idx, ScatEl s) { scatter_dest_el_k<I>(dest, idx, s); }
SCATDEST(i64, i64)
SCATDEST(i32, int)
// head[u] = 1 when no earlier update has u's destination
extern "C" __global__ void scatter_heads(unsigned char* __restrict__ head, const i64* __restrict__ dest, i64 nupd) {
    GRID_LOOP(nupd) {
        i64 d = dest[i];
        unsigned char h = d >= 0;
        for (i64 v = 0; v < i && h; ++v) h = dest[v] != d;
        head[i] = h;
    }
}
template <typename T>
__device__ __forceinline__ void scatter_apply_k(T* __restrict__ out, const T* __restrict__ upd,
                                                const i64* __restrict__ dest, const unsigned char* __restrict__ head,
                                                i64 nupd, i64 inner, int red) {
    GRID_LOOP(nupd * inner) {
        i64 u = i / inner, c = i % inner;
        if (!head[u]) continue;
        i64 d = dest[u];
        T acc = out[d * inner + c];
        for (i64 v = u; v < nupd; ++v)
            if (dest[v] == d) acc = combine<T>(red, acc, upd[v * inner + c]);
        out[d * inner + c] = acc;
    }
}
#define SCATAPPLY(SFX, T) extern "C" __global__ void scatter_apply_##SFX(T* out, const T* upd, const i64* dest, \
    const unsigned char* head, i64 nupd, i64 inner, int red) { scatter_apply_k<T>(out, upd, dest, head, nupd, inner, red); }
SCATAPPLY(f32, float)
SCATAPPLY(f16, unsigned short)
SCATAPPLY(i64, i64)
SCATAPPLY(i32, int)
// replace-only scatters of any other element type (bool, int8, ...): the bits move
template <typename T>
__device__ __forceinline__ void scatter_copy_k(T* __restrict__ out, const T* __restrict__ upd,
                                               const i64* __restrict__ dest, const unsigned char* __restrict__ head,
                                               i64 nupd, i64 inner) {
    GRID_LOOP(nupd * inner) {
        i64 u = i / inner, c = i % inner;
        if (!head[u]) continue;
        i64 d = dest[u], last = u;
        for (i64 v = u + 1; v < nupd; ++v)
            if (dest[v] == d) last = v;
        out[d * inner + c] = upd[last * inner + c];
    }
}
extern "C" __global__ void scatter_copy_1(unsigned char* out, const unsigned char* upd, const i64* dest,
                                          const unsigned char* head, i64 nupd, i64 inner) {
    scatter_copy_k(out, upd, dest, head, nupd, inner); }
extern "C" __global__ void scatter_copy_2(unsigned short* out, const unsigned short* upd, const i64* dest,
                                          const unsigned char* head, i64 nupd, i64 inner) {
    scatter_copy_k(out, upd, dest, head, nupd, inner); }

// Select on 1-byte values (bool / int8 / uint8 / fp8): out = cond ? a : b, all three broadcast to out
struct Bcast3 { i64 rank, n; i64 dims[8], sc[8], sa[8], sb[8]; };
extern "C" __global__ void select_1(unsigned char* __restrict__ out, const unsigned char* __restrict__ c,
                                    const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                                    Bcast3 s) {
    GRID_LOOP(s.n) {
        i64 r = i, ic = 0, ia = 0, ib = 0;
        for (int d = (int)s.rank - 1; d >= 0; --d) {
            i64 q = r % s.dims[d];
            r /= s.dims[d];
            ic += q * s.sc[d]; ia += q * s.sa[d]; ib += q * s.sb[d];
        }
        out[i] = c[ic] ? a[ia] : b[ib];
    }
}
