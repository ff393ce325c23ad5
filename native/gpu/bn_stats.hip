// Batch statistics: per-feature mean and inverse standard deviation of x,
// in two launches.
//   1. bn_stats_partial: each block reduces its (features x reduction slice)
//      tile with Welford batches and Chan merges to (mean, M2) per feature,
//      plus the sum in double, written to the scratch partials.  Values are
//      shifted by the feature's first element first, so a channel with mean
//      1e4 and std 1e-2 keeps its digits in float and a constant channel gives
//      exactly zero deviations.
//   2. bn_stats_finalize: per feature, merges the partials in a fixed order
//      (deterministic results) in double, and writes the statistics, the
//      forward coefficients, saved and running statistics.
#include "gpu/bn_device_math.h"
#include "gpu/bn_dispatch.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/bn_nest_walk.h"
#include "gpu/bn_scratch.hpp"

#include <cmath>

namespace mbn {
namespace gpu {
namespace {

// Positions per Welford batch: independent loads in flight, 16 values at most.
template <int V>
__host__ __device__ constexpr int batch_positions() {
    return V >= 8 ? 2 : 4;
}

// VR elements per position of one feature, or one element of each of VF
// consecutive features (bn_layout.hpp); the access is V = VR * VF wide.
template <typename T, int Rank, int VR, int VF>
__global__ void __launch_bounds__(kBlockThreads)
    bn_stats_partial(const T* __restrict__ x, BnLayout layout, Scratch scratch) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    constexpr int kBatch = batch_positions<V>();
    __shared__ ShiftedMoments<A> shared[kBlockThreads];
    const std::int64_t features = layout.feature.size;
    const std::int64_t feature0 = (static_cast<std::int64_t>(blockIdx.x) * layout.tile_features + threadIdx.x) * VF;
    const std::int64_t begin = static_cast<std::int64_t>(blockIdx.y) * layout.chunk;
    const std::int64_t end = min64(layout.reduce.size, begin + layout.chunk);
    const std::int64_t rows = layout.rows;

    ShiftedMoments<A> moments[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) moments[j] = ShiftedMoments<A>{{A(0), A(0), A(0)}, 0.0};
    if (feature0 < features) {
        std::int64_t base[1];
        nest_offsets<1>(layout.feature, feature0, kSlotX, base);
        // Reduction index 0 is at each feature's base; feature j of the
        // thread sits j elements on.
        A shift[VF];
        double wide_shift[VF];
#pragma unroll
        for (int j = 0; j < VF; ++j) {
            shift[j] = static_cast<A>(widen(x[base[0] + j]));
            wide_shift[j] = static_cast<double>(shift[j]);
            if (blockIdx.y == 0 && threadIdx.y == 0) scratch.shift[feature0 + j] = wide_shift[j];
        }

        std::int64_t r = begin + threadIdx.y;
        NestCursor<Rank, 1> cursor;
        cursor.start(layout.reduce, r, rows, base);
        for (; r + (kBatch - 1) * rows < end; r += kBatch * rows) {
            A v[VF][kBatch * VR];
            double wide_sum[VF];
#pragma unroll
            for (int j = 0; j < VF; ++j) wide_sum[j] = 0.0;
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                A value[V];
                load_values<A, V>(x + cursor.offset[0], value);
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const int j = VF > 1 ? e : 0;
                    v[j][VF > 1 ? k : k * VR + e] = value[e] - shift[j];
                    wide_sum[j] += static_cast<double>(value[e]) - wide_shift[j];
                }
                cursor.advance(layout.reduce);
            }
#pragma unroll
            for (int j = 0; j < VF; ++j) add_batch(moments[j], v[j], wide_sum[j]);
        }
        for (; r < end; r += rows) {
            A value[V];
            load_values<A, V>(x + cursor.offset[0], value);
            A v[VF][VR];
            double wide_sum[VF];
#pragma unroll
            for (int j = 0; j < VF; ++j) wide_sum[j] = 0.0;
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                v[j][VF > 1 ? 0 : e] = value[e] - shift[j];
                wide_sum[j] += static_cast<double>(value[e]) - wide_shift[j];
            }
#pragma unroll
            for (int j = 0; j < VF; ++j) add_batch(moments[j], v[j], wide_sum[j]);
            cursor.advance(layout.reduce);
        }
    }
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const ShiftedMoments<A> total = reduce_over_rows(moments[j], shared);
        if (threadIdx.y == 0 && feature0 < features) {
            const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * features + feature0 + j;
            scratch.partial0[at] = static_cast<double>(total.welford.mean);
            scratch.partial1[at] = static_cast<double>(total.welford.m2);
            scratch.partial2[at] = total.sum;
        }
    }
}

// Pointers of the optional outputs, in parameter type P (nullptr: not written).
template <typename P>
struct StatsOutputs {
    const P* scale;
    const P* bias;
    P* running_mean;
    P* running_var;
    P* saved_mean;
    P* saved_inv_std;
    double epsilon;
    double exp_avg_factor;
};

// Launched with finalize_shape(): the block's rows ("lanes") share the
// splits of one feature, merged lane by lane and then over the lanes in a
// fixed tree, so results do not depend on timing.
template <typename P>
__global__ void __launch_bounds__(kBlockThreads)
    bn_stats_finalize(BnLayout layout, Scratch scratch, StatsOutputs<P> out) {
    __shared__ ShiftedMoments<double> shared[kBlockThreads];
    const std::int64_t features = layout.feature.size;
    const std::int64_t feature = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const std::int64_t m = layout.reduction_size();
    const std::int64_t positions = layout.reduce.size;

    ShiftedMoments<double> part{{0.0, 0.0, 0.0}, 0.0};
    if (feature < features) {
        for (int split = threadIdx.y; split < layout.splits; split += blockDim.y) {
            const std::int64_t at = static_cast<std::int64_t>(split) * features + feature;
            const double count =
                static_cast<double>(min64(layout.chunk, positions - split * layout.chunk) * layout.vector_width);
            part = merge(part, ShiftedMoments<double>{{count, scratch.partial0[at], scratch.partial1[at]},
                                                      scratch.partial2[at]});
        }
    }
    part = reduce_over_rows(part, shared);
    if (feature >= features || threadIdx.y != 0) return;
    const Moments<double>& total = part.welford;
    const double mean_offset = part.sum / static_cast<double>(m);
    const double var = total.m2 / static_cast<double>(m);  // biased: it normalizes
    const double inv_std = 1.0 / sqrt(var + out.epsilon);
    const double mean = scratch.shift[feature] + mean_offset;
    scratch.mean_offset[feature] = mean_offset;
    scratch.inv_std[feature] = inv_std;

    std::int64_t at[6];  // offsets in the forward parameter slots
    nest_offsets<6>(layout.feature, feature, kSlotParam0, at);
    if (out.scale != nullptr) {
        scratch.coef0[feature] = static_cast<double>(widen(out.scale[at[kFwdScale - kSlotParam0]])) * inv_std;
        scratch.coef1[feature] = static_cast<double>(widen(out.bias[at[kFwdBias - kSlotParam0]]));
    }
    if (out.running_mean != nullptr) {
        // Unbiased for the running estimate; a single value has no M - 1.
        const double unbiased = m > 1 ? var * static_cast<double>(m) / static_cast<double>(m - 1) : var;
        const double f = out.exp_avg_factor;
        P* rm = out.running_mean + at[kFwdMean - kSlotParam0];
        P* rv = out.running_var + at[kFwdVar - kSlotParam0];
        *rm = narrow<P>((1.0 - f) * static_cast<double>(widen(*rm)) + f * mean);
        *rv = narrow<P>((1.0 - f) * static_cast<double>(widen(*rv)) + f * unbiased);
    }
    if (out.saved_mean != nullptr) {
        out.saved_mean[at[kFwdSavedMean - kSlotParam0]] = narrow<P>(mean);
        out.saved_inv_std[at[kFwdSavedInvStd - kSlotParam0]] = narrow<P>(inv_std);
    }
}

template <typename P>
P* data_of(const TensorArg* t) {
    return t != nullptr && t->present() ? static_cast<P*>(t->data) : nullptr;
}

}  // namespace

void run_batch_statistics(const TensorArg& x, DType param_dtype, double epsilon, const StatsWrites& writes,
                          const BnLayout& layout, const LaunchTarget& target) {
    const Scratch scratch = carve_scratch(target.scratch, layout);
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        // Widths for x alone and for x with a float dy (backward's layout).
        using ReduceWidths = Widths<vector_width_of<T>(), vector_width_of<T, float>()>;
        using FeatureWidths = Widths<feature_width_of<T>(), feature_width_of<T, float>()>;
        with_walk_shape<ReduceWidths, FeatureWidths>(layout, [&](auto rank, auto vr, auto vf) {
            const dim3 grid(static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits));
            const dim3 block(static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows));
            bn_stats_partial<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value>
                <<<grid, block, 0, target.stream>>>(
                static_cast<const T*>(x.data), layout, scratch);
            check_launch("bn_stats_partial");
        });
        with_parameter_type<acc_t<T>>(param_dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            StatsOutputs<P> out;
            out.scale = data_of<P>(writes.scale);
            out.bias = data_of<P>(writes.bias);
            out.running_mean = data_of<P>(writes.running_mean);
            out.running_var = data_of<P>(writes.running_var);
            out.saved_mean = data_of<P>(writes.saved_mean);
            out.saved_inv_std = data_of<P>(writes.saved_inv_std);
            out.epsilon = epsilon;
            out.exp_avg_factor = writes.exp_avg_factor;
            const FinalizeShape shape = finalize_shape(layout);
            bn_stats_finalize<P><<<shape.grid, shape.block, 0, target.stream>>>(layout, scratch, out);
            check_launch("bn_stats_finalize");
        });
    });
}

}  // namespace gpu
}  // namespace mbn
