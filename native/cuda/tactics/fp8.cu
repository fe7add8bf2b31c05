// FP8 (E4M3) storage for the FP8 GEMM: saturate to +-448 and round to nearest even, as the CPU's emulation
// (native/numerics.py) does. Hardware conversion (sm_89+): cvt.rn.satfinite.e4m3x2.f32 packs two values; the
// low byte holds the second operand.
#include "common.cuh"

__device__ __forceinline__ unsigned char to_e4m3(float v) {
    unsigned short r;
    asm("{cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;}" : "=h"(r) : "f"(0.0f), "f"(v));
    return (unsigned char)(r & 0xff);
}

extern "C" __global__ void cast_f16_e4m3(unsigned char* out, const unsigned short* in, long long n) {
    GRID_LOOP(n) { out[i] = to_e4m3(F16::ld(in[i])); }
}
extern "C" __global__ void cast_f32_e4m3(unsigned char* out, const float* in, long long n) {
    GRID_LOOP(n) { out[i] = to_e4m3(in[i]); }
}
