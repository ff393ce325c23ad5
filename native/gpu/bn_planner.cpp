#include "gpu/bn_planner.hpp"

#include <iterator>

namespace mbn {
namespace gpu {
namespace {

// Logical dimensions of each nest.
constexpr int kSpatialFeatureDims[] = {kC};
constexpr int kSpatialReduceDims[] = {kN, kD, kH, kW};
constexpr int kActivationFeatureDims[] = {kC, kD, kH, kW};
constexpr int kActivationReduceDims[] = {kN};

}  // namespace

FeatureLayout plan_layout(const BnGeometry& geom, const SlotTensors& tensors, const DeviceShape& device, bool vectors) {
    if (geom.mode == BnMode::spatial)
        return plan_feature_layout(kSpatialFeatureDims, static_cast<int>(std::size(kSpatialFeatureDims)),
                                   kSpatialReduceDims, static_cast<int>(std::size(kSpatialReduceDims)), geom.len,
                                   tensors, device, vectors);
    return plan_feature_layout(kActivationFeatureDims, static_cast<int>(std::size(kActivationFeatureDims)),
                               kActivationReduceDims, static_cast<int>(std::size(kActivationReduceDims)), geom.len,
                               tensors, device, vectors);
}

}  // namespace gpu
}  // namespace mbn
