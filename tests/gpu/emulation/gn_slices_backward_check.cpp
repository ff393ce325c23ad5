// Runs the slices backward (native/gpu/gn_backward_walks.h: gn_backward_slices
// and gn_backward_apply, with the finalize of gn_backward_finalize.h between
// them) on the host emulator (emulator.hpp) through the real planner
// (plan_gn_backward_slices) and the kernels' own dispatch
// (with_backward_walks: types, walk shape, activation), and checks dx,
// dweight and dbias against a float64 reference computed here with the
// tolerance table: float32, float16 and bfloat16 (parameters float32 or of
// x's type), with and without swish, NCHW (contiguous planes: the linear
// walk, vectors) and NHWC (several slices a thread), small float32 groups
// (the double instances), and bitwise-equal reruns.  Outputs start as NaN;
// a launch of blocks of part of a wave (the emulator runs whole waves) is
// skipped and said.
//
//   gn_slices_backward_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"
#include "two_d_launch.hpp"
// The slices kernel's static shared array: one object per instance, which
// serves every block, since the emulator runs one block (a cluster of one)
// at a time.
#undef __shared__
#define __shared__ static

#include "gpu/gn_backward_walks.h"

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
constexpr double kEpsilon = 1e-5;
constexpr float kBeta = 1.25f;

struct Case {
    Lengths len;  // N, C, D, H, W
    std::int64_t groups;
    DType dtype;
    bool channels_last;
    bool swish;
    bool params_like_x;  // weight and bias in x's type (else float32)
};

std::string describe(const Case& k, const FeatureLayout& l) {
    char text[240];
    std::snprintf(text, sizeof text, "%lldx%lldx%lldx%lld G%lld %s %s%s%s: widths %d x %d, rank %d, %d x %d threads, %d splits",
                  static_cast<long long>(k.len[kN]), static_cast<long long>(k.len[kC]),
                  static_cast<long long>(k.len[kH]), static_cast<long long>(k.len[kW]),
                  static_cast<long long>(k.groups), dtype_name(k.dtype), k.channels_last ? "NHWC" : "NCHW",
                  k.swish ? " swish" : "", k.params_like_x ? " params-like-x" : "", l.vector_width,
                  l.features_per_thread, l.reduce.rank, l.tile_features, l.rows, l.splits);
    return text;
}

Sums2<double> g_wave_totals[kBlockThreads / EMU_WAVE_SIZE];

void run_case(const Case& k, std::mt19937_64& rng) {
    const std::int64_t C = k.len[kC], G = k.groups;
    const DType pt = k.params_like_x ? k.dtype : DType::f32;
    Tensor x(k.dtype, k.len, k.channels_last), dy(k.dtype, k.len, k.channels_last);
    fill_backward_inputs(x, dy, rng);
    std::uniform_real_distribution<double> uniform;
    Small weight(pt, 1, C), bias(pt, 1, C);
    for (std::int64_t c = 0; c < C; ++c) {
        weight.set(c, 0.5 + uniform(rng));
        bias.set(c, uniform(rng) - 0.5);
    }
    SavedStatistics saved = saved_statistics(x, G, kEpsilon);
    Small& mean = saved.mean;
    Small& rstd = saved.rstd;
    const GnBackwardReference ref = gn_backward_reference(
        x, dy, mean, rstd, G, [&](std::int64_t c) { return weight.get(c); }, [&](std::int64_t c) { return bias.get(c); },
        k.swish, kBeta);
    DeviceShape device;
    device.wave_size = EMU_WAVE_SIZE;
    device.multiprocessors = EMU_WAVE_SIZE == 64 ? 110 : 132;
    std::vector<double> first_dx, first_dw, first_db;
    for (int round = 0; round < 2; ++round) {
        Tensor dx(k.dtype, k.len, k.channels_last);
        dx.fill_nan();
        Small dweight(pt, 1, C), dbias(pt, 1, C);
        for (std::int64_t c = 0; c < C; ++c) dweight.set(c, NAN), dbias.set(c, NAN);
        GnBackward p;
        p.shape.len = k.len;
        p.shape.groups = G;
        p.x = x.arg();
        p.dy = dy.arg();
        p.dx = dx.arg();
        // The tensors are packed: the planner may take the packed walk.
        for (TensorArg* t : {&p.x, &p.dy, &p.dx})
            t->order = k.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
        p.affine = true;
        p.weight = weight.arg();
        p.weight.len[kC] = C;
        if (k.swish) {
            p.bias = bias.arg();
            p.bias.len[kC] = C;
        }
        p.dweight = dweight.arg();
        p.dbias = dbias.arg();
        p.mean = mean.arg();
        p.rstd = rstd.arg();
        p.activation = k.swish ? Activation::swish : Activation::none;
        p.swish_beta = kBeta;
        GnBackwardPlan plan{};
        plan_gn_backward_slices(p, device, plan);
        const FeatureLayout& layout = plan.slices.layout;
        const std::string label = describe(k, layout) + (plan.slices.packed.vectors > 0 ? " packed" : "");
        if ((layout.tile_features * layout.rows) % EMU_WAVE_SIZE != 0) {
            // The emulator runs whole waves only.
            std::printf("skip %s: blocks of part of a wave\n", label.c_str());
            return;
        }
        std::vector<double> scratch(static_cast<std::size_t>(plan.needs.bytes / sizeof(double) + 64));
        const emu::Index grid{static_cast<unsigned>(layout.tiles), static_cast<unsigned>(layout.splits), 1};
        const emu::Index block{static_cast<unsigned>(layout.tile_features), static_cast<unsigned>(layout.rows), 1};
        with_backward_walks(p, plan.slices, scratch.data(),
                            [&](auto slices, auto apply, auto packed_apply, const auto& a, const auto& finalize,
                                auto xp, auto dyp, auto dxp) {
                                run_launch(grid, block, [&] { slices(xp, dyp, layout, a); });
                                run_launch(emu::Index{finalize.blocks, 1, 1},
                                           emu::Index{static_cast<unsigned>(kBlockThreads), 1, 1},
                                           [&] { finalize_block(finalize, g_wave_totals); });
                                const GnPackedWalk& packed = plan.slices.packed;
                                if (packed.vectors > 0)
                                    run_launch(emu::Index{packed_walk_grid(packed).x, 1, 1},
                                               emu::Index{static_cast<unsigned>(packed.threads), 1, 1},
                                               [&] { packed_apply(xp, dyp, dxp, packed, a); });
                                else
                                    run_launch(grid, block, [&] { apply(xp, dyp, dxp, layout, a); });
                            });
        std::vector<double> got_dw(C), got_db(C);
        for (std::int64_t c = 0; c < C; ++c) got_dw[c] = dweight.get(c), got_db[c] = dbias.get(c);
        const std::vector<double> got_dx = dx.values();
        if (round == 0) {
            const Tolerance tol = tolerance(k.dtype), ptol = tolerance(pt);
            tally.checks += 3;
            if (!compare(label, "dx", got_dx, ref.dx, tol.elementwise)) tally.fail(label + ": dx");
            if (!compare(label, "dweight", got_dw, ref.dweight, ptol.reduction)) tally.fail(label + ": dweight");
            if (!compare(label, "dbias", got_db, ref.dbias, ptol.reduction)) tally.fail(label + ": dbias");
            first_dx = got_dx, first_dw = got_dw, first_db = got_db;
            std::printf("done %s\n", label.c_str());
        } else {
            ++tally.checks;
            if (std::memcmp(got_dx.data(), first_dx.data(), got_dx.size() * sizeof(double)) != 0 ||
                got_dw != first_dw || got_db != first_db)
                tally.fail(label + ": rerun differs");
        }
        ++tally.checks;
        if (!dx.slack_intact()) tally.fail(label + ": wrote outside dx");
    }
}

}  // namespace

int main() {
    std::mt19937_64 rng(29);
    // NCHW planes of vectors (split or not) and odd planes (no vectors);
    // NHWC with several slices a thread; groups under kGnTileExactGroup
    // values (float32: the double instances).
    const GroupShape shapes[] = {{{1, 64, 1, 32, 32}, 32}, {{2, 12, 1, 9, 7}, 3}, {{1, 64, 1, 16, 16}, 32},
                            {{2, 8, 1, 4, 4}, 4}, {{1, 32, 1, 5, 6}, 16}, {{1, 32, 1, 8, 8}, 32}};
    for (DType t : {DType::f32, DType::f16, DType::bf16})
        for (bool last : {false, true})
            for (bool swish : {false, true})
                for (const GroupShape& s : shapes) {
                    run_case(Case{s.len, s.groups, t, last, swish, false}, rng);
                    if (t != DType::f32 && s.len[kH] == 32)
                        run_case(Case{s.len, s.groups, t, last, swish, true}, rng);
                }
    return tally.finish();
}
