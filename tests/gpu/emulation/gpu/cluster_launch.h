// Emulation stand-in for native/gpu/cluster_launch.h: runs the kernel on the
// fiber emulator (emulator.hpp), `cluster` consecutive blocks a cluster.
// The kernels of the including translation unit keep their shared memory
// in static __shared__ variables, which that unit makes one object and
// names to the launch in emu_static_shared (emu_bn_channel_tile.cpp): every
// block gets its own copy of it.
#pragma once

#include "emulator.hpp"
#include "gpu/hip_compat.h"
#include "gpu/launch.hpp"

#include <cstddef>
#include <cstdio>
#include <cstdlib>

// The translation unit's static shared memory: its address and size.
static void* emu_static_shared(std::size_t& bytes);

namespace mbn {
namespace gpu {

template <typename... Params, typename... Args>
void launch_clustered(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, int cluster,
                      hipStream_t, const char* name, Args... args) {
    if (shared != 0 || grid.y != 1 || grid.z != 1 || block.y != 1 || block.z != 1 || grid.x == 0 ||
        block.x == 0 || block.x > 1024 || block.x % EMU_WAVE_SIZE != 0 || cluster < 1 || cluster > 8 ||
        grid.x % static_cast<unsigned>(cluster) != 0) {
        std::fprintf(stderr, "%s: bad launch (grid %u x %u x %u, block %u x %u x %u, cluster %d, shared %zu)\n", name,
                     grid.x, grid.y, grid.z, block.x, block.y, block.z, cluster, shared);
        std::abort();
    }
    std::size_t bytes = 0;
    void* memory = emu_static_shared(bytes);
    emu::register_static_shared(memory, bytes);
    emu::run_grid(grid.x, block.x, static_cast<unsigned>(cluster), bytes, [&] { kernel(args...); });
}

}  // namespace gpu
}  // namespace mbn
