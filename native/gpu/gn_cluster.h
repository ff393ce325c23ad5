// Thread-block clusters (NVIDIA sm_90 and later): the blocks of one cluster
// run at the same time and read each other's shared memory.  The on-chip
// group-norm kernels use them to share a tile's statistics within one
// launch.  Elsewhere (AMD, older NVIDIA, the host pass) MBN_GN_CLUSTERS is 0
// and the host launches one block per tile (measure_gn_tile_clusters).
//
// Every helper is called by every thread of every block of the cluster.
#pragma once

#include "gpu/hip_compat.h"

#if MBN_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MBN_GN_CLUSTERS 1
#include <cooperative_groups.h>
#else
#define MBN_GN_CLUSTERS 0
#endif

namespace mbn {
namespace gpu {

#if MBN_GN_CLUSTERS

// Arrive (release: this block's shared-memory writes before it) and wait
// (acquire) for every thread of the cluster.
__device__ __forceinline__ void cluster_sync() { cooperative_groups::this_cluster().sync(); }

// The two halves of cluster_sync, with work between them: after arriving,
// a block may still compute but must not read other blocks' shared memory;
// it waits before it exits, so that none leaves while another reads its own.
__device__ __forceinline__ void cluster_arrive() { cooperative_groups::this_cluster().barrier_arrive(); }
__device__ __forceinline__ void cluster_wait() { cooperative_groups::this_cluster().barrier_wait(); }
// An arrival that publishes nothing (no fence before it: a release arrival
// waits for the block's outstanding global stores, measured as the kernel's
// costliest stall on the H100).  Only for arrivals that signal "done reading
// the others' shared memory".
__device__ __forceinline__ void cluster_arrive_relaxed() {
#if defined(MBN_EMULATION)
    cooperative_groups::this_cluster().barrier_arrive();
#else
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");
#endif
}

// The same shared variable in block `rank` of the cluster.
template <typename V>
__device__ __forceinline__ const V* cluster_peer(const V* mine, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(const_cast<V*>(mine), rank);
}
// The same, for writing into block `rank`'s shared memory.
template <typename V>
__device__ __forceinline__ V* cluster_peer_writable(V* mine, int rank) {
    return cooperative_groups::this_cluster().map_shared_rank(mine, rank);
}

#else

// One block per cluster: the host never launches more without clusters.
__device__ __forceinline__ void cluster_sync() {}
__device__ __forceinline__ void cluster_arrive() {}
__device__ __forceinline__ void cluster_wait() {}
__device__ __forceinline__ void cluster_arrive_relaxed() {}
template <typename V>
__device__ __forceinline__ const V* cluster_peer(const V* mine, int) {
    return mine;
}
template <typename V>
__device__ __forceinline__ V* cluster_peer_writable(V* mine, int) {
    return mine;
}

#endif

}  // namespace gpu
}  // namespace mbn
