// Shared by the device's kernels: storage-type adapters (compute is float32; FP16 and BF16 are stored as their bit
// patterns in an unsigned short and converted with the hardware's round-to-nearest-even) and the grid-stride loop.
#pragma once

struct F32 {
    typedef float T;
    static __device__ __forceinline__ float ld(float v) { return v; }
    static __device__ __forceinline__ float st(float v) { return v; }
};

struct F16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float ld(unsigned short v) {
        float f; asm("{cvt.f32.f16 %0, %1;}" : "=f"(f) : "h"(v)); return f;
    }
    static __device__ __forceinline__ unsigned short st(float v) {
        unsigned short h; asm("{cvt.rn.f16.f32 %0, %1;}" : "=h"(h) : "f"(v)); return h;
    }
};

// bfloat16: the upper half of a float32, so widening is a shift (exact); narrowing is cvt.rn (sm_80+), RNE with
// overflow to +-inf, as ml_dtypes' bfloat16 on the CPU
struct BF16 {
    typedef unsigned short T;
    static __device__ __forceinline__ float ld(unsigned short v) { return __uint_as_float(((unsigned int)v) << 16); }
    static __device__ __forceinline__ unsigned short st(float v) {
        unsigned short h; asm("{cvt.rn.bf16.f32 %0, %1;}" : "=h"(h) : "f"(v)); return h;
    }
};

// int8 values a max pool moves between int8 tensors (every value a float holds exactly; the max of int8 values is one
// of them, so the saturating store only guards an all-padding window)
struct I8 {
    typedef signed char T;
    static __device__ __forceinline__ float ld(signed char v) { return (float)v; }
    static __device__ __forceinline__ signed char st(float v) { return (signed char)fminf(fmaxf(v, -128.f), 127.f); }
};

#define GRID_LOOP(n) for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n); \
                          i += (long long)gridDim.x * blockDim.x)
