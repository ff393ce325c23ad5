// The middle launch of the forward slices (gn_forward_slices.hip): from the
// per (split, slice) moments of the statistics pass, each group's mean and
// rstd (written out when wanted) and its slices' normalize factors in the
// scratch (mean_offset, coef0, coef1).
//
// One block a group (n, g), of the threads the planner gives it
// (slice_terms_threads, gn_planner.hpp): at most kSliceTermsBatch of the
// group's channels x splits partials a thread, so that a thread's loads are
// all in flight together.  256 threads walking thousands of partials twice,
// a division each, made the launch one long chain of dependent loads
// (1x1280x64x64 fp32 NHWC on the H200: 32 blocks, 22.7 us beside the two
// streaming passes' 34 us).
//
// The values are taken about a center, the shift of the group's first slice
// (one of the group's elements): a partial's sum of x - center is
// count * (shift - center) + its sum of x - shift, so a group of mean 1e4
// and spread 1e-2 keeps its digits.  Each thread walks its partials once,
// a batch's loads in flight together, into sums about a reference of its
// own (SliceTermsShare); the block then sums in a fixed order (reduce_team:
// the same bits on every run) the threads' sums of x - center, which give
// the group's mean, then their M2s about that mean.  The kernel divides
// nowhere: the host gives the reciprocals.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/feature_layout.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/gn_planner.hpp"
#include "gpu/gn_stat_io.h"
#include "gpu/nest_walk.h"
#include "gpu/norm_math.h"

#include <algorithm>
#include <cstdint>

namespace mbn {
namespace gpu {

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
    // The host's divisions (set_slice_terms_counts): the values of a
    // partial of any split but the last and of the last, their
    // reciprocals, and 1 / M.  No division then waits on a load.
    double count;
    double last_count;
    double inv_count;
    double inv_last_count;
    double inv_size;
};

// The counts of a layout's partials (all splits but the last cover `chunk`
// positions) and the reciprocals the kernel multiplies by.
template <typename P>
void set_slice_terms_counts(GnSliceTermsArgs<P>& a, const FeatureLayout& layout) {
    const std::int64_t last_positions = layout.reduce.size - (layout.splits - 1) * layout.chunk;
    a.count = static_cast<double>(std::min(layout.chunk, layout.reduce.size) * layout.vector_width);
    a.last_count = static_cast<double>(last_positions * layout.vector_width);
    a.inv_count = 1.0 / a.count;
    a.inv_last_count = 1.0 / a.last_count;
    a.inv_size = 1.0 / static_cast<double>(a.order.shape.size);
}

// Where a group's slices sit: channel k of the group at first + k * step.
struct GroupSlices {
    std::int64_t first;
    std::int64_t step;
};

__device__ __forceinline__ GroupSlices group_slices(const GnSliceOrder& order, std::int64_t n,
                                                    std::int64_t first_channel) {
    return GroupSlices{order.index(n, first_channel), order.channel_major ? order.shape.samples : 1};
}

// A thread's share of a group, about its reference r (the mean of its
// first partial, as an offset from the center): its values' count; the sum
// over its partials of d = count * (mean - center - r), of d^2 / count and
// of their M2s.  Its values' sum of x - center (for the group's mean) is
// deviation + count r; with the group's mean at offset o from the center,
// their M2 about it is m2 + spread + (r - o) (2 deviation + count (r - o)):
// no division.  r lies among the thread's partial means, so no term much
// exceeds the result (a reference outside them, the center, would lose
// digits there).
struct SliceTermsShare {
    double reference;
    double count;
    double deviation;
    double spread;
    double m2;
};

// The thread's partials: q = thread, thread + threads, ... below channels x
// splits, numbered q = split * channels + k (channel k of the group), so
// that neighbouring threads load neighbouring scratch entries where samples
// are outermost.  kSliceTermsBatch at a time, the batch's loads issued
// before any use.  k and split are counted in 32 bits (a group's channels
// and the splits are far below 2^31): 64-bit counters spilled at 64
// registers a thread.
template <typename P>
__device__ __forceinline__ SliceTermsShare slice_terms_share(const FeatureLayout& layout, const FeatureArrays& scratch,
                                                             const GnSliceTermsArgs<P>& a,
                                                             const GroupSlices& slices, double center) {
    constexpr int B = kSliceTermsBatch;
    const int channels = static_cast<int>(a.order.shape.channels);
    const int splits = layout.splits;
    const std::int64_t features = layout.feature.size;
    const int threads = static_cast<int>(blockDim.x);
    // (split, k) of the thread's next partial, and the step to the one after.
    int split = static_cast<int>(threadIdx.x) / channels;
    int k = static_cast<int>(threadIdx.x) - split * channels;
    const int step_split = threads / channels;
    const int step_k = threads - step_split * channels;
    SliceTermsShare share{0.0, 0.0, 0.0, 0.0, 0.0};
    for (bool first = true; split < splits; first = false) {
        double shift[B], sum[B], m2[B];
        bool present[B], last[B];
#pragma unroll
        for (int i = 0; i < B; ++i) {
            present[i] = split < splits;
            last[i] = split == splits - 1;
            shift[i] = center;  // a partial past the end: count 0, sum 0, M2 0
            sum[i] = 0.0;
            m2[i] = 0.0;
            if (present[i]) {
                const std::int64_t slice = slices.first + k * slices.step;
                const std::int64_t at = split * features + slice;
                shift[i] = scratch.shift[slice];
                sum[i] = scratch.partial2[at];
                m2[i] = scratch.partial1[at];
            }
            k += step_k;
            split += step_split;
            if (k >= channels) {
                k -= channels;
                ++split;
            }
        }
        if (first) share.reference = (shift[0] - center) + sum[0] * (last[0] ? a.inv_last_count : a.inv_count);
#pragma unroll
        for (int i = 0; i < B; ++i) {
            const double count = present[i] ? (last[i] ? a.last_count : a.count) : 0.0;
            const double centered = count * (shift[i] - center) + sum[i];
            const double deviation = centered - count * share.reference;
            share.count += count;
            share.deviation += deviation;
            share.spread += deviation * deviation * (last[i] ? a.inv_last_count : a.inv_count);
            share.m2 += m2[i];
        }
    }
    return share;
}

// A slice's inputs to its factors: channel k of the group.
struct SliceFactorInputs {
    std::int64_t slice;
    double shift;
    double weight;  // 1 and 0 without affine parameters
    double bias;
};

template <typename P>
__device__ __forceinline__ SliceFactorInputs slice_factor_inputs(const FeatureArrays& scratch,
                                                                 const GnSliceTermsArgs<P>& a,
                                                                 const GroupSlices& slices,
                                                                 std::int64_t first_channel, std::int64_t k) {
    SliceFactorInputs s{slices.first + k * slices.step, 0.0, 1.0, 0.0};
    s.shift = scratch.shift[s.slice];
    if (a.weight != nullptr) {
        const std::int64_t c = first_channel + k;
        s.weight = static_cast<double>(widen(a.weight[c * a.weight_stride]));
        s.bias = static_cast<double>(widen(a.bias[c * a.bias_stride]));
    }
    return s;
}

// y = ((x - shift) - mean_offset) * coef0 + coef1, with `offset` the
// group's mean about the center.
__device__ __forceinline__ void write_slice_factors(const FeatureArrays& scratch, const SliceFactorInputs& s,
                                                   double center, double offset, double rstd) {
    scratch.mean_offset[s.slice] = (center - s.shift) + offset;
    scratch.coef0[s.slice] = rstd * s.weight;
    scratch.coef1[s.slice] = s.bias;
}

// One block (1-D, a whole number of waves up to kSliceTermsMaxThreads) per
// group (n, g).  `wave_totals`: shared memory for a Total<double> a wave.
// Every thread takes part in the block sums (their barriers).
template <typename P>
__device__ void slice_terms_block(const FeatureLayout& layout, const FeatureArrays& scratch,
                                  const GnSliceTermsArgs<P>& a, Total<double>* wave_totals) {
    const GnGroupShape& shape = a.order.shape;
    const int threads = static_cast<int>(blockDim.x);
    const int thread = static_cast<int>(threadIdx.x);
    std::int64_t n, g;
    divide(static_cast<std::int64_t>(blockIdx.x), shape.groups, n, g);
    const std::int64_t first_channel = g * shape.channels;
    const GroupSlices slices = group_slices(a.order, n, first_channel);
    const double center = scratch.shift[slices.first];
    const SliceTermsShare share = slice_terms_share(layout, scratch, a, slices, center);
    // The first slice this thread writes: loaded while the block sums.
    SliceFactorInputs first{};
    if (thread < shape.channels) first = slice_factor_inputs(scratch, a, slices, first_channel, thread);

    const double centered = share.deviation + share.count * share.reference;
    const double offset = reduce_team(Total<double>{centered}, threads, wave_totals).value * a.inv_size;
    const double shift = share.reference - offset;
    const double own_m2 = share.m2 + share.spread + shift * (2.0 * share.deviation + share.count * shift);
    const double m2 = reduce_team(Total<double>{own_m2}, threads, wave_totals).value;
    // The host's 1 / M and an rsqrt (within an ulp of 1 / sqrt): a double
    // division and square root are calls that every thread would wait on.
    const double rstd = rsqrt(m2 * a.inv_size + a.epsilon);
    if (thread == 0) {
        write_stat(a.mean, n, g, center + offset);
        write_stat(a.rstd, n, g, rstd);
    }
    if (thread >= shape.channels) return;
    write_slice_factors(scratch, first, center, offset, rstd);
    for (std::int64_t k = thread + threads; k < shape.channels; k += threads)
        write_slice_factors(scratch, slice_factor_inputs(scratch, a, slices, first_channel, k), center, offset, rstd);
}

}  // namespace gpu
}  // namespace mbn
