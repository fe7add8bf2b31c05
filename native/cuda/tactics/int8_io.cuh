// The INT8 I/O epilogue (native/shared/int8_io.py) of a pair of adjacent output channels of one output pixel, as the
// implicit-GEMM INT8 convolutions (conv_i8.cu, conv_i8t.cuh) hold their accumulators: v = (float(acc) + bias) * scale
// (+ r * rs), evaluated in float32 in that order with no contraction (the contract's floats, bit for bit), then ReLU
// and saturation into the int8 output tile (round to nearest even) or the float32 output.
#pragma once
#include "common.cuh"

// Exact conversions: the output saturates, then rounds by the add of 1.5 * 2^23 (a float in [-128, 127] added to it
// is rounded to the nearest even integer by the add's own rounding, and the result's low byte is that integer's two's
// complement): no F2I on the conversion pipe. The accumulators convert by I2FP: measured faster than the same trick
// (an integer and a float add) in the memory-bound residual 1x1 convolutions, whose epilogue issue slots bound them.

// byte i of w as a signed int8, in float: with its sign bit flipped the byte is r + 128, which placed in the
// mantissa of 2^23 (0x4B0000uu) is the float 2^23 + r + 128; one byte permute and one add
__device__ __forceinline__ float int8_io_s8f(unsigned w, int i) {
    return __fsub_rn(__int_as_float(__byte_perm(w ^ 0x8080u, 0x4B000000u, i == 0 ? 0x7650 : 0x7651)), 8388736.0f);
}
__device__ __forceinline__ signed char int8_io_f2i8(float v, float lo) {
    return (signed char)__float_as_int(__fadd_rn(fminf(fmaxf(v, lo), 127.0f), 12582912.0f));
}

// RES: the residual [pixels, M]: 0 none, 1 int8, 2 float32, 3 float16; OUT: 0 int8 (cell: the pair's place in the
// shared output tile, which holds the int8 residual tile first), 1 float32 (y + at). inside: the pixel exists.
template <int RES, int OUT>
__device__ __forceinline__ void int8_io_pair(int a0, int a1, float b0, float b1, float k0, float k1, float q0,
                                             float q1, unsigned char* cell, bool inside, long long at,
                                             const void* res, void* y, int lo, int relu) {
    float v0 = __fmul_rn(__fadd_rn(__int2float_rn(a0), b0), k0);
    float v1 = __fmul_rn(__fadd_rn(__int2float_rn(a1), b1), k1);
    if (RES == 1) {
        const unsigned w = OUT == 0 ? *(const unsigned short*)cell
                                    : (inside ? *(const unsigned short*)((const signed char*)res + at) : 0u);
        v0 = __fadd_rn(v0, __fmul_rn(int8_io_s8f(w, 0), q0));
        v1 = __fadd_rn(v1, __fmul_rn(int8_io_s8f(w, 1), q1));
    } else if (RES == 2) {
        if (inside) {
            float2 r = *(const float2*)((const float*)res + at);
            v0 = __fadd_rn(v0, __fmul_rn(r.x, q0));
            v1 = __fadd_rn(v1, __fmul_rn(r.y, q1));
        }
    } else if (RES == 3) {
        if (inside) {
            const unsigned short* r16 = (const unsigned short*)res + at;
            v0 = __fadd_rn(v0, __fmul_rn(F16::ld(r16[0]), q0));
            v1 = __fadd_rn(v1, __fmul_rn(F16::ld(r16[1]), q1));
        }
    }
    if (OUT == 0) {
        // saturate, then round to nearest even: the same int8 as rounding first for every finite value
        *(char2*)cell = make_char2(int8_io_f2i8(v0, (float)lo), int8_io_f2i8(v1, (float)lo));
    } else if (inside) {
        *(float2*)((float*)y + at) = relu ? make_float2(fmaxf(v0, 0.0f), fmaxf(v1, 0.0f)) : make_float2(v0, v1);
    }
}
