// The split-phase (data-parallel) batch-norm ops on the CPU: local partial
// statistics, their merge, and the two halves of backward.  The normalize op
// lives with inference (bn_forward_inference.cpp), which it shares a pass
// with.  Every per-feature quantity is computed in double; statistics and
// parameter tensors of any accepted type are read and written through one
// dtype switch per tensor, so only the passes over x and dy are templates.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

#include <cmath>
#include <vector>

namespace mbn::cpu {
namespace {

template <typename Tx>
void local_statistics_run(const BnLocalStatistics& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(pb.geom, {&pb.x, nullptr, nullptr}, 1);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* center = ws.take<double>(F);
    double* part_s1 = ws.take<double>(F * plan.blocks);
    double* part_s2 = ws.take<double>(F * plan.blocks);
    double* count = ws.take<double>(F);
    double* mean = ws.take<double>(F);
    double* m2 = ws.take<double>(F);
    const StagingBuffers<C> staging(plan, ws);
    const Tx* x = static_cast<const Tx*>(pb.x.data);
    first_values(plan, kWholePlan, x, center);
    traverse(plan, kWholePlan, staging, StatisticsPass<Tx, C>{{x}, center, part_s1, part_s2});
    sum_blocks<2>(plan, kWholePlan, {part_s1, part_s2}, {mean, m2});  // Σ(x - c), Σ(x - c)² until replaced
    const double M = static_cast<double>(plan.reduction);
    run_features(plan, 1, [&](std::int64_t p) {
        const Statistics st = shifted_statistics(center[p], mean[p], m2[p], M);
        count[p] = M;
        mean[p] = st.mean;
        m2[p] = st.variance * M;
    });
    write_param(plan, pb.count, count);
    write_param(plan, pb.mean, mean);
    write_param(plan, pb.m2, m2);
}

// The values of a tensor in row-major (N, C, D, H, W) order, as double.
std::vector<double> gather(const TensorArg& t) {
    std::vector<double> out(static_cast<std::size_t>(t.element_count()));
    with_data_type(t.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* data = static_cast<const T*>(t.data);
        std::size_t i = 0;
        for (std::int64_t n = 0; n < t.len[kN]; ++n)
            for (std::int64_t c = 0; c < t.len[kC]; ++c)
                for (std::int64_t d = 0; d < t.len[kD]; ++d)
                    for (std::int64_t h = 0; h < t.len[kH]; ++h)
                        for (std::int64_t w = 0; w < t.len[kW]; ++w) out[i++] = load_as<double>(data[t.offset(n, c, d, h, w)]);
    });
    return out;
}

// Writes row-major values into a tensor with len[kN] == 1.
void scatter(const TensorArg& t, const std::vector<double>& values) {
    with_data_type(t.dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        T* data = static_cast<T*>(t.data);
        std::size_t i = 0;
        for (std::int64_t c = 0; c < t.len[kC]; ++c)
            for (std::int64_t d = 0; d < t.len[kD]; ++d)
                for (std::int64_t h = 0; h < t.len[kH]; ++h)
                    for (std::int64_t w = 0; w < t.len[kW]; ++w) data[t.offset(0, c, d, h, w)] = store_from<T>(values[i++]);
    });
}

template <typename Tx, typename Tg>
void backward_reduce_run(const BnBackwardReduce& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(pb.geom, {&pb.x, &pb.dy, nullptr}, 2);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* mean = ws.take<double>(F);
    double* invstd = ws.take<double>(F);
    read_param(plan, pb.mean, mean);
    read_param(plan, pb.inv_std, invstd);
    const std::int64_t parts = F * plan.blocks;
    const GradientSums sums{ws.take<double>(parts), ws.take<double>(parts), nullptr, nullptr};
    double* sum_dy = ws.take<double>(F);
    double* sum_dy_xmu = ws.take<double>(F);
    const StagingBuffers<C> staging(plan, ws);
    const Tx* x = static_cast<const Tx*>(pb.x.data);
    const Tg* dy = static_cast<const Tg*>(pb.dy.data);
    traverse(plan, kWholePlan, staging, GradientPass<Tx, Tg, C>{{x, dy}, mean, sums});
    sum_blocks<2>(plan, kWholePlan, {sums.sdy, sums.dot}, {sum_dy, sum_dy_xmu});
    write_param(plan, pb.sum_dy, sum_dy);
    write_param(plan, pb.sum_dy_xmu, sum_dy_xmu);
    if (!pb.dscale.present()) return;
    for (std::int64_t p = 0; p < F; ++p) invstd[p] *= sum_dy_xmu[p];  // now dscale
    write_param_blended(plan, pb.dscale, invstd, pb.param);
    write_param_blended(plan, pb.dbias, sum_dy, pb.param);
}

template <typename Tx, typename Tg>
void backward_elementwise_run(const BnBackwardElementwise& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(pb.geom, {&pb.x, &pb.dy, &pb.dx}, 3);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* values = ws.take<double>(6 * F);
    const TensorArg* inputs[] = {&pb.scale, &pb.mean, &pb.inv_std, &pb.sum_dy, &pb.sum_dy_xmu, &pb.count};
    for (int i = 0; i < 6; ++i) read_param(plan, *inputs[i], values + i * F);
    const double *scale = values, *mean = values + F, *invstd = values + 2 * F;
    const double *sum_dy = values + 3 * F, *sum_dy_xmu = values + 4 * F, *count = values + 5 * F;
    const BackpropArrays coef(ws, F, backprop_in_float<C>(plan));
    const StagingBuffers<C> staging(plan, ws);
    run_features(plan, 1, [&](std::int64_t p) {
        coef.set(p, backprop_coefficients(mean[p], invstd[p], scale[p], sum_dy[p], sum_dy_xmu[p] * invstd[p], count[p],
                                          pb.data.alpha));
    });
    traverse(plan, kWholePlan, staging,
             BackpropPass<Tx, Tg, C>(plan, static_cast<const Tx*>(pb.x.data), static_cast<const Tg*>(pb.dy.data),
                                     static_cast<Tg*>(pb.dx.data), coef, pb.data.beta));
}

template <typename Fn>
void with_x_and_gradient_types(const TensorArg& x, const TensorArg& dy, Fn&& fn) {
    with_data_type(x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        with_own_or_float<Tx>(dy.dtype, [&](auto grad) { fn(io, grad); });
    });
}

}  // namespace

void local_statistics(const BnLocalStatistics& p) {
    with_data_type(p.x.dtype, [&](auto io) { local_statistics_run<typename decltype(io)::type>(p); });
}

void merge_statistics(const BnMergeStatistics& p) {
    const std::vector<double> count = gather(p.count), mean = gather(p.mean), m2 = gather(p.m2);
    const std::int64_t K = p.ranks();
    const std::size_t F = count.size() / static_cast<std::size_t>(K);
    std::vector<double> out_mean(F), out_inv_std(F), run_mean, run_var;
    const bool running = p.running_mean.present();
    if (running) run_mean = gather(p.running_mean), run_var = gather(p.running_var);
    for (std::size_t f = 0; f < F; ++f) {
        MergedMoments m;  // rank by rank, in order
        for (std::int64_t k = 0; k < K; ++k) {
            const std::size_t i = static_cast<std::size_t>(k) * F + f;
            m.add(count[i], mean[i], m2[i]);
        }
        if (m.count == 0.0) m.mean = m.m2 = std::nan("");
        const double var = biased_variance(m.m2, m.count);
        out_mean[f] = m.mean;
        out_inv_std[f] = inverse_std(var, p.epsilon);
        if (running) {
            run_mean[f] = running_update(run_mean[f], m.mean, p.exp_avg_factor);
            run_var[f] = running_update(run_var[f], unbiased_variance(var, m.count), p.exp_avg_factor);
        }
    }
    scatter(p.saved_mean, out_mean);
    scatter(p.saved_inv_std, out_inv_std);
    if (running) {
        scatter(p.running_mean, run_mean);
        scatter(p.running_var, run_var);
    }
}

void backward_reduce(const BnBackwardReduce& p) {
    with_x_and_gradient_types(p.x, p.dy, [&](auto io, auto grad) {
        backward_reduce_run<typename decltype(io)::type, typename decltype(grad)::type>(p);
    });
}

void backward_elementwise(const BnBackwardElementwise& p) {
    with_x_and_gradient_types(p.x, p.dy, [&](auto io, auto grad) {
        backward_elementwise_run<typename decltype(io)::type, typename decltype(grad)::type>(p);
    });
}

}  // namespace mbn::cpu
