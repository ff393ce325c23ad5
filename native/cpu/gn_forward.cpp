// Group-norm forward: per (n, g) the mean and biased variance of its C/G
// channels at every position, y = (x - mean) * rstd * weight[c] + bias[c]
// (optionally through swish), and the optional mean/rstd outputs.
//
// The per-sample walk sums each (n, c) over D, H, W, shifted by its group's
// first value; the channel sums of a group are then added in channel order,
// so the statistics do not depend on the thread count.
#include "cpu/bn_math.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/gn_groups.hpp"
#include "cpu/gn_ops.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

#include <algorithm>

namespace mbn::cpu {
namespace {

template <typename Tx>
void run(const GnForward& pb) {
    using C = typename Element<Tx>::Compute;
    const GroupIndex gi(pb.shape);
    const WalkPlan plan = plan_per_sample_walk(pb.shape.len, {&pb.x, &pb.y, nullptr}, 2);
    const std::int64_t F = gi.features(), G = gi.count();

    // Everything is allocated and every parameter read before y is touched.
    Workspace ws;
    double* weight = ws.take<double>(gi.channels);
    double* bias = ws.take<double>(gi.channels);
    if (pb.affine) {
        read_param(plan, pb.weight, weight);
        read_param(plan, pb.bias, bias);
    } else {
        std::fill(weight, weight + gi.channels, 1.0);
        std::fill(bias, bias + gi.channels, 0.0);
    }
    double* group_center = ws.take<double>(G);
    double* center = ws.take<double>(F);
    double* part_s1 = ws.take<double>(F * plan.blocks);
    double* part_s2 = ws.take<double>(F * plan.blocks);
    double* s1 = ws.take<double>(F);
    double* s2 = ws.take<double>(F);
    double* mean = ws.take<double>(G);
    double* var = ws.take<double>(G);
    double* rstd = ws.take<double>(G);
    const NormalizeArrays<C> coef(ws, F);
    const StagingBuffers<C> staging(plan, ws);

    const Tx* x = static_cast<const Tx*>(pb.x.data);
    group_first_values<Tx>(pb.x, gi, group_center);
    spread_to_features(gi, group_center, center);
    traverse(plan, kWholePlan, staging, StatisticsPass<Tx, C>{{x}, center, part_s1, part_s2});
    sum_blocks<2>(plan, kWholePlan, {part_s1, part_s2}, {s1, s2});

    // Σ(x - c) and Σ(x - c)² per group, held in mean and var until replaced.
    sum_over_groups(gi, s1, nullptr, mean);
    sum_over_groups(gi, s2, nullptr, var);
    for (std::int64_t q = 0; q < G; ++q) {
        const Statistics st = shifted_statistics(group_center[q], mean[q], var[q], gi.size);
        mean[q] = st.mean;
        var[q] = st.variance;
    }
    inverse_std_span(var, pb.epsilon, rstd, G);
    run_ranges(F, 4, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t q = begin; q < end; ++q) {
            const std::int64_t g = gi.group_of(q), c = gi.channel_of(q);
            coef.set(q, normalize_coefficients<C>(mean[g], rstd[g], weight[c], bias[c], 1.0f));
        }
    });

    const OutputActivation<C> act{pb.activation == Activation::swish, static_cast<C>(pb.swish_beta)};
    traverse(plan, kWholePlan, staging, NormalizePass<Tx, C>(plan, x, static_cast<Tx*>(pb.y.data), coef, 0.0f, act));
    if (pb.mean.present()) write_group_values(pb.mean, gi, mean);
    if (pb.rstd.present()) write_group_values(pb.rstd, gi, rstd);
}

}  // namespace

void group_norm_forward(const GnForward& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        run<Tx>(p);
    });
}

}  // namespace mbn::cpu
