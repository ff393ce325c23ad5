// Normalizing with given statistics: one streaming pass.  Inference takes
// the estimated variance, y = scale * (x - mean) / sqrt(var + eps) + bias,
// with no fabs (a negative var + eps gives NaN, as the SPEC requires); the
// split-phase normalize takes the inverse standard deviation itself.
#include "cpu/bn_math.hpp"
#include "cpu/bn_ops.hpp"
#include "cpu/dtype_dispatch.hpp"
#include "cpu/param_io.hpp"
#include "cpu/walk_passes.hpp"

namespace mbn::cpu {
namespace {

// `spread` is the variance (inverse_std false) or the inverse std itself.
template <typename Tx, typename Tp>
void run(const BnGeometry& geom, const TensorArg& x, const TensorArg& y, const TensorArg& scale_t,
         const TensorArg& bias_t, const TensorArg& mean_t, const TensorArg& spread, bool inverse_std, double epsilon,
         Blend out) {
    using C = typename Element<Tx>::Compute;
    const WalkPlan plan = plan_walk(geom, {&x, &y, nullptr}, 2);
    const std::int64_t F = plan.features;
    Workspace ws;
    double* params = ws.take<double>(4 * F);
    double *scale = params, *bias = params + F, *mean = params + 2 * F, *invstd = params + 3 * F;
    read_param<Tp>(plan, scale_t, scale);
    read_param<Tp>(plan, bias_t, bias);
    read_param<Tp>(plan, mean_t, mean);
    read_param<Tp>(plan, spread, invstd);
    const NormalizeArrays<C> coef(ws, F);
    const Scratch<C> scratch(plan, ws);
    if (!inverse_std) inverse_std_span(invstd, epsilon, invstd, F);
    run_features(plan, 1, [&](std::int64_t p) {
        coef.set(p, normalize_coefficients<C>(mean[p], invstd[p], scale[p], bias[p], out.alpha));
    });
    normalize_pass<Tx, C>(plan, kWholePlan, static_cast<const Tx*>(x.data), static_cast<Tx*>(y.data), coef, out.beta,
                          scratch);
}

template <typename Fn>
void with_types(const TensorArg& x, const TensorArg& scale, Fn&& fn) {
    with_data_type(x.dtype, [&](auto io) {
        using Tx = typename decltype(io)::type;
        with_own_or_float<Tx>(scale.dtype, [&](auto param) { fn(io, param); });
    });
}

}  // namespace

void forward_inference(const BnForwardInference& p) {
    with_types(p.x, p.scale, [&](auto io, auto param) {
        run<typename decltype(io)::type, typename decltype(param)::type>(p.geom, p.x, p.y, p.scale, p.bias, p.mean,
                                                                           p.var, false, p.epsilon, p.out);
    });
}

void normalize(const BnNormalize& p) {
    with_types(p.x, p.scale, [&](auto io, auto param) {
        run<typename decltype(io)::type, typename decltype(param)::type>(p.geom, p.x, p.y, p.scale, p.bias, p.mean,
                                                                           p.inv_std, true, 0.0, p.out);
    });
}

}  // namespace mbn::cpu
