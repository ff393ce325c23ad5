// One block per channel: spatial batch-norm training and backward on packed
// NCHW tensors whose channels are small (bn_channel_block.hpp).
//
// Block c copies channel c's N planes of S values (and dy's) into shared
// memory, sums them with the block alone, finishes the statistics on thread
// 0, and writes y (or dx) from its copy.  One launch, no hand-over between
// blocks, each value read from DRAM once: what a small tensor needs, where a
// grid-wide barrier or a second launch would cost more than the data.
// Numerics as bn_resident.hip: values around the channel's first sample,
// statistics in float per thread then double, gradient sums in double.
#include "gpu/bn_channel_block.hpp"

#include "common/environment.hpp"
#include "common/numerics.hpp"
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/param_io.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace mbn {
namespace gpu {
namespace {

// Shared memory per block: small enough for several blocks per
// multiprocessor without asking for more than the default 48 KB.
constexpr std::int64_t kSharedBytes = 40 << 10;
constexpr int kMaxThreads = 512;
constexpr std::int64_t kMaxValues = 2048;

struct ChannelBlockArgs {
    const void* x;
    const void* dy;
    void* out;  // y or dx
    int channels, spatial, samples;
    ChannelParam scale, bias, prev_mean, prev_var, running_mean, running_var, saved_mean, saved_inv_std;
    ChannelParam dscale, dbias;
    double epsilon, exp_avg_factor;
    float alpha, beta, param_alpha, param_beta;
    bool saved;        // backward: saved statistics given
    bool double_math;  // backward: dx in double
};

// Sum of a double pair over the block; every thread gets the totals.
__device__ void block_sum(double& a, double& b, double* scratch) {
    for (int mask = 1; mask < MBN_WAVE_SIZE; mask *= 2) {
        a += shuffle_xor(a, mask);
        b += shuffle_xor(b, mask);
    }
    const int wave = threadIdx.x / MBN_WAVE_SIZE;
    const int waves = (blockDim.x + MBN_WAVE_SIZE - 1) / MBN_WAVE_SIZE;
    __syncthreads();  // scratch may still be read from an earlier sum
    if (threadIdx.x % MBN_WAVE_SIZE == 0) {
        scratch[wave * 2] = a;
        scratch[wave * 2 + 1] = b;
    }
    __syncthreads();
    a = 0.0;
    b = 0.0;
    for (int w = 0; w < waves; ++w) {
        a += scratch[w * 2];
        b += scratch[w * 2 + 1];
    }
}

// Element i of the channel (plane i / S, position i % S) in the tensor.
__device__ __forceinline__ int global_index(const ChannelBlockArgs& a, int c, int i) {
    const int n = i / a.spatial;
    return (n * a.channels + c) * a.spatial + (i - n * a.spatial);
}

template <typename T, bool kBackward>
__global__ void __launch_bounds__(kMaxThreads) bn_channel_block(ChannelBlockArgs a) {
    extern __shared__ double channel_shared[];
    const int c = blockIdx.x;
    const int m = a.samples * a.spatial;
    double* scratch = channel_shared;  // 2 doubles per wave
    T* xs = reinterpret_cast<T*>(channel_shared + 2 * (kMaxThreads / 32));
    T* dys = xs + m;
    const T* x = static_cast<const T*>(a.x);
    const T* dy = static_cast<const T*>(a.dy);
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const int g = global_index(a, c, i);
        xs[i] = x[g];
        if (kBackward) dys[i] = dy[g];
    }
    const double count = static_cast<double>(m);
    // The center: the saved mean, or the channel's first value.
    const bool saved = kBackward && a.saved;
    const float center = saved ? static_cast<float>(a.saved_mean.load(c)) : widen(x[c * a.spatial]);
    __syncthreads();

    double mean_offset = 0.0, inv_std = 0.0, variance = 0.0;
    if (saved) {
        inv_std = a.saved_inv_std.load(c);
    } else {
        float s1 = 0.0f, s2 = 0.0f;
        double d1 = 0.0, d2 = 0.0;
        int batch = 0;
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const float d = widen(xs[i]) - center;
            s1 += d;
            s2 = d * d + s2;
            if (++batch == 8) {
                d1 += s1;
                d2 += s2;
                s1 = s2 = 0.0f;
                batch = 0;
            }
        }
        d1 += s1;
        d2 += s2;
        if (!isfinite(d1) || !isfinite(d2)) {  // float overflowed (values near 1e30) or Inf/NaN
            d1 = d2 = 0.0;
            for (int i = threadIdx.x; i < m; i += blockDim.x) {
                const double d = static_cast<double>(widen(xs[i])) - center;
                d1 += d;
                d2 += d * d;
            }
        }
        block_sum(d1, d2, scratch);
        mean_offset = d1 / count;
        variance = fmax((d2 - d1 * mean_offset) / count, 0.0);
        inv_std = inverse_std(variance, a.epsilon);
    }

    if (!kBackward) {
        if (threadIdx.x == 0) {
            const double mean = center + mean_offset;
            if (a.running_mean.present()) {
                const double unbiased = unbiased_variance(variance, count);
                const double f = a.exp_avg_factor;
                a.running_mean.store(c, running_update(a.prev_mean.load(c), mean, f));
                a.running_var.store(c, running_update(a.prev_var.load(c), unbiased, f));
            }
            if (a.saved_mean.present()) {
                a.saved_mean.store(c, mean);
                a.saved_inv_std.store(c, inv_std);
            }
        }
        const float factor = static_cast<float>(a.scale.load(c) * inv_std);
        const float shift = static_cast<float>(a.bias.load(c) - mean_offset * a.scale.load(c) * inv_std);
        T* y = static_cast<T*>(a.out);
        for (int i = threadIdx.x; i < m; i += blockDim.x)
            store_blended(y, global_index(a, c, i), (widen(xs[i]) - center) * factor + shift, a.alpha, a.beta);
        return;
    }

    // Backward: sum(dy) and sum(dy * (x - center)) in double per value.
    double g1 = 0.0, g2 = 0.0;
    for (int i = threadIdx.x; i < m; i += blockDim.x) {
        const double g = widen(dys[i]);
        g1 += g;
        g2 += g * (static_cast<double>(widen(xs[i])) - center);
    }
    block_sum(g1, g2, scratch);
    const double dy_xhat = (g2 - mean_offset * g1) * inv_std;
    if (threadIdx.x == 0) {
        a.dscale.store_blended(c, dy_xhat, a.param_alpha, a.param_beta);
        a.dbias.store_blended(c, g1, a.param_alpha, a.param_beta);
    }
    const double k0 = a.scale.load(c) * inv_std;
    const double k1 = -k0 * inv_std * dy_xhat / count;
    const double k2 = -k0 * g1 / count - k1 * mean_offset;
    T* dx = static_cast<T*>(a.out);
    if (a.double_math) {
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const double d = static_cast<double>(widen(xs[i])) - center;
            store_blended(dx, global_index(a, c, i), k0 * widen(dys[i]) + k1 * d + k2, a.alpha, a.beta);
        }
    } else {
        const float f0 = static_cast<float>(k0), f1 = static_cast<float>(k1), f2 = static_cast<float>(k2);
        for (int i = threadIdx.x; i < m; i += blockDim.x) {
            const float d = widen(xs[i]) - center;
            store_blended(dx, global_index(a, c, i), f0 * widen(dys[i]) + f1 * d + f2, a.alpha, a.beta);
        }
    }
}

// MIOPEN_BN_GPU_CHANNEL_BLOCKS=0 turns the path off.
bool channel_blocks_enabled() {
    static const bool on = switch_from_environment("MIOPEN_BN_GPU_CHANNEL_BLOCKS", true);
    return on;
}

bool fits(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data, int tensors) {
    if (!channel_blocks_enabled() || geom.mode != BnMode::spatial) return false;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return false;
    if (x.order != MemoryOrder::packed_nchw) return false;
    for (const TensorArg* t : data)
        if (t->dtype != x.dtype || t->order != x.order) return false;
    if (x.element_count() >= (std::int64_t(1) << 31)) return false;
    // Up to kMaxValues per channel: a block walks them at a handful per
    // thread.  Longer channels went slower than the other paths on the H100
    // (16x256x28x28: 17.0 -> 25.8 us), their planes read one value at a time.
    const std::int64_t m = geom.reduction_size();
    const std::int64_t bytes = m * static_cast<std::int64_t>(dtype_size(x.dtype)) * tensors;
    return m <= kMaxValues && bytes + 2 * (kMaxThreads / 32) * 8 <= kSharedBytes;
}

int threads_for(std::int64_t m) {
    int threads = 64;
    while (threads < kMaxThreads && threads * 8 < m) threads *= 2;
    return threads;
}

template <bool kBackward>
void launch(const ChannelBlockArgs& a, DType dtype, std::int64_t m, int tensors, const LaunchTarget& target) {
    const std::size_t shared =
        static_cast<std::size_t>(2 * (kMaxThreads / 32)) * 8 + static_cast<std::size_t>(m) * dtype_size(dtype) * tensors;
    with_element_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            bn_channel_block<T, kBackward>
                <<<static_cast<unsigned>(a.channels), threads_for(m), shared, target.stream>>>(a);
            check_launch("bn_channel_block");
        }
    });
}

ChannelBlockArgs shape_args(const BnGeometry& geom) {
    ChannelBlockArgs a{};
    a.channels = static_cast<int>(geom.len[kC]);
    a.spatial = static_cast<int>(geom.spatial_size());
    a.samples = static_cast<int>(geom.len[kN]);
    return a;
}

}  // namespace

bool channel_blocks_fit(const BnForwardTraining& p) {
    return p.activation.identity() && fits(p.geom, p.x, {&p.x, &p.y}, 1);
}

bool channel_blocks_fit(const BnBackward& p) {
    return p.activation.identity() && fits(p.geom, p.x, {&p.x, &p.dy, &p.dx}, 2);
}

void run_channel_blocks(const BnForwardTraining& p, const LaunchTarget& target) {
    ChannelBlockArgs a = shape_args(p.geom);
    a.x = p.x.data;
    a.out = p.y.data;
    a.scale = channel_param(p.scale);
    a.bias = channel_param(p.bias);
    a.prev_mean = channel_param(p.prev_running_mean);
    a.prev_var = channel_param(p.prev_running_var);
    a.running_mean = channel_param(p.running_mean);
    a.running_var = channel_param(p.running_var);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.epsilon = p.epsilon;
    a.exp_avg_factor = p.exp_avg_factor;
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    launch<false>(a, p.x.dtype, p.geom.reduction_size(), 1, target);
}

void run_channel_blocks(const BnBackward& p, const LaunchTarget& target) {
    ChannelBlockArgs a = shape_args(p.geom);
    a.x = p.x.data;
    a.dy = p.dy.data;
    a.out = p.dx.data;
    a.scale = channel_param(p.scale);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.dscale = channel_param(p.dscale);
    a.dbias = channel_param(p.dbias);
    a.epsilon = p.epsilon;
    a.alpha = p.data.alpha;
    a.beta = p.data.beta;
    a.param_alpha = p.param.alpha;
    a.param_beta = p.param.beta;
    a.saved = p.saved_mean.present();
    a.double_math = !float_backprop_enough(p.geom.reduction_size());
    launch<true>(a, p.x.dtype, p.geom.reduction_size(), 2, target);
}

}  // namespace gpu
}  // namespace mbn
