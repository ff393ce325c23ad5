// Runs the forward slices' group terms (native/gpu/gn_slice_terms.h) on the
// host emulator (emulator.hpp) over random partial sets -- each (split,
// slice) a count, a shift, the sum of x - shift and an M2 -- and checks,
// for the planner's block (slice_terms_threads) and for blocks of one wave
// (several batches a thread), three waves and kSliceTermsMaxThreads (idle
// threads), with samples or channels outermost:
//   mean, rstd   every group's, against a long double merge of the same
//                partials, in float and double tensors with gaps (the gaps
//                unwritten), or absent;
//   mean_offset, coef0, coef1   every slice's (the group's mean - shift,
//                rstd * weight, bias), nothing past them written;
// with the float64 rows of the tolerance table (the float rows for float
// statistics).  A group of mean 1e4 and spread 1e-2 must keep its digits.
//
//   gn_slice_terms_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "check_support.hpp"
#include "emulator.hpp"
#include "gpu/gn_slice_terms.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace mbn;
using namespace mbn::gpu;

namespace {

emu_check::Tally tally;

// The kernel's shared wave totals (the emulator gives each block its own copy).
Total<double> g_wave_totals[kSliceTermsMaxThreads / EMU_WAVE_SIZE];

constexpr int kSlack = 16;  // entries past each output, never written
const double kNan = std::numeric_limits<double>::quiet_NaN();

struct Case {
    const char* name;
    std::int64_t n, c, g;
    std::int64_t positions;  // the layout's reduction positions
    std::int64_t chunk;      // positions a split
    int vector_width;
    bool channel_major;
    bool affine;
    double offset;  // the data's mean and spread
    double spread;
    bool wide_stats;  // double mean / rstd, else float
    bool stats;       // written at all
};

// A layout and group order for a case, as plan_slices would give them.
GnSlicePlan plan_for(const Case& k) {
    GnSlicePlan plan{};
    FeatureLayout& layout = plan.layout;
    layout.feature.size = k.n * k.c;
    layout.reduce.size = k.positions;
    layout.vector_width = k.vector_width;
    layout.chunk = k.chunk;
    layout.splits = static_cast<int>((k.positions + k.chunk - 1) / k.chunk);
    GnGroupShape& s = plan.order.shape;
    s.samples = k.n;
    s.groups = k.g;
    s.channels = k.c / k.g;
    s.positions = k.positions * k.vector_width;
    s.height = 1;
    s.width = s.positions;
    s.size = s.channels * s.positions;
    plan.order.channel_major = k.channel_major;
    plan.terms_threads = slice_terms_threads(s.channels * layout.splits, EMU_WAVE_SIZE);
    return plan;
}

// Random partials: each (split, slice) of `count` values with a mean near
// the slice's and some spread, shifted by a value near the slice's mean.
struct Partials {
    std::vector<double> shift, sum, m2;  // sum, m2: [split * slices + slice]
};

Partials random_partials(const Case& k, const FeatureLayout& layout, std::mt19937_64& rng) {
    std::normal_distribution<double> normal(0.0, 1.0);
    std::uniform_real_distribution<double> uniform(0.0, 1.0);
    const std::int64_t slices = layout.feature.size;
    Partials p;
    p.shift.resize(static_cast<std::size_t>(slices));
    p.sum.resize(static_cast<std::size_t>(slices * layout.splits));
    p.m2.resize(p.sum.size());
    for (std::int64_t f = 0; f < slices; ++f) {
        const double slice_mean = k.offset + k.spread * normal(rng);
        p.shift[f] = slice_mean + k.spread * normal(rng);  // the slice's first value
        for (int split = 0; split < layout.splits; ++split) {
            const std::int64_t positions = std::min(layout.chunk, layout.reduce.size - split * layout.chunk);
            const double count = static_cast<double>(positions * layout.vector_width);
            const double mean = slice_mean + k.spread * normal(rng) / std::sqrt(count);
            const std::size_t at = static_cast<std::size_t>(split * slices + f);
            p.sum[at] = count * (mean - p.shift[f]);
            p.m2[at] = count > 1.0 ? count * k.spread * k.spread * (0.25 + uniform(rng)) : 0.0;
        }
    }
    return p;
}

// The reference: a group's count-weighted mean and M2 of the same partials
// in long double.
struct GroupReference {
    long double mean, m2;
};

GroupReference reference(const GnSlicePlan& plan, const Partials& p, std::int64_t n, std::int64_t g) {
    const FeatureLayout& layout = plan.layout;
    const GnGroupShape& s = plan.order.shape;
    const std::int64_t slices = layout.feature.size;
    auto each = [&](auto&& visit) {
        for (std::int64_t j = 0; j < s.channels; ++j) {
            const std::int64_t slice = plan.order.index(n, g * s.channels + j);
            for (int split = 0; split < layout.splits; ++split) {
                const std::int64_t positions = std::min(layout.chunk, layout.reduce.size - split * layout.chunk);
                const long double count = static_cast<long double>(positions * layout.vector_width);
                const std::size_t at = static_cast<std::size_t>(split * slices + slice);
                visit(count, p.shift[slice] + p.sum[at] / count, static_cast<long double>(p.m2[at]));
            }
        }
    };
    long double total = 0;
    each([&](long double count, long double mean, long double) { total += count * mean; });
    GroupReference r{total / static_cast<long double>(s.size), 0};
    each([&](long double count, long double mean, long double m2) {
        r.m2 += m2 + count * (mean - r.mean) * (mean - r.mean);
    });
    return r;
}

template <typename P>
void run_case(const Case& k, std::mt19937_64& rng) {
    const GnSlicePlan plan = plan_for(k);
    const FeatureLayout& layout = plan.layout;
    const GnGroupShape& s = plan.order.shape;
    const Partials partials = random_partials(k, layout, rng);
    const std::int64_t slices = layout.feature.size;
    constexpr std::int64_t kParamStride = 3;
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::vector<P> weight(static_cast<std::size_t>(k.c * kParamStride)), bias(weight.size());
    for (auto& v : weight) v = static_cast<P>(uniform(rng) + 0.25);
    for (auto& v : bias) v = static_cast<P>(uniform(rng));
    const double epsilon = 1e-5;

    const std::vector<int> wave_multiples = {plan.terms_threads, EMU_WAVE_SIZE, 3 * EMU_WAVE_SIZE,
                                             kSliceTermsMaxThreads};
    for (int threads : wave_multiples) {
        const std::string label = std::string(k.name) + (sizeof(P) == 4 ? " float" : " double") + ", " +
                                  std::to_string(layout.splits) + " splits, " + std::to_string(threads) + " threads";
        std::vector<double> shift = partials.shift, sum = partials.sum, m2 = partials.m2;
        std::vector<double> mean_offset(static_cast<std::size_t>(slices + kSlack), kNan), coef0(mean_offset),
            coef1(mean_offset);
        // (N, G) statistics with gaps: stride_g 2, stride_n 2 G + 1.
        const std::int64_t stride_g = 2, stride_n = 2 * k.g + 1;
        const std::size_t stat_entries = static_cast<std::size_t>(k.n * stride_n + kSlack);
        std::vector<double> wide_mean(stat_entries, kNan), wide_rstd(stat_entries, kNan);
        std::vector<float> narrow_mean(stat_entries, NAN), narrow_rstd(stat_entries, NAN);

        FeatureArrays scratch{};  // the arrays the kernel must not touch stay null
        scratch.shift = shift.data();
        scratch.partial2 = sum.data();
        scratch.partial1 = m2.data();
        scratch.mean_offset = mean_offset.data();
        scratch.coef0 = coef0.data();
        scratch.coef1 = coef1.data();
        GnSliceTermsArgs<P> a{};
        a.order = plan.order;
        if (k.affine) {
            a.weight = weight.data();
            a.bias = bias.data();
            a.weight_stride = kParamStride;
            a.bias_stride = kParamStride;
        }
        if (k.stats) {
            void* mean_data = k.wide_stats ? static_cast<void*>(wide_mean.data()) : narrow_mean.data();
            void* rstd_data = k.wide_stats ? static_cast<void*>(wide_rstd.data()) : narrow_rstd.data();
            a.mean = GnStatTensor{mean_data, k.wide_stats, stride_n, stride_g};
            a.rstd = GnStatTensor{rstd_data, k.wide_stats, stride_n, stride_g};
        }
        a.epsilon = epsilon;
        set_slice_terms_counts(a, layout);
        emu::register_static_shared(g_wave_totals, sizeof g_wave_totals);
        emu::run_grid(static_cast<unsigned>(s.group_count()), static_cast<unsigned>(threads), 1,
                      sizeof g_wave_totals, [&] { slice_terms_block(layout, scratch, a, g_wave_totals); });

        // Against the reference: the statistics, then every slice's factors.
        std::vector<double> got_stats, want_stats, got_float_stats, want_float_stats;
        std::vector<double> got_offset, want_offset, got_coef, want_coef;
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t g = 0; g < k.g; ++g) {
                const GroupReference r = reference(plan, partials, n, g);
                const long double rstd = 1.0L / std::sqrt(r.m2 / static_cast<long double>(s.size) + epsilon);
                const std::size_t at = static_cast<std::size_t>(n * stride_n + g * stride_g);
                if (k.stats) {
                    auto& got = k.wide_stats ? got_stats : got_float_stats;
                    auto& want = k.wide_stats ? want_stats : want_float_stats;
                    got.push_back(k.wide_stats ? wide_mean[at] : narrow_mean[at]);
                    got.push_back(k.wide_stats ? wide_rstd[at] : narrow_rstd[at]);
                    want.push_back(static_cast<double>(r.mean));
                    want.push_back(static_cast<double>(rstd));
                }
                for (std::int64_t j = 0; j < s.channels; ++j) {
                    const std::int64_t c = g * s.channels + j;
                    const std::size_t slice = static_cast<std::size_t>(plan.order.index(n, c));
                    const long double w = k.affine ? static_cast<long double>(weight[c * kParamStride]) : 1.0L;
                    const long double b = k.affine ? static_cast<long double>(bias[c * kParamStride]) : 0.0L;
                    got_offset.push_back(mean_offset[slice]);
                    want_offset.push_back(static_cast<double>(r.mean - partials.shift[slice]));
                    got_coef.push_back(coef0[slice]);
                    got_coef.push_back(coef1[slice]);
                    want_coef.push_back(static_cast<double>(rstd * w));
                    want_coef.push_back(static_cast<double>(b));
                }
            }
        const emu_check::Tolerance wide = emu_check::tolerance(DType::f64);
        const emu_check::Tolerance narrow = emu_check::tolerance(DType::f32);
        tally.checks += 4;
        if (!emu_check::compare(label, "mean and rstd", got_stats, want_stats, wide.reduction)) tally.fail(label);
        if (!emu_check::compare(label, "float mean and rstd", got_float_stats, want_float_stats, narrow.reduction))
            tally.fail(label);
        if (!emu_check::compare(label, "mean_offset", got_offset, want_offset, wide.reduction)) tally.fail(label);
        if (!emu_check::compare(label, "coef0 and coef1", got_coef, want_coef, wide.reduction)) tally.fail(label);

        // Nothing else written: the factors' slack, the statistics' gaps
        // and slack, the inputs.
        ++tally.checks;
        bool untouched = shift == partials.shift && sum == partials.sum && m2 == partials.m2;
        for (std::size_t i = static_cast<std::size_t>(slices); i < mean_offset.size(); ++i)
            untouched = untouched && std::isnan(mean_offset[i]) && std::isnan(coef0[i]) && std::isnan(coef1[i]);
        for (std::size_t i = 0; i < stat_entries; ++i) {
            const std::int64_t n = static_cast<std::int64_t>(i) / stride_n, rest = static_cast<std::int64_t>(i) % stride_n;
            const bool statistic = k.stats && n < k.n && rest % stride_g == 0 && rest / stride_g < k.g;
            const bool wide_written = statistic && k.wide_stats, narrow_written = statistic && !k.wide_stats;
            if (!wide_written) untouched = untouched && std::isnan(wide_mean[i]) && std::isnan(wide_rstd[i]);
            if (!narrow_written) untouched = untouched && std::isnan(narrow_mean[i]) && std::isnan(narrow_rstd[i]);
        }
        if (!untouched) tally.fail(label + ": written outside its outputs");
        std::printf("%-70s %d partials a group\n", label.c_str(), static_cast<int>(s.channels * layout.splits));
    }
}

// The planner's block sizes: whole waves, a batch a thread up to the cap.
void check_thread_plan() {
    for (int wave : {32, 64})
        for (std::int64_t partials : {1LL, 4LL, 40LL, 129LL, 1280LL, 3160LL, 4096LL, 4097LL, 50688LL}) {
            const int threads = slice_terms_threads(partials, wave);
            const std::int64_t per_thread = (partials + threads - 1) / threads;
            ++tally.checks;
            if (threads % wave != 0 || threads > kSliceTermsMaxThreads || threads < wave ||
                (per_thread > kSliceTermsBatch && threads < kSliceTermsMaxThreads / wave * wave) ||
                (threads > wave && (partials + kSliceTermsBatch - 1) / kSliceTermsBatch <= threads - wave))
                tally.fail("slice_terms_threads(" + std::to_string(partials) + ", " + std::to_string(wave) +
                           ") = " + std::to_string(threads));
        }
}

}  // namespace

int main() {
    std::mt19937_64 rng(27);
    check_thread_plan();
    // name, N, C, G, positions, chunk, vector width, channel-major, affine,
    // offset, spread, double statistics, statistics written
    const Case cases[] = {
        // 1x1280x64x64 fp32 NHWC as the H200's plan cuts it: 79 splits of 52.
        {"1x1280x64x64 NHWC", 1, 1280, 32, 4096, 52, 1, false, true, 3.0, 2.0, true, true},
        // NCHW: one split of 4-wide positions, 40 partials a group.
        {"1x1280x64x64 NCHW", 1, 1280, 32, 1024, 1024, 4, false, true, -1.0, 0.5, false, true},
        {"2x320 NHWC", 2, 320, 32, 1024, 32, 1, false, false, 0.0, 1.0, true, true},
        {"3x96 G3 channel-major", 3, 96, 3, 200, 7, 1, true, true, 5.0, 3.0, true, true},
        {"2x64 G1 many splits", 2, 64, 1, 3000, 4, 2, false, true, 0.5, 1.0, true, false},
        {"5x7 G7 one channel", 5, 7, 7, 33, 5, 1, true, true, 2.0, 1.0, false, true},
        {"1x2560 G1 wide group", 1, 2560, 1, 64, 16, 1, false, true, 1.0, 1.0, true, true},
        {"offset 1e4 spread 1e-2", 2, 64, 8, 500, 23, 1, false, true, 1e4, 1e-2, true, true},
    };
    for (const Case& k : cases) run_case<float>(k, rng);
    run_case<double>(cases[3], rng);
    run_case<double>(cases[7], rng);
    return tally.finish();
}
