// How the GPU kernels walk a per-feature reduction (batch norm's channels,
// group norm's (sample, channel) slices): every element is named by a
// feature index f (0..F-1) and a reduction index r (0..M-1), and each of the
// two is a mixed-radix number over a small "loop nest" of merged logical
// dimensions.  A tensor's element offset is then
//     sum_i feature_digit_i * stride[t][i] + sum_j reduce_digit_j * stride[t][j],
// with per-tensor strides, so one set of kernels serves every layout: packed
// NCHW / NHWC collapse to one or two dimensions per nest, strided views keep
// up to four.
//
// Plain data only: shared by host code (built by g++) and the kernels (built
// by hipcc / nvcc), and passed to kernels by value.
#pragma once

#include "common/host_device.hpp"

#include <cstdint>

namespace mbn {
namespace gpu {

constexpr int kNestRank = 4;     // a nest never has more dimensions (N,D,H,W or C,D,H,W)
constexpr int kBlockThreads = 256;
constexpr int kMaxSplits = 1024;  // blocks sharing one feature's reduction
constexpr int kMaxFeaturesPerThread = 4;
constexpr int kThreadsPerMultiprocessor = 2048;  // resident threads the split count aims to fill
constexpr int kSingleSplitSteps = 32;  // reduction steps per thread below which one split is used

// Tensor slots: the data tensors first, then the per-feature parameters
// (batch norm's are named in bn_layout.hpp).
enum Slot : int {
    kSlotX = 0,
    kSlotY = 1,   // y forward, dy backward
    kSlotDx = 2,  // backward only
    kSlotParam0 = 3,
    kMaxSlots = 11,
};
// A mixed-radix index space.  Dimensions are right-aligned: the innermost is
// at kNestRank - 1, unused outer ones have len 1 and stride 0.
struct LoopNest {
    std::int64_t len[kNestRank];
    std::int64_t stride[kMaxSlots][kNestRank];
    std::int64_t size;  // product of len
    int rank;           // dimensions in use
};

struct FeatureLayout {
    LoopNest feature;  // F = feature.size
    // Reduction positions.  Each holds vector_width consecutive elements of
    // every data tensor (a 16-byte access; 1 when the layout does not allow
    // it), so M = reduce.size * vector_width.
    LoopNest reduce;
    int vector_width;
    // Consecutive features each thread owns, read as one access per position
    // (threads along features only; 1 otherwise).  F is then a multiple of it.
    int features_per_thread;
    // Launch shape: blockDim = (tile_features, rows), gridDim = (tiles, splits).
    // Thread (tx, ty) of block (bx, by) owns features from
    // (bx * tile_features + tx) * features_per_thread on, and the reduction
    // positions [by * chunk, min(P, (by + 1) * chunk)) that are congruent to
    // ty modulo rows (P = reduce.size).
    int tile_features;
    int rows;
    std::int64_t tiles;
    int splits;
    std::int64_t chunk;  // in positions

    // M: the values each feature's statistics are taken over.
    MBN_HOST_DEVICE std::int64_t reduction_size() const { return reduce.size * vector_width; }
};

}  // namespace gpu
}  // namespace mbn
