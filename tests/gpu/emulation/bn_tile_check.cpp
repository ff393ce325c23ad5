// Runs the batch-norm tile kernels (native/gpu/bn_wave_tile.hip: wave
// tiles; native/gpu/bn_channel_tile.hip: block tiles NCHW and NHWC, cluster
// tiles, streamed tiles) on the host emulator (emulator.hpp) through the
// real planners (plan_wave_tiles, plan_channel_tiles,
// PlanRule::wherever_it_fits), and checks every output
// against a float64 reference computed here, with the tolerance table of
// python/miopen_bn/tolerances.csv (check_support.hpp): training (y, running
// mean and variance, saved mean and inverse std; then again with none of
// them, y bitwise the same) and backward (dx, dscale, dbias; with the saved
// statistics, then recomputing them), float32, float16 and bfloat16,
// parameters float32 or of x's type, blended outputs (alpha, beta) or not,
// in place (y = x, dx = dy, dx = x), deviations whose float squares overflow.
// Outputs start as NaN.  Every planned path named in kCovered must be met.
//
//   bn_tile_check    exit status 0 when every case passes
#include "common/problem.hpp"
#include "gpu/bn_channel_tile.hpp"
#include "gpu/bn_wave_tile.hpp"

#include "check_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

using namespace mbn;
using namespace mbn::gpu;
using namespace emu_check;

namespace {

constexpr double kEpsilon = 1e-5;
constexpr double kFactor = 0.1;  // exp_avg_factor

struct Case {
    Lengths len;  // N, C, D, H, W
    DType dtype;
    bool nhwc;
    bool params_like_x;  // scale, bias, statistics and their gradients in x's type (else float32)
    bool blend;          // outputs blended with their prior content (alpha, beta)
    bool clustered;      // a device with clusters of up to 8 blocks (wave 32 only)
    double offset;       // the channels' means lie around it
    double magnitude = 1.0;  // x's deviations scaled by it (5e18: float squares overflow)
    bool in_place = false;   // y is x; dx is dy (saved statistics), then x
    bool mixed = false;      // the magnitude on even channels only (odd ones of 1)
};

std::string describe(const Case& k) {
    char text[200];
    std::snprintf(text, sizeof text, "%lldx%lldx%lldx%lldx%lld %s %s%s%s%s%s offset %g magnitude %g%s",
                  static_cast<long long>(k.len[kN]), static_cast<long long>(k.len[kC]),
                  static_cast<long long>(k.len[kD]), static_cast<long long>(k.len[kH]),
                  static_cast<long long>(k.len[kW]), dtype_name(k.dtype), k.nhwc ? "NHWC" : "NCHW",
                  k.params_like_x ? " params-like-x" : "", k.blend ? " blended" : "",
                  k.clustered ? " clusters" : "", k.in_place ? " in-place" : "", k.offset, k.magnitude,
                  k.mixed ? " on even channels" : "");
    return text;
}

int failures = 0;

void check(bool ok, const std::string& label, const char* what) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s: %s\n", label.c_str(), what);
}

void compare(const std::string& label, const char* what, const std::vector<double>& got,
             const std::vector<double>& expected, MbnTolerance tol) {
    if (!emu_check::compare(label, what, got, expected, tol)) ++failures;
}

// The H100 the planner is given (132 multiprocessors, 50 MB of L2), its
// wave the emulated one; without clusters unless the case asks for them.
DeviceShape device_shape(bool clustered) {
    DeviceShape d;
    d.wave_size = EMU_WAVE_SIZE;
    d.multiprocessors = 132;
    d.l2_bytes = 50 << 20;
    d.cluster_blocks = clustered ? 8 : 1;
    return d;
}

// The path a plan takes, as kCovered names it.
std::string path_of(const ChannelTilePlan& p, const Case& k) {
    const int full = 16 / static_cast<int>(dtype_size(k.dtype));
    const std::string vector = p.vector == full ? "16B" : p.vector == 1 ? "single" : "8B";
    if (p.stream) {
        const std::int64_t plane_units = k.len[kD] * k.len[kH] * k.len[kW] / p.vector;
        const char* step = p.threads > plane_units ? "step>plane" : p.threads < plane_units ? "step<plane" : "step=plane";
        return "stream " + vector + " " + step + (p.cluster > 1 ? " cluster" : "");
    }
    return std::string(p.nhwc ? "block NHWC" : "block NCHW") + (p.cluster > 1 ? " cluster" : "");
}

// The paths the cases must reach (a planner change that moved one away
// fails the check rather than leaving the path untested).
const char* const kCovered[] = {
    "wave 1 slot",       "wave 2 slots",      "wave 4 slots",       "wave 8 slots",
    "wave NHWC 1 slot 1 lane", "wave NHWC 2 slots 2 lanes", "wave NHWC 4 slots 1 lane",
    "wave NHWC 4 slots 2 lanes waves", "wave NHWC 4 slots 1 lane waves",
    "block NCHW",        "block NHWC",
    "stream 16B step<plane", "stream 16B step>plane", "stream 16B step=plane", "stream 8B step>plane",
    "stream single step<plane", "stream single step>plane",
};
const char* const kCoveredWithClusters[] = {"block NCHW cluster", "block NHWC cluster",
                                             "stream single step<plane cluster"};
std::set<std::string> covered;

std::string plan_text(const ChannelTilePlan& p) {
    char text[160];
    std::snprintf(text, sizeof text, "%lld blocks x %d threads, vector %d, %d a thread, cluster %d, lanes %d",
                  static_cast<long long>(p.blocks), p.threads, p.vector, p.per_thread, p.cluster, p.lanes);
    return text;
}

// A (1, C, 1, 1, 1) parameter tensor.
struct Param : Small {
    Param(DType t, std::int64_t c) : Small(t, 1, c) {}
    void fill(double v) {
        for (std::int64_t c = 0; c < columns; ++c) set(c, v);
    }
    std::vector<double> values() const {
        std::vector<double> out(static_cast<std::size_t>(columns));
        for (std::int64_t c = 0; c < columns; ++c) out[c] = get(c);
        return out;
    }
};

// Plans p's wave tiles (`wave`) or channel tiles and runs them; false
// where the planner takes no such tiles.  The first round of a case records
// and prints the path.
template <typename Problem>
bool plan_and_run(const Problem& p, const Case& k, bool wave, const std::string& label, const char* op, bool first) {
    const DeviceShape device = device_shape(k.clustered);
    const LaunchTarget target{nullptr, nullptr, nullptr};
    if (wave) {
        const WaveTilePlan plan = plan_wave_tiles(p, device, PlanRule::wherever_it_fits);
        if (!plan.usable) {
            if (first) std::printf("no plan %s %s\n", label.c_str(), op);
            return false;
        }
        check(plan.threads <= (plan.nhwc ? 256 : 4 * EMU_WAVE_SIZE), label + " " + op,
              "more threads than the kernel's launch bounds");
        if (first) {
            const int slots = plan.nhwc ? plan.row_slots : plan.plane_slots;
            std::string path = std::string(plan.nhwc ? "wave NHWC " : "wave ") + std::to_string(slots) +
                               (slots == 1 ? " slot" : " slots");
            if (plan.nhwc) {
                path += plan.lanes == 1 ? " 1 lane" : " 2 lanes";
                if (plan.threads > EMU_WAVE_SIZE) path += " waves";
            }
            covered.insert(path);
            std::printf("run %s %s: %s: %lld blocks x %d threads\n", label.c_str(), op, path.c_str(),
                        static_cast<long long>(plan.blocks), plan.threads);
        }
        run_wave_tiles(p, plan, target);
        return true;
    }
    const ChannelTilePlan plan = plan_channel_tiles(p, device, PlanRule::wherever_it_fits);
    if (!plan.usable) {
        if (first) std::printf("no plan %s %s\n", label.c_str(), op);
        return false;
    }
    check(plan.threads <= 512, label + " " + op, "more threads than the kernel's launch bounds");
    if (first) {
        covered.insert(path_of(plan, k));
        std::printf("run %s %s: %s: %s\n", label.c_str(), op, path_of(plan, k).c_str(), plan_text(plan).c_str());
    }
    run_channel_tiles(p, plan, target);
    return true;
}

struct Blending {
    float alpha, beta;
};

// One case, for the plan of wave tiles (`wave`) or of the other tiles.
void run_case(const Case& k, bool wave, std::mt19937_64& rng) {
    const std::int64_t N = k.len[kN], C = k.len[kC], S = k.len[kD] * k.len[kH] * k.len[kW];
    const double M = static_cast<double>(N * S);
    const DType pt = k.params_like_x ? k.dtype : DType::f32;
    const Blending data_blend = k.blend ? Blending{0.75f, 0.5f} : Blending{1.0f, 0.0f};
    const Blending param_blend = k.blend ? Blending{1.5f, -0.25f} : Blending{1.0f, 0.0f};

    Tensor x(k.dtype, k.len, k.nhwc), dy(k.dtype, k.len, k.nhwc), prior(k.dtype, k.len, k.nhwc);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    for (std::int64_t c = 0; c < C; ++c) {
        const double mean = k.offset + uniform(rng) * 4 - 2, spread = uniform(rng) * 1.5 + 0.5;
        const double magnitude = k.mixed && c % 2 != 0 ? 1.0 : k.magnitude;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t s = 0; s < S; ++s) {
                x.set(n, c, s, magnitude * (mean + spread * normal(rng)));
                dy.set(n, c, s, normal(rng));
                prior.set(n, c, s, normal(rng));
            }
    }
    Param scale(pt, C), bias(pt, C), prev_mean(pt, C), prev_var(pt, C), dscale_prior(pt, C), dbias_prior(pt, C);
    for (std::int64_t c = 0; c < C; ++c) {
        scale.set(c, 0.5 + uniform(rng));
        bias.set(c, uniform(rng) - 0.5);
        prev_mean.set(c, uniform(rng) - 0.5);
        prev_var.set(c, 0.5 + uniform(rng));
        dscale_prior.set(c, normal(rng));
        dbias_prior.set(c, normal(rng));
    }
    const std::vector<double> xs = x.values(), gs = dy.values(), ps = prior.values();
    auto arg = [&](Tensor& t) {
        TensorArg a = t.arg();
        a.order = k.nhwc ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
        return a;
    };
    auto index = [&](std::int64_t n, std::int64_t c, std::int64_t s) { return (n * C + c) * S + s; };

    // Reference statistics of the stored x.
    std::vector<double> ref_mean(C), ref_var(C), ref_inv(C);
    for (std::int64_t c = 0; c < C; ++c) {
        double sum = 0, m2 = 0;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t s = 0; s < S; ++s) sum += xs[index(n, c, s)];
        ref_mean[c] = sum / M;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t s = 0; s < S; ++s) m2 += (xs[index(n, c, s)] - ref_mean[c]) * (xs[index(n, c, s)] - ref_mean[c]);
        ref_var[c] = m2 / M;
        ref_inv[c] = 1.0 / std::sqrt(ref_var[c] + kEpsilon);
    }
    const Tolerance tol = tolerance(k.dtype), ptol = tolerance(pt);
    const std::string label = describe(k) + (wave ? " [wave tiles]" : " [channel tiles]");

    // ---- training: everything, then y alone (bitwise the same y).
    std::vector<double> ref_y(xs.size()), ref_rm(C), ref_rv(C);
    for (std::int64_t c = 0; c < C; ++c) {
        ref_rm[c] = (1 - kFactor) * prev_mean.get(c) + kFactor * ref_mean[c];
        ref_rv[c] = (1 - kFactor) * prev_var.get(c) + kFactor * ref_var[c] * (M > 1 ? M / (M - 1) : 1.0);
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t s = 0; s < S; ++s) {
                const std::size_t i = index(n, c, s);
                const double v = (xs[i] - ref_mean[c]) * ref_inv[c] * scale.get(c) + bias.get(c);
                ref_y[i] = data_blend.alpha * v + data_blend.beta * ps[i];
            }
    }
    std::vector<double> first_y;
    Param saved_mean(pt, C), saved_inv(pt, C);  // the training's, for the backward
    for (int round = 0; round < 2; ++round) {
        const bool everything = round == 0;
        Tensor fresh(k.dtype, k.len, k.nhwc);
        x.assign(xs);  // again (in place, the last round overwrote it)
        Tensor& y = k.in_place ? x : fresh;
        if (k.blend)
            y.assign(ps);
        else if (!k.in_place)
            y.fill_nan();
        Param running_mean(pt, C), running_var(pt, C);
        running_mean.fill(NAN), running_var.fill(NAN), saved_mean.fill(NAN), saved_inv.fill(NAN);
        BnForwardTraining p;
        p.geom.mode = BnMode::spatial;
        p.geom.len = k.len;
        p.x = arg(x);
        p.y = arg(y);
        p.scale = scale.arg();
        p.bias = bias.arg();
        if (everything) {
            p.prev_running_mean = prev_mean.arg();
            p.prev_running_var = prev_var.arg();
            p.running_mean = running_mean.arg();
            p.running_var = running_var.arg();
            p.saved_mean = saved_mean.arg();
            p.saved_inv_std = saved_inv.arg();
        }
        p.epsilon = kEpsilon;
        p.exp_avg_factor = kFactor;
        p.out.alpha = data_blend.alpha;
        p.out.beta = data_blend.beta;
        if (!plan_and_run(p, k, wave, label, "training", round == 0)) break;
        const std::vector<double> got = y.values();
        check(x.slack_intact() && y.slack_intact(), label, "training wrote outside y");
        if (everything) {
            compare(label, "y", got, ref_y, tol.elementwise);
            compare(label, "running mean", running_mean.values(), ref_rm, ptol.reduction);
            compare(label, "running variance", running_var.values(), ref_rv, ptol.reduction);
            compare(label, "saved mean", saved_mean.values(), ref_mean, ptol.reduction);
            compare(label, "saved inverse std", saved_inv.values(), ref_inv, ptol.reduction);
            first_y = got;
        } else {
            check(std::memcmp(got.data(), first_y.data(), got.size() * sizeof(double)) == 0, label,
                  "training without running and saved statistics gave another y");
        }
    }

    // ---- backward: from the saved statistics (as stored), then recomputing them.
    for (int round = 0; round < 2; ++round) {
        const bool saved = round == 0;
        std::vector<double> mean = ref_mean, inv = ref_inv;
        Param given_mean(pt, C), given_inv(pt, C);
        if (saved)
            for (std::int64_t c = 0; c < C; ++c) {
                given_mean.set(c, ref_mean[c]);
                given_inv.set(c, ref_inv[c]);
                mean[c] = given_mean.get(c);  // the reference takes them as stored
                inv[c] = given_inv.get(c);
            }
        std::vector<double> ref_dx(xs.size()), ref_ds(C), ref_db(C);
        for (std::int64_t c = 0; c < C; ++c) {
            double g1 = 0, g2 = 0;
            for (std::int64_t n = 0; n < N; ++n)
                for (std::int64_t s = 0; s < S; ++s) {
                    const std::size_t i = index(n, c, s);
                    g1 += gs[i];
                    g2 += gs[i] * (xs[i] - mean[c]) * inv[c];
                }
            ref_ds[c] = param_blend.alpha * g2 + param_blend.beta * dscale_prior.get(c);
            ref_db[c] = param_blend.alpha * g1 + param_blend.beta * dbias_prior.get(c);
            for (std::int64_t n = 0; n < N; ++n)
                for (std::int64_t s = 0; s < S; ++s) {
                    const std::size_t i = index(n, c, s);
                    const double xhat = (xs[i] - mean[c]) * inv[c];
                    const double v = scale.get(c) * inv[c] * (gs[i] - g1 / M - xhat * g2 / M);
                    ref_dx[i] = data_blend.alpha * v + data_blend.beta * ps[i];
                }
        }
        Tensor fresh(k.dtype, k.len, k.nhwc);
        x.assign(xs);
        dy.assign(gs);
        Tensor& dx = !k.in_place ? fresh : saved ? dy : x;
        if (k.blend)
            dx.assign(ps);
        else if (!k.in_place)
            dx.fill_nan();
        Param dscale(pt, C), dbias(pt, C);
        for (std::int64_t c = 0; c < C; ++c) {
            dscale.set(c, k.blend ? dscale_prior.get(c) : NAN);
            dbias.set(c, k.blend ? dbias_prior.get(c) : NAN);
        }
        BnBackward p;
        p.geom.mode = BnMode::spatial;
        p.geom.len = k.len;
        p.x = arg(x);
        p.dy = arg(dy);
        p.dx = arg(dx);
        p.scale = scale.arg();
        p.dscale = dscale.arg();
        p.dbias = dbias.arg();
        if (saved) {
            p.saved_mean = given_mean.arg();
            p.saved_inv_std = given_inv.arg();
        }
        p.epsilon = kEpsilon;
        p.data.alpha = data_blend.alpha;
        p.data.beta = data_blend.beta;
        p.param.alpha = param_blend.alpha;
        p.param.beta = param_blend.beta;
        if (!plan_and_run(p, k, wave, label, "backward", round == 0)) break;
        check(x.slack_intact() && dy.slack_intact() && dx.slack_intact(), label, "backward wrote outside dx");
        const std::string what = saved ? " (saved statistics)" : " (statistics recomputed)";
        compare(label + what, "dx", dx.values(), ref_dx, tol.elementwise);
        compare(label + what, "dscale", dscale.values(), ref_ds, ptol.reduction);
        compare(label + what, "dbias", dbias.values(), ref_db, ptol.reduction);
    }
}

}  // namespace

int main() {
    std::mt19937_64 rng(18);
    std::vector<Case> cases;
    auto add = [&](Lengths len, bool nhwc, std::initializer_list<DType> which, bool blend = false) {
        for (DType t : which) {
            // Parameters of x's type for half and bfloat16, float32 for the
            // blended cases.
            const bool like_x = t != DType::f32 && !blend;
            cases.push_back(Case{len, t, nhwc, like_x, blend, false, 0.0});
        }
    };
    // The same, with float32 parameters for half and bfloat16 too (the wave
    // tiles take only those).
    auto add_both = [&](Lengths len, std::initializer_list<DType> which, bool blend = false) {
        add(len, false, which, blend);
        for (DType t : which)
            if (t != DType::f32 && !blend) cases.push_back(Case{len, t, false, false, false, false, 0.0});
    };
    // Wave tiles (and the block tiles of the same shapes; the wave tiles
    // refuse parameters of x's type), slots a plane at
    // 32 / 64 lanes: 7x7 2 / 1 (8x5x7x7: 16 values a lane at 32), 4x4 1 / 1,
    // 10x10 4 / 2, 14x14 8 / 4, 16x16 8 / 4, 20x20 none / 8; 20x3x7x7 too
    // many samples (channel tiles); C not a multiple of the 4 waves of a block.
    add_both({2, 6, 1, 7, 7}, {DType::f32, DType::f16, DType::bf16});
    add_both({8, 5, 1, 7, 7}, {DType::f16});
    add_both({20, 3, 1, 7, 7}, {DType::f32});
    add_both({4, 9, 1, 4, 4}, {DType::f32, DType::f16, DType::bf16});
    add_both({3, 3, 1, 4, 4}, {DType::bf16}, true);
    add_both({3, 5, 1, 10, 10}, {DType::f16});
    add_both({2, 7, 1, 14, 14}, {DType::f32, DType::bf16});
    add_both({2, 3, 1, 16, 16}, {DType::f16}, true);
    add_both({2, 3, 1, 20, 20}, {DType::f32});
    // Blocks of 4 waves (529 channels: 133 blocks), the last one's three
    // waves past C.
    add_both({2, 529, 1, 4, 4}, {DType::f16});
    // NHWC wave tiles (float32 parameters): one wave of 1, 2 or 4 row
    // slots, one or two vectors a row (tiles at two that would not outnumber
    // the multiprocessors take one); blocks of several waves adding through
    // shared memory, the last wave's rows part past N*H*W; 5 vectors a row
    // (odd: one lane); blended; rank 2.
    auto add_nhwc = [&](Lengths len, std::initializer_list<DType> which, bool blend = false) {
        for (DType t : which) cases.push_back(Case{len, t, true, false, blend, false, 0.0});
    };
    add_nhwc({1, 32, 1, 3, 3}, {DType::f16, DType::f32});     // 9 rows
    add_nhwc({1, 4224, 1, 5, 5}, {DType::f16});               // 25 rows, 264 tiles of 2 vectors
    add_nhwc({1, 4096, 1, 7, 7}, {DType::f16});               // 49 rows, 256 tiles of 2 vectors
    add_nhwc({1, 2048, 1, 7, 7}, {DType::bf16, DType::f32});  // 49 rows, one vector a tile
    add_nhwc({2, 64, 1, 7, 7}, {DType::f32, DType::bf16});    // 98 rows
    add_nhwc({4, 16, 1, 7, 7}, {DType::f16});                 // 196 rows
    add_nhwc({8, 16, 1, 7, 7}, {DType::f16, DType::f32});     // 392 rows: several waves
    add_nhwc({2, 2112, 1, 8, 13}, {DType::f16});              // 208 rows, 132 tiles of 2 vectors, waves
    add_nhwc({3, 20, 1, 5, 11}, {DType::f32}, true);          // 5 vectors, blended
    add_nhwc({37, 40, 1, 1, 1}, {DType::bf16});
    cases.push_back(Case{{8, 16, 1, 7, 7}, DType::f32, true, false, false, false, 1000.0});
    cases.push_back(Case{{8, 6, 1, 7, 7}, DType::f32, false, false, false, false, 1e4});
    // Block tiles, NCHW: 16-byte vectors, 8-byte (10x10 half), single values
    // (5x5), two and four vectors a thread (12x2x16x16, 32x2x16x16 float).
    add({8, 12, 1, 8, 8}, false, {DType::f32, DType::f16, DType::bf16});
    add({16, 3, 1, 10, 10}, false, {DType::f16, DType::f32});
    add({6, 4, 1, 5, 5}, false, {DType::f32, DType::bf16});
    add({12, 2, 1, 16, 16}, false, {DType::f32});
    add({32, 2, 1, 16, 16}, false, {DType::f32});
    add({5, 7, 1, 6, 6}, false, {DType::f16}, true);
    // Block tiles, NHWC: two lanes a row (C = 32 half, 24 float), one
    // (24 bfloat16), two and four rows a thread (4x16x10x10, 10x16x10x10
    // half), rank 2.
    add({4, 32, 1, 6, 6}, true, {DType::f16});
    add({3, 24, 1, 5, 7}, true, {DType::f32, DType::bf16});
    add({4, 16, 1, 10, 10}, true, {DType::f16});
    add({10, 16, 1, 10, 10}, true, {DType::f16});
    add({2, 8, 1, 1, 1}, true, {DType::f32});
    add({3, 16, 1, 3, 3}, true, {DType::bf16}, true);
    // Streamed tiles (one 256-thread block a channel, 256 vectors in
    // registers): 16-byte vectors with planes of 1024 (64x64 float), 256
    // (32x32 float) and 128 (32x32 half) of them; 8-byte ones (14x14 half,
    // 49 a plane); single values (45x47 planes: 2115; 7x7: 49).
    add({3, 2, 1, 64, 64}, false, {DType::f32});
    add({9, 2, 1, 32, 32}, false, {DType::f32});
    add({24, 2, 1, 32, 32}, false, {DType::f16, DType::bf16});
    add({48, 2, 1, 14, 14}, false, {DType::f16, DType::bf16});
    add({4, 3, 1, 45, 47}, false, {DType::f32, DType::f16, DType::bf16});
    add({48, 2, 1, 7, 7}, false, {DType::f32});
    add({44, 1, 1, 14, 14}, false, {DType::bf16}, true);
    // Means far from 0 (the center the sums are taken around matters).
    cases.push_back(Case{{8, 12, 1, 8, 8}, DType::f32, false, false, false, false, 1000.0});
    cases.push_back(Case{{4, 3, 1, 45, 47}, DType::f32, false, false, false, false, 1000.0});
    // Deviations whose float squares overflow (the sums again in double), on
    // every channel, then on every other one (NHWC: beside channels of the
    // same thread that must keep their float sums as they are).
    for (const Lengths& len : {Lengths{8, 12, 1, 8, 8}, Lengths{4, 3, 1, 45, 47}, Lengths{3, 24, 1, 5, 7}})
        cases.push_back(Case{len, DType::f32, len[kC] == 24, false, false, false, 0.0, 5e18});
    cases.push_back(Case{{3, 24, 1, 5, 7}, DType::f32, true, false, false, false, 0.0, 5e18, false, true});
    cases.push_back(Case{{4, 16, 1, 10, 10}, DType::bf16, true, false, false, false, 0.0, 5e18, false, true});
    cases.push_back(Case{{8, 16, 1, 7, 7}, DType::f32, true, false, false, false, 0.0, 5e18, false, true});
    cases.push_back(Case{{1, 16, 1, 7, 7}, DType::bf16, true, false, false, false, 0.0, 5e18});
    cases.push_back(Case{{2, 6, 1, 7, 7}, DType::bf16, false, false, false, false, 0.0, 5e18, false, true});
    // In place: y = x, dx = dy and dx = x.
    cases.push_back(Case{{2, 6, 1, 7, 7}, DType::f16, false, false, false, false, 0.0, 1.0, true});  // float32 parameters: the wave tiles too
    cases.push_back(Case{{8, 12, 1, 8, 8}, DType::f32, false, false, false, false, 0.0, 1.0, true});
    cases.push_back(Case{{4, 16, 1, 10, 10}, DType::bf16, true, true, false, false, 0.0, 1.0, true});
    cases.push_back(Case{{8, 16, 1, 7, 7}, DType::f16, true, false, false, false, 0.0, 1.0, true});
    cases.push_back(Case{{4, 3, 1, 45, 47}, DType::f16, false, true, false, false, 0.0, 1.0, true});
    cases.push_back(Case{{24, 2, 1, 32, 32}, DType::f32, false, false, false, false, 0.0, 1.0, true});
    // Clusters of blocks (H100: wave 32 only): NCHW and NHWC tiles, a streamed channel.
    const bool clusters = EMU_WAVE_SIZE == 32;
    if (clusters) {
        cases.push_back(Case{{8, 4, 1, 16, 16}, DType::f32, false, false, false, true, 0.0});
        cases.push_back(Case{{16, 16, 1, 8, 8}, DType::f16, true, true, false, true, 0.0});
        cases.push_back(Case{{6, 3, 1, 9, 9}, DType::bf16, false, false, true, true, 0.0});
        // A float channel streamed by a cluster of 8 blocks (2115 values each).
        cases.push_back(Case{{8, 1, 1, 45, 47}, DType::f32, false, false, false, true, 0.0});
    }
    for (const Case& k : cases)
        for (bool wave : {true, false}) run_case(k, wave, rng);
    std::vector<const char*> wanted(std::begin(kCovered), std::end(kCovered));
    if (clusters) wanted.insert(wanted.end(), std::begin(kCoveredWithClusters), std::end(kCoveredWithClusters));
    for (const char* path : wanted)
        if (!covered.count(path)) {
            ++failures;
            std::printf("FAIL no case took the path %s\n", path);
        }
    std::printf("%d failure(s) in %zu cases\n", failures, cases.size());
    return failures == 0 ? 0 : 1;
}
