// native/gpu/bn_wave_tile.hip built for the emulator (emulator.hpp).  Its
// kernel has no shared memory: the launch stand-in (gpu/cluster_launch.h)
// is told so.
#include "gpu/hip_compat.h"

#include "gpu/bn_wave_tile.hip"

static void* emu_static_shared(std::size_t& bytes) {
    bytes = 0;
    return nullptr;
}
