// Synchronization between the blocks of one launch, through counters in the
// backend's zero-initialized counter buffer (LaunchTarget::counters).
//
// grid_barrier: every block of the launch waits until all have arrived.
// Only valid when every block of the grid is resident at once: the engine
// sizes such grids from the occupancy the runtime reports for the kernel
// (engine_plan.cpp), never larger.  A normal launch, not a cooperative one,
// so that the call stays capturable in a graph on either vendor.
#pragma once

#include "gpu/hip_compat.h"

#include <cstdint>

namespace mbn {
namespace gpu {

using ArrivalCounter = unsigned long long;

// Reads that must see other blocks' stores of this launch: past the
// non-coherent L1 (and after a fence that orders them behind the arrival).
template <typename V>
__device__ __forceinline__ V load_coherent(const V* p) {
    return *static_cast<const volatile V*>(p);
}

// The same for data other blocks stored before a grid barrier: on NVIDIA a
// plain load that bypasses L1 (so the loads of a loop can be in flight
// together, which volatile ones cannot); elsewhere the volatile load.
template <typename V>
__device__ __forceinline__ V load_after_barrier(const V* p) {
#if MBN_GPU_CUDA
    return __ldcg(p);
#else
    return load_coherent(p);
#endif
}

// Eases the polling of a waiting thread (plain spinning before sm_70).
__device__ __forceinline__ void pause_briefly() {
#if MBN_GPU_CUDA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(32);
#endif
#else
    __builtin_amdgcn_s_sleep(1);
#endif
}

// The two counters a grid barrier uses: arrivals (back at zero whenever no
// barrier is in progress, so kernels leave it as they found it) and the
// generation, which only ever grows.
struct GridBarrier {
    ArrivalCounter* arrivals;
    ArrivalCounter* generation;
};
constexpr int kGridBarrierCounters = 2;

// Every thread of every block calls it; returns once all gridDim blocks
// have called it, with their earlier global stores visible to this block's
// coherent loads.
__device__ __forceinline__ void grid_barrier(const GridBarrier& barrier) {
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
        const ArrivalCounter blocks = static_cast<ArrivalCounter>(gridDim.x) * gridDim.y * gridDim.z;
        // Read before arriving: the last arrival bumps it only after all
        // arrived, so this block cannot miss the bump.
        const ArrivalCounter seen = load_coherent(barrier.generation);
        __threadfence();  // this block's stores before its arrival
        if (atomicAdd(barrier.arrivals, 1ull) + 1 == blocks) {
            atomicExch(barrier.arrivals, 0ull);
            __threadfence();
            atomicAdd(barrier.generation, 1ull);
        } else {
            while (load_coherent(barrier.generation) == seen) pause_briefly();
        }
        __threadfence();  // the others' stores before this block's reads
    }
    __syncthreads();
}

}  // namespace gpu
}  // namespace mbn
