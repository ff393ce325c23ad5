// The scratch memory and counters of one group-norm call, carved from the
// backend's workspace and its zero-initialized counter buffer.
//
// Forward, when groups are cut into several chunks:
//   partials      per chunk: count, mean and M2 of its shifted values
//   stats         per group: the merged statistics (gn_layout.hpp)
//   arrivals      per group (gn_arrival.h); tickets: the resident pass's
//                 next chunk
// Backward, over the (n, c) rows of its FeatureLayout:
//   sum_g, sum_g_xhat  per (split, row): sums of the pre-activation gradient g
//                      and of g * xhat
//   group_terms        per group: mean of w g and mean of w g xhat
// Backward on chip (gn_tile_backward.hip), when dweight / dbias are wanted:
//   sum_g, sum_g_xhat  per (channel, sample): a tile's sums, [c * N + n]
//   arrivals           per tile of a sample (its channels)
#pragma once

#include "gpu/gn_layout.hpp"
#include "gpu/gn_tile.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

constexpr int kGnPartialFields = 3;  // count, mean, M2
constexpr int kGnGroupTerms = 2;

struct GnForwardScratch {
    double* partials;  // [chunk * kGnPartialFields + field]
    GnGroupStats* stats;
    ArrivalCounter* arrivals;
    ArrivalCounter* tickets;
};

struct GnBackwardScratch {
    double* sum_g;  // [split * rows + row]
    double* sum_g_xhat;
    double* group_terms;  // [group * kGnGroupTerms + term]
};

// Arrays start on 256-byte boundaries.
inline std::size_t gn_padded_bytes(std::int64_t count, std::size_t size) {
    return (static_cast<std::size_t>(count) * size + 255) / 256 * 256;
}

// Sizes of what a call needs: workspace bytes and counters.
struct GnScratchNeeds {
    std::size_t bytes;
    std::int64_t counters;
};

inline GnScratchNeeds forward_scratch_needs(const GnChunks& chunks, std::int64_t groups) {
    if (chunks.parts == 1) return GnScratchNeeds{0, 0};
    return GnScratchNeeds{gn_padded_bytes(chunks.total * kGnPartialFields, sizeof(double)) +
                              gn_padded_bytes(groups, sizeof(GnGroupStats)),
                          groups + 1};
}

inline GnForwardScratch carve_forward_scratch(void* base, ArrivalCounter* counters, const GnChunks& chunks,
                                              std::int64_t groups) {
    char* p = static_cast<char*>(base);
    GnForwardScratch s;
    s.partials = reinterpret_cast<double*>(p);
    s.stats = reinterpret_cast<GnGroupStats*>(p + gn_padded_bytes(chunks.total * kGnPartialFields, sizeof(double)));
    s.arrivals = counters;
    s.tickets = counters + groups;
    return s;
}

inline GnScratchNeeds backward_scratch_needs(std::int64_t rows, int splits, std::int64_t groups) {
    return GnScratchNeeds{2 * gn_padded_bytes(rows * splits, sizeof(double)) +
                              gn_padded_bytes(groups * kGnGroupTerms, sizeof(double)),
                          0};
}

inline GnBackwardScratch carve_backward_scratch(void* base, std::int64_t rows, int splits) {
    char* p = static_cast<char*>(base);
    const std::size_t sums = gn_padded_bytes(rows * splits, sizeof(double));
    GnBackwardScratch s;
    s.sum_g = reinterpret_cast<double*>(p);
    s.sum_g_xhat = reinterpret_cast<double*>(p + sums);
    s.group_terms = reinterpret_cast<double*>(p + 2 * sums);
    return s;
}

struct GnTileBackwardScratch {
    double* sum_g;
    double* sum_g_xhat;
    ArrivalCounter* arrivals;
};

inline GnScratchNeeds tile_backward_scratch_needs(const GnTileWalk& w, bool affine) {
    if (!affine) return GnScratchNeeds{0, 0};
    const std::int64_t sums = w.groups * w.channels * w.samples;
    return GnScratchNeeds{2 * gn_padded_bytes(sums, sizeof(double)), w.tiles_per_sample};
}

inline GnTileBackwardScratch carve_tile_backward_scratch(void* base, ArrivalCounter* counters, const GnTileWalk& w) {
    char* p = static_cast<char*>(base);
    const std::size_t sums = gn_padded_bytes(w.groups * w.channels * w.samples, sizeof(double));
    return GnTileBackwardScratch{reinterpret_cast<double*>(p), reinterpret_cast<double*>(p + sums), counters};
}

}  // namespace gpu
}  // namespace mbn
