// Emulation stand-in for native/gpu/grid_barrier.h (found first on the
// include path): the emulator runs one cluster at a time, so a check of a
// grid-barrier kernel launches its whole grid as one cluster, and the
// grid's barrier is the cluster's (the counter left untouched).  The
// hand-overs count on their counters as the real ones do: one thread runs
// at a time, so an atomic is a plain addition, and a waiting thread spins
// on the emulator.  Include after any header that renames blockIdx.
#pragma once

#include "emulator.hpp"
#include "gpu/gn_cluster.h"
#include "gpu/hip_compat.h"

#include <map>
#include <utility>

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

// Each block's answer from its last arrive_last, for its other threads.
inline bool& last_arrival_of_this_block() {
    static std::map<std::pair<unsigned, unsigned>, bool> answers;
    return answers[{static_cast<unsigned>(blockIdx.x), static_cast<unsigned>(blockIdx.y)}];
}

inline bool arrive_last(BarrierCounter* counter, BarrierCounter target) {
    __syncthreads();
    if (threadIdx.x == 0) last_arrival_of_this_block() = ++*counter == target;
    __syncthreads();
    return last_arrival_of_this_block();
}

inline void release(BarrierCounter* counter) {
    __syncthreads();
    if (threadIdx.x == 0) ++*counter;
}

inline void wait_for(BarrierCounter* counter, BarrierCounter target) {
    if (threadIdx.x == 0)
        while (*counter < target) emu::spin();
    __syncthreads();
}

inline void leave(BarrierCounter* counter, BarrierCounter final_count) {
    if (threadIdx.x == 0 && ++*counter == final_count) *counter = 0;
}

}  // namespace gpu
}  // namespace mbn
