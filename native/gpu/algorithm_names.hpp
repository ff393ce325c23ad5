// The GPU backend's algorithms by name, and MIOPEN_BN_GPU_ALGORITHM, which
// forces one.  Header-only and free of GPU types, so that a host program can
// check the names and the variable's rules (tests/gpu/algorithm_names_check.cpp);
// the choice itself is bn_algorithm.cpp.
//
// MIOPEN_BN_GPU_ALGORITHM=<name> (unset or empty: each call's own choice)
// makes every call of an op the named algorithm implements take it, or fail
// with miopenStatusNotImplemented saying why it cannot; calls of other ops
// choose as usual (dense_inference forces inference only, gn_slices both
// group-norm directions, gn_chunks the group-norm forward).  A name not in
// the table fails each such call with miopenStatusBadParm listing the names.
// The variable is read at each call; the split-phase ops, one kernel
// sequence each, do not read it.
#pragma once

#include "common/error.hpp"

#include <cstdlib>
#include <cstring>
#include <string>

namespace mbn {
namespace gpu {

// The GPU backend's ops that choose among algorithms, as bits.
enum GpuOp : unsigned {
    kOpTraining = 1,         // batch-norm training forward
    kOpBackward = 2,         // batch-norm backward
    kOpInference = 4,        // batch-norm inference from estimates
    kOpGnForward = 8,        // group-norm forward (with or without swish)
    kOpGnBackward = 16,      // group-norm backward
};

// Every way the backend runs one of those calls.  Adding one: a value here,
// a row in kAlgorithms, a line in its op's candidate order (bn_algorithm.cpp)
// and a case in the backend's switch (gpu_backend.hip).
enum class Algorithm : int {
    dense_inference,  // inference on packed NCHW/NHWC data as one elementwise pass (bn_dense_inference.hip)
    nest_walk,        // inference over any strides, the layout's nests walked per feature (bn_forward.hip)
    nhwc_columns,     // packed NHWC, each column of channels held in registers by its own blocks (bn_nhwc_columns.hip)
    wave_tiles,       // packed NCHW, each channel held in one wave's registers (bn_wave_tile.hip)
    channel_tiles,    // packed NCHW/NHWC, each channel tile held by a block or a cluster, or streamed by one block (bn_channel_tile.hip)
    resident,         // packed NCHW/NHWC, the tensors held in shared memory by a persistent grid (bn_resident.hip)
    single_launch,    // any strides, one block per feature walking its whole reduction (bn_*_single_launch.hip)
    multi_pass,       // any strides: partial sums, their merge, the elementwise pass (feature_passes.hip, bn_stats.hip, bn_forward.hip, bn_backward.hip)
    gn_on_chip,       // group norm in one launch, groups held in registers (gn_tile_*.hip)
    gn_slices,        // group norm by (sample, channel) slices: sums, merge per group, output (gn_forward_slices.hip, gn_backward.hip)
    gn_chunks,        // group-norm forward by chunks of each group, one launch or two (gn_forward.hip)
    gn_persistent,    // group norm on packed data in one launch of resident blocks, x (and dy) held on chip and in L2 (gn_forward_persistent.hip, gn_backward_persistent.hip)
};

struct AlgorithmEntry {
    Algorithm algorithm;
    const char* name;
    unsigned ops;  // GpuOp bits it implements
};

inline constexpr AlgorithmEntry kAlgorithms[] = {
    {Algorithm::dense_inference, "dense_inference", kOpInference},
    {Algorithm::nest_walk, "nest_walk", kOpInference},
    {Algorithm::nhwc_columns, "nhwc_columns", kOpTraining | kOpBackward},
    {Algorithm::wave_tiles, "wave_tiles", kOpTraining | kOpBackward},
    {Algorithm::channel_tiles, "channel_tiles", kOpTraining | kOpBackward},
    {Algorithm::resident, "resident", kOpTraining | kOpBackward},
    {Algorithm::single_launch, "single_launch", kOpTraining | kOpBackward},
    {Algorithm::multi_pass, "multi_pass", kOpTraining | kOpBackward},
    {Algorithm::gn_on_chip, "gn_on_chip", kOpGnForward | kOpGnBackward},
    {Algorithm::gn_slices, "gn_slices", kOpGnForward | kOpGnBackward},
    {Algorithm::gn_chunks, "gn_chunks", kOpGnForward},
    {Algorithm::gn_persistent, "gn_persistent", kOpGnForward | kOpGnBackward},
};

inline constexpr const char* kAlgorithmVariable = "MIOPEN_BN_GPU_ALGORITHM";

inline const AlgorithmEntry& algorithm_entry(Algorithm a) {
    for (const AlgorithmEntry& e : kAlgorithms)
        if (e.algorithm == a) return e;
    fail(miopenStatusInternalError, "GPU backend: algorithm ", static_cast<int>(a), " has no name");
}

inline const char* algorithm_name(Algorithm a) { return algorithm_entry(a).name; }

inline const char* op_name(GpuOp op) {
    switch (op) {
        case kOpTraining: return "batch norm training";
        case kOpBackward: return "batch norm backward";
        case kOpInference: return "batch norm inference";
        case kOpGnForward: return "group norm forward";
        default: return "group norm backward";
    }
}

// What the variable asks of a call of `op`.
struct AlgorithmRequest {
    bool forced = false;
    Algorithm algorithm = Algorithm::multi_pass;  // when forced
};

// `text` as MIOPEN_BN_GPU_ALGORITHM's value for a call of `op`: nullptr or
// empty forces nothing, a name forces its algorithm where it implements
// `op`, anything else is BadParm.
inline AlgorithmRequest parse_algorithm_request(const char* text, GpuOp op) {
    AlgorithmRequest request;
    if (text == nullptr || *text == '\0') return request;
    for (const AlgorithmEntry& e : kAlgorithms) {
        if (std::strcmp(text, e.name) != 0) continue;
        request.forced = (e.ops & op) != 0;
        request.algorithm = e.algorithm;
        return request;
    }
    std::string names;
    for (const AlgorithmEntry& e : kAlgorithms) names += std::string(names.empty() ? "" : ", ") + e.name;
    fail(miopenStatusBadParm, kAlgorithmVariable, "=", text, " names no GPU algorithm (the names: ", names,
         "; unset or empty lets each call choose)");
}

inline AlgorithmRequest requested_algorithm(GpuOp op) {
    return parse_algorithm_request(std::getenv(kAlgorithmVariable), op);
}

}  // namespace gpu
}  // namespace mbn
