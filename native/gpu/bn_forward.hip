// Forward batch norm: training (batch statistics, then normalize) and
// inference (estimates, or the batch-statistics fallback the front turns into
// a training problem without outputs).  Both end in bn_forward_apply:
//     y = alpha * (((x - shift) - mean_offset) * coef0 + coef1) + beta * y_prior
// with coef0 = scale * inv_std and coef1 = bias per feature.
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_nest_walk.h"
#include "gpu/bn_scratch.hpp"

namespace mbn {
namespace gpu {
namespace {

constexpr int kBatch = 4;  // positions per thread in flight

// VR elements per position of one feature, or one element of each of VF
// consecutive features (bn_layout.hpp); the access is V = VR * VF wide.
template <typename T, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_forward_apply(const T* x, T* y, BnLayout layout, Scratch scratch, float alpha, float beta) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    const std::int64_t feature0 = (static_cast<std::int64_t>(blockIdx.x) * layout.tile_features + threadIdx.x) * VF;
    if (feature0 >= layout.feature.size) return;
    const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * layout.chunk;
    const std::int64_t end = min64(layout.reduce.size, begin + layout.chunk);
    const std::int64_t rows = layout.rows;
    A shift[VF], mean_offset[VF], factor[VF], bias[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        shift[j] = static_cast<A>(scratch.shift[feature0 + j]);
        mean_offset[j] = static_cast<A>(scratch.mean_offset[feature0 + j]);
        factor[j] = static_cast<A>(scratch.coef0[feature0 + j]);
        bias[j] = static_cast<A>(scratch.coef1[feature0 + j]);
    }

    std::int64_t base[2];
    nest_offsets<2>(layout.feature, feature0, kSlotX, base);
    std::int64_t r = begin + threadIdx.y;
    NestCursor<Rank, 2> cursor;
    cursor.start(layout.reduce, r, rows, base);
    // x may be y (in place): each element is read before this thread writes it.
    for (; r + (kBatch - 1) * rows < end; r += kBatch * rows) {
        A v[kBatch][V];
        std::int64_t out[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            load_values<A, V>(x + cursor.offset[0], v[k]);
            out[k] = cursor.offset[1];
            cursor.advance(layout.reduce);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                v[k][e] = ((v[k][e] - shift[j]) - mean_offset[j]) * factor[j] + bias[j];
            }
            store_values<T, V>(y + out[k], v[k], alpha, beta);
        }
    }
    for (; r < end; r += rows) {
        A v[V];
        load_values<A, V>(x + cursor.offset[0], v);
#pragma unroll
        for (int e = 0; e < V; ++e) {
            const int j = VF > 1 ? e : 0;
            v[e] = ((v[e] - shift[j]) - mean_offset[j]) * factor[j] + bias[j];
        }
        store_values<T, V>(y + cursor.offset[1], v, alpha, beta);
        cursor.advance(layout.reduce);
    }
}

// Inference coefficients from the estimates: shift = mean, coef0 =
// scale / sqrt(var + eps) (NaN for a negative var + eps, on purpose: no fabs).
template <typename P>
__global__ void __launch_bounds__(kBlockThreads)
    bn_inference_coefficients(BnLayout layout, Scratch scratch, const P* scale, const P* bias, const P* mean,
                              const P* var, double epsilon) {
    const std::int64_t feature = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (feature >= layout.feature.size) return;
    std::int64_t at[4];
    nest_offsets<4>(layout.feature, feature, kFwdScale, at);
    const double inv_std = 1.0 / sqrt(static_cast<double>(widen(var[at[kFwdVar - kFwdScale]])) + epsilon);
    scratch.shift[feature] = static_cast<double>(widen(mean[at[kFwdMean - kFwdScale]]));
    scratch.mean_offset[feature] = 0.0;
    scratch.coef0[feature] = static_cast<double>(widen(scale[at[0]])) * inv_std;
    scratch.coef1[feature] = static_cast<double>(widen(bias[at[kFwdBias - kFwdScale]]));
}

void launch_forward_apply(const TensorArg& x, const TensorArg& y, const Blend& out, const BnLayout& layout,
                          const LaunchTarget& target) {
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        const Scratch scratch = carve_scratch(target.scratch, layout);
        with_walk_shape_of<T>(layout, [&](auto rank, auto vr, auto vf) {
            const dim3 grid(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits));
            const dim3 block(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
            bn_forward_apply<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                <<<grid, block, 0, target.stream>>>(
                static_cast<const T*>(x.data), static_cast<T*>(y.data), layout, scratch, out.alpha, out.beta);
            check_launch("bn_forward_apply");
        });
    });
}

}  // namespace

void run_forward_training(const BnForwardTraining& p, const BnLayout& layout, const LaunchTarget& target) {
    StatsWrites writes;
    writes.scale = &p.scale;
    writes.bias = &p.bias;
    if (p.running_mean.present()) {
        writes.running_mean = &p.running_mean;
        writes.running_var = &p.running_var;
    }
    if (p.saved_mean.present()) {
        writes.saved_mean = &p.saved_mean;
        writes.saved_inv_std = &p.saved_inv_std;
    }
    writes.exp_avg_factor = p.exp_avg_factor;
    run_batch_statistics(p.x, p.scale.dtype, p.epsilon, writes, layout, target);
    launch_forward_apply(p.x, p.y, p.out, layout, target);
}

void run_forward_inference(const BnForwardInference& p, const BnLayout& layout, const LaunchTarget& target) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using A = acc_t<typename decltype(x_tag)::type>;
        with_parameter_type<A>(p.scale.dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            const std::int64_t blocks = (layout.feature.size + kBlockThreads - 1) / kBlockThreads;
            bn_inference_coefficients<P><<<static_cast<unsigned>(blocks), kBlockThreads, 0, target.stream>>>(
                layout, carve_scratch(target.scratch, layout), static_cast<const P*>(p.scale.data),
                static_cast<const P*>(p.bias.data), static_cast<const P*>(p.mean.data),
                static_cast<const P*>(p.var.data), p.epsilon);
            check_launch("bn_inference_coefficients");
        });
    });
    launch_forward_apply(p.x, p.y, p.out, layout, target);
}

}  // namespace gpu
}  // namespace mbn
