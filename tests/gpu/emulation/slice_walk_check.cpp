// Runs the per-feature walks that group norm's slices share with batch norm
// (native/gpu/feature_phases.h: block_moments, normalize_share) on the host
// emulator (emulator.hpp), over layouts of the real row planner
// (plan_row_layout), and checks the linear walk (cursor rank 1, the packed
// layouts' LinearCursor with groups of loads and a guarded tail) against a
// float64 reference and against the nest cursor (rank 2):
//   moments  every (split, feature): the count, the sum of x - shift and M2
//            within 1e-5 / 1e-4 of the reference, the shift x's first value;
//            where every thread walks whole Welford batches, the nest
//            cursor's bits;
//   normalize every element written, bit for bit the nest cursor's output,
//            in place (y == x) too.
// Chunks are also cut by hand so that threads walk whole groups and end on
// partial ones.  Blocks and grids are 2-D here: the emulator's 1-D thread
// and block numbers are split as the kernels' launches would be.
//
//   slice_walk_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"
#include "two_d_launch.hpp"

#include "gpu/feature_phases.h"
#include "gpu/feature_plan.hpp"

#include "check_support.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace mbn;
using namespace mbn::gpu;

namespace {

emu_check::Tally tally;

template <typename T>
DType dtype_for() {
    if constexpr (std::is_same<T, __half>::value) return DType::f16;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) return DType::bf16;
    if constexpr (std::is_same<T, double>::value) return DType::f64;
    return DType::f32;
}

template <typename T>
double value_of(T v) {
    return static_cast<double>(widen(v));
}

// Every block's shared memory (the emulator gives each block its own copy).
alignas(16) unsigned char g_shared[kMaxFeaturesPerThread * kBlockThreads * sizeof(ShiftedMoments<double>)];

// Runs `body` once per thread of the layout's launch (gridDim = (tiles,
// splits), blockDim = (tile_features, rows)).
template <typename Body>
void run_walk(const FeatureLayout& layout, Body&& body) {
    g_block = emu::Index{static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows), 1};
    g_grid = emu::Index{static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits), 1};
    emu::register_static_shared(g_shared, sizeof g_shared);
    emu::run_grid(static_cast<unsigned>(layout.tiles * layout.splits),
                  static_cast<unsigned>(layout.tile_features * layout.rows), 1, sizeof g_shared, body);
}

// The element offsets of (feature f, reduction position r), vector_width of them.
std::int64_t element_at(const FeatureLayout& layout, std::int64_t f, std::int64_t r, int slot) {
    return nest_offset(layout.feature, f, slot) + nest_offset(layout.reduce, r, slot);
}

// Returns the (split, feature) sums and M2s, for the ranks' comparison.
template <typename T, int Rank, int VR, int VF>
std::vector<double> moments_case(const std::string& label, const std::vector<T>& x, const FeatureLayout& layout) {
    using A = acc_t<T>;
    auto* shared = reinterpret_cast<ShiftedMoments<A>*>(g_shared);  // VF x kBlockThreads
    const std::int64_t features = layout.feature.size;
    const std::size_t partials = static_cast<std::size_t>(features * layout.splits);
    std::vector<double> count(partials, -1.0), sum(partials, 0.0), m2(partials, 0.0), shift(features, 0.0);
    run_walk(layout, [&] {
        const ThreadShare share = thread_share<VF>(layout, launch_place());
        ShiftedMoments<A> total[VF];
        double first[VF];
        block_moments<T, Rank, VR, VF>(x.data(), layout, share, total, first, shared);
        if (threadIdx.y != 0 || !share.active) return;
        for (int j = 0; j < VF; ++j) {
            const std::int64_t at = static_cast<std::int64_t>(blockIdx.y) * features + share.feature0 + j;
            count[at] = static_cast<double>(total[j].welford.count);
            sum[at] = total[j].sum;
            m2[at] = total[j].welford.m2;
            if (blockIdx.y == 0) shift[share.feature0 + j] = first[j];
        }
    });
    for (std::int64_t f = 0; f < features; ++f) {
        const double s0 = value_of(x[element_at(layout, f, 0, kSlotX)]);
        ++tally.checks;
        if (shift[f] != s0) tally.fail(label + ": shift of feature " + std::to_string(f));
        for (int split = 0; split < layout.splits; ++split) {
            const std::int64_t begin = split * layout.chunk;
            const std::int64_t end = std::min(layout.reduce.size, begin + layout.chunk);
            double n = 0.0, s = 0.0, s_abs = 0.0;
            for (std::int64_t r = begin; r < end; ++r)
                for (int e = 0; e < layout.vector_width; ++e) {
                    const double d = value_of(x[element_at(layout, f, r, kSlotX) + e]) - s0;
                    n += 1.0;
                    s += d;
                    s_abs += std::fabs(d);
                }
            const double mean = n > 0.0 ? s / n : 0.0;
            double q = 0.0;
            for (std::int64_t r = begin; r < end; ++r)
                for (int e = 0; e < layout.vector_width; ++e) {
                    const double d = value_of(x[element_at(layout, f, r, kSlotX) + e]) - s0 - mean;
                    q += d * d;
                }
            const std::size_t at = static_cast<std::size_t>(split * features + f);
            ++tally.checks;
            if (count[at] != n || std::fabs(sum[at] - s) > 1e-5 * (s_abs + 1.0) ||
                std::fabs(m2[at] - q) > 1e-4 * (q + 1e-3)) {
                char text[200];
                std::snprintf(text, sizeof text, ": feature %lld split %d: count %g (%g) sum %.9g (%.9g) m2 %.9g (%.9g)",
                              static_cast<long long>(f), split, count[at], n, sum[at], s, m2[at], q);
                tally.fail(label + text);
            }
        }
    }
    sum.insert(sum.end(), m2.begin(), m2.end());
    return sum;
}

template <typename T, int Rank, int VR, int VF>
std::vector<T> normalize_case(const std::vector<T>& x, const FeatureLayout& layout, bool in_place,
                              const std::vector<float>& factors) {
    using A = acc_t<T>;
    std::vector<T> y(x.size(), narrow<T>(std::nan("")));
    if (in_place) y = x;
    const T* in = in_place ? y.data() : x.data();
    run_walk(layout, [&] {
        const ThreadShare share = thread_share<VF>(layout, second_pass_place());
        if (!share.active) return;
        A shift[VF], mean_offset[VF], factor[VF], bias[VF];
        for (int j = 0; j < VF; ++j) {
            const std::size_t f = static_cast<std::size_t>(share.feature0 + j);
            shift[j] = static_cast<A>(factors[4 * f]);
            mean_offset[j] = static_cast<A>(factors[4 * f + 1]);
            factor[j] = static_cast<A>(factors[4 * f + 2]);
            bias[j] = static_cast<A>(factors[4 * f + 3]);
        }
        normalize_share<T, Rank, VR, VF>(in, y.data(), layout, share, shift, mean_offset, factor, bias, 1.0f, 0.0f);
    });
    return y;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

// One tensor layout, its planner's chunks and two cut by hand.
template <typename T, int VR, int VF>
void walk_case(const char* name, const Lengths& len, bool channels_last) {
    const emu_check::Tensor shape(dtype_for<T>(), len, channels_last);  // its strides
    std::vector<T> x(static_cast<std::size_t>(shape.count()));
    std::mt19937 rng(static_cast<unsigned>(x.size()));
    std::normal_distribution<double> normal(0.0, 1.0);
    for (T& v : x) v = narrow<T>(3.0 + 2.0 * normal(rng));
    TensorArg xt, yt;  // y's data is never read: the planner checks its alignment
    xt.data = yt.data = x.data();
    xt.dtype = yt.dtype = dtype_for<T>();
    xt.len = yt.len = len;
    xt.stride = yt.stride = shape.stride;
    SlotTensors tensors;
    tensors.slot[kSlotX] = &xt;
    tensors.slot[kSlotY] = &yt;
    DeviceShape device;
    device.multiprocessors = 3;
    device.wave_size = EMU_WAVE_SIZE;
    const FeatureLayout planned = plan_row_layout(len, tensors, device);
    if (planned.vector_width != VR || planned.features_per_thread != VF || planned.reduce.rank > 1) {
        tally.fail(std::string(name) + ": planned widths " + std::to_string(planned.vector_width) + " x " +
             std::to_string(planned.features_per_thread) + ", reduction rank " + std::to_string(planned.reduce.rank));
        return;
    }
    std::vector<float> factors(static_cast<std::size_t>(4 * planned.feature.size));
    std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
    for (float& v : factors) v = uniform(rng);
    const std::int64_t positions = planned.reduce.size;
    for (std::int64_t chunk : {planned.chunk, positions / 3 + 5, static_cast<std::int64_t>(planned.rows) * 5 + 3}) {
        FeatureLayout layout = planned;
        layout.chunk = std::max<std::int64_t>(1, std::min(chunk, positions));
        layout.splits = static_cast<int>((positions + layout.chunk - 1) / layout.chunk);
        char label[160];
        std::snprintf(label, sizeof label, "%s, %lld positions of %d, %d rows, %d splits of %lld", name,
                      static_cast<long long>(positions), VR, layout.rows, layout.splits,
                      static_cast<long long>(layout.chunk));
        const std::vector<double> linear_moments = moments_case<T, 1, VR, VF>(std::string(label) + " linear", x, layout);
        const std::vector<double> nest_moments = moments_case<T, 2, VR, VF>(std::string(label) + " nest", x, layout);
        // Where every thread walks whole Welford batches the two walks make
        // the same batches and merges (the linear one dividing once for its
        // VF features): the same bits.
        const std::int64_t batch_rows = static_cast<std::int64_t>(layout.rows) * moment_batch_positions<VR * VF>();
        if (layout.chunk % batch_rows == 0 && positions % batch_rows == 0) {
            ++tally.checks;
            if (!same_bits(linear_moments, nest_moments))
                tally.fail(std::string(label) + ": linear moments differ from the nest cursor's");
        }
        const std::vector<T> nest = normalize_case<T, 2, VR, VF>(x, layout, false, factors);
        const std::vector<T> linear = normalize_case<T, 1, VR, VF>(x, layout, false, factors);
        const std::vector<T> in_place = normalize_case<T, 1, VR, VF>(x, layout, true, factors);
        tally.checks += 3;
        bool written = true;
        for (const T& v : linear) written = written && !std::isnan(value_of(v));
        if (!written) tally.fail(std::string(label) + ": normalize left elements unwritten");
        if (!same_bits(linear, nest)) tally.fail(std::string(label) + ": linear normalize differs from the nest cursor's");
        if (!same_bits(in_place, nest)) tally.fail(std::string(label) + ": in-place normalize differs");
    }
}

}  // namespace

int main() {
    // name, lengths (N, C, D, H, W), channels last
    walk_case<__half, 8, 1>("fp16 NCHW", Lengths{1, 4, 1, 128, 128}, false);
    walk_case<__half, 8, 1>("fp16 NCHW N=2", Lengths{2, 3, 1, 40, 64}, false);
    walk_case<__half, 1, 4>("fp16 NHWC", Lengths{1, 16, 1, 40, 50}, true);
    walk_case<__half, 1, 4>("fp16 NHWC whole batches", Lengths{1, 16, 1, 64, 64}, true);
    walk_case<__nv_bfloat16, 1, 4>("bf16 NHWC", Lengths{2, 8, 1, 30, 33}, true);
    walk_case<float, 4, 1>("fp32 NCHW", Lengths{1, 3, 1, 96, 96}, false);
    walk_case<float, 1, 4>("fp32 NHWC", Lengths{1, 8, 1, 64, 47}, true);
    walk_case<float, 1, 4>("fp32 NHWC whole batches", Lengths{1, 8, 1, 64, 64}, true);
    walk_case<float, 1, 1>("fp32 NCHW odd", Lengths{1, 3, 1, 37, 33}, false);
    walk_case<double, 2, 1>("fp64 NCHW", Lengths{1, 2, 1, 50, 60}, false);
    return tally.finish();
}
