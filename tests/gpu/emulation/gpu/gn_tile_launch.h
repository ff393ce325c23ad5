// Emulation stand-in for native/gpu/gn_tile_launch.h: runs the kernel on
// the fiber emulator, clusters as the walk says.  The including file names
// the kernels' extern shared array in EMU_SHARED_ARRAY (defined by it).
#pragma once

#include "emulator.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/gn_tile.hpp"

#include <cstdlib>
#include <cstdio>

namespace mbn {
namespace gpu {

// The emulator runs clusters of any size the planner asks for.
template <typename... Params>
int resident_clusters(void (*)(Params...), int, int) {
    return 1;
}

template <typename... Params, typename... Args>
void launch_tile_kernel(void (*kernel)(Params...), const GnTileWalk& w, hipStream_t, const char* name,
                        Args... args) {
    if (w.shared_bytes > kGnTileMaxSharedBytes || w.threads % EMU_WAVE_SIZE != 0 || w.cluster < 1 ||
        w.cluster > kGnTileMaxCluster || w.launch_cluster() > kGnTileMaxCluster ||
        (w.sample_cluster > 1 && (w.cluster != 1 || w.sample_cluster != w.samples))) {
        std::fprintf(stderr, "%s: bad launch (threads %d, cluster %d, sample cluster %d, shared %d)\n", name,
                     w.threads, w.cluster, w.sample_cluster, w.shared_bytes);
        std::abort();
    }
    emu::register_shared(EMU_SHARED_ARRAY, sizeof(EMU_SHARED_ARRAY));
    emu::run_grid(static_cast<unsigned>(w.tiles() * w.cluster), static_cast<unsigned>(w.threads),
                  static_cast<unsigned>(w.launch_cluster()), static_cast<std::size_t>(w.shared_bytes),
                  [&] { kernel(args...); });
}

}  // namespace gpu
}  // namespace mbn
