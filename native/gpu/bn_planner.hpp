// Builds the FeatureLayout (feature_layout.hpp) of a validated batch-norm
// problem: which logical dimensions form the feature and reduction nests, in
// what order, merged where every tensor allows, and the launch shape.
#pragma once

#include "common/problem.hpp"
#include "gpu/bn_layout.hpp"
#include "gpu/feature_plan.hpp"

namespace mbn {
namespace gpu {

// With `vectors` false every thread takes one element of one feature per
// step (vector_width = features_per_thread = 1): calls with a fused
// activation, whose kernels exist for that walk alone (type_dispatch.hpp,
// with_walk_shape_for).
FeatureLayout plan_layout(const BnGeometry& geom, const SlotTensors& tensors, const DeviceShape& device,
                          bool vectors = true);

}  // namespace gpu
}  // namespace mbn
