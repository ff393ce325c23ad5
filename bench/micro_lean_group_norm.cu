// How fast could a lean group-norm forward run on a tiny group?  A bound
// for bench/RESULTS.md's lead (forty-fifth session), not the library: one
// block of 128 threads a group of packed NCHW half data (G = 32), x held in
// registers (at most 2 vectors a thread), float two-pass sums about the
// group's first element, warp shuffles and one shared-memory round a pass,
// y written from the registers.  Checks group 0 against float64; time it
// with ncu beside the library's tile forward on the same call:
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/lean bench/micro_lean_group_norm.cu && /tmp/lean
//   ncu --clock-control none --metrics gpu__time_duration.sum /tmp/lean
#include <cuda_fp16.h>
#include <cstdio>
#include <vector>
#include <cmath>
constexpr int kThreads = 128, kSlots = 2, W = 8;
__device__ __forceinline__ float block_sum(float v, float* sh) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) sh[warp] = v;
    __syncthreads();
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kThreads / 32; ++w) t += sh[w];
    return t;
}
__global__ void __launch_bounds__(kThreads) lean_group_norm(const __half* x, __half* y, const float* weight, const float* bias,
        float* mean_out, float* rstd_out, int group_vectors, int channel_vectors, int channels_per_group, float eps) {
    __shared__ float sh[2][kThreads / 32];
    const int g = blockIdx.x;
    const __half* gx = x + (size_t)g * group_vectors * W;
    __half* gy = y + (size_t)g * group_vectors * W;
    uint4 raw[kSlots];
    int held = 0;
#pragma unroll
    for (int a = 0; a < kSlots; ++a) {
        const int v = threadIdx.x + a * kThreads;
        if (v < group_vectors) { raw[a] = reinterpret_cast<const uint4*>(gx)[v]; held = a + 1; }
    }
    const float shift = __half2float(gx[0]);
    float s = 0.f;
#pragma unroll
    for (int a = 0; a < kSlots; ++a) if (a < held) {
        const __half* h = reinterpret_cast<const __half*>(&raw[a]);
#pragma unroll
        for (int j = 0; j < W; ++j) s += __half2float(h[j]) - shift;
    }
    const float n = (float)(group_vectors * W);
    const float mean_off = block_sum(s, sh[0]) / n;
    float q = 0.f;
#pragma unroll
    for (int a = 0; a < kSlots; ++a) if (a < held) {
        const __half* h = reinterpret_cast<const __half*>(&raw[a]);
#pragma unroll
        for (int j = 0; j < W; ++j) { const float e = __half2float(h[j]) - shift - mean_off; q += e * e; }
    }
    const float rstd = rsqrtf(block_sum(q, sh[1]) / n + eps);
    if (threadIdx.x == 0) { mean_out[g] = shift + mean_off; rstd_out[g] = rstd; }
    const int c0 = (g % 32) * channels_per_group;  // G = 32
#pragma unroll
    for (int a = 0; a < kSlots; ++a) if (a < held) {
        const int v = threadIdx.x + a * kThreads;
        const int c = c0 + v / channel_vectors;
        const float sc = rstd * weight[c], t = bias[c] - (shift + mean_off) * sc;
        const __half* h = reinterpret_cast<const __half*>(&raw[a]);
        uint4 out; __half* o = reinterpret_cast<__half*>(&out);
#pragma unroll
        for (int j = 0; j < W; ++j) o[j] = __float2half_rn(__half2float(h[j]) * sc + t);
        reinterpret_cast<uint4*>(gy)[v] = out;
    }
}
int main() {
    // 1x320x8x8 half NCHW, G = 32: the group fits 128 threads' two vectors
    // (larger groups do not; the kernel holds at most kSlots a thread).
    for (auto shape : {std::vector<int>{1, 320, 8, 8}}) {
        const int N = shape[0], C = shape[1], HW = shape[2] * shape[3], G = 32, cpg = C / G;
        const size_t count = (size_t)N * C * HW;
        const int group_vectors = cpg * HW / W, channel_vectors = HW / W;
        if (group_vectors > kThreads * kSlots) { printf("group of %d vectors: past the kernel's %d\n", group_vectors, kThreads * kSlots); return 1; }
        std::vector<__half> hx(count); for (size_t i = 0; i < count; ++i) hx[i] = __float2half((float)((i * 2654435761u) % 1000) / 250.f - 2.f);
        __half *x, *y; float *w, *b, *m, *r;
        cudaMalloc(&x, count * 2); cudaMalloc(&y, count * 2); cudaMalloc(&w, C * 4); cudaMalloc(&b, C * 4); cudaMalloc(&m, N * G * 4); cudaMalloc(&r, N * G * 4);
        cudaMemcpy(x, hx.data(), count * 2, cudaMemcpyHostToDevice);
        std::vector<float> ones(C, 1.f), zeros(C, 0.f);
        cudaMemcpy(w, ones.data(), C * 4, cudaMemcpyHostToDevice); cudaMemcpy(b, zeros.data(), C * 4, cudaMemcpyHostToDevice);
        for (int rep = 0; rep < 5; ++rep) lean_group_norm<<<N * G, kThreads>>>(x, y, w, b, m, r, group_vectors, channel_vectors, cpg, 1e-5f);
        cudaDeviceSynchronize();
        // check group 0 against the host
        std::vector<__half> hy(count); cudaMemcpy(hy.data(), y, count * 2, cudaMemcpyDeviceToHost);
        double s = 0, q = 0; const int gs = cpg * HW;
        for (int i = 0; i < gs; ++i) s += __half2float(hx[i]);
        double mu = s / gs; for (int i = 0; i < gs; ++i) { double e = __half2float(hx[i]) - mu; q += e * e; }
        double rs = 1.0 / std::sqrt(q / gs + 1e-5), worst = 0;
        for (int i = 0; i < gs; ++i) worst = std::fmax(worst, std::fabs(__half2float(hy[i]) - (__half2float(hx[i]) - mu) * rs));
        printf("%dx%dx%dx%d: group 0 worst |y error| %.3g (%s)\n", N, C, shape[2], shape[3], worst, cudaGetErrorString(cudaGetLastError()));
        cudaFree(x); cudaFree(y); cudaFree(w); cudaFree(b); cudaFree(m); cudaFree(r);
    }
    return 0;
}
