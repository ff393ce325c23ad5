// How the group-norm kernels address a problem.  Plain data only: shared by
// the host planner (g++) and the kernels (hipcc / nvcc), passed by value.
//
// Forward: each group (n, g) is a list of M = C/G * S elements, numbered in
// x's memory order -- channel k (0 <= k < C/G) and position s (0 <= s < S,
// S = D*H*W) with either the position fastest (NCHW-like) or the channel
// fastest (NHWC-like).  A group is cut into `parts` chunks; one team of
// threads (a wave, or the whole block) holds one chunk in registers.
//
// Slices: the per-(sample, channel) reductions run over a FeatureLayout whose
// features are the (n, c) pairs and whose reduction is the positions
// (feature_layout.hpp): the backward always, the forward when channels are
// innermost in memory and a group's channels are few.
#pragma once

#include "gpu/divisor.hpp"
#include "gpu/feature_layout.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

// Vector slots each thread of a forward team holds: 16-byte vectors, or
// scalars when the layout allows no vectors.
constexpr int kGnVectorSlots = 8;
constexpr int kGnScalarSlots = 16;
MBN_HOST_DEVICE constexpr int gn_slots(int width) { return width > 1 ? kGnVectorSlots : kGnScalarSlots; }

struct GnGroupShape {
    std::int64_t samples;    // N
    std::int64_t groups;     // G
    std::int64_t channels;   // C / G
    std::int64_t positions;  // S = D*H*W
    std::int64_t height;     // H: positions are (d, h, w) digits ...
    std::int64_t width;      // ... with w fastest
    std::int64_t size;       // M = C/G * S

    MBN_HOST_DEVICE std::int64_t group_count() const { return samples * groups; }
};

// Where one data tensor keeps the elements of a group, in elements.
struct GnPlacement {
    std::int64_t sample;       // stride of n
    std::int64_t channel;      // stride of c
    std::int64_t position[3];  // strides of d, h, w
    // Positions are linear when position s sits at s * pitch (packed
    // spatial dimensions, any pitch): then no digits are needed.
    bool linear;
    std::int64_t pitch;
};

struct GnForwardWalk {
    GnGroupShape shape;
    GnPlacement x, y;
    bool channels_inner;  // element order: channel fastest (else position fastest)
};

// How the groups are cut into chunks, one team per chunk.
struct GnChunks {
    std::int64_t parts;   // chunks per group (K)
    std::int64_t length;  // elements per chunk, a multiple of the vector width; the last may be shorter
    std::int64_t total;   // chunks in all: groups * parts
    int team_threads;     // threads per team: a wave (then parts == 1) or the whole block
};

// How slices are numbered: c * N + n when x's channel stride exceeds its
// sample stride (the nest then puts channels outside), else n * C + c.
struct GnSliceOrder {
    GnGroupShape shape;
    bool channel_major;

    MBN_HOST_DEVICE std::int64_t index(std::int64_t n, std::int64_t c) const {
        return channel_major ? c * shape.samples + n : n * (shape.groups * shape.channels) + c;
    }
};

// The slices' elementwise last launch over packed tensors (NCHW-like or
// NHWC-like, no gaps, 16-byte aligned, every data tensor of the call alike):
// one flat walk over the 16-byte vectors, as an elementwise copy runs,
// where the slices' feature walk moved its bytes at ~70% of the copy's rate
// (bench/RESULTS.md).  Slice (n, c) is then feature n * C + c (GnSliceOrder,
// not channel-major).  A block of `threads` takes kPackedWalkBatch vectors a
// thread, a block's threads apart, all loaded before any is written;
// channels inner a block is whole rows of C / W vectors where
// kPackedWalkMostThreads allows, so that each thread's lanes keep their
// channels (gn_packed_walk.h).  A thread may take `batches` such batches
// one after another: the backward's channels-inner apply, whose thread
// finds its W lanes' terms once for all of them.
constexpr int kPackedWalkBatch = 4;
constexpr int kPackedWalkThreads = 256;
constexpr int kPackedWalkMostThreads = 512;
constexpr int kPackedInnerBatches = 4;  // the backward's channels-inner apply
struct GnPackedWalk {
    int vectors;           // of x; 0: not packed, the feature walk runs
    int threads;           // a block's
    int batches;           // of kPackedWalkBatch vectors a thread
    bool channels_inner;   // NHWC-like: a vector holds W channels of one position
    int row_vectors;       // channels inner: C / W
    int channels;          // C
    Divisor by_plane;      // positions inner: S / W, a slice's vectors
    Divisor by_row;        // channels inner: C / W
    Divisor by_sample;     // channels inner: S * C / W
};

// A mean or rstd tensor of lengths (N, G): float, or double.
struct GnStatTensor {
    void* data;  // nullptr: absent
    bool wide;   // elements are double
    std::int64_t stride_n;
    std::int64_t stride_g;
};

// The counters of cross-block hand-overs (gn_arrival.h).
using ArrivalCounter = unsigned long long;

// The statistics of one group: xhat = ((x - shift) - mean_offset) * rstd,
// the shift being the group's first element (so float arithmetic sees only
// deviations; a constant group gives exact zeros).
struct GnGroupStats {
    double shift;
    double mean_offset;
    double rstd;
};

}  // namespace gpu
}  // namespace mbn
