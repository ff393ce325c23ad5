// The phases batch-norm kernels are built from, as device functions over one
// block's share of a problem (its features and one split of their
// reduction): statistics moments and the normalize loop (feature_phases.h,
// shared with group norm), the statistics' finish into mean and inverse std,
// the gradient sums and the backprop loop.
//
// The multi-launch kernels (feature_passes.hip, bn_stats.hip, bn_forward.hip,
// bn_backward.hip) run one phase each, with the splits of a feature merged
// in scratch between launches; the single-launch kernels (bn_fused.hpp)
// chain the phases inside one block when that block owns its features'
// whole reduction (layout.splits == 1).  Both use these functions, so both
// compute the same values in the same order.
#pragma once

#include "common/numerics.hpp"
#include "common/problem.hpp"
#include "gpu/block_reduce.h"
#include "gpu/bn_activation.h"
#include "gpu/bn_launch.hpp"
#include "gpu/feature_phases.h"
#include "gpu/feature_share.h"
#include "gpu/nest_walk.h"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"

#include <cstdint>

namespace mbn {
namespace gpu {

// ---- statistics ---------------------------------------------------------------

// A feature's statistics from its merged moments: mean = shift + mean_offset.
struct FeatureStatistics {
    double mean_offset;
    double variance;  // biased: it normalizes
    double inv_std;
};

__device__ __forceinline__ FeatureStatistics finish_statistics(const ShiftedMoments<double>& total, double count,
                                                               double epsilon) {
    FeatureStatistics s;
    s.mean_offset = total.sum / count;
    s.variance = biased_variance(total.welford.m2, count);
    s.inv_std = inverse_std(s.variance, epsilon);
    return s;
}

// The parameter tensors a training call's statistics finish reads and
// writes (absent ones are skipped), each of its own type, and its factors.
struct StatsOutputs {
    ParamRef scale, bias;                          // read
    ParamRef prev_running_mean, prev_running_var;  // read
    ParamRef running_mean, running_var;            // written
    ParamRef saved_mean, saved_inv_std;            // written
    double epsilon;
    double exp_avg_factor;
};

// The kernels' view of a call's StatsWrites.
inline StatsOutputs stats_outputs(const StatsWrites& writes, double epsilon) {
    StatsOutputs out;
    out.scale = param_ref(writes.scale);
    out.bias = param_ref(writes.bias);
    out.prev_running_mean = param_ref(writes.prev_running_mean);
    out.prev_running_var = param_ref(writes.prev_running_var);
    out.running_mean = param_ref(writes.running_mean);
    out.running_var = param_ref(writes.running_var);
    out.saved_mean = param_ref(writes.saved_mean);
    out.saved_inv_std = param_ref(writes.saved_inv_std);
    out.epsilon = epsilon;
    out.exp_avg_factor = writes.exp_avg_factor;
    return out;
}

// The forward factors of one feature: y = ((x - shift) - mean_offset) * coef0 + coef1.
struct ForwardCoefficients {
    double shift;
    double mean_offset;
    double coef0;  // scale * inv_std
    double coef1;  // bias
};

// Writes a feature's saved and running statistics (where `out` names them;
// the running ones are read from the previous buffers, which V3 keeps apart)
// and returns its forward coefficients (scale and bias may be absent when
// only statistics are wanted: the coefficients are then meaningless).
__device__ inline ForwardCoefficients write_statistics(const StatsOutputs& out, const FeatureLayout& layout,
                                                       std::int64_t feature, double shift,
                                                       const FeatureStatistics& s) {
    constexpr int kParams = kFwdPrevVar - kSlotParam0 + 1;
    const std::int64_t m = layout.reduction_size();
    const double mean = shift + s.mean_offset;
    std::int64_t at[kParams];  // offsets in the forward parameter slots
    nest_offsets<kParams>(layout.feature, feature, kSlotParam0, at);
    ForwardCoefficients c{shift, s.mean_offset, 0.0, 0.0};
    if (out.scale.present()) {
        c.coef0 = out.scale.load(at[kFwdScale - kSlotParam0]) * s.inv_std;
        c.coef1 = out.bias.load(at[kFwdBias - kSlotParam0]);
    }
    if (out.running_mean.present()) {
        const double unbiased = unbiased_variance(s.variance, static_cast<double>(m));
        const double f = out.exp_avg_factor;
        const double prior_mean = out.prev_running_mean.load(at[kFwdPrevMean - kSlotParam0]);
        const double prior_var = out.prev_running_var.load(at[kFwdPrevVar - kSlotParam0]);
        out.running_mean.store(at[kFwdMean - kSlotParam0], running_update(prior_mean, mean, f));
        out.running_var.store(at[kFwdVar - kSlotParam0], running_update(prior_var, unbiased, f));
    }
    if (out.saved_mean.present()) {
        out.saved_mean.store(at[kFwdSavedMean - kSlotParam0], mean);
        out.saved_inv_std.store(at[kFwdSavedInvStd - kSlotParam0], s.inv_std);
    }
    return c;
}

// ---- normalize epilogue ----------------------------------------------------------

// The epilogue of batch norm's `activation` in the accumulation type A,
// `fused` being with_activation's tag: NoEpilogue without one (that kernel
// instance is the plain one), else ActivationEpilogue<A>.
template <typename A>
NoEpilogue activation_epilogue(std::false_type, const ActivationSpec&) {
    return NoEpilogue{};
}
template <typename A>
ActivationEpilogue<A> activation_epilogue(std::true_type, const ActivationSpec& activation) {
    return ActivationEpilogue<A>{activation};
}

// ---- backward -------------------------------------------------------------------

// The type of dx's per-element arithmetic, C: double, or float for float,
// half and bfloat16 data when every feature reduces over at least
// kFloatBackpropMinCount values (common/numerics.hpp).  Conversions to and
// from double issue at an eighth of the float rate, and the double path
// converts x, dy and dx.

// Positions per thread in flight: about 8 values of each input held as
// doubles, 16 as floats.
template <int V, typename C>
__host__ __device__ constexpr int backprop_batch_positions() {
    return sizeof(C) == sizeof(double) ? (V >= 8 ? 1 : V == 4 ? 2 : 4) : (V >= 8 ? 2 : V == 4 ? 4 : 8);
}

// A feature's center as two C values, hi + lo: (x - hi) - lo keeps the
// digits of x - center in float, as long as x is within a factor of two of
// the center (a channel of mean 1e4 and std 1e-2), where a float center
// alone would be off by more than the deviations' own rounding.  For double
// C, lo is 0.
template <typename C>
struct SplitCenter {
    C hi;
    C lo;
};
template <typename C>
__device__ __forceinline__ SplitCenter<C> split_center(double center) {
    const C hi = static_cast<C>(center);
    return SplitCenter<C>{hi, static_cast<C>(center - static_cast<double>(hi))};
}

// A fused activation's share of the backward: g = dy * f'(z) takes dy's
// place, z = factor * (x - mean) + bias per feature of the thread (factor =
// scale * inv_std, the forward's coefficients).  Ignored by the kernels'
// instances without an activation (Fused = false).
template <int VF>
struct ActivationTerms {
    ActivationSpec spec;
    double factor[VF];
    double bias[VF];
};

// g of one element: dy times f'(z), f' taken in the accumulation type A of
// the data (as the forward takes f, and as the CPU backend does).
template <typename A, typename C>
__device__ __forceinline__ C activated_gradient(const ActivationSpec& spec, C dy, C z) {
    return dy * static_cast<C>(activation_slope(spec, static_cast<A>(z)));
}

// sum(g) and sum(g * (x - center)) over the share in double, reduced over
// the block's rows (valid in row 0), g = dy, or with Fused the activated
// gradient of `act`, whose z then needs center = the mean.  Every thread of
// the block calls it.
template <typename T, typename G, int Rank, int VR, int VF, bool Fused = false>
__device__ void block_gradient_sums(const T* __restrict__ x, const G* __restrict__ dy, const FeatureLayout& layout,
                                    const ThreadShare& share, const double (&center)[VF],
                                    Sums2<double> (&total)[VF], Sums2<double>* shared,
                                    const ActivationTerms<VF>& act = {}) {
    constexpr int V = VR * VF;
    constexpr int kBatch = backprop_batch_positions<V, double>();
    const std::int64_t rows = layout.rows;
    Sums2<double> sums[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) sums[j] = Sums2<double>{0.0, 0.0};
    if (share.active) {
        std::int64_t base[2];
        nest_offsets<2>(layout.feature, share.feature0, kSlotX, base);
        std::int64_t r = share.first;
        NestCursor<Rank, 2> cursor;
        cursor.start(layout.reduce, r, rows, base);
        for (; r + (kBatch - 1) * rows < share.end; r += kBatch * rows) {
            double xv[kBatch][V], g[kBatch][V];
#pragma unroll
            for (int k = 0; k < kBatch; ++k) {
                load_values<double, V>(x + cursor.offset[0], xv[k]);
                load_values<double, V>(dy + cursor.offset[1], g[k]);
                cursor.advance(layout.reduce);
            }
#pragma unroll
            for (int k = 0; k < kBatch; ++k)
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    const int j = VF > 1 ? e : 0;
                    const double deviation = xv[k][e] - center[j];
                    if constexpr (Fused)
                        g[k][e] = activated_gradient<acc_t<T>>(act.spec, g[k][e],
                                                               deviation * act.factor[j] + act.bias[j]);
                    sums[j].a += g[k][e];
                    sums[j].b += g[k][e] * deviation;
                }
        }
        for (; r < share.end; r += rows) {
            double xv[V], g[V];
            load_values<double, V>(x + cursor.offset[0], xv);
            load_values<double, V>(dy + cursor.offset[1], g);
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const int j = VF > 1 ? e : 0;
                const double deviation = xv[e] - center[j];
                if constexpr (Fused)
                    g[e] = activated_gradient<acc_t<T>>(act.spec, g[e], deviation * act.factor[j] + act.bias[j]);
                sums[j].a += g[e];
                sums[j].b += g[e] * deviation;
            }
            cursor.advance(layout.reduce);
        }
    }
#pragma unroll
    for (int j = 0; j < VF; ++j) total[j] = reduce_over_rows(sums[j], shared);
}

// The backprop factors of one feature: dx = coef0 * ((dy - coef1) - xhat * coef2)
// with xhat = (x - center) * inv_std.
struct BackpropCoefficients {
    double center;
    double inv_std;
    double coef0;  // scale * inv_std
    double coef1;  // mean of dy
    double coef2;  // mean of dy * xhat
};

// The parameter tensors of a backward call, each of its own type (saved
// statistics absent: recomputed; bias absent without an activation).
struct BackwardParams {
    ParamRef scale, dscale, dbias, saved_mean, saved_inv_std, bias;
};

inline BackwardParams backward_params(const BnBackward& p) {
    return BackwardParams{param_ref(p.scale),      param_ref(p.dscale),        param_ref(p.dbias),
                          param_ref(p.saved_mean), param_ref(p.saved_inv_std), param_ref(p.bias)};
}

// A feature's saved mean and inverse std.
__device__ inline void load_saved_statistics(const BackwardParams& p, const FeatureLayout& layout, std::int64_t feature,
                                             double& mean, double& inv_std) {
    std::int64_t at[2];
    nest_offsets<2>(layout.feature, feature, kBwdSavedMean, at);
    mean = p.saved_mean.load(at[0]);
    inv_std = p.saved_inv_std.load(at[1]);
}

// A feature's fused-activation terms (ActivationTerms: factor and bias) from
// its inverse std.
__device__ inline void load_activation_terms(const BackwardParams& p, const FeatureLayout& layout, std::int64_t feature,
                                             double inv_std, double& factor, double& bias) {
    factor = p.scale.load(nest_offset(layout.feature, feature, kBwdScale)) * inv_std;
    bias = p.bias.load(nest_offset(layout.feature, feature, kBwdBias));
}

// Writes a feature's dscale and dbias (blended) from its gradient sums and
// returns its backprop coefficients.
__device__ inline BackpropCoefficients finish_gradients(const FeatureLayout& layout, std::int64_t feature,
                                                        double center, double inv_std, const Sums2<double>& sums,
                                                        const BackwardParams& p, Blend param) {
    const double sum_dy = sums.a;
    const double sum_dy_xhat = sums.b * inv_std;
    std::int64_t at[3];
    nest_offsets<3>(layout.feature, feature, kBwdScale, at);
    p.dscale.store_blended(at[kBwdDscale - kBwdScale], sum_dy_xhat, param.alpha, param.beta);
    p.dbias.store_blended(at[kBwdDbias - kBwdScale], sum_dy, param.alpha, param.beta);
    const double m = static_cast<double>(layout.reduction_size());
    return BackpropCoefficients{center, inv_std, p.scale.load(at[0]) * inv_std, sum_dy / m, sum_dy_xhat / m};
}

// The coefficients in C, the center split (see SplitCenter).
template <typename C>
struct BackpropFactors {
    SplitCenter<C> center;
    C inv_std, coef0, coef1, coef2;
};
template <typename C>
__device__ __forceinline__ BackpropFactors<C> backprop_factors(const BackpropCoefficients& c) {
    return BackpropFactors<C>{split_center<C>(c.center), static_cast<C>(c.inv_std), static_cast<C>(c.coef0),
                              static_cast<C>(c.coef1), static_cast<C>(c.coef2)};
}

// dx (before blending) into g, from x and dy (in g) of one position; with
// Fused, dy first becomes the activated gradient, z = coef0 * (x - mean) +
// z_bias (coef0 = scale * inv_std).
template <typename A, bool Fused, int V, int VF, typename C>
__device__ __forceinline__ void backprop_values(const BackpropFactors<C> (&f)[VF], const C (&z_bias)[VF],
                                                const ActivationSpec& spec, const C (&xv)[V], C (&g)[V]) {
#pragma unroll
    for (int e = 0; e < V; ++e) {
        const int j = VF > 1 ? e : 0;
        const BackpropFactors<C>& k = f[j];
        const C deviation = (xv[e] - k.center.hi) - k.center.lo;
        const C xhat = deviation * k.inv_std;
        if constexpr (Fused) g[e] = activated_gradient<A>(spec, g[e], deviation * k.coef0 + z_bias[j]);
        g[e] = k.coef0 * ((g[e] - k.coef1) - xhat * k.coef2);
    }
}

// dx = alpha * coef0 * ((g - coef1) - xhat * coef2) + beta * dx_prior over
// the thread's share, in C (double where dx may cancel: see
// kFloatBackpropMinCount), g = dy or (Fused) the activated gradient of `act`
// (its factors are coef0).  dx may be dy (in place): each element is read
// before this thread writes it.
template <typename T, typename G, typename C, int Rank, int VR, int VF, bool Fused = false>
__device__ void backprop_share(const T* x, const G* dy, G* dx, const FeatureLayout& layout, const ThreadShare& share,
                               const BackpropCoefficients (&coefficients)[VF], float alpha, float beta,
                               const ActivationTerms<VF>& act = {}) {
    using A = acc_t<T>;
    constexpr int V = VR * VF;
    constexpr int kBatch = backprop_batch_positions<V, C>();
    const std::int64_t rows = layout.rows;
    BackpropFactors<C> f[VF];
    C z_bias[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        f[j] = backprop_factors<C>(coefficients[j]);
        z_bias[j] = Fused ? static_cast<C>(act.bias[j]) : C(0);
    }
    std::int64_t base[3];
    nest_offsets<3>(layout.feature, share.feature0, kSlotX, base);
    std::int64_t r = share.first;
    NestCursor<Rank, 3> cursor;
    cursor.start(layout.reduce, r, rows, base);
    for (; r + (kBatch - 1) * rows < share.end; r += kBatch * rows) {
        // As loaded until its turn (see normalize_share).
        Pack<T, V> raw_x[kBatch];
        Pack<G, V> raw_dy[kBatch];
        std::int64_t out[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            raw_x[k] = load_pack<V>(x + cursor.offset[0]);
            raw_dy[k] = load_pack<V>(dy + cursor.offset[1]);
            out[k] = cursor.offset[2];
            cursor.advance(layout.reduce);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            C xv[V], g[V];
            widen_pack<C, V>(raw_x[k], xv);
            widen_pack<C, V>(raw_dy[k], g);
            backprop_values<A, Fused, V, VF, C>(f, z_bias, act.spec, xv, g);
            store_values<G, V>(dx + out[k], g, alpha, beta);
        }
    }
    for (; r < share.end; r += rows) {
        C xv[V], g[V];
        load_values<C, V>(x + cursor.offset[0], xv);
        load_values<C, V>(dy + cursor.offset[1], g);
        backprop_values<A, Fused, V, VF, C>(f, z_bias, act.spec, xv, g);
        store_values<G, V>(dx + cursor.offset[2], g, alpha, beta);
        cursor.advance(layout.reduce);
    }
}

}  // namespace gpu
}  // namespace mbn
