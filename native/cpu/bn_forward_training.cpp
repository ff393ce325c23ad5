// Training forward: batch statistics, y (through the fused activation, if
// any), and the optional saved and running statistics (read from the
// previous buffers, written to the next: the same ones but for V3).  Also
// serves inference without estimates (neither pair given).
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

namespace mbn::cpu {
namespace {

template <typename Tx>
void run(const BnForwardTraining& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_fused_walk(pb.geom, {&pb.x, &pb.y, nullptr}, 2, sizeof(Tx));
    const std::int64_t F = plan.features;
    const bool running = pb.running_mean.present();

    // Everything is allocated and every input parameter read before y is touched.
    Workspace ws;
    double* scale = ws.take<double>(F);
    double* bias = ws.take<double>(F);
    read_param(plan, pb.scale, scale);
    read_param(plan, pb.bias, bias);
    double* run_mean = running ? ws.take<double>(F) : nullptr;
    double* run_var = running ? ws.take<double>(F) : nullptr;
    if (running) {
        read_param(plan, pb.prev_running_mean, run_mean);
        read_param(plan, pb.prev_running_var, run_var);
    }
    double* center = ws.take<double>(F);
    double* part_s1 = ws.take<double>(F * plan.blocks);
    double* part_s2 = ws.take<double>(F * plan.blocks);
    double* mean = ws.take<double>(F);
    double* var = ws.take<double>(F);
    double* invstd = ws.take<double>(F);
    const NormalizeArrays<C> coef(ws, F);
    const OutputActivation<C> act = fused_activation<C>(pb.activation, pb.out);
    const float coef_alpha = act.coefficient_alpha(pb.out);
    const StagingBuffers<C> staging(plan, ws);

    const Tx* x = static_cast<const Tx*>(pb.x.data);
    Tx* y = static_cast<Tx*>(pb.y.data);
    const double M = static_cast<double>(plan.reduction);
    // Statistics, then y; for a fused plan unit by unit, each unit's y
    // computed while its x is still in cache.
    run_scopes(plan, [&](const PassScope& scope) {
        first_values(plan, scope, x, center);
        traverse(plan, scope, staging, StatisticsPass<Tx, C>{{x}, center, part_s1, part_s2});

        // Σ(x - c) and Σ(x - c)² per feature, held in mean and var until replaced.
        sum_blocks<2>(plan, scope, {part_s1, part_s2}, {mean, var});
        run_feature_ranges(plan, scope, 1, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t p = begin; p < end; ++p) {
                const Statistics st = shifted_statistics(center[p], mean[p], var[p], M);
                mean[p] = st.mean;
                var[p] = st.variance;
            }
            inverse_std_span(var + begin, pb.epsilon, invstd + begin, end - begin);
            for (std::int64_t p = begin; p < end; ++p)
                coef.set(p, normalize_coefficients<C>(mean[p], invstd[p], scale[p], bias[p], coef_alpha));
        });

        traverse(plan, scope, staging, NormalizePass<Tx, C>(plan, x, y, coef, pb.out.beta, act));
    });

    if (pb.saved_mean.present()) {
        write_param(plan, pb.saved_mean, mean);
        write_param(plan, pb.saved_inv_std, invstd);
    }
    if (running) {
        const double f = pb.exp_avg_factor;
        for (std::int64_t p = 0; p < F; ++p) {
            run_mean[p] = running_update(run_mean[p], mean[p], f);
            run_var[p] = running_update(run_var[p], unbiased_variance(var[p], M), f);
        }
        write_param(plan, pb.running_mean, run_mean);
        write_param(plan, pb.running_var, run_var);
    }
}

}  // namespace

void forward_training(const BnForwardTraining& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        run<Tx>(p);
    });
}

}  // namespace mbn::cpu
