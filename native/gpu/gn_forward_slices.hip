// Forward group norm by slices (the algorithm gn_slices, gn_planner.hpp):
// for channels-innermost tensors whose groups hold few channels, where a
// group's elements are short runs a row apart.  Three launches over the
// slice layout, whose rows are whole runs of channels:
//   1. run_statistics_partials (feature_passes.hpp): the per (split,
//      feature) moments, the features being the slices (n, c), each shifted
//      by its first element;
//   2. gn_forward_slice_terms: one block per group merges its slices'
//      moments in a fixed order into the group's mean and rstd (written out),
//      and sets each slice's normalize factors in the scratch;
//   3. run_normalize: y = act(((x - shift) - mean_offset) * coef0 + coef1).
// x is read twice (3B moved, against 2B for the chunk walk's single read),
// but as whole lines.  Launches 1 and 3 take the linear walk on packed
// layouts (PackedWalk::linear, feature_passes.hpp): about 64 bytes of x
// loaded a thread before the math, as the backward's slices.
#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/feature_passes.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/feature_share.h"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_slices.h"
#include "gpu/gn_stat_io.h"
#include "gpu/nest_walk.h"
#include "gpu/norm_math.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

template <typename P>
struct GnSliceTermsArgs {
    GnSliceOrder order;
    const P* weight;  // nullptr: weight 1 and bias 0
    const P* bias;
    std::int64_t weight_stride;
    std::int64_t bias_stride;
    GnStatTensor mean;  // written when present
    GnStatTensor rstd;
    double epsilon;
};

// One partial of a group, split `split` of slice (n, c): its count, its
// mean (shift + the split's sum of shifted values / count) and its M2.
__device__ Moments<double> slice_partial(const FeatureLayout& layout, const FeatureArrays& scratch, std::int64_t slice,
                                      std::int64_t split) {
    const std::int64_t at = split * layout.feature.size + slice;
    const double count = share_count(layout, split);
    return Moments<double>{count, scratch.shift[slice] + scratch.partial2[at] / count, scratch.partial1[at]};
}

// One block (1-D) per group (n, g).  The group's mean is the count-weighted
// mean of its partials; its M2 their M2 plus their spread about that mean.
template <typename P>
__global__ void __launch_bounds__(kBlockThreads)
    gn_forward_slice_terms(FeatureLayout layout, FeatureArrays scratch, GnSliceTermsArgs<P> a) {
    __shared__ Total<double> wave_totals[kBlockThreads / MBN_WAVE_SIZE];
    const GnGroupShape& shape = a.order.shape;
    const int threads = static_cast<int>(blockDim.x);
    std::int64_t n, g;
    divide(static_cast<std::int64_t>(blockIdx.x), shape.groups, n, g);
    const std::int64_t first_channel = g * shape.channels;
    const int thread = static_cast<int>(threadIdx.x);
    auto partial = [&](std::int64_t k, std::int64_t split) {
        return slice_partial(layout, scratch, a.order.index(n, first_channel + k), split);
    };
    const double size = static_cast<double>(shape.size);
    double weighted = 0.0;
    for_group_partials(shape.channels, layout.splits, threads, thread, [&](std::int64_t k, std::int64_t split) {
        const Moments<double> q = partial(k, split);
        weighted += q.count * q.mean;
    });
    const double mean = reduce_team(Total<double>{weighted}, threads, wave_totals).value / size;
    double m2 = 0.0;
    for_group_partials(shape.channels, layout.splits, threads, thread, [&](std::int64_t k, std::int64_t split) {
        const Moments<double> q = partial(k, split);
        m2 += q.m2 + q.count * (q.mean - mean) * (q.mean - mean);
    });
    m2 = reduce_team(Total<double>{m2}, threads, wave_totals).value;
    const double rstd = inverse_std(biased_variance(m2, size), a.epsilon);
    if (threadIdx.x == 0) {
        write_stat(a.mean, n, g, mean);
        write_stat(a.rstd, n, g, rstd);
    }
    for (std::int64_t k = threadIdx.x; k < shape.channels; k += threads) {
        const std::int64_t c = first_channel + k;
        const std::int64_t slice = a.order.index(n, c);
        scratch.mean_offset[slice] = mean - scratch.shift[slice];
        const bool affine = a.weight != nullptr;
        scratch.coef0[slice] = affine ? rstd * static_cast<double>(widen(a.weight[c * a.weight_stride])) : rstd;
        scratch.coef1[slice] = affine ? static_cast<double>(widen(a.bias[c * a.bias_stride])) : 0.0;
    }
}

}  // namespace

void run_gn_forward_slices(const GnForward& p, const GnSlicePlan& plan, const LaunchTarget& target) {
    const FeatureLayout& layout = plan.layout;
    run_statistics_partials(p.x, layout, target, PackedWalk::linear);
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
        with_parameter_type<T>(param_dtype, [&](auto p_tag) {
            using P = typename decltype(p_tag)::type;
            GnSliceTermsArgs<P> a{};
            a.order = plan.order;
            if (p.affine) {
                a.weight = static_cast<const P*>(p.weight.data);
                a.bias = static_cast<const P*>(p.bias.data);
                a.weight_stride = p.weight.stride[kC];
                a.bias_stride = p.bias.stride[kC];
            }
            a.mean = stat_tensor(p.mean);
            a.rstd = stat_tensor(p.rstd);
            a.epsilon = p.epsilon;
            const std::int64_t groups = plan.order.shape.group_count();
            gn_forward_slice_terms<P><<<dim3(static_cast<unsigned>(groups)), dim3(kBlockThreads), 0, target.stream>>>(
                layout, carve_scratch(target.scratch, layout), a);
            check_launch("gn_forward_slice_terms");
        });
    });
    run_normalize(p.x, p.y, layout, Blend{}, p.activation, p.swish_beta, target, PackedWalk::linear);
}

}  // namespace gpu
}  // namespace mbn
