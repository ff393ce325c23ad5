// A host emulator of the GPU execution model, enough to run the on-chip
// kernels (native/gpu/gn_tile_*.hip, bn_channel_tile.hip) on the CPU: every thread of
// a cluster is a fiber; __syncthreads, warp shuffles and cluster barriers
// are barriers among fibers (a thread that skips one deadlocks, which the
// scheduler reports); each block's shared memory (dynamic, or the static
// variables of a translation unit) is its own.  One cluster
// runs at a time, its blocks interleaved at every barrier.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

// The emulated wave width: 32 (NVIDIA, RDNA) unless built with
// -DEMU_WAVE_SIZE=64 (CDNA).
#ifndef EMU_WAVE_SIZE
#define EMU_WAVE_SIZE 32
#endif

namespace emu {

struct Index {
    unsigned x = 0, y = 0, z = 0;
};

// The running fiber's coordinates (what threadIdx, blockIdx, ... read).
extern Index thread_index, block_index, block_dim, grid_dim;

// Runs `body` once per thread of `blocks` blocks of `threads` threads, in
// clusters of `cluster` blocks with `shared_bytes` of dynamic shared memory
// each.  Aborts with a message on a deadlock or a shared-memory overrun.
void run_grid(unsigned blocks, unsigned threads, unsigned cluster, std::size_t shared_bytes,
              const std::function<void()>& body);

// The kernels' extern dynamic shared array of one translation unit: the
// running block's memory lives there (swapped at every change of block).
void register_shared(void* array, std::size_t capacity);

// Or the kernels' static __shared__ memory of one translation unit, one
// object (emu_bn_channel_tile.cpp): a launch then asks for exactly `bytes`,
// each block gets its own copy of the object (uninitialized: NaN), and
// there is no overrun canary (the compiler lays the object out).
void register_static_shared(void* begin, std::size_t bytes);

void sync_block();
void sync_warp();
// Lets the other threads run while this one polls memory another block
// writes (a grid-wide hand-over's wait).  Polling is no progress: when
// every thread left polls or waits, the scheduler reports a deadlock.
void spin();
void cluster_arrive();
void cluster_wait();
unsigned cluster_rank();
void* peer_shared(void* mine, int rank);

// The value of lane (this lane ^ mask) of the warp, 8 bytes at most.
template <typename V>
V shuffle_xor(V value, int mask);

// The value of lane (this lane + delta), or this lane's own past the
// warp's last lane, 8 bytes at most.
template <typename V>
V shuffle_down(V value, unsigned delta);

// The value of lane `source` of the warp, 8 bytes at most.
template <typename V>
V shuffle_from(V value, int source);

// Exchange raw bytes through the warp's slots (the shuffles' core).
void exchange(const void* mine, void* theirs, std::size_t size, int mask);
void exchange_from(const void* mine, void* theirs, std::size_t size, int source);
void exchange_down(const void* mine, void* theirs, std::size_t size, unsigned delta);

template <typename V>
V shuffle_xor(V value, int mask) {
    V other;
    exchange(&value, &other, sizeof(V), mask);
    return other;
}

template <typename V>
V shuffle_from(V value, int source) {
    V other;
    exchange_from(&value, &other, sizeof(V), source);
    return other;
}

template <typename V>
V shuffle_down(V value, unsigned delta) {
    V other;
    exchange_down(&value, &other, sizeof(V), delta);
    return other;
}

}  // namespace emu
