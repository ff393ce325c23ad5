// Cross-block hand-over of results within one launch, through counters in
// the backend's zero-initialized counter buffer.
//
// Each block stores its partial results, then arrives at a counter; the
// block whose arrival completes the count (the last one, whichever it is)
// reads every partial, finalizes, and puts the counter back to zero
// (release_to_zero where other blocks wait for it, reset_counter where none
// does).
// The finalizing order is fixed by the partials' indices, never by arrival
// order, so results are deterministic.  Every counter a launch uses is
// completed and released exactly once, so all are zero again when it ends,
// ready for the next call (graph replays included).
//
// Blocks may also wait for the finalizer (resident forward): after arriving
// they wait until the counter is released.  That needs the blocks that hold
// the rest of the group to run meanwhile: gn_forward.hip hands chunks out in
// order, so only a few blocks ever wait at once.
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/hip_compat.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// Reads that must see other blocks' stores of this launch: past the
// non-coherent L1 (and after a fence that orders them behind the arrival).
template <typename V>
__device__ __forceinline__ V load_coherent(const V* p) {
    return *static_cast<const volatile V*>(p);
}

// One thread per block, after the block's partial results are stored.
// True for the arrival that completes `target`: that block finalizes and
// then calls release_to_zero().
__device__ __forceinline__ bool arrive(ArrivalCounter* counter, ArrivalCounter target) {
    __threadfence();  // this block's partials before its arrival
    if (atomicAdd(counter, 1ull) + 1 != target) return false;
    __threadfence();  // every arrival (and so every partial) before the reads that follow
    return true;
}

// The finalizer, after storing what the others may wait for: the counter
// back to zero.  (Named apart from grid_barrier.h's release, one more
// count, so that a kernel may use both headers.)
__device__ __forceinline__ void release_to_zero(ArrivalCounter* counter) {
    __threadfence();
    atomicExch(counter, 0ull);
}

// The same for a counter no block of the launch waits on: no fence first,
// since only the next launch reads it again, and a launch's end orders every
// store of it before the next one's start.
__device__ __forceinline__ void reset_counter(ArrivalCounter* counter) { atomicExch(counter, 0ull); }

// Eases the polling of a waiting thread (plain spinning before sm_70); a
// longer pause than grid_barrier.h's pause_briefly.
__device__ __forceinline__ void pause_awaiting() {
#if MBN_GPU_CUDA
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
    __nanosleep(64);
#endif
#else
    __builtin_amdgcn_s_sleep(2);
#endif
}

// One thread per block, after its own arrival (so the counter is not zero
// until the finalizer releases it).
__device__ __forceinline__ void await_release(const ArrivalCounter* counter) {
    while (load_coherent(counter) != 0) pause_awaiting();
    __threadfence();  // the finalizer's results before the reads that follow
}

}  // namespace gpu
}  // namespace mbn
