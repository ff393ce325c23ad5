// Backward: dbias = Σdy, dscale = Σdy·xhat, and dx, with the statistics
// taken from savedMean/savedInvVariance or recomputed from x with epsilon.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

namespace mbn::cpu {
namespace {

template <typename Tx, typename Tp, typename Tg>
void run(const BnBackward& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_fused_walk(pb.geom, {&pb.x, &pb.dy, &pb.dx}, 3, sizeof(Tx));
    const std::int64_t F = plan.features;
    const bool saved = pb.saved_mean.present();

    Workspace ws;
    double* scale = ws.take<double>(F);
    double* mean = ws.take<double>(F);
    double* invstd = ws.take<double>(F);
    read_param<Tp>(plan, pb.scale, scale);
    if (saved) {
        read_param<Tp>(plan, pb.saved_mean, mean);
        read_param<Tp>(plan, pb.saved_inv_std, invstd);
    }
    const std::int64_t parts = F * plan.blocks;
    const GradientSums sums{ws.take<double>(parts), ws.take<double>(parts), saved ? nullptr : ws.take<double>(parts),
                            saved ? nullptr : ws.take<double>(parts)};
    double* dscale = ws.take<double>(F);
    double* dbias = ws.take<double>(F);
    const BackpropArrays coef(ws, F, backprop_in_float<C>(plan));
    const Scratch<C> scratch(plan, ws);

    // Sums are shifted by the saved mean, or by each feature's first value.
    const Tx* x = static_cast<const Tx*>(pb.x.data);
    const Tg* dy = static_cast<const Tg*>(pb.dy.data);
    double* center = saved ? mean : ws.take<double>(F);
    double* s1 = saved ? nullptr : ws.take<double>(F);
    double* s2 = saved ? nullptr : ws.take<double>(F);
    const double M = static_cast<double>(plan.reduction);
    // Sums, then dx; for a fused plan unit by unit, each unit's dx computed
    // while its x and dy are still in cache.
    run_scopes(plan, [&](const PassScope& scope) {
        if (!saved) first_values(plan, scope, x, center);
        gradient_pass<Tx, Tg, C>(plan, scope, x, dy, center, scratch, sums);

        // Per-feature totals: Σdy in dbias, Σdy·(x - c) in dscale until replaced.
        if (saved) sum_blocks<2>(plan, scope, {sums.sdy, sums.dot}, {dbias, dscale});
        else sum_blocks<4>(plan, scope, {sums.sdy, sums.dot, sums.s1, sums.s2}, {dbias, dscale, s1, s2});
        run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
            if (!saved) {
                for (std::int64_t p = begin; p < end; ++p) {
                    const Statistics st = shifted_statistics(center[p], s1[p], s2[p], M);
                    dscale[p] -= (st.mean - center[p]) * dbias[p];  // Σdy·(x - mean) from Σdy·(x - center)
                    mean[p] = st.mean;
                    s2[p] = st.variance;
                }
                inverse_std_span(s2 + begin, pb.epsilon, invstd + begin, end - begin);
            }
            for (std::int64_t p = begin; p < end; ++p) {
                dscale[p] *= invstd[p];
                coef.set(p, backprop_coefficients(mean[p], invstd[p], scale[p], dbias[p], dscale[p], M,
                                                  pb.data.alpha));
            }
        });

        backprop_pass<Tx, Tg, C>(plan, scope, x, dy, static_cast<Tg*>(pb.dx.data), coef, pb.data.beta, scratch);
    });
    write_param_blended<Tp>(plan, pb.dscale, dscale, pb.param);
    write_param_blended<Tp>(plan, pb.dbias, dbias, pb.param);
}

}  // namespace

void backward(const BnBackward& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        with_own_or_float<Tx>(p.scale.dtype, [&](auto param) {
            with_own_or_float<Tx>(p.dy.dtype, [&](auto grad) {
                run<Tx, typename decltype(param)::type, typename decltype(grad)::type>(p);
            });
        });
    });
}

}  // namespace mbn::cpu
