// Builds the BnLayout (bn_layout.hpp) of a validated problem: which logical
// dimensions form the feature and reduction nests, in what order, merged
// where every tensor allows, and the launch shape.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_layout.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

// The tensors of one call, by slot (Slot / ForwardParam / BackwardParam);
// nullptr or an absent TensorArg leaves a slot unused.
struct SlotTensors {
    const TensorArg* slot[kMaxSlots] = {};
};

// The device facts the launch shape depends on.
struct DeviceShape {
    int multiprocessors = 1;
    int wave_size = 32;
    int shared_bytes_per_block = 0;  // the most dynamic shared memory one block may use
    int cluster_blocks = 1;          // blocks one thread-block cluster may hold (1: no clusters)
};

// Whether a tensor's data may be moved as 16-byte vectors.
inline bool aligned16(const TensorArg& t) { return reinterpret_cast<std::uintptr_t>(t.data) % 16 == 0; }

// With `vectors` false every thread takes one element of one feature per
// step (vector_width = features_per_thread = 1): calls with a fused
// activation, whose kernels exist for that walk alone (bn_dispatch.hpp,
// with_walk_shape_for).
BnLayout plan_layout(const BnGeometry& geom, const SlotTensors& tensors, const DeviceShape& device,
                     bool vectors = true);

// The same walk over rows: one feature per (sample, channel) pair, reduced
// over its positions (group norm's per-row sums).
BnLayout plan_row_layout(const Lengths& len, const SlotTensors& tensors, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
