// Runs the slices backward's finalize (native/gpu/gn_backward_finalize.h)
// on the host emulator (emulator.hpp) with random split sums and checks,
// for teams of one thread, of part of a wave, of a wave and of several
// waves, with samples or channels outermost in the sums:
//   group_terms  every group's mean of w g and of w g xhat against a long
//                double reference of the same partials;
//   dbias, dweight  every channel's sums of g and of g xhat, likewise, in
//                double and in float;
//   and that nothing past them (the strides' gaps, the arrays' ends) is
//   written.
//
//   gn_finalize_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "check_support.hpp"
#include "emulator.hpp"
#include "gpu/gn_backward_finalize.h"

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
Sums2<double> g_wave_totals[kBlockThreads / EMU_WAVE_SIZE];

struct Case {
    std::int64_t n, c, g;
    int splits;
    bool channel_major;
    bool affine;
};

constexpr std::int64_t kPositions = 7;
constexpr std::int64_t kStride = 2;  // of weight, dweight and dbias
constexpr int kSlack = 16;          // entries past each output, never written

bool close(double got, double want, double scale, double relative) {
    return std::fabs(got - want) <= relative * scale + 1e-300;
}

template <typename P>
void run_case(const Case& k, std::mt19937_64& rng) {
    const std::string label = "N" + std::to_string(k.n) + " C" + std::to_string(k.c) + " G" + std::to_string(k.g) +
                              " splits " + std::to_string(k.splits) + (k.channel_major ? " channel-major" : "") +
                              (k.affine ? "" : " no-affine") + (sizeof(P) == 4 ? " float" : " double");
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    GnFinalizeArgs<P> f{};
    GnGroupShape& s = f.order.shape;
    s.samples = k.n;
    s.groups = k.g;
    s.channels = k.c / k.g;
    s.positions = kPositions;
    s.height = 1;
    s.width = kPositions;
    s.size = s.channels * kPositions;
    f.order.channel_major = k.channel_major;
    f.slices = k.n * k.c;
    f.splits = k.splits;
    const double nan = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> sum_g(f.slices * k.splits), sum_gx(f.slices * k.splits);
    for (auto& v : sum_g) v = uniform(rng);
    for (auto& v : sum_gx) v = uniform(rng) * 3.0;
    std::vector<double> terms(k.n * k.g * kGnGroupTerms + kSlack, nan);
    std::vector<P> weight(k.c * kStride), dweight(k.c * kStride + kSlack, P(nan)), dbias(k.c * kStride + kSlack, P(nan));
    for (auto& v : weight) v = static_cast<P>(uniform(rng) + 0.25);
    f.scratch.sum_g = sum_g.data();
    f.scratch.sum_g_xhat = sum_gx.data();
    f.scratch.group_terms = terms.data();
    if (k.affine) {
        f.params.weight = weight.data();
        f.params.weight_stride = kStride;
        f.params.dweight = dweight.data();
        f.params.dbias = dbias.data();
        f.params.dweight_stride = kStride;
        f.params.dbias_stride = kStride;
    }
    plan_finalize(f);
    emu::register_static_shared(g_wave_totals, sizeof g_wave_totals);
    emu::run_grid(f.blocks, kBlockThreads, 1, sizeof g_wave_totals, [&] { finalize_block(f, g_wave_totals); });

    // The reference: long double sums of the same partials, any order.
    for (std::int64_t n = 0; n < k.n; ++n)
        for (std::int64_t g = 0; g < k.g; ++g) {
            long double a = 0, b = 0, scale = 0;
            for (std::int64_t j = 0; j < s.channels; ++j) {
                const std::int64_t c = g * s.channels + j;
                const double w = k.affine ? static_cast<double>(weight[c * kStride]) : 1.0;
                for (int split = 0; split < k.splits; ++split) {
                    const std::int64_t at = split * f.slices + f.order.index(n, c);
                    a += w * sum_g[at];
                    b += w * sum_gx[at];
                    scale += std::fabs(w * sum_g[at]) + std::fabs(w * sum_gx[at]);
                }
            }
            const double m = static_cast<double>(s.size);
            const double* got = &terms[(n * k.g + g) * kGnGroupTerms];
            ++tally.checks;
            if (!close(got[0], static_cast<double>(a / m), static_cast<double>(scale / m), 1e-14) ||
                !close(got[1], static_cast<double>(b / m), static_cast<double>(scale / m), 1e-14))
                tally.fail(label + ": group (" + std::to_string(n) + ", " + std::to_string(g) + ") " +
                       std::to_string(got[0]) + " " + std::to_string(got[1]) + " want " +
                       std::to_string(static_cast<double>(a / m)) + " " + std::to_string(static_cast<double>(b / m)));
        }
    for (std::size_t i = k.n * k.g * kGnGroupTerms; i < terms.size(); ++i)
        if (!std::isnan(terms[i])) tally.fail(label + ": group_terms written past the groups");
    const double relative = sizeof(P) == 4 ? 1e-6 : 1e-14;
    for (std::int64_t c = 0; c < k.c; ++c) {
        if (!k.affine) break;
        long double a = 0, b = 0, scale = 0;
        for (std::int64_t n = 0; n < k.n; ++n)
            for (int split = 0; split < k.splits; ++split) {
                const std::int64_t at = split * f.slices + f.order.index(n, c);
                a += sum_g[at];
                b += sum_gx[at];
                scale += std::fabs(sum_g[at]) + std::fabs(sum_gx[at]);
            }
        ++tally.checks;
        const double db = static_cast<double>(dbias[c * kStride]), dw = static_cast<double>(dweight[c * kStride]);
        if (!close(db, static_cast<double>(a), static_cast<double>(scale), relative) ||
            !close(dw, static_cast<double>(b), static_cast<double>(scale), relative))
            tally.fail(label + ": channel " + std::to_string(c) + " " + std::to_string(db) + " " + std::to_string(dw) +
                   " want " + std::to_string(static_cast<double>(a)) + " " + std::to_string(static_cast<double>(b)));
    }
    for (std::size_t i = 0; i < dbias.size(); ++i) {
        const bool output = k.affine && i % kStride == 0 && i < static_cast<std::size_t>(k.c * kStride);
        if (!output && (!std::isnan(static_cast<double>(dbias[i])) || !std::isnan(static_cast<double>(dweight[i]))))
            tally.fail(label + ": dbias / dweight written at " + std::to_string(i));
    }
    std::printf("%-44s group lanes %3d, channel lanes %3d, %u blocks\n", label.c_str(), f.group_lanes,
                f.channel_lanes, f.blocks);
}

}  // namespace

int main() {
    std::mt19937_64 rng(23);
    // Teams of 1, 2-32 and 64-256 threads; partial last blocks; splits that
    // leave some of a team's threads without partials.
    const Case cases[] = {
        {1, 1280, 32, 1, false, true},  {1, 1280, 32, 3, false, true},  {2, 320, 32, 1, false, true},
        {1, 32, 32, 1, false, true},    {1, 32, 32, 700, false, true},  {64, 64, 32, 1, true, true},
        {64, 64, 32, 13, true, true},   {1, 128, 32, 198, false, true}, {3, 96, 3, 5, true, true},
        {5, 7, 7, 9, false, true},      {4, 64, 32, 2, false, false},   {2, 640, 32, 1, true, true},
    };
    for (const Case& k : cases) run_case<double>(k, rng);
    for (const Case& k : cases) run_case<float>(k, rng);
    return tally.finish();
}
