// A barrier across all blocks of one launch, through one counter of the
// backend's zero-initialized counter buffer (LaunchTarget::counters).
//
// Only valid when every block of the grid is resident at once: callers size
// such grids from the occupancy the runtime reports, never larger.  It is a
// normal launch, not a cooperative one, so the call stays capturable in a
// graph on either vendor.
//
// The counter only grows during a launch: barrier k (1, 2, ...) waits until
// it reaches k * blocks.  Each block adds one more on its way out, and the
// last one out puts the counter back at zero, so the next launch (or graph
// replay) finds it as this one did.
#pragma once

#include "gpu/gn_cluster.h"
#include "gpu/hip_compat.h"

namespace mbn {
namespace gpu {

using BarrierCounter = unsigned long long;

__device__ __forceinline__ BarrierCounter load_counter(const BarrierCounter* p) {
    return *static_cast<const volatile BarrierCounter*>(p);
}

// Eases the polling of a waiting thread.
__device__ __forceinline__ void pause_briefly() {
#if MBN_GPU_CUDA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(20);
#endif
#else
    __builtin_amdgcn_s_sleep(1);
#endif
}

// Data other blocks stored before a barrier: read past the non-coherent L1.
template <typename V>
__device__ __forceinline__ V load_after_barrier(const V* p) {
#if MBN_GPU_CUDA
    return __ldcg(p);
#else
    return *static_cast<const volatile V*>(p);
#endif
}

// Every thread of every block calls it with the same `number` (1 for the
// first barrier of the launch, 2 for the second, ...).  Returns once every
// block has arrived, with their earlier global stores visible to this
// block's load_after_barrier reads.
__device__ __forceinline__ void grid_barrier(BarrierCounter* counter, unsigned number) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const BarrierCounter blocks = gridDim.x;
        __threadfence();  // this block's stores before its arrival
        atomicAdd(counter, 1ull);
        while (load_counter(counter) < number * blocks) pause_briefly();
        __threadfence();  // the others' stores before this block's reads
    }
    __syncthreads();
}

// The block's way out after `barriers` barriers: the last block resets the
// counter.  No thread of the block may touch the counter afterwards.
__device__ __forceinline__ void grid_barrier_exit(BarrierCounter* counter, unsigned barriers) {
    if (threadIdx.x == 0) {
        const BarrierCounter blocks = gridDim.x;
        if (atomicAdd(counter, 1ull) + 1 == (barriers + 1) * blocks) atomicExch(counter, 0ull);
    }
}

// Hand-overs: blocks that need the same totals store their partial
// results and arrive at a shared counter; the block whose arrival brings the
// counter to its target folds the partials (one block reads them, instead
// of every block: the fold costs one block's loads, not the team's times the
// L2 traffic), stores the totals and releases the others, who wait for
// that.  Targets only grow during a launch; every block leaves each counter
// once at the end, and the last to leave puts it back at zero for the next
// launch or graph replay.

// Whether this block's arrival brought the counter to `target` (the same
// answer in every thread of the block).  With it, the other arrivals'
// stores are visible to this block's load_after_barrier reads.
__device__ __forceinline__ bool arrive_last(BarrierCounter* counter, BarrierCounter target) {
    __shared__ int last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();  // this block's partials before its arrival
        last = atomicAdd(counter, 1ull) + 1 == target;
        if (last) __threadfence();  // the others' partials before the fold's reads
    }
    __syncthreads();
    return last != 0;
}

// The folding block, after storing the totals: one more count.
__device__ __forceinline__ void release(BarrierCounter* counter) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(counter, 1ull);
    }
}

// Returns once the counter has reached `target`, with the stores made
// before that visible to this block's load_after_barrier reads.
__device__ __forceinline__ void wait_for(BarrierCounter* counter, BarrierCounter target) {
    if (threadIdx.x == 0) {
        while (load_counter(counter) < target) pause_briefly();
        __threadfence();
    }
    __syncthreads();
}

// A block's way out: `final_count` is the counter's value once every block
// that uses it has left.  No thread may touch the counter afterwards.
__device__ __forceinline__ void leave(BarrierCounter* counter, BarrierCounter final_count) {
    if (threadIdx.x == 0 && atomicAdd(counter, 1ull) + 1 == final_count) atomicExch(counter, 0ull);
}

// The same two for a grid of thread-block clusters of `cluster` blocks: one
// arrival per cluster, after the cluster's own barrier, so the counter sees
// `cluster` times fewer atomics and pollers.  Every thread of every block
// calls them; `cluster` is 1 where the grid has no clusters.
__device__ __forceinline__ void cluster_grid_barrier(BarrierCounter* counter, unsigned number, int cluster) {
    if (cluster == 1) {
        grid_barrier(counter, number);
        return;
    }
    __syncthreads();  // (for racecheck, which does not model the cluster barrier)
    cluster_sync();
    if (threadIdx.x == 0 && blockIdx.x % cluster == 0) {
        const BarrierCounter arrivals = gridDim.x / cluster;
        __threadfence();  // the cluster's stores (ordered before by its barrier) before its arrival
        atomicAdd(counter, 1ull);
        while (load_counter(counter) < number * arrivals) pause_briefly();
        __threadfence();
    }
    cluster_sync();
    __syncthreads();
}

__device__ __forceinline__ void cluster_grid_barrier_exit(BarrierCounter* counter, unsigned barriers, int cluster) {
    if (cluster == 1) {
        grid_barrier_exit(counter, barriers);
        return;
    }
    if (threadIdx.x == 0 && blockIdx.x % cluster == 0) {
        const BarrierCounter arrivals = gridDim.x / cluster;
        if (atomicAdd(counter, 1ull) + 1 == (barriers + 1) * arrivals) atomicExch(counter, 0ull);
    }
}

}  // namespace gpu
}  // namespace mbn
