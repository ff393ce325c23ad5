// Group-norm backward from the saved mean and rstd.  With xhat =
// (x - mean) * rstd, w = weight[c] and g = dy (times swish'(z) at
// z = xhat * w + bias[c] when the forward fused a swish):
//   dbias[c]   = Σ g                over n and positions
//   dweight[c] = Σ g * xhat
//   dx = rstd * (w*g - S1/M - xhat * S2/M),  S1 = Σ_group w*g,  S2 = Σ_group w*g*xhat
// (the derivative of y = xhat * w + b through the group's mean and
// variance).  One pass gathers Σg and Σg*(x - mean) per (n, c); dx is then
// dx = g*k_dy + (x - mean)*k_x + k_0 per (n, c), in a second pass.
#include "cpu/dtype_dispatch.hpp"
#include "cpu/gn_groups.hpp"
#include "cpu/gn_ops.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

#include <algorithm>
#include <optional>

namespace mbn::cpu {
namespace {

template <typename Tx>
void run(const GnBackward& pb) {
    using C = typename Element<Tx>::Compute;
    const GroupIndex gi(pb.shape);
    const WalkPlan plan = plan_per_sample_walk(pb.shape.len, {&pb.x, &pb.dy, &pb.dx}, 3);
    const std::int64_t F = gi.features(), G = gi.count(), channels = gi.channels;
    const bool swish = pb.activation == Activation::swish;

    Workspace ws;
    double* weight = ws.take<double>(channels);
    double* bias = ws.take<double>(channels);
    if (pb.affine) read_param(plan, pb.weight, weight);
    else std::fill(weight, weight + channels, 1.0);
    if (pb.bias.present()) read_param(plan, pb.bias, bias);
    else std::fill(bias, bias + channels, 0.0);
    double* mean = ws.take<double>(G);
    double* rstd = ws.take<double>(G);
    read_group_values(pb.mean, gi, mean);
    read_group_values(pb.rstd, gi, rstd);
    double* center = ws.take<double>(F);
    double* part_sdy = ws.take<double>(F * plan.blocks);
    double* part_dot = ws.take<double>(F * plan.blocks);
    double* sdy = ws.take<double>(F);
    double* dot = ws.take<double>(F);
    double* group_sums = ws.take<double>(2 * G);
    double *s1 = group_sums, *weighted_dot = group_sums + G;
    double* param_grads = ws.take<double>(2 * channels);
    double *dweight = param_grads, *dbias = param_grads + channels;
    const BackpropArrays coef(ws, F, backprop_in_float<C>(plan));
    std::optional<NormalizeArrays<C>> z;  // the swish's input, as the forward computed it
    if (swish) z.emplace(ws, F);
    const StagingBuffers<C> staging(plan, ws);

    spread_to_features(gi, mean, center);
    if (swish) {
        run_ranges(F, 4, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t q = begin; q < end; ++q) {
                const std::int64_t g = gi.group_of(q), c = gi.channel_of(q);
                z->set(q, normalize_coefficients<C>(mean[g], rstd[g], weight[c], bias[c], 1.0f));
            }
        });
    }
    const GradientInput<C> input{swish ? &*z : nullptr, static_cast<C>(pb.swish_beta)};

    const Tx* x = static_cast<const Tx*>(pb.x.data);
    const Tx* dy = static_cast<const Tx*>(pb.dy.data);
    const GradientSums part{part_sdy, part_dot, nullptr, nullptr};
    traverse(plan, kWholePlan, staging, GradientPass<Tx, Tx, C>{{x, dy}, center, part, input});
    sum_blocks<2>(plan, kWholePlan, {part_sdy, part_dot}, {sdy, dot});

    // S1 = Σ w*g and S2 = rstd * Σ w*g*(x - mean) per group.
    sum_over_groups(gi, sdy, weight, s1);
    sum_over_groups(gi, dot, weight, weighted_dot);
    run_ranges(F, 4, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t q = begin; q < end; ++q) {
            const std::int64_t g = gi.group_of(q);
            const double r = rstd[g], s2 = r * weighted_dot[g];
            coef.set(q, {mean[g], r * weight[gi.channel_of(q)], -r * r * s2 / gi.size, -r * s1[g] / gi.size});
        }
    });
    Tx* dx = static_cast<Tx*>(pb.dx.data);
    traverse(plan, kWholePlan, staging, BackpropPass<Tx, Tx, C>(plan, x, dy, dx, coef, 0.0f, input));

    if (!pb.affine) return;
    run_ranges(channels, gi.samples, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t c = begin; c < end; ++c) {
            double db = 0.0, dw = 0.0;
            for (std::int64_t n = 0; n < gi.samples; ++n) {
                const std::int64_t q = n * channels + c;
                db += sdy[q];
                dw += rstd[gi.group_of(q)] * dot[q];
            }
            dbias[c] = db;
            dweight[c] = dw;
        }
    });
    write_param(plan, pb.dweight, dweight);
    write_param(plan, pb.dbias, dbias);
}

}  // namespace

void group_norm_backward(const GnBackward& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        run<Tx>(p);
    });
}

}  // namespace mbn::cpu
