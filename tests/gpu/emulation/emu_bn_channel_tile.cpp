// native/gpu/bn_channel_tile.hip built for the emulator (emulator.hpp).  Its
// kernel declares its shared memory statically (`__shared__ TileShared sh;`),
// which a host compiler would make one object per fiber (__shared__ as
// nothing) or per template instance (`static`).  Here __shared__ reads
// `extern`: every instance's `sh` is the one object defined below, in the
// kernel's namespace, which the launch stand-in (gpu/cluster_launch.h) hands
// the emulator; the emulator gives each block of a cluster its own copy (one
// kernel runs at a time).  A kernel that renamed it, or added another
// __shared__ variable, fails to link here.
#include "gpu/hip_compat.h"

#undef __shared__
#define __shared__ extern

#include "gpu/bn_channel_tile.hip"

namespace mbn {
namespace gpu {
namespace {
TileShared sh;
}  // namespace
}  // namespace gpu
}  // namespace mbn

static void* emu_static_shared(std::size_t& bytes) {
    bytes = sizeof(mbn::gpu::sh);
    return &mbn::gpu::sh;
}
