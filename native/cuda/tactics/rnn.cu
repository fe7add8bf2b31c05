// The LSTM cell of one time step (ONNX gate order i, o, f, c; default activations sigmoid / tanh / tanh), on the
// gates g = x_t W^T + h R^T + b that one cuBLASLt GEMM per step produced. Sigmoid as the CPU's RNN kernel computes
// it: 0.5 * (tanh(x / 2) + 1). c may be updated in place; h_out is the step's slice of Y.
#include "common.cuh"

__device__ __forceinline__ float sigm(float x) { return 0.5f * (tanhf(0.5f * x) + 1.0f); }

extern "C" __global__ void lstm_cell(float* h_out, float* c, const float* g, long long B, long long H) {
    GRID_LOOP(B * H) {
        long long b = i / H, k = i % H;
        const float* gb = g + b * 4 * H;
        float ii = sigm(gb[k]), oo = sigm(gb[H + k]), ff = sigm(gb[2 * H + k]), cc = tanhf(gb[3 * H + k]);
        float nc = ff * c[i] + ii * cc;
        c[i] = nc;
        h_out[i] = oo * tanhf(nc);
    }
}
