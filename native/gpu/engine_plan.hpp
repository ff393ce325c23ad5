// The one algorithm choice of a batch-norm training or backward call on the
// GPU: how its feature tiles are split over the grid, whether each block
// keeps its share of the data in registers between the reduction and the
// elementwise pass, and the grid size.  Every call makes it here, and
// nowhere else; MIOPEN_BN_GPU_ALGORITHM forces one algorithm (tests run each
// on every shape; an algorithm that cannot run a problem falls back to the
// automatic choice, and the logged name says which ran).
//
//   single-cached    each block owns whole features (one split): reduce,
//                    then the epilogue from registers; no grid barrier
//   single-streamed  the same, the epilogue re-reading its share (L1/L2)
//   split-cached     a feature's reduction split over several blocks, all
//                    resident at once: partials, a grid barrier, the blocks
//                    of a tile dividing the merges (fixed order), a second
//                    barrier to share the results (twice, for a backward
//                    that recomputes statistics), then the epilogue from
//                    registers: DRAM sees the data once
//   split-streamed   the same, the epilogue re-reading its share
// All are one launch.
#pragma once

#include "gpu/bn_layout.hpp"
#include "gpu/bn_planner.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mbn {
namespace gpu {

enum class EngineAlgorithm : int { single_cached, single_streamed, split_cached, split_streamed };

const char* algorithm_name(EngineAlgorithm a);

struct EnginePlan {
    BnLayout layout;  // with the splits and chunk of the algorithm
    EngineAlgorithm algorithm;
    int grid;          // blocks launched (a 1-D grid walking tiles x splits items)
    int run_positions; // positions each thread holds (cached algorithms)
    std::size_t scratch_bytes;
};

// What the two kernel instances of a call can hold: resident blocks of each
// (occupancy x multiprocessors) and the positions the cached one keeps.
struct EngineCapacity {
    std::int64_t resident_cached;
    std::int64_t resident_streamed;
    int cache_positions;
};

EnginePlan plan_engine(const BnLayout& layout, const EngineCapacity& capacity);

// A description of the plan for the Info log.
std::string describe(const EnginePlan& plan);

// Scratch arrays of the split algorithms, in double: per (split, feature)
// partials, moments (mean, M2, sum of the shifted values) and gradient sums
// (dy, dy (x - mean)); and per feature kFinalsPerFeature merged results,
// published by the block that merged them.
constexpr int kFinalsPerFeature = 8;
struct EngineScratch {
    double* mean;
    double* m2;
    double* sum;
    double* dy_sum;
    double* dy_x_sum;
    double* finals;  // [feature * kFinalsPerFeature + k]
};
std::size_t engine_scratch_bytes(const BnLayout& layout);
EngineScratch carve_engine_scratch(void* base, const BnLayout& layout);

}  // namespace gpu
}  // namespace mbn
