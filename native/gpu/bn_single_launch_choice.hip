// Whether a call takes the single-launch kernels (bn_fused.hpp).
#include "gpu/bn_fused.hpp"

#include "common/environment.hpp"

namespace mbn {
namespace gpu {
namespace {

bool single_launch_switched_on() {
    static const bool on = switch_from_environment("MIOPEN_BN_GPU_SINGLE_LAUNCH", true);
    return on;
}

}  // namespace

bool use_single_launch(const BnLayout& layout) {
    return layout.splits == 1 &&
           static_cast<std::int64_t>(layout.tile_features) * layout.features_per_thread <= kBlockThreads &&
           single_launch_switched_on();
}

}  // namespace gpu
}  // namespace mbn
