// Runs the forward slices' last launch on packed tensors
// (native/gpu/gn_packed_normalize.h: gn_packed_normalize) on the host
// emulator (emulator.hpp), with the walk of the real planner
// (plan_gn_forward_slices), and checks y against
//     act(((x - shift) - mean_offset) * coef0 + coef1)
// in float64 under the tolerance table, from random factors per slice:
// float32, float16, bfloat16 and float64, NCHW (a thread's vectors in
// several slices, a last block cut short) and NHWC where the planner walks
// it (float and double lanes), with and without swish; every element
// written (y starts as NaN), nothing past y, and in place (y == x) the same
// bits.  A launch of blocks of part of a wave (the emulator runs whole
// waves) is skipped and said.
//
//   gn_packed_normalize_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"
#include "two_d_launch.hpp"

#include "gpu/gn_packed_normalize.h"
#include "gpu/gn_planner.hpp"

#include "check_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace mbn;
using namespace mbn::gpu;
using namespace emu_check;

namespace {

Tally tally;
constexpr float kBeta = 1.25f;

struct Case {
    Lengths len;  // N, C, D, H, W
    std::int64_t groups;
    DType dtype;
    bool channels_last;
    bool swish;
};

template <typename T>
void launch(const GnPackedWalk& walk, const void* x, void* y, const FeatureArrays& scratch, bool swish) {
    const emu::Index grid{packed_walk_grid(walk).x, 1, 1};
    const emu::Index block{static_cast<unsigned>(walk.threads), 1, 1};
    const T* from = static_cast<const T*>(x);
    T* to = static_cast<T*>(y);
    auto run = [&](auto kernel) { run_launch(grid, block, [&] { kernel(from, to, walk, scratch, kBeta); }); };
    if (walk.channels_inner)
        swish ? run(gn_packed_normalize<T, true, true>) : run(gn_packed_normalize<T, true, false>);
    else
        swish ? run(gn_packed_normalize<T, false, true>) : run(gn_packed_normalize<T, false, false>);
}

void launch_typed(DType t, const GnPackedWalk& walk, const void* x, void* y, const FeatureArrays& scratch,
                  bool swish) {
    switch (t) {
        case DType::f32: launch<float>(walk, x, y, scratch, swish); break;
        case DType::f16: launch<__half>(walk, x, y, scratch, swish); break;
        case DType::bf16: launch<mbn_bfloat16>(walk, x, y, scratch, swish); break;
        case DType::f64: launch<double>(walk, x, y, scratch, swish); break;
    }
}

void run_case(const Case& k, std::mt19937_64& rng) {
    const std::int64_t N = k.len[kN], C = k.len[kC];
    const std::int64_t S = k.len[kD] * k.len[kH] * k.len[kW];
    char label[160];
    std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld G%lld %s %s%s", static_cast<long long>(N),
                  static_cast<long long>(C), static_cast<long long>(k.len[kH]), static_cast<long long>(k.len[kW]),
                  static_cast<long long>(k.groups), dtype_name(k.dtype), k.channels_last ? "NHWC" : "NCHW",
                  k.swish ? " swish" : "");
    Tensor x(k.dtype, k.len, k.channels_last), y(k.dtype, k.len, k.channels_last);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    // Per slice (n, c), feature n * C + c: a shift near the values, a small
    // offset, a scale and a bias.
    const std::size_t slices = static_cast<std::size_t>(N * C);
    std::vector<double> shift(slices), offset(slices), coef0(slices), coef1(slices);
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c) {
            const double mean = uniform(rng) * 4 - 2;
            for (std::int64_t s = 0; s < S; ++s) x.set(n, c, s, normal(rng) + mean);
            const std::size_t f = static_cast<std::size_t>(n * C + c);
            shift[f] = x.get(n, c, 0);
            offset[f] = mean - shift[f] + 0.1 * normal(rng);
            coef0[f] = 0.5 + uniform(rng);
            coef1[f] = uniform(rng) - 0.5;
        }
    FeatureArrays scratch{};
    scratch.shift = shift.data();
    scratch.mean_offset = offset.data();
    scratch.coef0 = coef0.data();
    scratch.coef1 = coef1.data();

    GnForward p;
    p.shape.len = k.len;
    p.shape.groups = k.groups;
    p.x = x.arg();
    p.y = y.arg();
    for (TensorArg* t : {&p.x, &p.y})
        t->order = k.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
    p.activation = k.swish ? Activation::swish : Activation::none;
    p.swish_beta = kBeta;
    DeviceShape device;
    device.wave_size = EMU_WAVE_SIZE;
    device.multiprocessors = EMU_WAVE_SIZE == 64 ? 110 : 132;
    GnForwardPlan plan{};
    plan_gn_forward_slices(p, device, plan);
    const GnPackedWalk& walk = plan.slices.packed;
    if (walk.vectors == 0) {
        std::printf("skip %s: the planner does not walk it packed\n", label);
        return;
    }
    if (walk.threads % EMU_WAVE_SIZE != 0) {
        std::printf("skip %s: blocks of part of a wave\n", label);
        return;
    }

    std::vector<double> expected;
    expected.reserve(static_cast<std::size_t>(N * C * S));
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c) {
            const std::size_t f = static_cast<std::size_t>(n * C + c);
            for (std::int64_t s = 0; s < S; ++s) {
                const double z = ((x.get(n, c, s) - shift[f]) - offset[f]) * coef0[f] + coef1[f];
                expected.push_back(k.swish ? swish(z, kBeta) : z);
            }
        }
    y.fill_nan();
    launch_typed(k.dtype, walk, x.data(), y.data(), scratch, k.swish);
    const std::vector<double> got = y.values();
    tally.checks += 3;
    if (!compare(label, "y", got, expected, tolerance(k.dtype).elementwise)) tally.fail(std::string(label) + ": y");
    if (!y.slack_intact()) tally.fail(std::string(label) + ": wrote outside y");
    // In place: the same bits.
    Tensor z = x;
    launch_typed(k.dtype, walk, z.data(), z.data(), scratch, k.swish);
    if (std::memcmp(z.data(), y.data(), static_cast<std::size_t>(y.count()) * dtype_size(k.dtype)) != 0)
        tally.fail(std::string(label) + ": in place differs");
    std::printf("done %s: %d x %d threads, %d vectors\n", label, packed_walk_grid(walk).x, walk.threads,
                walk.vectors);
}

}  // namespace

int main() {
    std::mt19937_64 rng(31);
    // NCHW: 16 blocks whose threads' vectors lie in four slices each; a
    // single block cut short; short planes (16 positions).  NHWC: whole
    // rows of 16 or 32 vectors a block, several samples.
    const GroupShape shapes[] = {{{1, 64, 1, 32, 32}, 32}, {{2, 12, 1, 8, 8}, 3}, {{3, 32, 1, 4, 4}, 8},
                            {{2, 64, 1, 5, 6}, 16}, {{3, 128, 1, 3, 3}, 32}};
    for (DType t : {DType::f32, DType::f16, DType::bf16, DType::f64})
        for (bool last : {false, true})
            for (bool swish : {false, true})
                for (const GroupShape& s : shapes) run_case(Case{s.len, s.groups, t, last, swish}, rng);
    return tally.finish();
}
