// The one place the GPU backend chooses how a call runs: the algorithm
// (algorithm_names.hpp) and its plan, by the default order and size rules or
// as MIOPEN_BN_GPU_ALGORITHM forces it.  Each choice is logged at Info level
// (MIOPEN_LOG_LEVEL=5): "batch norm training: algorithm channel_tiles (why)".
// A forced algorithm that cannot serve the call fails it with
// miopenStatusNotImplemented, saying why; it never falls back.
#pragma once

#include "common/group_norm_problem.hpp"
#include "common/problem.hpp"
#include "gpu/algorithm_names.hpp"
#include "gpu/bn_channel_tile.hpp"
#include "gpu/bn_nhwc_columns.hpp"
#include "gpu/bn_planner.hpp"
#include "gpu/bn_resident.hpp"
#include "gpu/bn_wave_tile.hpp"
#include "gpu/gn_planner.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

// A batch-norm call's algorithm, the plan it runs by (only its own part is
// filled) and the scratch bytes and counters the backend must provide.
struct BnChoice {
    Algorithm algorithm = Algorithm::multi_pass;
    ColumnPlan columns;     // nhwc_columns
    WaveTilePlan waves;     // wave_tiles
    ChannelTilePlan tiles;  // channel_tiles
    ResidentPlan resident;  // resident
    FeatureLayout layout{};      // single_launch, multi_pass, nest_walk
    std::size_t scratch_bytes = 0;
    std::int64_t counters = 0;
};

struct GnForwardChoice {
    Algorithm algorithm = Algorithm::gn_chunks;
    GnForwardPlan plan{};
};

struct GnBackwardChoice {
    Algorithm algorithm = Algorithm::gn_slices;
    GnBackwardPlan plan{};
};

BnChoice choose_algorithm(const BnForwardTraining& p, const DeviceShape& device);
BnChoice choose_algorithm(const BnBackward& p, const DeviceShape& device);
BnChoice choose_algorithm(const BnForwardInference& p, const DeviceShape& device);
GnForwardChoice choose_algorithm(const GnForward& p, const DeviceShape& device);
GnBackwardChoice choose_algorithm(const GnBackward& p, const DeviceShape& device);

}  // namespace gpu
}  // namespace mbn
