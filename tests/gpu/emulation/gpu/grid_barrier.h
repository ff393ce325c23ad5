// Emulation stand-in for native/gpu/grid_barrier.h (found first on the
// include path): the emulator runs one cluster at a time, so a check of a
// grid-barrier kernel launches its whole grid as one cluster, and the
// grid's barrier is the cluster's.  The counter is left untouched.
#pragma once

#include "gpu/gn_cluster.h"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

using BarrierCounter = unsigned long long;

template <typename V>
inline V load_after_barrier(const V* p) {
    return *p;
}

inline void grid_barrier(BarrierCounter*, unsigned) {
    __syncthreads();
    cluster_sync();
    __syncthreads();
}

inline void grid_barrier_exit(BarrierCounter*, unsigned) {}

}  // namespace gpu
}  // namespace mbn
