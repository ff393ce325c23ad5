// Between the (n, g) groups of a group-norm problem and the (n, c) features
// its per-sample walk reduces (plan_per_sample_walk): feature q = n*C + c
// belongs to group n*G + c / (C/G).  Also reading and writing the (N, G)
// mean/rstd tensors, as double.
#pragma once

#include "common/group_norm_problem.hpp"
#include "common/numerics.hpp"
#include "cpu/element.hpp"

#include <cstdint>

namespace mbn::cpu {

struct GroupIndex {
    std::int64_t samples, channels, groups, per_group;  // N, C, G, C/G
    double size;                                        // M: values per group

    explicit GroupIndex(const GnShape& s)
        : samples(s.len[kN]), channels(s.len[kC]), groups(s.groups), per_group(s.channels_per_group()),
          size(static_cast<double>(s.group_size())) {}

    std::int64_t features() const { return samples * channels; }
    std::int64_t count() const { return samples * groups; }
    // The group of feature q = n*C + c.
    std::int64_t group_of(std::int64_t q) const { return (q / channels) * groups + (q % channels) / per_group; }
    std::int64_t channel_of(std::int64_t q) const { return q % channels; }
};

// per_feature[q] = per_group[group_of(q)].
void spread_to_features(const GroupIndex& gi, const double* per_group, double* per_feature);

// per_group[n*G + g] = Σ over g's channels c, in channel order, of
// per_feature[n*C + c] * weight[c] (weight null: 1).
void sum_over_groups(const GroupIndex& gi, const double* per_feature, const double* weight, double* per_group);

// values[n*G + g] from / to an (N, G) statistics tensor of any dtype and strides.
void read_group_values(const TensorArg& t, const GroupIndex& gi, double* values);
void write_group_values(const TensorArg& t, const GroupIndex& gi, const double* values);

// center[n*G + g] = x[n, g*C/G, 0, 0, 0]: each group's first value, the
// shift of its sums (common/numerics.hpp).
template <typename Tx>
void group_first_values(const TensorArg& x, const GroupIndex& gi, double* center) {
    const Tx* data = static_cast<const Tx*>(x.data);
    for (std::int64_t n = 0; n < gi.samples; ++n)
        for (std::int64_t g = 0; g < gi.groups; ++g)
            center[n * gi.groups + g] =
                statistics_shift(load_as<typename Element<Tx>::Compute>(data[x.offset(n, g * gi.per_group, 0, 0, 0)]));
}

}  // namespace mbn::cpu
