// Normalizing with given statistics: one streaming pass.  Inference takes
// the estimated variance, y = scale * (x - mean) / sqrt(var + eps) + bias,
// with no fabs (a negative var + eps gives NaN: docs/deviations.md); or
// the inverse std itself (var_is_inv_std: the InvVariance entry point and
// the split-phase normalize), y = scale * (x - mean) * invstd + bias.  A
// fused activation is applied to each run of y while it is in cache.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

#include <algorithm>

namespace mbn::cpu {
namespace {

template <typename Tx>
void run(const BnForwardInference& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(pb.geom, {&pb.x, &pb.y, nullptr}, 2);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* params = ws.take<double>(5 * F);
    double *scale = params, *bias = params + F, *mean = params + 2 * F, *var = params + 3 * F;
    double* invstd = params + 4 * F;
    read_param(plan, pb.scale, scale);
    read_param(plan, pb.bias, bias);
    read_param(plan, pb.mean, mean);
    read_param(plan, pb.var, var);
    const NormalizeArrays<C> coef(ws, F);
    const StagingBuffers<C> staging(plan, ws);
    if (pb.var_is_inv_std) std::copy(var, var + F, invstd);
    else inverse_std_span(var, pb.epsilon, invstd, F);
    const OutputActivation<C> act = fused_activation<C>(pb.activation, pb.out);
    run_features(plan, 1, [&](std::int64_t p) {
        coef.set(p, normalize_coefficients<C>(mean[p], invstd[p], scale[p], bias[p], act.coefficient_alpha(pb.out)));
    });
    traverse(plan, kWholePlan, staging,
             NormalizePass<Tx, C>(plan, static_cast<const Tx*>(pb.x.data), static_cast<Tx*>(pb.y.data), coef,
                                  pb.out.beta, act));
}

}  // namespace

void forward_inference(const BnForwardInference& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        run<Tx>(p);
    });
}

void normalize(const BnNormalize& p) {
    BnForwardInference q;
    q.geom = p.geom;
    q.x = p.x;
    q.y = p.y;
    q.scale = p.scale;
    q.bias = p.bias;
    q.mean = p.mean;
    q.var = p.inv_std;
    q.var_is_inv_std = true;
    q.out = p.out;
    forward_inference(q);
}

}  // namespace mbn::cpu
