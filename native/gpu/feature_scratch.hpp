// Per-feature scratch arrays the kernels of one call share, carved from the
// backend's workspace.  All are double: the statistics and coefficients
// feed sums with heavy cancellation (dscale with recomputed statistics, dx
// for tiny batches), where float rounding of a mean would show.
//
//   shift, mean_offset, inv_std  the statistics: xhat = ((x - shift) - mean_offset) * inv_std
//                                (shift is a sample of the feature: the
//                                kernels' float arithmetic then only sees
//                                deviations, which keeps a channel with mean
//                                1e4 and std 1e-2 exact, and a constant one at 0)
//   coef0..coef2                 the per-feature factors of the final
//                                elementwise kernel (see each op)
//   z_bias                       backward through a fused activation: the
//                                bias of its input z = coef0 * (x - mean) + z_bias
//   partial0..partial2           per (split, feature) partial reductions
#pragma once

#include "gpu/feature_layout.hpp"

#include <cstddef>
#include <cstdint>

namespace mbn {
namespace gpu {

struct FeatureArrays {
    double* shift;
    double* mean_offset;
    double* inv_std;
    double* coef0;
    double* coef1;
    double* coef2;
    double* z_bias;
    double* partial0;  // [split * F + feature]
    double* partial1;
    double* partial2;
};

// Arrays start on 256-byte boundaries.
inline std::int64_t scratch_padded(std::int64_t elements) { return (elements + 31) / 32 * 32; }

inline std::size_t scratch_bytes(const FeatureLayout& layout) {
    const std::int64_t per_feature = scratch_padded(layout.feature.size);
    const std::int64_t partial = scratch_padded(layout.feature.size * layout.splits);
    return static_cast<std::size_t>(7 * per_feature + 3 * partial) * sizeof(double);
}

inline FeatureArrays carve_scratch(void* base, const FeatureLayout& layout) {
    const std::int64_t per_feature = scratch_padded(layout.feature.size);
    const std::int64_t partial = scratch_padded(layout.feature.size * layout.splits);
    double* p = static_cast<double*>(base);
    FeatureArrays s;
    s.shift = p;
    s.mean_offset = p + per_feature;
    s.inv_std = p + 2 * per_feature;
    s.coef0 = p + 3 * per_feature;
    s.coef1 = p + 4 * per_feature;
    s.coef2 = p + 5 * per_feature;
    s.z_bias = p + 6 * per_feature;
    s.partial0 = p + 7 * per_feature;
    s.partial1 = s.partial0 + partial;
    s.partial2 = s.partial1 + partial;
    return s;
}

}  // namespace gpu
}  // namespace mbn
