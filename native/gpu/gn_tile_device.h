// Device-side pieces the on-chip group-norm kernels share (gn_tile.hpp
// describes the cut): where a block's thread sits in its tile, which
// elements its slots hold, which groups its lanes belong to, and the
// fixed-order sums that make results bitwise repeatable.  No __global__
// function lives here.
#pragma once

#include "gpu/block_reduce.h"
#include "gpu/gn_cluster.h"
#include "gpu/gn_tile.hpp"
#include "gpu/norm_math.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// Where this thread sits: its tile, its block's part, its column and row,
// and the rows it holds (slots 0 .. slots - 1, row_threads rows apart).
// Set up once in int arithmetic; a slot's address is then one add.
struct GnTileThread {
    int n;      // sample
    int tile;   // tile within the sample
    int rank;   // block within the cluster
    GnTilePart part;
    int tx, ty;
    bool in_block;      // ty < row_threads (threads past them hold nothing)
    int slots;          // rows held
    std::int64_t base;  // offset of the tile's first element
    std::int64_t first; // offset of slot 0's first lane
    std::int64_t step;  // from one slot's first lane to the next's

    // `width`: the kernel's elements per vector.
    __device__ GnTileThread(const GnTileWalk& w, int width) {
        const int block = static_cast<int>(blockIdx.x);
        if (w.sample_cluster > 1) {
            // Clusters of samples: block t * N + n holds tile t of sample n.
            rank = 0;
            tile = w.by_sample_cluster.divide(block);
            n = block - tile * w.sample_cluster;
        } else {
            const int tile_index = w.by_cluster.divide(block);
            rank = block - tile_index * w.cluster;
            n = w.by_tiles_per_sample.divide(tile_index);
            tile = tile_index - n * static_cast<int>(w.tiles_per_sample);
        }
        part = tile_part(w, rank);
        const int thread = static_cast<int>(threadIdx.x);
        ty = w.by_columns.divide(thread);
        tx = thread - ty * w.columns;
        in_block = ty < w.row_threads;
        slots = active() && ty < part.rows ? w.by_row_threads.divide(part.rows - ty + w.row_threads - 1) : 0;
        base = w.tile_base(n, tile);
        first = base + static_cast<std::int64_t>(part.row0 + ty) * w.row_stride +
                static_cast<std::int64_t>(part.vector0 + tx) * width;
        step = static_cast<std::int64_t>(w.row_threads) * w.row_stride;
    }

    // Row (within the tile) of slot a.
    __device__ int row(const GnTileWalk& w, int a) const { return part.row0 + ty + a * w.row_threads; }
    // Whether the thread's column names channels of the tile.
    __device__ bool active() const { return in_block && tx < part.vectors; }
    // Element offset of slot a's first lane.
    __device__ std::int64_t offset(int a) const { return first + a * step; }
};

// The slots this thread holds, as a bit mask (slot a: bit a).
template <int R>
__device__ __forceinline__ unsigned held_slots(const GnTileThread& at) {
    static_assert(R < 32, "slots are bits of an unsigned");
    return at.slots >= R ? (1u << R) - 1 : (1u << at.slots) - 1;
}

// Every slot's pack, those the thread does not hold loaded from the tile's
// first vector (always in bounds; the loads of a wave's empty slots share
// one address): where registers are short.  A load under a predicate
// leaves its pack undefined on the other path, and ptxas then holds the
// pack's registers from the kernel's first instruction: the backward at 128
// registers spilled 64 to 128 bytes of x and dy that way.  (Where registers
// are not short, the kernels load slots 0 .. slots - 1 and stop.)
template <int R, int W, typename T>
__device__ __forceinline__ void load_every_slot(const T* data, const GnTileThread& at, unsigned held,
                                                Pack<T, W> (&raw)[R]) {
#pragma unroll
    for (int a = 0; a < R; ++a) raw[a] = load_pack<W>(data + (held & (1u << a) ? at.offset(a) : at.base));
}

// The groups (within the tile) of a thread's lanes: lanes below `split`
// belong to group `lo`, the others to lo + 1.  Positions fastest: all to
// the tile's one group.  Channels fastest: lane j is channel tx * W + j.
struct GnLaneGroups {
    int lo;
    int split;
};

template <int W, bool kInner>
__device__ __forceinline__ GnLaneGroups lane_groups(const GnTileWalk& w, int tx) {
    if (!kInner) return GnLaneGroups{0, W};
    const int channels = static_cast<int>(w.channels);
    const int first = tx * W;
    const int lo = w.by_channels.divide(first);
    const int split = (lo + 1) * channels - first;
    return GnLaneGroups{lo, split < W ? split : W};
}

// A parameter (weight or bias) of channel c as float; `absent` without one.
template <typename P>
__device__ __forceinline__ float channel_param(const P* p, std::int64_t stride, std::int64_t c, float absent) {
    return p != nullptr ? static_cast<float>(widen(p[c * stride])) : absent;
}

// A group's moments as sums (gn_tile_forward.hip): each thread takes its
// values' mean m and M2 about it two-pass in registers and contributes
// A = n m, B = n m^2, C = M2; then over the group M2 = C + B - A^2 / count,
// exactly (the thread means enter only as the spread between them).  Sums
// merge by addition, in double.
struct GnMomentSums {
    double a, b, c;
};
__device__ __forceinline__ GnMomentSums operator+(const GnMomentSums& x, const GnMomentSums& y) {
    return GnMomentSums{x.a + y.a, x.b + y.b, x.c + y.c};
}
__device__ __forceinline__ GnMomentSums shuffle_xor(const GnMomentSums& v, int mask) {
    return GnMomentSums{shuffle_xor_wave(v.a, mask), shuffle_xor_wave(v.b, mask), shuffle_xor_wave(v.c, mask)};
}
__device__ __forceinline__ GnMomentSums shuffle_down(const GnMomentSums& v, int delta) {
    return GnMomentSums{shuffle_down(v.a, delta), shuffle_down(v.b, delta), shuffle_down(v.c, delta)};
}

// The sum of `value` over the cluster's blocks, in rank order, from the
// shared variable `mine` of each (after cluster_sync).  Each read crosses to
// another multiprocessor, so up to `kInFlight` are issued before their adds
// (all of them by default; fewer where registers are short: the backward's
// eight Sums2<double> in flight took 32 registers beside its x and dy).
// The same adds in the same order for any kInFlight.
template <int kInFlight = kGnTileMaxCluster, typename V>
__device__ __forceinline__ V cluster_total(const V* mine, int cluster) {
    static_assert(kGnTileMaxCluster % kInFlight == 0, "reads in whole batches");
    if (cluster == 1) return *mine;
    V total{};
#pragma unroll
    for (int first = 0; first < kGnTileMaxCluster; first += kInFlight) {
        V parts[kInFlight];
#pragma unroll
        for (int i = 0; i < kInFlight; ++i)
            if (first + i < cluster) parts[i] = *cluster_peer(mine, first + i);
        if (first == 0) total = parts[0];  // rank 0: a cluster here has at least 2
#pragma unroll
        for (int i = first == 0 ? 1 : 0; i < kInFlight; ++i)
            if (first + i < cluster) total = total + parts[i];
    }
    return total;
}

// A block a group's (GnTileWalk::group_blocks) lanes: which of the W lanes
// of the column whose first channel is `column_channel` are channels of
// the group of `channels` from `first_channel` (`in`; none where the column
// does not `touch` the group), and whether all are (the return).
template <int W>
__device__ __forceinline__ bool group_lanes(bool touches, int column_channel, int first_channel, int channels,
                                            bool (&in)[W]) {
    bool whole = touches;
#pragma unroll
    for (int j = 0; j < W; ++j) {
        in[j] = touches && column_channel + j >= first_channel && column_channel + j < first_channel + channels;
        whole = whole && in[j];
    }
    return whole;
}

// A block a group's (GnTileWalk::group_blocks) store of slot `at` from
// `out`: a vector wholly of the group (`whole`) whole, else the lanes `in`
// marks, 16-bit ones in pairs where the group's channels are even (`pairs`:
// its ends split no pair), as 2-byte stores of every lane lost 0.79x-0.88x
// against the tile kernel on 16x16 half forward rows (H200, forty-seventh
// session).  A neighbouring group's lanes are its own block's to write.
template <typename T, int W>
__device__ __forceinline__ void store_group_lanes(T* at, const Pack<T, W>& out, const bool (&in)[W], bool whole,
                                                  bool pairs) {
    if (whole) {
        store_pack(at, out);
    } else if (pairs) {
#pragma unroll
        for (int j = 0; j < W; j += 2)
            if (in[j]) store_pack(at + j, Pack<T, 2>{{out.lane[j], out.lane[j + 1]}});
    } else {
#pragma unroll
        for (int j = 0; j < W; ++j)
            if (in[j]) at[j] = out.lane[j];
    }
}

// A kernel built without cluster support must never run a cluster (the host
// checks; this stops a wrong result if it ever did).
__device__ __forceinline__ void require_cluster_support(int cluster) {
#if !MBN_GN_CLUSTERS
    if (cluster > 1) {
#if MBN_GPU_CUDA
        __trap();
#else
        __builtin_trap();
#endif
    }
#else
    (void)cluster;
#endif
}

// The tile's dynamic shared memory at a byte offset of GnTileShared.
template <typename V>
__device__ __forceinline__ V* shared_at(void* shared, int offset) {
    return reinterpret_cast<V*>(static_cast<char*>(shared) + offset);
}

}  // namespace gpu
}  // namespace mbn
