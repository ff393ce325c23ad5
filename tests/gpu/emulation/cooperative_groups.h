// Emulation stand-in for CUDA's <cooperative_groups.h>: the cluster calls
// of native/gpu/gn_cluster.h.
#pragma once

#include "emulator.hpp"

namespace cooperative_groups {

struct cluster_group {
    static void sync() {
        emu::cluster_arrive();
        emu::cluster_wait();
    }
    static void barrier_arrive() { emu::cluster_arrive(); }
    static void barrier_wait() { emu::cluster_wait(); }
    template <typename T>
    static T* map_shared_rank(T* address, int rank) {
        return static_cast<T*>(emu::peer_shared(address, rank));
    }
    static unsigned block_rank() { return emu::cluster_rank(); }
};

inline cluster_group this_cluster() { return cluster_group{}; }

}  // namespace cooperative_groups
