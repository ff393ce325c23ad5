// Backward: dbias = Σg, dscale = Σg·xhat, and dx, with the statistics
// taken from savedMean/savedInvVariance or recomputed from x with epsilon,
// and g = dy, or dy * f'(z) through a fused activation f whose input
// z = scale * xhat + bias is recomputed on each pass.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

#include <optional>

namespace mbn::cpu {
namespace {

template <typename Tx, typename Tg>
void run(const BnBackward& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_fused_walk(pb.geom, {&pb.x, &pb.dy, &pb.dx}, 3, sizeof(Tx));
    const std::int64_t F = plan.features;
    const bool saved = pb.saved_mean.present();
    const bool fused = !pb.activation.identity();
    // Without saved statistics they are recomputed: alongside the gradient
    // sums, or, with an activation (whose input z needs them), in a pass of
    // their own first.
    const bool stats_alongside = !saved && !fused;
    const bool stats_first = !saved && fused;

    Workspace ws;
    double* scale = ws.take<double>(F);
    double* bias = fused ? ws.take<double>(F) : nullptr;
    double* mean = ws.take<double>(F);
    double* invstd = ws.take<double>(F);
    read_param(plan, pb.scale, scale);
    if (fused) read_param(plan, pb.bias, bias);
    if (saved) {
        read_param(plan, pb.saved_mean, mean);
        read_param(plan, pb.saved_inv_std, invstd);
    }
    const std::int64_t parts = F * plan.blocks;
    const GradientSums sums{ws.take<double>(parts), ws.take<double>(parts),
                            stats_alongside ? ws.take<double>(parts) : nullptr,
                            stats_alongside ? ws.take<double>(parts) : nullptr};
    double* part_s1 = stats_first ? ws.take<double>(parts) : nullptr;
    double* part_s2 = stats_first ? ws.take<double>(parts) : nullptr;
    double* dscale = ws.take<double>(F);
    double* dbias = ws.take<double>(F);
    const BackpropArrays coef(ws, F, backprop_in_float<C>(plan));
    std::optional<NormalizeArrays<C>> z;  // the activation's input, as the forward computed it
    if (fused) z.emplace(ws, F);
    const GradientInput<C> input = fused ? GradientInput<C>::fused(*z, pb.activation) : GradientInput<C>{};
    const StagingBuffers<C> staging(plan, ws);

    // Sums are shifted by the mean when it is known first, else by each
    // feature's first value.
    const Tx* x = static_cast<const Tx*>(pb.x.data);
    const Tg* dy = static_cast<const Tg*>(pb.dy.data);
    double* center = stats_alongside ? ws.take<double>(F) : mean;
    double* first = stats_first ? ws.take<double>(F) : nullptr;
    double* s1 = saved ? nullptr : ws.take<double>(F);
    double* s2 = saved ? nullptr : ws.take<double>(F);
    const double M = static_cast<double>(plan.reduction);
    const auto take_statistics = [&](const double* shift, std::int64_t begin, std::int64_t end) {
        for (std::int64_t p = begin; p < end; ++p) {
            const Statistics st = shifted_statistics(shift[p], s1[p], s2[p], M);
            if (stats_alongside) dscale[p] -= (st.mean - shift[p]) * dbias[p];  // Σdy·(x - mean) from Σdy·(x - c)
            mean[p] = st.mean;
            s2[p] = st.variance;
        }
        inverse_std_span(s2 + begin, pb.epsilon, invstd + begin, end - begin);
    };
    // Sums, then dx; for a fused plan unit by unit, each unit's dx computed
    // while its x and dy are still in cache.
    run_scopes(plan, [&](const PassScope& scope) {
        if (stats_alongside) first_values(plan, scope, x, center);
        if (stats_first) {
            first_values(plan, scope, x, first);
            traverse(plan, scope, staging, StatisticsPass<Tx, C>{{x}, first, part_s1, part_s2});
            sum_blocks<2>(plan, scope, {part_s1, part_s2}, {s1, s2});
            run_feature_ranges(plan, scope, 1,
                               [&](std::int64_t begin, std::int64_t end) { take_statistics(first, begin, end); });
        }
        if (fused) {
            run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t p = begin; p < end; ++p)
                    z->set(p, normalize_coefficients<C>(mean[p], invstd[p], scale[p], bias[p], 1.0f));
            });
        }
        traverse(plan, scope, staging, GradientPass<Tx, Tg, C>{{x, dy}, center, sums, input});

        // Per-feature totals: Σg in dbias, Σg·(x - c) in dscale until replaced.
        if (stats_alongside) sum_blocks<4>(plan, scope, {sums.sdy, sums.dot, sums.s1, sums.s2}, {dbias, dscale, s1, s2});
        else sum_blocks<2>(plan, scope, {sums.sdy, sums.dot}, {dbias, dscale});
        run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
            if (stats_alongside) take_statistics(center, begin, end);
            for (std::int64_t p = begin; p < end; ++p) {
                dscale[p] *= invstd[p];
                coef.set(p, backprop_coefficients(mean[p], invstd[p], scale[p], dbias[p], dscale[p], M,
                                                  pb.data.alpha));
            }
        });

        traverse(plan, scope, staging,
                 BackpropPass<Tx, Tg, C>(plan, x, dy, static_cast<Tg*>(pb.dx.data), coef, pb.data.beta, input));
    });
    write_param_blended(plan, pb.dscale, dscale, pb.param);
    write_param_blended(plan, pb.dbias, dbias, pb.param);
}

}  // namespace

void backward(const BnBackward& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        with_own_or_float<Tx>(p.dy.dtype, [&](auto grad) { run<Tx, typename decltype(grad)::type>(p); });
    });
}

}  // namespace mbn::cpu
