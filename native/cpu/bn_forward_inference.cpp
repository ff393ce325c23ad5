// Inference forward with estimated statistics: one streaming pass.
// y = scale * (x - mean) / sqrt(var + eps) + bias, with no fabs: a negative
// var + eps gives NaN, as the SPEC requires.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

namespace mbn::cpu {
namespace {

template <typename Tx, typename Tp>
void run(const BnForwardInference& pb) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(pb.geom, {&pb.x, &pb.y, nullptr}, 2);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* params = ws.take<double>(5 * F);
    double *scale = params, *bias = params + F, *mean = params + 2 * F, *var = params + 3 * F;
    double* invstd = params + 4 * F;
    read_param<Tp>(plan, pb.scale, scale);
    read_param<Tp>(plan, pb.bias, bias);
    read_param<Tp>(plan, pb.mean, mean);
    read_param<Tp>(plan, pb.var, var);
    const NormalizeArrays<C> coef(ws, F);
    const Scratch<C> scratch(plan, ws);
    inverse_std_span(var, pb.epsilon, invstd, F);
    run_features(plan, 1, [&](std::int64_t p) {
        coef.set(p, normalize_coefficients<C>(mean[p], invstd[p], scale[p], bias[p], pb.out.alpha));
    });
    normalize_pass<Tx, C>(plan, kWholePlan, static_cast<const Tx*>(pb.x.data), static_cast<Tx*>(pb.y.data), coef,
                          pb.out.beta, scratch);
}

}  // namespace

void forward_inference(const BnForwardInference& p) {
    with_data_type(p.x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        with_own_or_float<Tx>(p.scale.dtype, [&](auto param) { run<Tx, typename decltype(param)::type>(p); });
    });
}

}  // namespace mbn::cpu
