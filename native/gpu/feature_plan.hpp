// Planning a feature layout (feature_layout.hpp): what it is planned from
// (the tensors of a call by slot and the device's facts), the planner itself
// (feature_plan.cpp) and the layout of per-row sums.
#pragma once

#include "common/problem.hpp"
#include "gpu/feature_layout.hpp"

#include <cstdint>
#include <initializer_list>

namespace mbn {
namespace gpu {

// The tensors of one call, by slot (Slot / ForwardParam / BackwardParam);
// nullptr or an absent TensorArg leaves a slot unused.
struct SlotTensors {
    const TensorArg* slot[kMaxSlots] = {};
};

// Blocks a thread-block cluster may hold on every device that has them.
constexpr int kPortableClusterBlocks = 8;

// The device facts the launch shape depends on.
struct DeviceShape {
    int multiprocessors = 1;
    int wave_size = 32;
    int shared_bytes_per_block = 0;  // the most dynamic shared memory one block may use
    int l2_bytes = 0;                // the L2 cache (0: unknown)
    int cluster_blocks = 1;          // blocks (a power of two) one thread-block cluster may hold (1: no clusters)
    bool dependent_launches = false; // programmatic dependent launches (NVIDIA, compute capability 9.0 and later)
    // Clusters of k blocks (k = 2 .. kPortableClusterBlocks) of the
    // group-norm forward tiles that run at once, each block a whole
    // multiprocessor: fewer than the multiprocessors / k, since a cluster
    // must fit one GPC (the H100: 66 of 2, 30 of 4, 15 of 8).  A grid of
    // more runs in rounds.  0: clusters of k do not launch.
    int cluster_slots[kPortableClusterBlocks + 1] = {};
    // The same for the group-norm backward tiles in each of their forms,
    // [b - 1] the form of b blocks a multiprocessor (gn_tile.hpp).
    int backward_cluster_slots[2][kPortableClusterBlocks + 1] = {};

    // The L2 a planner counts on: the device's, or where it does not say, a
    // size smaller than the data-centre parts' (40-50 MB), so that what a
    // plan reads again from L2 (streamed tiles, the persistent forward) is
    // likely still there.
    std::int64_t l2_or_assumed() const { return l2_bytes > 0 ? l2_bytes : std::int64_t(24) << 20; }

    // The same for any k, 1 included (a single block: at least one a
    // multiprocessor, b of the backward form of b): the forward's
    // (backward_blocks 0) or the backward form's of backward_blocks.
    int resident_clusters(int k, int backward_blocks = 0) const {
        if (k == 1) return multiprocessors * (backward_blocks > 1 ? backward_blocks : 1);
        const int* slots = backward_blocks > 0 ? backward_cluster_slots[backward_blocks - 1] : cluster_slots;
        return k > 1 && k <= kPortableClusterBlocks ? slots[k] : 0;
    }
};

// How a kernel path's plan decides (bn_algorithm.hip): by its own size rule
// (the default choice), or wherever it can serve the call (an algorithm
// forced by MIOPEN_BN_GPU_ALGORITHM).
enum class PlanRule { size_rule, wherever_it_fits };

// Whether a tensor's data may be moved as 16-byte vectors.
inline bool aligned16(const TensorArg& t) { return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0; }

// Whether the data tensors (x first) are packed alike: x NCHW-like or
// NHWC-like without gaps, each tensor of x's type and memory order and
// 16-byte aligned (the flat walks over 16-byte vectors need all three).
inline bool packed_alike(std::initializer_list<const TensorArg*> data) {
    const TensorArg& x = **data.begin();
    if (x.order != MemoryOrder::packed_nchw && x.order != MemoryOrder::packed_nhwc) return false;
    for (const TensorArg* t : data)
        if (t->dtype != x.dtype || t->order != x.order || !aligned16(*t)) return false;
    return true;
}

// The layout whose features are the logical dimensions feature_dims[0 ..
// feature_count) and whose reduction runs over reduce_dims[0 ..
// reduce_count) (indices into `len`): the nests, ordered by x's strides and
// merged where every tensor allows, and the launch shape.  With `vectors`
// false every thread takes one element of one feature per step.  Batch
// norm's plan_layout (bn_planner.hpp) is this over its channels.
FeatureLayout plan_feature_layout(const int* feature_dims, int feature_count, const int* reduce_dims,
                                  int reduce_count, const Lengths& len, const SlotTensors& tensors,
                                  const DeviceShape& device, bool vectors = true);

// plan_feature_layout over rows: one feature per (sample, channel) pair,
// reduced over its positions (group norm's per-row sums).
FeatureLayout plan_row_layout(const Lengths& len, const SlotTensors& tensors, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
