// How accurate is swish in the tanh form, z/2 + z/2 tanh(beta z/2) with
// tanh.approx.f32 (native/gpu/gn_activation.h), against the exponential form
// (ex2.approx, rcp.approx) and float64, on the device?  2^24 values of z per
// range and beta:
// - the forward, rounded to half and to bfloat16: worst |error| as a
//   fraction of the tolerance table's bound (atol + rtol |exact|), and RMS;
// - tanh.approx near saturation: its error as a fraction of 1 - |tanh|;
// - swish's derivative in both forms: relative error (why the backward keeps
//   the exponential form).
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/swish_acc bench/micro_swish_tanh_accuracy.cu && /tmp/swish_acc
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

__device__ float tanh_approx(float v) { float r; asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(v)); return r; }
__device__ float ex2_approx(float v) { float r; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v)); return r; }
__device__ float rcp_approx(float v) { float r; asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v)); return r; }

constexpr float kLog2E = 1.44269504088896341f;

struct Out { float z, y_half, y_bf16, tanh_z, d_tanh, d_exp; };

__global__ void forms(int n, float lo, float hi, float beta, bool tanh_form, Out* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float z = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
    const float half_z = 0.5f * z;
    const float t = tanh_approx(0.5f * beta * z);
    const float y = tanh_form ? fmaf(half_z, t, half_z) : z * rcp_approx(1.0f + ex2_approx(z * (-beta * kLog2E)));
    const float s_tanh = fmaf(0.5f, t, 0.5f);
    const float s_exp = rcp_approx(1.0f + ex2_approx(z * (-beta * kLog2E)));
    out[i] = Out{z, __half2float(__float2half_rn(y)), __bfloat162float(__float2bfloat16_rn(y)), tanh_approx(z),
                 fmaf(0.25f * beta * z, fmaf(-t, t, 1.0f), s_tanh), s_exp + (beta * z) * (s_exp * (1.0f - s_exp))};
}

int main() {
    const int n = 1 << 24;
    Out* out = nullptr;
    if (cudaMallocManaged(&out, sizeof(Out) * n) != cudaSuccess) return 1;
    const std::pair<float, float> ranges[] = {{-40.f, 40.f}, {-12.f, 0.f}, {-3.f, 3.f}, {-9.f, -0.5f}, {0.5f, 9.f}};
    for (const bool tanh_form : {true, false})
        for (const float beta : {1.0f, 0.5f, 1.702f})
            for (const auto& r : ranges) {
                forms<<<(n + 255) / 256, 256>>>(n, r.first, r.second, beta, tanh_form, out);
                if (cudaDeviceSynchronize() != cudaSuccess) return 1;
                double worst_h = 0, worst_b = 0, rms_h = 0, rms_b = 0, worst_t = 0, rms_d = 0;
                for (int i = 0; i < n; ++i) {
                    const double z = out[i].z, exact = z / (1.0 + std::exp(-static_cast<double>(beta) * z));
                    const double eh = std::fabs(out[i].y_half - exact) / (2e-3 + 2e-3 * std::fabs(exact));
                    const double eb = std::fabs(out[i].y_bf16 - exact) / (1.6e-2 + 1.6e-2 * std::fabs(exact));
                    worst_h = std::max(worst_h, eh), worst_b = std::max(worst_b, eb);
                    rms_h += eh * eh, rms_b += eb * eb;
                    const double et = std::tanh(z), room = 1.0 - std::fabs(et);
                    if (room > 1e-6) worst_t = std::max(worst_t, std::fabs(out[i].tanh_z - et) / room);
                    const double s = 1.0 / (1.0 + std::exp(-static_cast<double>(beta) * z));
                    const double d = s + beta * z * s * (1.0 - s);
                    const double ed = std::fabs((tanh_form ? out[i].d_tanh : out[i].d_exp) - d) / (1e-6 + std::fabs(d));
                    rms_d += ed * ed;
                }
                std::printf("%-8s beta %.3f z in [%g, %g]: y half worst %.3f rms %.3f, bfloat16 worst %.3f rms %.3f "
                            "(of the bound); tanh.approx error / (1 - |tanh|) worst %.3g; derivative relative RMS %.3g\n",
                            tanh_form ? "tanh" : "exp/rcp", beta, r.first, r.second, worst_h, std::sqrt(rms_h / n),
                            worst_b, std::sqrt(rms_b / n), worst_t, std::sqrt(rms_d / n));
            }
    return 0;
}
