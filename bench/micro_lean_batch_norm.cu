// How fast could a lean batch-norm training forward run on small NCHW
// channels?  A bound for bench/RESULTS.md's lead (fifty-third session), not
// the library.  Three forms, each with float two-pass statistics by warp
// shuffles, lane 0 (thread 0) writing the saved and running statistics, y
// from the registers, and no double:
//   0: a warp a channel, four warps a block; a lane's values of sample n at
//      plane positions lane, lane + 32, ... (at most kMost a lane);
//   1: the same, one warp a block;
//   2: a block of 128 threads a channel, at most 8 values a thread, one
//      shared-memory round a pass;
// and the backward in form 0.
// Checks every channel against float64 on the host; time it with ncu
// beside the library's kernel and torch.compile's on the same shape
// (.dev/ncu_anchor.py):
//   nvcc -std=c++17 -O3 -arch=sm_90 -o /tmp/lean_bn bench/micro_lean_batch_norm.cu
//   ncu --clock-control none --metrics gpu__time_duration.sum,smsp__inst_executed.sum /tmp/lean_bn
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <type_traits>
#include <vector>

constexpr int kMost = 16;

__device__ __forceinline__ float wave_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// A lane's values of one channel (`p`: the channel's first plane, at the
// lane), less `offset`: sample n's at plane positions lane + 32 j, slot
// n kPerPlane + j; 0 past N samples or the plane's end (`held[j]`: whether
// position lane + 32 j lies in the plane).
template <int kPerPlane, typename T>
__device__ __forceinline__ void load_wave_values(const T* p, long plane_stride, int N, int HW, float offset,
                                                 float (&v)[kMost], bool (&held)[kPerPlane]) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < kPerPlane; ++j) held[j] = lane + 32 * j < HW;
#pragma unroll
    for (int n = 0; n < kMost / kPerPlane; ++n)
#pragma unroll
        for (int j = 0; j < kPerPlane; ++j)
            v[n * kPerPlane + j] = n < N && held[j] ? static_cast<float>(p[n * plane_stride + 32 * j]) - offset : 0.0f;
}

// A channel's statistics finished: y = x scale + shift, and what one
// thread stores (the saved mean and inverse std, the running statistics
// from their prior values, read before the channel's values).
struct ChannelFinish {
    float mean, var, count, inv_std, scale, shift, prior_mean, prior_var;
    __device__ void store(int c, float* saved_mean, float* saved_inv_std, float* running_mean, float* running_var,
                          float momentum) const {
        saved_mean[c] = mean;
        saved_inv_std[c] = inv_std;
        running_mean[c] = (1.0f - momentum) * prior_mean + momentum * mean;
        running_var[c] = (1.0f - momentum) * prior_var + momentum * var * count / (count - 1.0f);
    }
};

__device__ __forceinline__ ChannelFinish finish_channel(float mean, float var, float count, float w, float b,
                                                        float prior_mean, float prior_var, float epsilon) {
    const float inv_std = rsqrtf(var + epsilon), scale = w * inv_std;
    return ChannelFinish{mean, var, count, inv_std, scale, b - mean * scale, prior_mean, prior_var};
}

// kPerPlane: the slots a lane takes in one plane (ceil(HW / 32)); the
// plane's count and the samples are run-time, the slots' layout is not.
template <typename T, int kPerPlane, int kWaves>
__global__ void __launch_bounds__(kWaves * 32)
    lean_batch_norm_training(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ weight,
                             const float* __restrict__ bias, float* running_mean, float* running_var,
                             float* saved_mean, float* saved_inv_std, int N, int C, int HW, float momentum,
                             float epsilon) {
    constexpr int kPlanes = kMost / kPerPlane;
    const int lane = threadIdx.x % 32;
    const int c = blockIdx.x * kWaves + threadIdx.x / 32;
    if (c >= C) return;
    const long plane_stride = static_cast<long>(C) * HW;
    const T* cx = x + static_cast<long>(c) * HW + lane;
    T* cy = y + static_cast<long>(c) * HW + lane;
    // The channel's parameters and prior statistics first: loaded after the
    // sums (behind the saved statistics' stores, which may alias them) each
    // was a round trip to DRAM on the chain.
    const float w = weight[c], b = bias[c], prior_mean = running_mean[c], prior_var = running_var[c];
    float v[kMost];
    bool held[kPerPlane];
    load_wave_values<kPerPlane>(cx, plane_stride, N, HW, 0.0f, v, held);
    const float count = static_cast<float>(N) * HW;
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kMost; ++k) s += v[k];
    const float mean = wave_sum(s) / count;
    float q = 0.0f;
#pragma unroll
    for (int n = 0; n < kPlanes; ++n)
#pragma unroll
        for (int j = 0; j < kPerPlane; ++j) {
            const float e = n < N && held[j] ? v[n * kPerPlane + j] - mean : 0.0f;
            q = fmaf(e, e, q);
        }
    const float var = wave_sum(q) / count;
    const ChannelFinish f = finish_channel(mean, var, count, w, b, prior_mean, prior_var, epsilon);
    if (lane == 0) f.store(c, saved_mean, saved_inv_std, running_mean, running_var, momentum);
#pragma unroll
    for (int n = 0; n < kPlanes; ++n)
#pragma unroll
        for (int j = 0; j < kPerPlane; ++j)
            if (n < N && held[j])
                cy[n * plane_stride + 32 * j] = static_cast<T>(fmaf(v[n * kPerPlane + j], f.scale, f.shift));
}

// The same with a block of kThreads a channel: value r of the channel's
// N * HW at thread r mod kThreads, at most kPer a thread, float two-pass
// statistics by shuffles and one shared-memory round a pass.
template <typename T, int kThreads, int kPer>
__global__ void __launch_bounds__(kThreads)
    lean_batch_norm_training_block(const T* __restrict__ x, T* __restrict__ y, const float* __restrict__ weight,
                                   const float* __restrict__ bias, float* running_mean, float* running_var,
                                   float* saved_mean, float* saved_inv_std, int N, int C, int HW, float momentum,
                                   float epsilon) {
    __shared__ float part[2][kThreads / 32];
    const int c = blockIdx.x, t = threadIdx.x, lane = t % 32, warp = t / 32;
    const int total = N * HW;
    const float w = weight[c], b = bias[c], prior_mean = running_mean[c], prior_var = running_var[c];
    long at[kPer];
    float v[kPer];
    int n = t / HW, hw = t - n * HW;
    const int step_n = kThreads / HW, step_hw = kThreads - step_n * HW;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        at[k] = (static_cast<long>(n) * C + c) * HW + hw;
        v[k] = t + k * kThreads < total ? static_cast<float>(x[at[k]]) : 0.0f;
        n += step_n;
        hw += step_hw;
        if (hw >= HW) hw -= HW, ++n;
    }
    auto block_sum = [&](float value, float* slot) {
        value = wave_sum(value);
        if (lane == 0) slot[warp] = value;
        __syncthreads();
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kThreads / 32; ++w) sum += slot[w];
        return sum;
    };
    const float count = static_cast<float>(total);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) s += v[k];
    const float mean = block_sum(s, part[0]) / count;
    float q = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const float e = t + k * kThreads < total ? v[k] - mean : 0.0f;
        q = fmaf(e, e, q);
    }
    const float var = block_sum(q, part[1]) / count;
    const ChannelFinish f = finish_channel(mean, var, count, w, b, prior_mean, prior_var, epsilon);
    if (t == 0) f.store(c, saved_mean, saved_inv_std, running_mean, running_var, momentum);
#pragma unroll
    for (int k = 0; k < kPer; ++k)
        if (t + k * kThreads < total) y[at[k]] = static_cast<T>(fmaf(v[k], f.scale, f.shift));
}

// The wave kernels' instance for a shape: `launch` is called with the
// slots a lane takes in a plane (kPerPlane, 1, 2 or 8) where N samples fit
// kMost slots; false where no instance holds the shape.
template <typename F>
bool with_per_plane(int N, int HW, F&& launch) {
    const int per_plane = (HW + 31) / 32;
    if (per_plane == 1 && N <= kMost)
        launch(std::integral_constant<int, 1>{});
    else if (per_plane == 2 && N <= kMost / 2)
        launch(std::integral_constant<int, 2>{});
    else if (per_plane <= 8 && N <= kMost / 8)
        launch(std::integral_constant<int, 8>{});
    else
        return false;
    return true;
}

// The checks' data: x and dy of element i (hashed, spread over about
// [-2, 2] and [-1, 1]) and channel c's weight and bias.
float input_x(size_t i) { return static_cast<float>((i * 2654435761u) % 1000) / 250.f - 2.f; }
float input_dy(size_t i) { return static_cast<float>((i * 40503u + 7) % 997) / 500.f - 1.f; }
float input_weight(int c) { return 0.5f + (c % 7) * 0.1f; }
float input_bias(int c) { return (c % 5) * 0.2f - 0.4f; }

// A device array's `count` values on the host (after the work before it).
template <typename V>
std::vector<V> download(const V* device, size_t count) {
    std::vector<V> host(count);
    cudaMemcpy(host.data(), device, count * sizeof(V), cudaMemcpyDeviceToHost);
    return host;
}

// Channel c's mean and inverse std (epsilon 1e-5) in float64 on the host.
template <typename T>
void reference_moments(const std::vector<T>& hx, int N, int C, int HW, int c, double& mean, double& inv_std) {
    double s = 0, q = 0;
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) s += static_cast<float>(hx[(static_cast<size_t>(n) * C + c) * HW + i]);
    mean = s / (static_cast<double>(N) * HW);
    for (int n = 0; n < N; ++n)
        for (int i = 0; i < HW; ++i) {
            const double e = static_cast<float>(hx[(static_cast<size_t>(n) * C + c) * HW + i]) - mean;
            q += e * e;
        }
    inv_std = 1.0 / std::sqrt(q / (static_cast<double>(N) * HW) + 1e-5);
}

// form: 0 a channel a wave, four waves a block; 1 the same, one wave a
// block; 2 a block of 128 threads a channel.
template <typename T>
double run(int N, int C, int H, int W, const char* name, int form) {
    const int HW = H * W;
    const size_t count = static_cast<size_t>(N) * C * HW;
    std::vector<T> hx(count);
    for (size_t i = 0; i < count; ++i) hx[i] = static_cast<T>(input_x(i));
    std::vector<float> w(C), b(C), rm(C, 0.0f), rv(C, 1.0f);
    for (int c = 0; c < C; ++c) w[c] = input_weight(c), b[c] = input_bias(c);
    T *x, *y;
    float *dw, *db, *drm, *drv, *sm, *si, *flush;
    cudaMalloc(&x, count * sizeof(T));
    cudaMalloc(&y, count * sizeof(T));
    cudaMalloc(&dw, C * 4); cudaMalloc(&db, C * 4); cudaMalloc(&drm, C * 4); cudaMalloc(&drv, C * 4);
    cudaMalloc(&sm, C * 4); cudaMalloc(&si, C * 4);
    cudaMalloc(&flush, 256 << 20);
    cudaMemcpy(x, hx.data(), count * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(drm, rm.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(drv, rv.data(), C * 4, cudaMemcpyHostToDevice);
    auto launch = [&] {
        if (form == 2) {
            if (static_cast<long>(N) * HW > 128L * 8) return false;
            lean_batch_norm_training_block<T, 128, 8><<<C, 128>>>(x, y, dw, db, drm, drv, sm, si, N, C, HW, 0.1f, 1e-5f);
            return true;
        }
        const int waves = form == 0 ? 4 : 1;
        return with_per_plane(N, HW, [&](auto per_plane) {
            constexpr int kPerPlane = decltype(per_plane)::value;
            const dim3 grid((C + waves - 1) / waves), block(waves * 32);
            if (waves == 4)
                lean_batch_norm_training<T, kPerPlane, 4><<<grid, block>>>(x, y, dw, db, drm, drv, sm, si, N, C, HW,
                                                                         0.1f, 1e-5f);
            else
                lean_batch_norm_training<T, kPerPlane, 1><<<grid, block>>>(x, y, dw, db, drm, drv, sm, si, N, C, HW,
                                                                         0.1f, 1e-5f);
        });
    };
    // Cold L2 before the call ncu times, as the bench flushes before each repetition.
    cudaMemset(flush, 0, 256 << 20);
    if (!launch()) {
        std::printf("%s: no instance for %d values a plane\n", name, HW);
        return -1;
    }
    const std::vector<T> hy = download(y, count);
    const std::vector<float> hsm = download(sm, C), hsi = download(si, C);
    double worst_y = 0, worst_stat = 0;
    for (int c = 0; c < C; ++c) {
        double mu, rs;
        reference_moments(hx, N, C, HW, c, mu, rs);
        worst_stat = std::fmax(worst_stat, std::fabs(hsm[c] - mu) + std::fabs(hsi[c] - rs) / rs);
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const size_t at = (static_cast<size_t>(n) * C + c) * HW + i;
                const double ref = (static_cast<float>(hx[at]) - mu) * rs * w[c] + b[c];
                worst_y = std::fmax(worst_y, std::fabs(static_cast<float>(hy[at]) - ref) / (1.0 + std::fabs(ref)));
            }
    }
    std::printf("form %d %s %dx%dx%dx%d: worst |y error| / (1 + |y|) %.3g, statistics %.3g (%s)\n", form, name, N, C, H, W, worst_y,
                worst_stat, cudaGetErrorString(cudaGetLastError()));
    cudaFree(x); cudaFree(y); cudaFree(dw); cudaFree(db); cudaFree(drm); cudaFree(drv); cudaFree(sm); cudaFree(si);
    cudaFree(flush);
    return worst_y;
}

// The backward in form 0, from the saved mean and inverse std: dbias =
// sum(dy), dscale = sum(dy (x - mean)) inv_std, dx = scale inv_std (dy -
// dbias / M - (x - mean) inv_std dscale / M); the channel's scale and saved
// statistics read before the values.
template <typename T, int kPerPlane>
__global__ void __launch_bounds__(4 * 32)
    lean_batch_norm_backward(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                             const float* __restrict__ weight, const float* __restrict__ saved_mean,
                             const float* __restrict__ saved_inv_std, float* dscale, float* dbias, int N, int C,
                             int HW) {
    constexpr int kPlanes = kMost / kPerPlane;
    const int lane = threadIdx.x % 32;
    const int c = blockIdx.x * 4 + threadIdx.x / 32;
    if (c >= C) return;
    const float w = weight[c], mean = saved_mean[c], inv_std = saved_inv_std[c];
    const long plane_stride = static_cast<long>(C) * HW, base = static_cast<long>(c) * HW + lane;
    // x and dy of a slot loaded side by side (as measured in run284).
    float xv[kMost], gv[kMost];
    bool held[kPerPlane];
#pragma unroll
    for (int j = 0; j < kPerPlane; ++j) held[j] = lane + 32 * j < HW;
#pragma unroll
    for (int n = 0; n < kPlanes; ++n)
#pragma unroll
        for (int j = 0; j < kPerPlane; ++j) {
            const bool in = n < N && held[j];
            const long at = base + n * plane_stride + 32 * j;
            xv[n * kPerPlane + j] = in ? static_cast<float>(x[at]) - mean : 0.0f;
            gv[n * kPerPlane + j] = in ? static_cast<float>(dy[at]) : 0.0f;
        }
    float g1 = 0.0f, g2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kMost; ++k) g1 += gv[k], g2 = fmaf(gv[k], xv[k], g2);
    g1 = wave_sum(g1);
    g2 = wave_sum(g2);
    const float count = static_cast<float>(N) * HW;
    const float k0 = w * inv_std, k1 = -k0 * inv_std * inv_std * g2 / count, k2 = -k0 * g1 / count;
    if (lane == 0) dbias[c] = g1, dscale[c] = g2 * inv_std;
#pragma unroll
    for (int n = 0; n < kPlanes; ++n)
#pragma unroll
        for (int j = 0; j < kPerPlane; ++j)
            if (n < N && held[j]) {
                const int k = n * kPerPlane + j;
                dx[base + n * plane_stride + 32 * j] = static_cast<T>(fmaf(k0, gv[k], fmaf(k1, xv[k], k2)));
            }
}

// The backward's check and one cold call (form 0), on the same data as
// run's: dy from a second hash, the saved statistics from the host.
template <typename T>
double run_backward(int N, int C, int H, int W, const char* name) {
    const int HW = H * W;
    const size_t count = static_cast<size_t>(N) * C * HW;
    std::vector<T> hx(count), hdy(count);
    for (size_t i = 0; i < count; ++i) hx[i] = static_cast<T>(input_x(i)), hdy[i] = static_cast<T>(input_dy(i));
    std::vector<float> w(C), mu(C), rs(C);
    std::vector<double> mu64(C), rs64(C);
    for (int c = 0; c < C; ++c) {
        w[c] = input_weight(c);
        reference_moments(hx, N, C, HW, c, mu64[c], rs64[c]);
        mu[c] = static_cast<float>(mu64[c]);
        rs[c] = static_cast<float>(rs64[c]);
    }
    T *x, *dy, *dx;
    float *dw, *dm, *dr, *ds, *db, *flush;
    cudaMalloc(&x, count * sizeof(T)); cudaMalloc(&dy, count * sizeof(T)); cudaMalloc(&dx, count * sizeof(T));
    cudaMalloc(&dw, C * 4); cudaMalloc(&dm, C * 4); cudaMalloc(&dr, C * 4); cudaMalloc(&ds, C * 4); cudaMalloc(&db, C * 4);
    cudaMalloc(&flush, 256 << 20);
    cudaMemcpy(x, hx.data(), count * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, hdy.data(), count * sizeof(T), cudaMemcpyHostToDevice);
    cudaMemcpy(dw, w.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dm, mu.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(dr, rs.data(), C * 4, cudaMemcpyHostToDevice);
    cudaMemset(flush, 0, 256 << 20);
    const bool launched = with_per_plane(N, HW, [&](auto per_plane) {
        lean_batch_norm_backward<T, decltype(per_plane)::value>
            <<<(C + 3) / 4, 128>>>(x, dy, dx, dw, dm, dr, ds, db, N, C, HW);
    });
    if (!launched) return -1;
    const std::vector<T> hdx = download(dx, count);
    const std::vector<float> hds = download(ds, C), hdb = download(db, C);
    double worst_dx = 0, worst_param = 0;
    const double m = static_cast<double>(N) * HW;
    for (int c = 0; c < C; ++c) {
        double g1 = 0, g2 = 0;
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const size_t at = (static_cast<size_t>(n) * C + c) * HW + i;
                g1 += static_cast<float>(hdy[at]);
                g2 += static_cast<float>(hdy[at]) * (static_cast<float>(hx[at]) - mu64[c]);
            }
        worst_param = std::fmax(worst_param, std::fabs(hdb[c] - g1) / (1 + std::fabs(g1)) +
                                                 std::fabs(hds[c] - g2 * rs64[c]) / (1 + std::fabs(g2 * rs64[c])));
        for (int n = 0; n < N; ++n)
            for (int i = 0; i < HW; ++i) {
                const size_t at = (static_cast<size_t>(n) * C + c) * HW + i;
                const double xhat = (static_cast<float>(hx[at]) - mu64[c]) * rs64[c];
                const double ref = w[c] * rs64[c] * (static_cast<float>(hdy[at]) - g1 / m - xhat * g2 * rs64[c] / m);
                worst_dx = std::fmax(worst_dx, std::fabs(static_cast<float>(hdx[at]) - ref) / (1.0 + std::fabs(ref)));
            }
    }
    std::printf("backward %s %dx%dx%dx%d: worst |dx error| / (1 + |dx|) %.3g, dscale/dbias %.3g (%s)\n", name, N, C, H,
                W, worst_dx, worst_param, cudaGetErrorString(cudaGetLastError()));
    cudaFree(x); cudaFree(dy); cudaFree(dx); cudaFree(dw); cudaFree(dm); cudaFree(dr); cudaFree(ds); cudaFree(db);
    cudaFree(flush);
    return worst_dx;
}

int main() {
    for (int form = 0; form < 3; ++form) {
        run<__half>(8, 2048, 7, 7, "half", form);
        run<float>(8, 2048, 7, 7, "float", form);
        run<float>(2, 256, 14, 14, "float", form);
        run<__half>(2, 256, 14, 14, "half", form);
        run<__half>(1, 2048, 7, 7, "half", form);
    }
    run_backward<__half>(8, 2048, 7, 7, "half");
    run_backward<float>(8, 2048, 7, 7, "float");
    run_backward<float>(2, 256, 14, 14, "float");
    run_backward<__half>(2, 256, 14, 14, "half");
    run_backward<__half>(1, 2048, 7, 7, "half");
    return 0;
}
