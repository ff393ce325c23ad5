// Validated problems of the split-phase (data-parallel) batch-norm ops; see
// problem.hpp for TensorArg's invariants.  Every parameter-shaped tensor has
// lengths (1,C,1,1,1) spatially or (1,C,D,H,W) per activation.  "stats"
// tensors (counts, means, M2, gradient sums) are f32 or f64 whatever x's
// type; "param" tensors follow the one-call ops' rule (f32 or x's type).
#pragma once

#include "problem.hpp"

namespace mbn {

// count = M, mean, m2 = Σ(x - mean)² per feature (stats type).
struct BnLocalStatistics {
    BnGeometry geom;
    TensorArg x;
    TensorArg count, mean, m2;
};

// K ranks' partials merged per feature.  The partials' len[kN] is K (the
// rank index, stride stride[kN]); every other tensor has len[kN] == 1 and
// the partials' other lengths.  saved_* and running_* each have one type,
// any of the four; running_* both present or both absent.
struct BnMergeStatistics {
    TensorArg count, mean, m2;
    TensorArg saved_mean, saved_inv_std;
    TensorArg running_mean, running_var;
    double epsilon = 1e-5;        // >= 0, not NaN
    double exp_avg_factor = 0.1;  // finite when running_* are present

    std::int64_t ranks() const { return count.len[kN]; }
};

// y = alpha * (scale * (x - mean) * inv_std + bias) + beta * y; params one type.
struct BnNormalize {
    BnGeometry geom;
    TensorArg x, y;
    TensorArg scale, bias, mean, inv_std;
    Blend out;
};

// sum_dy = Σdy, sum_dy_xmu = Σdy·(x - mean) (stats type); dbias = sum_dy and
// dscale = sum_dy_xmu * inv_std (param type, both present or both absent),
// blended with `param`.
struct BnBackwardReduce {
    BnGeometry geom;
    TensorArg x, dy;
    TensorArg mean, inv_std;
    TensorArg sum_dy, sum_dy_xmu;
    TensorArg dscale, dbias;
    Blend param;
};

// dx = scale * inv_std * (dy - sum_dy/n - (x - mean) * inv_std² * sum_dy_xmu/n),
// n = count per feature; sums and count of the stats type.
struct BnBackwardElementwise {
    BnGeometry geom;
    TensorArg x, dy, dx;
    TensorArg scale, mean, inv_std;
    TensorArg sum_dy, sum_dy_xmu, count;
    Blend data;
};

}  // namespace mbn
