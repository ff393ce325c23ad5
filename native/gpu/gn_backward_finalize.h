// The middle step of the slices backward (gn_backward.hip): from the per
// (split, slice) sums of g and g * xhat, each group's means of w g and of
// w g xhat and each channel's dbias and dweight.
//
// Each item's partials -- a group's channels x splits, a channel's samples
// x splits -- are merged by a team of `lanes` consecutive threads
// (reduce_team): one thread where an item has a partial or two, part of a
// wave or a whole wave for tens, several waves of one block only for
// hundreds (few tiles and many splits); many teams share a block.  A block
// per item, reducing through shared memory, spent the kernel on barriers
// and shuffles around a handful of loads (1x1280x64x64 on the H200: 1312
// blocks, 7.6 us, DRAM idle).  The sums stay double, in a fixed order.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/gn_scratch.hpp"
#include "gpu/gn_slices.h"
#include "gpu/norm_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// The weight and the parameter gradients, as the slices backward's three
// kernels read them (gn_backward.hip's arguments hold the same).
template <typename P>
struct GnParamGradients {
    const P* weight;  // nullptr: w = 1, and no dweight / dbias
    std::int64_t weight_stride;
    P* dweight;  // with dbias: nullptr when not wanted
    P* dbias;
    std::int64_t dweight_stride;
    std::int64_t dbias_stride;
};

template <typename P>
struct GnFinalizeArgs {
    GnSliceOrder order;   // with the group shape
    std::int64_t slices;  // the partials of one split
    int splits;
    GnParamGradients<P> params;
    GnBackwardScratch scratch;
    int group_lanes;  // a team's threads, a power of two up to a block
    int channel_lanes;
    unsigned group_blocks;  // the blocks of groups, then those of channels
    unsigned blocks;
};

// Lanes for `partials` values: the fewest (a power of two) that leave at
// most two loads a lane -- a chain of loads is the kernel's latency -- up
// to a block.
inline int finalize_lanes(std::int64_t partials) {
    int lanes = 1;
    while (lanes < kBlockThreads && 2 * lanes < partials) lanes *= 2;
    return lanes;
}

// The teams and the grid (1-D blocks of kBlockThreads threads).
template <typename P>
void plan_finalize(GnFinalizeArgs<P>& f) {
    const GnGroupShape& shape = f.order.shape;
    f.group_lanes = finalize_lanes(shape.channels * f.splits);
    f.channel_lanes = finalize_lanes(shape.samples * f.splits);
    const auto blocks_for = [](std::int64_t items, int lanes) {
        const std::int64_t per_block = kBlockThreads / lanes;
        return static_cast<unsigned>((items + per_block - 1) / per_block);
    };
    f.group_blocks = blocks_for(shape.group_count(), f.group_lanes);
    const bool channels = f.params.dweight != nullptr;
    f.blocks = f.group_blocks + (channels ? blocks_for(shape.groups * shape.channels, f.channel_lanes) : 0u);
}

// A member's share of the sums of w g and w g xhat over group `group`
// (n * G + g): its channels and splits, in the fixed order of
// for_group_partials.
template <typename P>
__device__ Sums2<double> group_part(const GnFinalizeArgs<P>& f, std::int64_t group, int lanes, int member) {
    std::int64_t n, g;
    divide(group, f.order.shape.groups, n, g);
    Sums2<double> part{0.0, 0.0};
    for_group_partials(f.order.shape.channels, f.splits, lanes, member, [&](std::int64_t k, std::int64_t split) {
        const std::int64_t c = g * f.order.shape.channels + k;
        const double w =
            f.params.weight != nullptr ? static_cast<double>(widen(f.params.weight[c * f.params.weight_stride])) : 1.0;
        const std::int64_t at = split * f.slices + f.order.index(n, c);
        part.a += w * f.scratch.sum_g[at];
        part.b += w * f.scratch.sum_g_xhat[at];
    });
    return part;
}

// A member's share of dbias[c] and dweight[c]: the split sums of every
// sample's slice (the samples take the place of a group's channels).
template <typename P>
__device__ Sums2<double> channel_part(const GnFinalizeArgs<P>& f, std::int64_t c, int lanes, int member) {
    Sums2<double> part{0.0, 0.0};
    for_group_partials(f.order.shape.samples, f.splits, lanes, member, [&](std::int64_t n, std::int64_t split) {
        const std::int64_t at = split * f.slices + f.order.index(n, c);
        part.a += f.scratch.sum_g[at];
        part.b += f.scratch.sum_g_xhat[at];
    });
    return part;
}

// One block of the finalize: blocks of groups' teams, then (when dweight is
// wanted) those of channels' teams.  Every thread takes part in reduce_team
// (its barriers when a team spans waves), those past the last item with
// zeros.  `wave_totals`: shared memory for a Sums2<double> a wave.
template <typename P>
__device__ void finalize_block(const GnFinalizeArgs<P>& f, Sums2<double>* wave_totals) {
    const bool groups = blockIdx.x < f.group_blocks;
    const int lanes = groups ? f.group_lanes : f.channel_lanes;
    const std::int64_t block = groups ? blockIdx.x : blockIdx.x - f.group_blocks;
    const int flat = flat_thread_index();
    const std::int64_t item = block * (kBlockThreads / lanes) + flat / lanes;
    const int member = flat & (lanes - 1);  // not %: that kept the quotient on the stack (sm_90)
    const GnGroupShape& shape = f.order.shape;
    const std::int64_t items = groups ? shape.group_count() : shape.groups * shape.channels;
    Sums2<double> part{0.0, 0.0};
    if (item < items) part = groups ? group_part(f, item, lanes, member) : channel_part(f, item, lanes, member);
    const Sums2<double> total = reduce_team(part, lanes, wave_totals);
    if (member != 0 || item >= items) return;
    if (groups) {
        double* terms = f.scratch.group_terms + item * kGnGroupTerms;
        const double m = static_cast<double>(shape.size);
        terms[0] = total.a / m;
        terms[1] = total.b / m;
    } else {
        f.params.dbias[item * f.params.dbias_stride] = narrow<P>(total.a);
        f.params.dweight[item * f.params.dweight_stride] = narrow<P>(total.b);
    }
}

}  // namespace gpu
}  // namespace mbn
