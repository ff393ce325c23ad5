// native/gpu/bn_wave_tile_nhwc.hip built for the emulator (emulator.hpp).
// Its kernel's static shared memory is one object (`__shared__ NhwcShared
// sh;`), defined below as emu_bn_channel_tile.cpp defines the channel
// tiles' and handed to the launch stand-in (gpu/cluster_launch.h).
#include "gpu/hip_compat.h"

#undef __shared__
#define __shared__ extern

#include "gpu/bn_wave_tile_nhwc.hip"

namespace mbn {
namespace gpu {
namespace {
NhwcShared sh;
}  // namespace
}  // namespace gpu
}  // namespace mbn

static void* emu_static_shared(std::size_t& bytes) {
    bytes = sizeof(mbn::gpu::sh);
    return &mbn::gpu::sh;
}
