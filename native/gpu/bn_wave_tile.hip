// Spatial batch-norm training and backward with each small packed NCHW
// channel owned by one wave (bn_wave_tile.hpp).
//
// A lane holds plane positions lane + W j (j below kPlaneSlots) of each of
// the N samples, all its loads issued before any value is used; the wave
// sums them with shuffles and every lane finishes the channel itself: no
// shared memory, no barrier, one launch, each value read once.  What made
// this form 1.2x-1.35x faster than the wave tiles it replaces (a form of
// the block tiles, bench/RESULTS.md, fifty-fourth session): float32
// parameters loaded first and kept float until the sums are in, every load
// issued before the first conversion, float statistics, no division, and
// no slot past the call's samples touched.
// Numerics (docs/numerics.md, "Wave tiles"): pass one sums x, pass two the
// deviations d = x - m1 from that float mean and their squares, so the mean
// is m1 + sum(d) / M and the variance sum(d^2) / M - (sum(d) / M)^2, from
// numbers of the size of the spread; at most 16 values a lane and a 5- or
// 6-level butterfly.  Sums that come out non-finite (deviations past about
// 1e18, Inf/NaN in x, huge gradients) are taken again in double.  The
// variance and inverse std are taken in double, the rest of the channel's
// constants in float; dx's coefficients and dx in double below
// kFloatBackpropMinCount values, as elsewhere.
#include "gpu/bn_wave_tile_args.h"

#include "common/numerics.hpp"
#include "gpu/block_reduce.h"
#include "gpu/cluster_launch.h"
#include "gpu/feature_plan.hpp"
#include "gpu/norm_math.h"
#include "gpu/param_io.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace mbn {
namespace gpu {
namespace {

// At most 4 waves a block; fewer where the blocks would not cover the
// multiprocessors (256 channels: 64 blocks of 4 waves left half of the
// H200's 132 idle).
constexpr int kMostWavesPerBlock = 4;
// Values a lane holds per tensor: x and dy take 32 registers in the
// backward, all loads in flight at once.
constexpr int kMostPerLane = 16;

// A lane's slots: k = n * kPlaneSlots + j holds sample n at plane position
// lane + W j.  Only the slots of the call's N samples are touched (each()):
// with N below the instance's most, the others are neither loaded nor
// summed nor stored (1x2048x7x7: 2 of 16 slots).
template <int kPlaneSlots>
struct LaneSlots {
    static constexpr int kSamples = kMostPerLane / kPlaneSlots;
    int samples;
    bool held[kPlaneSlots];  // position lane + W j lies in the plane

    __device__ LaneSlots(int lane, int samples_, int plane) : samples(samples_) {
#pragma unroll
        for (int j = 0; j < kPlaneSlots; ++j) held[j] = lane + MBN_WAVE_SIZE * j < plane;
    }
    // Whether slot k (of a sample below N) holds a value.
    __device__ __forceinline__ bool in(int k) const { return held[k % kPlaneSlots]; }
    // Element offset of slot k from the lane's first (sample 0, position lane).
    __device__ __forceinline__ static int offset(int k, int sample_stride) {
        return k / kPlaneSlots * sample_stride + MBN_WAVE_SIZE * (k % kPlaneSlots);
    }
    // f(k) for the slots of samples 0 .. N - 1, in order.
    template <typename F>
    __device__ __forceinline__ void each(F&& f) const {
#pragma unroll
        for (int n = 0; n < kSamples; ++n) {
#if MBN_GPU_CUDA
            if (n >= samples) break;  // the form measured on the H200 (run288)
#else
            if (n >= samples) continue;  // hipcc leaves a loop with an exit rolled (registers as scratch)
#endif
#pragma unroll
            for (int j = 0; j < kPlaneSlots; ++j) f(n * kPlaneSlots + j);
        }
    }
};

// The channel's statistics from the wave's values: `center` (m1, the float
// mean of pass one), the mean's offset from it and the biased variance.
struct WaveMoments {
    float center, offset;
    double variance;
};

template <int kPlaneSlots>
__device__ WaveMoments wave_moments(const float (&v)[kMostPerLane], const LaneSlots<kPlaneSlots>& slots,
                                    float inv_count) {
    float s = 0.0f;
    slots.each([&](int k) { s += v[k]; });  // absent positions hold 0
    wave_sum(1, MBN_WAVE_SIZE, s);
    const float m1 = s * inv_count;
    float r = 0.0f, q = 0.0f;
    slots.each([&](int k) {
        const float d = slots.in(k) ? v[k] - m1 : 0.0f;
        r += d;
        q = fmaf(d, d, q);
    });
    wave_sum(1, MBN_WAVE_SIZE, r, q);
    if (isfinite(m1) && isfinite(r) && isfinite(q)) {
        const float offset = r * inv_count;
        return {m1, offset, fmax(static_cast<double>(q) * inv_count - static_cast<double>(offset) * offset, 0.0)};
    }
    // Float overflowed (or x holds Inf/NaN): both passes again in double,
    // around the double mean rounded to float (y is taken from x - center
    // in float).
    double ds = 0.0;
    slots.each([&](int k) { ds += v[k]; });
    wave_sum(1, MBN_WAVE_SIZE, ds);
    const float center = static_cast<float>(ds * inv_count);
    double dr = 0.0, dq = 0.0;
    slots.each([&](int k) {
        const double d = slots.in(k) ? static_cast<double>(v[k]) - center : 0.0;
        dr += d;
        dq += d * d;
    });
    wave_sum(1, MBN_WAVE_SIZE, dr, dq);
    const ShiftedStatistics st = finish_shifted(dr, dq, inv_count, 0.0);  // its inverse std unused
    return {center, static_cast<float>(st.offset), st.variance};
}

// The gradient sums g1 = sum(dy), g2 = sum(dy (x - center)); in double
// where float's came out non-finite.
template <int kPlaneSlots>
__device__ __forceinline__ void wave_gradient_sums(const float (&x)[kMostPerLane], const float (&g)[kMostPerLane],
                                                   const LaneSlots<kPlaneSlots>& slots, float center, double& g1,
                                                   double& g2) {
    float a = 0.0f, b = 0.0f;
    slots.each([&](int k) {  // absent positions: dy 0
        a += g[k];
        b = fmaf(g[k], x[k] - center, b);
    });
    wave_sum(1, MBN_WAVE_SIZE, a, b);
    if (isfinite(a) && isfinite(b)) {
        g1 = a;
        g2 = b;
        return;
    }
    g1 = g2 = 0.0;
    slots.each([&](int k) {
        g1 += g[k];
        g2 += static_cast<double>(g[k]) * (static_cast<double>(x[k]) - center);
    });
    wave_sum(1, MBN_WAVE_SIZE, g1, g2);
}

template <typename T, bool kBackward, int kPlaneSlots>
__global__ void __launch_bounds__(kMostWavesPerBlock * MBN_WAVE_SIZE) bn_wave_tile(WaveTileArgs a) {
    const int lane = static_cast<int>(threadIdx.x) % MBN_WAVE_SIZE;
    const int waves = static_cast<int>(blockDim.x) / MBN_WAVE_SIZE;
    const int c = static_cast<int>(blockIdx.x) * waves + static_cast<int>(threadIdx.x) / MBN_WAVE_SIZE;
    if (c >= a.channels) return;  // a whole wave: no barrier follows
    // The channel's parameters first (absent ones are 0): training's scale,
    // bias and prior running statistics; the backward's scale and saved
    // statistics.
    const float scale = a.scale.load(c);
    const float p1 = (kBackward ? a.saved_mean : a.train.bias).load(c);
    const float p2 = (kBackward ? a.saved_inv_std : a.train.prev_mean).load(c);
    const float p3 = kBackward ? 0.0f : a.train.prev_var.load(c);

    const LaneSlots<kPlaneSlots> slots(lane, a.samples, a.plane);
    const int sample_stride = a.channels * a.plane;
    const int first = c * a.plane + lane;
    const T* x = static_cast<const T*>(a.x) + first;
    const T* dy = static_cast<const T*>(a.dy) + first;
    // Every load issued before any value is widened: widened as it came,
    // the first conversion waited for its load with most loads not issued.
    T xr[kMostPerLane], gr[kBackward ? kMostPerLane : 1];
    slots.each([&](int k) {
        const bool in = slots.in(k);
        const int at = LaneSlots<kPlaneSlots>::offset(k, sample_stride);
        xr[k] = in ? x[at] : narrow<T>(0.0f);
        if (kBackward) gr[kBackward ? k : 0] = in ? dy[at] : narrow<T>(0.0f);
    });
    float xv[kMostPerLane], gv[kBackward ? kMostPerLane : 1];
    slots.each([&](int k) {
        xv[k] = widen(xr[k]);
        if (kBackward) gv[kBackward ? k : 0] = widen(gr[kBackward ? k : 0]);
    });
    const float inv_count = static_cast<float>(a.inv_count);
    T* out = static_cast<T*>(a.out) + first;
    // Writes value(k) (alpha folded in by the caller) to every present
    // slot, blended with the prior content where beta != 0: one branch for
    // all the slots.
    auto write = [&](auto value) {
        if (a.beta == 0.0f) {
            slots.each([&](int k) {
                if (slots.in(k)) out[LaneSlots<kPlaneSlots>::offset(k, sample_stride)] = narrow<T>(value(k));
            });
        } else {
            slots.each([&](int k) {
                if (slots.in(k)) {
                    T& at = out[LaneSlots<kPlaneSlots>::offset(k, sample_stride)];
                    at = narrow<T>(value(k) + a.beta * widen(at));
                }
            });
        }
    };

    if constexpr (!kBackward) {
        const WaveMoments m = wave_moments(xv, slots, inv_count);
        const float inv_std = static_cast<float>(rsqrt(m.variance + a.epsilon));
        if (lane == 0) {
            const float mean = m.center + m.offset;
            if (a.train.running_mean.present()) {
                const float f = static_cast<float>(a.train.exp_avg_factor);
                const float unbiased = static_cast<float>(m.variance * a.unbiased_ratio);
                a.train.running_mean.store(c, (1.0f - f) * p2 + f * mean);
                a.train.running_var.store(c, (1.0f - f) * p3 + f * unbiased);
            }
            if (a.saved_mean.present()) {
                a.saved_mean.store(c, mean);
                a.saved_inv_std.store(c, inv_std);
            }
        }
        // y = alpha ((x - center) factor + bias - offset factor).
        const float factor = scale * inv_std;
        const float k0 = a.alpha * factor, k1 = a.alpha * (p1 - m.offset * factor);
        write([&](int k) { return fmaf(xv[k] - m.center, k0, k1); });
    } else {
        // With saved statistics the values are taken around the saved mean.
        float center = p1, offset = 0.0f, inv_std = p2;
        if (!a.saved_mean.present()) {
            const WaveMoments m = wave_moments(xv, slots, inv_count);
            center = m.center;
            offset = m.offset;
            inv_std = static_cast<float>(rsqrt(m.variance + a.epsilon));
        }
        double g1, g2;
        wave_gradient_sums(xv, gv, slots, center, g1, g2);
        // dx = alpha (dy k0 + (x - center) k1 + k2).
        const float f1 = static_cast<float>(g1), f2 = static_cast<float>(g2);
        const float dy_xhat = (f2 - offset * f1) * inv_std;
        if (lane == 0) {
            a.back.dscale.store_blended(c, dy_xhat, a.back.param_alpha, a.back.param_beta);
            a.back.dbias.store_blended(c, f1, a.back.param_alpha, a.back.param_beta);
        }
        if (a.back.double_math) {
            // Few values: dx's terms nearly cancel (M = 2 gives 0), so the
            // coefficients and dx are taken in double.
            const double s = scale, i = inv_std, o = offset, n = a.inv_count;
            const double k0 = s * i, k1 = -k0 * i * ((g2 - o * g1) * i) * n, k2 = -k0 * g1 * n - k1 * o;
            const double d0 = a.alpha * k0, d1 = a.alpha * k1, d2 = a.alpha * k2;
            write([&](int k) {
                return static_cast<float>(d0 * gv[k] + d1 * (static_cast<double>(xv[k]) - center) + d2);
            });
        } else {
            const float k0 = scale * inv_std, k1 = -k0 * inv_std * dy_xhat * inv_count;
            const float k2 = -k0 * f1 * inv_count - k1 * offset;
            const float c0 = a.alpha * k0, c1 = a.alpha * k1, c2 = a.alpha * k2;
            write([&](int k) { return fmaf(c0, gv[k], fmaf(c1, xv[k] - center, c2)); });
        }
    }
}

// NHWC: a block a tile of one or two 16-byte vectors of channels (two, a
// 32-byte sector a row, where C allows and the tiles still outnumber the
// multiprocessors); the fewest row slots (1, 2, 4) that one wave's lanes
// need, else 4 and as many waves as the rows take, up to kMostNhwcThreads.
WaveTilePlan plan_nhwc(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                       const DeviceShape& device) {
    WaveTilePlan p{};
    for (const TensorArg* t : data)
        if (!aligned16(*t)) return p;
    const std::int64_t vector = 16 / static_cast<std::int64_t>(dtype_size(x.dtype));
    const std::int64_t channels = geom.len[kC];
    if (channels % vector != 0) return p;
    const std::int64_t vectors = channels / vector;
    const std::int64_t rows = geom.len[kN] * geom.spatial_size();
    const int wave = std::max(1, device.wave_size);
    p.lanes = vectors % 2 == 0 && vectors / 2 >= device.multiprocessors ? 2 : 1;
    const std::int64_t wave_rows = wave / p.lanes;
    if (wave_rows < vector) return p;  // a lane of a wave's rows finishes each channel of a vector
    p.row_slots = 1;
    while (p.row_slots < kMostRowSlots && p.row_slots * wave_rows < rows) p.row_slots *= 2;
    const std::int64_t waves = (rows + wave_rows * p.row_slots - 1) / (wave_rows * p.row_slots);
    if (waves * wave > kMostNhwcThreads) return p;
    p.nhwc = true;
    p.threads = static_cast<int>(waves) * wave;
    p.blocks = vectors / p.lanes;
    p.usable = true;
    return p;
}

WaveTilePlan plan(const BnGeometry& geom, const TensorArg& x, std::initializer_list<const TensorArg*> data,
                  bool identity, const DeviceShape& device) {
    WaveTilePlan p{};
    if (!identity || geom.mode != BnMode::spatial) return p;
    if (x.order != MemoryOrder::packed_nchw && x.order != MemoryOrder::packed_nhwc) return p;
    if (x.dtype != DType::f16 && x.dtype != DType::bf16 && x.dtype != DType::f32) return p;
    for (const TensorArg* t : data)
        if (t->dtype != x.dtype || t->order != x.order) return p;
    if (x.element_count() >= (std::int64_t(1) << 31)) return p;
    if (x.order == MemoryOrder::packed_nhwc) return plan_nhwc(geom, x, data, device);
    const std::int64_t samples = geom.len[kN], plane = geom.spatial_size();
    const int wave = std::max(1, device.wave_size);
    const std::int64_t needed = (plane + wave - 1) / wave;
    p.plane_slots = 1;
    while (p.plane_slots < needed) p.plane_slots *= 2;
    if (p.plane_slots > 8 || samples * p.plane_slots > kMostPerLane) return p;
    const std::int64_t channels = geom.len[kC];
    std::int64_t waves = std::min<std::int64_t>(kMostWavesPerBlock, channels);
    while (waves > 1 && (channels + waves - 1) / waves < device.multiprocessors) waves /= 2;
    p.threads = static_cast<int>(waves) * wave;
    p.blocks = (channels + waves - 1) / waves;
    p.usable = true;
    return p;
}

template <bool kBackward>
void launch(const WaveTileArgs& a, DType dtype, const WaveTilePlan& p, const LaunchTarget& target) {
    if (p.nhwc) {
        launch_wave_tiles_nhwc(a, dtype, kBackward, p, target);
        return;
    }
    with_element_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (!std::is_same<T, double>::value) {
            auto go = [&](auto slots) {
                launch_clustered(bn_wave_tile<T, kBackward, decltype(slots)::value>,
                                 dim3(static_cast<unsigned>(p.blocks)), dim3(static_cast<unsigned>(p.threads)), 0, 1,
                                 target.stream, "bn_wave_tile", a);
            };
            if (p.plane_slots == 1)
                go(std::integral_constant<int, 1>{});
            else if (p.plane_slots == 2)
                go(std::integral_constant<int, 2>{});
            else if (p.plane_slots == 4)
                go(std::integral_constant<int, 4>{});
            else
                go(std::integral_constant<int, 8>{});
        }
    });
}

FloatParam float_param(const TensorArg& t) {
    FloatParam f{static_cast<float*>(t.data), t.present() ? static_cast<int>(t.stride[kC]) : 0, false};
    f.packed = t.present() && f.stride == 1 && aligned16(t);
    return f;
}

WaveTileArgs shape_args(const BnGeometry& geom, const WaveTilePlan& plan, double epsilon, float alpha, float beta) {
    WaveTileArgs a{};
    a.channels = static_cast<int>(geom.len[kC]);
    a.samples = static_cast<int>(geom.len[kN]);
    a.plane = static_cast<int>(geom.spatial_size());
    a.lanes = plan.lanes;
    const double count = static_cast<double>(geom.reduction_size());
    a.inv_count = 1.0 / count;
    a.unbiased_ratio = unbiased_ratio(count);
    a.epsilon = epsilon;
    a.alpha = alpha;
    a.beta = beta;
    return a;
}

// Whether every parameter tensor present is float32 (FloatParam).
bool float_params(std::initializer_list<const TensorArg*> params) {
    for (const TensorArg* t : params)
        if (t->present() && t->dtype != DType::f32) return false;
    return true;
}

}  // namespace

// Taken wherever they fit, by the default too: no size rule.
WaveTilePlan plan_wave_tiles(const BnForwardTraining& p, const DeviceShape& device, PlanRule) {
    const auto params = {&p.scale, &p.bias, &p.prev_running_mean, &p.prev_running_var, &p.running_mean,
                         &p.running_var, &p.saved_mean, &p.saved_inv_std};
    if (!float_params(params) || !strides_fit(params, p.geom.len[kC])) return WaveTilePlan{};
    return plan(p.geom, p.x, {&p.x, &p.y}, p.activation.identity(), device);
}

WaveTilePlan plan_wave_tiles(const BnBackward& p, const DeviceShape& device, PlanRule) {
    const auto params = {&p.scale, &p.saved_mean, &p.saved_inv_std, &p.dscale, &p.dbias};
    if (!float_params(params) || !strides_fit(params, p.geom.len[kC])) return WaveTilePlan{};
    return plan(p.geom, p.x, {&p.x, &p.dy, &p.dx}, p.activation.identity(), device);
}

void run_wave_tiles(const BnForwardTraining& p, const WaveTilePlan& plan, const LaunchTarget& target) {
    WaveTileArgs a = shape_args(p.geom, plan, p.epsilon, p.out.alpha, p.out.beta);
    a.x = p.x.data;
    a.out = p.y.data;
    a.scale = float_param(p.scale);
    a.saved_mean = float_param(p.saved_mean);
    a.saved_inv_std = float_param(p.saved_inv_std);
    a.train.bias = float_param(p.bias);
    a.train.prev_mean = float_param(p.prev_running_mean);
    a.train.prev_var = float_param(p.prev_running_var);
    a.train.running_mean = float_param(p.running_mean);
    a.train.running_var = float_param(p.running_var);
    a.train.exp_avg_factor = p.exp_avg_factor;
    launch<false>(a, p.x.dtype, plan, target);
}

void run_wave_tiles(const BnBackward& p, const WaveTilePlan& plan, const LaunchTarget& target) {
    WaveTileArgs a = shape_args(p.geom, plan, p.epsilon, p.data.alpha, p.data.beta);
    a.x = p.x.data;
    a.dy = p.dy.data;
    a.out = p.dx.data;
    a.scale = float_param(p.scale);
    a.saved_mean = float_param(p.saved_mean);
    a.saved_inv_std = float_param(p.saved_inv_std);
    a.back = WaveTileArgs::Backward{};
    a.back.dscale = float_param(p.dscale);
    a.back.dbias = float_param(p.dbias);
    a.back.param_alpha = p.param.alpha;
    a.back.param_beta = p.param.beta;
    a.back.double_math = !float_backprop_enough(p.geom.reduction_size());
    launch<true>(a, p.x.dtype, plan, target);
}

}  // namespace gpu
}  // namespace mbn
