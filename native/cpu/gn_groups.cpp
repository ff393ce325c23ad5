#include "cpu/gn_groups.hpp"

#include "cpu/dtype_dispatch.hpp"
#include "cpu/walk_passes.hpp"

namespace mbn::cpu {

void spread_to_features(const GroupIndex& gi, const double* per_group, double* per_feature) {
    run_ranges(gi.features(), 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t q = begin; q < end; ++q) per_feature[q] = per_group[gi.group_of(q)];
    });
}

void sum_over_groups(const GroupIndex& gi, const double* per_feature, const double* weight, double* per_group) {
    run_ranges(gi.count(), gi.per_group, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t q = begin; q < end; ++q) {
            const std::int64_t n = q / gi.groups, first = (q % gi.groups) * gi.per_group;
            const double* values = per_feature + n * gi.channels + first;
            double sum = 0.0;
            for (std::int64_t i = 0; i < gi.per_group; ++i) sum += weight ? values[i] * weight[first + i] : values[i];
            per_group[q] = sum;
        }
    });
}

void read_group_values(const TensorArg& t, const GroupIndex& gi, double* values) {
    with_data_type(t.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* data = static_cast<const T*>(t.data);
        for (std::int64_t n = 0; n < gi.samples; ++n)
            for (std::int64_t g = 0; g < gi.groups; ++g)
                values[n * gi.groups + g] = load_as<double>(data[t.offset(n, g, 0, 0, 0)]);
    });
}

void write_group_values(const TensorArg& t, const GroupIndex& gi, const double* values) {
    with_data_type(t.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* data = static_cast<T*>(t.data);
        for (std::int64_t n = 0; n < gi.samples; ++n)
            for (std::int64_t g = 0; g < gi.groups; ++g)
                data[t.offset(n, g, 0, 0, 0)] = store_from<T>(values[n * gi.groups + g]);
    });
}

}  // namespace mbn::cpu
