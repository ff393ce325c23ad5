// Runs the NHWC columns' kernel (native/gpu/bn_nhwc_columns_kernel.h) on the
// host emulator (emulator.hpp), its whole two-dimensional grid as one
// cluster: a column's blocks hand their sums over through counters, which
// gpu/grid_barrier.h's stand-in counts while waiting blocks spin.  The
// launches are shaped as the planner shapes them (lanes, blocks a column,
// rows a block, register rows, streamed rows, flat or tree folds), each
// type's every register-row instance among them, and every output is
// checked against a float64 reference under the tolerance table
// (check_support.hpp): training (y, running mean and variance, saved mean
// and inverse std) and backward (dx, dscale, dbias; saved statistics, then
// recomputed), float32, float16 and bfloat16, blended outputs, in place (y
// is x, dx is dy, with streamed rows), deviations whose float squares
// overflow.  Outputs start as NaN; the slack around every tensor stays
// untouched; the counters are back at zero afterwards.  Then the planner
// (bn_nhwc_columns_plan.h) on an H200 model: the column width, blocks,
// register rows and folds it gives channels-last shapes of the bench, and
// no plan where the device holds no instance.
//
//   bn_columns_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"
#include "two_d_launch.hpp"

#undef __shared__
#define __shared__ extern
#include "gpu/bn_nhwc_columns_kernel.h"
#undef __shared__
#define __shared__
#include "gpu/bn_nhwc_columns_plan.h"

namespace mbn {
namespace gpu {
namespace {
ColumnShared sh;
}  // namespace
}  // namespace gpu
}  // namespace mbn

#include "check_support.hpp"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace mbn;
using namespace mbn::gpu;
using namespace emu_check;

namespace {

constexpr double kEpsilon = 1e-5;
constexpr double kFactor = 0.1;  // exp_avg_factor

// One launch: the tensor, and the plan's choices the kernel reads.
struct Case {
    std::int64_t n, c, h, w;
    DType dtype;
    bool backward;
    int lanes;       // 16-byte vectors side by side in a column's row
    int blocks;      // a column's blocks
    int register_rows;
    int team_size;   // blocks a team folds (blocks: one flat fold)
    bool blend = false;
    double magnitude = 1.0;  // x's deviations scaled by it (5e18: float squares overflow)
    bool in_place = false;   // y is x; dx is dy
};

std::string describe(const Case& k, const char* what) {
    char text[200];
    std::snprintf(text, sizeof text, "%s %lldx%lldx%lldx%lld %s NHWC, lanes %d, %d blocks a column, %d register rows, "
                  "teams of %d%s%s magnitude %g", what, static_cast<long long>(k.n), static_cast<long long>(k.c),
                  static_cast<long long>(k.h), static_cast<long long>(k.w), dtype_name(k.dtype), k.lanes, k.blocks,
                  k.register_rows, k.team_size, k.blend ? ", blended," : ",", k.in_place ? " in place," : "",
                  k.magnitude);
    return text;
}

// A (1, C) float32 parameter tensor.
struct Param : Small {
    explicit Param(std::int64_t c) : Small(DType::f32, 1, c) {}
    std::vector<double> values() const {
        std::vector<double> out(static_cast<std::size_t>(columns));
        for (std::int64_t i = 0; i < columns; ++i) out[i] = get(i);
        return out;
    }
    void fill_nan() {
        for (std::int64_t i = 0; i < columns; ++i) set(i, NAN);
    }
};

ChannelParam param(Param* p) {
    if (p == nullptr) return ChannelParam{ParamRef{nullptr, DType::f32}, 0};
    const TensorArg a = p->arg();
    return ChannelParam{param_ref(a), 1};
}

// The case's plan, the kernel's arguments the plan fixes (common_args), and
// the scratch and counters they point into.
struct Launch {
    ColumnPlan plan;
    ColumnArgs args{};
    std::vector<double> scratch;
    std::vector<BarrierCounter> counters;
};

Launch shape_launch(const Case& k) {
    Launch l;
    ColumnPlan& p = l.plan;
    const int V = 16 / static_cast<int>(dtype_size(k.dtype));
    const int rows = static_cast<int>(k.n * k.h * k.w);
    p.usable = true;
    p.lanes = k.lanes;
    p.columns = static_cast<int>(k.c / (k.lanes * V));
    p.rows_per_block = (rows + k.blocks - 1) / k.blocks;
    p.blocks_per_column = (rows + p.rows_per_block - 1) / p.rows_per_block;
    p.register_rows = k.register_rows;
    p.streamed = p.rows_per_block > k.register_rows * (kThreads / k.lanes);
    p.team_size = k.team_size;
    p.teams = (p.blocks_per_column + k.team_size - 1) / k.team_size;
    const ScratchLayout s = scratch_layout(p.columns, p.blocks_per_column, p.teams, k.lanes * V * 2);
    l.scratch.assign(static_cast<std::size_t>(s.doubles), NAN);
    l.counters.assign(static_cast<std::size_t>(p.columns) * (1 + p.teams), 0);
    BnGeometry geom;
    geom.len = Lengths{k.n, k.c, 1, k.h, k.w};
    LaunchTarget target{};
    target.scratch = l.scratch.data();
    target.counters = l.counters.data();
    ColumnArgs& a = l.args;
    a = common_args(p, geom, target);
    a.epsilon = kEpsilon;
    a.exp_avg_factor = kFactor;
    a.alpha = k.blend ? 0.75f : 1.0f;
    a.beta = k.blend ? 0.5f : 0.0f;
    a.param_alpha = k.blend ? 0.5f : 1.0f;
    a.param_beta = k.blend ? 0.25f : 0.0f;
    return l;
}

// The instance of the case's register rows, streamed where its rows pass them.
template <typename T, bool kBackward>
void run_kernel(const Case& k, Launch& l) {
    const ColumnArgs a = l.args;
    const bool streamed = l.plan.streamed;
    auto launch = [&](auto kernel) {
        g_block = emu::Index{static_cast<unsigned>(kThreads), 1, 1};
        g_grid = emu::Index{static_cast<unsigned>(a.blocks_per_column), static_cast<unsigned>(l.plan.columns), 1};
        emu::register_static_shared(&sh, sizeof sh);
        const unsigned blocks = g_grid.x * g_grid.y;
        emu::run_grid(blocks, kThreads, blocks, sizeof sh, [&] { kernel(a); });
    };
    switch (k.register_rows) {
        case 1: launch(bn_nhwc_columns<T, kBackward, 1, false>); break;
        case 2: launch(bn_nhwc_columns<T, kBackward, 2, false>); break;
        case 4:
            if (streamed && kBackward)
                launch(bn_nhwc_columns<T, kBackward, 4, true>);
            else
                launch(bn_nhwc_columns<T, kBackward, 4, false>);
            break;
        case 6:
            if constexpr (kBackward) launch(bn_nhwc_columns<T, kBackward, 6, false>);
            break;
        default:
            if (streamed && !kBackward)
                launch(bn_nhwc_columns<T, kBackward, 8, true>);
            else
                launch(bn_nhwc_columns<T, kBackward, 8, false>);
    }
}

template <bool kBackward>
void run(const Case& k, Launch& l) {
    switch (k.dtype) {
        case DType::f16: run_kernel<__half, kBackward>(k, l); return;
        case DType::bf16: run_kernel<mbn_bfloat16, kBackward>(k, l); return;
        default: run_kernel<float, kBackward>(k, l); return;
    }
}

// x of channels off centre (mean in [-2, 2) times the magnitude's scale,
// spread in [0.5, 2)), dy standard normal with a mean of its own.
void fill(Tensor& x, Tensor& dy, const Case& k, std::mt19937& rng) {
    std::uniform_real_distribution<double> centre(-2.0, 2.0), spread(0.5, 2.0);
    std::normal_distribution<double> normal(0.0, 1.0);
    const std::int64_t spatial = k.h * k.w;
    for (std::int64_t c = 0; c < k.c; ++c) {
        const double m = centre(rng), s = spread(rng) * k.magnitude, g = centre(rng);
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t p = 0; p < spatial; ++p) {
                x.set(n, c, p, m + s * normal(rng));
                dy.set(n, c, p, g + normal(rng));
            }
    }
}

struct Moments {
    std::vector<double> mean, var;  // biased
};
Moments moments(const Tensor& x, const Case& k) {
    Moments m;
    const std::int64_t spatial = k.h * k.w, count = k.n * spatial;
    for (std::int64_t c = 0; c < k.c; ++c) {
        double s = 0.0;
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t p = 0; p < spatial; ++p) s += x.get(n, c, p);
        const double mean = s / count;
        double q = 0.0;
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t p = 0; p < spatial; ++p) q += (x.get(n, c, p) - mean) * (x.get(n, c, p) - mean);
        m.mean.push_back(mean);
        m.var.push_back(q / count);
    }
    return m;
}

void expect(Tally& tally, bool ok, const std::string& label, const char* what) {
    ++tally.checks;
    if (!ok) tally.fail(label + ": " + what);
}

bool counters_back_at_zero(const Launch& l) {
    for (BarrierCounter c : l.counters)
        if (c != 0) return false;
    return true;
}

void check_training(const Case& k, Tally& tally, std::mt19937& rng) {
    const std::string label = describe(k, "training");
    const Lengths len{k.n, k.c, 1, k.h, k.w};
    Tensor x(k.dtype, len, true), dy(k.dtype, len, true), y(k.dtype, len, true), prior(k.dtype, len, true);
    fill(x, dy, k, rng);
    fill(prior, dy, k, rng);
    y.assign(prior.values());
    if (!k.blend) y.fill_nan();
    const Tensor input = x;  // what the kernel reads (x is y in place)
    if (k.in_place) prior = x;
    Param scale(k.c), bias(k.c), prev_mean(k.c), prev_var(k.c), running_mean(k.c), running_var(k.c), saved_mean(k.c),
        saved_inv_std(k.c);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    for (std::int64_t c = 0; c < k.c; ++c) {
        scale.set(c, u(rng));
        bias.set(c, u(rng) - 1.0);
        prev_mean.set(c, u(rng));
        prev_var.set(c, u(rng));
    }
    running_mean.fill_nan();
    running_var.fill_nan();
    saved_mean.fill_nan();
    saved_inv_std.fill_nan();
    Launch l = shape_launch(k);
    ColumnArgs& a = l.args;
    a.x = x.data();
    a.out = k.in_place ? x.data() : y.data();
    a.scale = param(&scale);
    a.bias = param(&bias);
    a.prev_mean = param(&prev_mean);
    a.prev_var = param(&prev_var);
    a.running_mean = param(&running_mean);
    a.running_var = param(&running_var);
    a.saved_mean = param(&saved_mean);
    a.saved_inv_std = param(&saved_inv_std);
    run<false>(k, l);

    const Moments m = moments(input, k);
    const std::int64_t spatial = k.h * k.w, count = k.n * spatial;
    std::vector<double> y_ref, rm_ref, rv_ref, sm_ref, si_ref;
    for (std::int64_t n = 0; n < k.n; ++n)
        for (std::int64_t c = 0; c < k.c; ++c) {
            const double inv_std = 1.0 / std::sqrt(m.var[c] + kEpsilon);
            for (std::int64_t p = 0; p < spatial; ++p) {
                const double value = scale.get(c) * (input.get(n, c, p) - m.mean[c]) * inv_std + bias.get(c);
                y_ref.push_back(a.alpha * value + a.beta * prior.get(n, c, p));
            }
        }
    for (std::int64_t c = 0; c < k.c; ++c) {
        rm_ref.push_back(running_update(prev_mean.get(c), m.mean[c], kFactor));
        rv_ref.push_back(running_update(prev_var.get(c), m.var[c] * unbiased_ratio(count), kFactor));
        sm_ref.push_back(m.mean[c]);
        si_ref.push_back(1.0 / std::sqrt(m.var[c] + kEpsilon));
    }
    const Tolerance tol = tolerance(k.dtype), stats = tolerance(DType::f32);
    const Tensor& out = k.in_place ? x : y;
    expect(tally, compare(label, "y", out.values(), y_ref, tol.elementwise), label, "y");
    expect(tally, compare(label, "running mean", running_mean.values(), rm_ref, stats.reduction), label, "running mean");
    expect(tally, compare(label, "running variance", running_var.values(), rv_ref, stats.reduction), label,
                "running variance");
    expect(tally, compare(label, "saved mean", saved_mean.values(), sm_ref, stats.reduction), label, "saved mean");
    expect(tally, compare(label, "saved inverse std", saved_inv_std.values(), si_ref, stats.reduction), label,
                "saved inverse std");
    expect(tally, x.slack_intact() && y.slack_intact(), label, "a write outside y");
    expect(tally, counters_back_at_zero(l), label, "the counters are not back at zero");
}

void check_backward(const Case& k, bool saved, Tally& tally, std::mt19937& rng) {
    const std::string label = describe(k, saved ? "backward, saved statistics" : "backward, recomputed");
    const Lengths len{k.n, k.c, 1, k.h, k.w};
    Tensor x(k.dtype, len, true), dy(k.dtype, len, true), dx(k.dtype, len, true), prior(k.dtype, len, true);
    fill(x, dy, k, rng);
    Tensor unused(k.dtype, len, true);
    fill(prior, unused, k, rng);
    dx.assign(prior.values());
    if (!k.blend) dx.fill_nan();
    const Tensor gradient = dy;  // what the kernel reads (dy is dx in place)
    if (k.in_place) prior = dy;
    Param scale(k.c), saved_mean(k.c), saved_inv_std(k.c), dscale(k.c), dbias(k.c);
    std::uniform_real_distribution<double> u(0.5, 1.5);
    const Moments m = moments(x, k);
    std::vector<double> dscale_prior, dbias_prior;
    for (std::int64_t c = 0; c < k.c; ++c) {
        scale.set(c, u(rng));
        saved_mean.set(c, m.mean[c]);  // stored as float32: the reference reads them back
        saved_inv_std.set(c, 1.0 / std::sqrt(m.var[c] + kEpsilon));
        dscale.set(c, k.blend ? u(rng) : NAN);
        dbias.set(c, k.blend ? u(rng) : NAN);
        dscale_prior.push_back(dscale.get(c));
        dbias_prior.push_back(dbias.get(c));
    }
    Launch l = shape_launch(k);
    ColumnArgs& a = l.args;
    a.x = x.data();
    a.dy = dy.data();
    a.out = k.in_place ? dy.data() : dx.data();
    a.scale = param(&scale);
    a.saved_mean = param(saved ? &saved_mean : nullptr);
    a.saved_inv_std = param(saved ? &saved_inv_std : nullptr);
    a.dscale = param(&dscale);
    a.dbias = param(&dbias);
    a.saved = saved;
    run<true>(k, l);

    const std::int64_t spatial = k.h * k.w, count = k.n * spatial;
    std::vector<double> dx_ref(static_cast<std::size_t>(x.count())), ds_ref, db_ref;
    for (std::int64_t c = 0; c < k.c; ++c) {
        const double mean = saved ? saved_mean.get(c) : m.mean[c];
        const double inv_std = saved ? saved_inv_std.get(c) : 1.0 / std::sqrt(m.var[c] + kEpsilon);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t p = 0; p < spatial; ++p) {
                sum_dy += gradient.get(n, c, p);
                sum_dy_xhat += gradient.get(n, c, p) * (x.get(n, c, p) - mean) * inv_std;
            }
        ds_ref.push_back(a.param_alpha * sum_dy_xhat + a.param_beta * dscale_prior[c]);
        db_ref.push_back(a.param_alpha * sum_dy + a.param_beta * dbias_prior[c]);
        for (std::int64_t n = 0; n < k.n; ++n)
            for (std::int64_t p = 0; p < spatial; ++p) {
                const double xhat = (x.get(n, c, p) - mean) * inv_std;
                const double value =
                    scale.get(c) * inv_std * (gradient.get(n, c, p) - sum_dy / count - xhat * sum_dy_xhat / count);
                dx_ref[static_cast<std::size_t>((n * k.c + c) * spatial + p)] =
                    a.alpha * value + a.beta * prior.get(n, c, p);
            }
    }
    const Tolerance tol = tolerance(k.dtype), stats = tolerance(DType::f32);
    const Tensor& out = k.in_place ? dy : dx;
    expect(tally, compare(label, "dx", out.values(), dx_ref, tol.elementwise), label, "dx");
    expect(tally, compare(label, "dscale", dscale.values(), ds_ref, stats.reduction), label, "dscale");
    expect(tally, compare(label, "dbias", dbias.values(), db_ref, stats.reduction), label, "dbias");
    expect(tally, x.slack_intact() && dy.slack_intact() && dx.slack_intact(), label, "a write outside dx");
    expect(tally, counters_back_at_zero(l), label, "the counters are not back at zero");
}

// ---- the planner ----------------------------------------------------------------

struct PlanCase {
    std::int64_t n, c, h, w;
    DType dtype;
    bool backward;
    PlanRule rule;
    bool usable;
    int lanes, columns, blocks, register_rows;
    bool streamed;
    int team_size, teams;
};

// x as a packed NHWC argument (the planner reads no data).
TensorArg nhwc_arg(const PlanCase& k) {
    alignas(16) static unsigned char somewhere[16];
    TensorArg a;
    a.data = somewhere;
    a.dtype = k.dtype;
    a.len = Lengths{k.n, k.c, 1, k.h, k.w};
    a.stride = Strides{k.h * k.w * k.c, 1, k.h * k.w * k.c, k.w * k.c, k.c};
    a.order = MemoryOrder::packed_nhwc;
    return a;
}

// An H200's 132 multiprocessors, two blocks of every instance each but
// backward's 8 register rows (one), as the sm_90 build's register counts
// allow; or none at all.
ColumnPlan plan_on_model(const PlanCase& k, bool holds_none = false) {
    DeviceShape device;
    device.wave_size = EMU_WAVE_SIZE;
    device.multiprocessors = 132;
    const auto occupancy = [&](int rows, bool) { return holds_none ? 0 : k.backward && rows == 8 ? 1 : 2; };
    const TensorArg x = nhwc_arg(k);
    BnGeometry geom;
    geom.len = x.len;
    return k.backward ? plan_columns<true>(geom, x, {&x, &x, &x}, device, k.rule, occupancy)
                      : plan_columns<false>(geom, x, {&x, &x}, device, k.rule, occupancy);
}

void check_plans(Tally& tally) {
    constexpr PlanRule kSize = PlanRule::size_rule;
    const std::vector<PlanCase> cases = {
        // 128-byte columns in one fold batch (float), 64-byte where 128 would
        // take two (half: 6 register rows, nothing streamed)
        {16, 256, 28, 28, DType::f16, true, kSize, true, 4, 8, 33, 6, false, 33, 1},
        {16, 256, 28, 28, DType::f32, true, kSize, true, 8, 8, 33, 4, true, 33, 1},
        {64, 1024, 14, 14, DType::f16, true, kSize, true, 8, 16, 16, 4, true, 16, 1},
        // 128-byte columns where the threads stream most rows, as a tree of teams
        {32, 64, 56, 56, DType::f32, true, kSize, true, 8, 2, 132, 4, true, 12, 11},
        // 64-byte columns in fewer, fuller blocks that fold flat: 6 rows
        // (backward), 8 (training)
        {8, 64, 56, 56, DType::f16, true, kSize, true, 4, 2, 66, 6, false, 66, 1},
        {8, 64, 56, 56, DType::f16, false, kSize, true, 4, 2, 49, 8, false, 49, 1},
        // under a MiB of x: the size rule leaves it to the other paths; forced, columns
        {4, 320, 20, 20, DType::f16, false, kSize, false, 0, 0, 0, 0, false, 0, 0},
        {4, 320, 20, 20, DType::f16, false, PlanRule::wherever_it_fits, true, 4, 10, 25, 1, false, 25, 1},
    };
    for (const PlanCase& k : cases) {
        char label[120];
        std::snprintf(label, sizeof label, "plan of %lldx%lldx%lldx%lld %s NHWC %s", static_cast<long long>(k.n),
                      static_cast<long long>(k.c), static_cast<long long>(k.h), static_cast<long long>(k.w),
                      dtype_name(k.dtype), k.backward ? "backward" : "training");
        const ColumnPlan p = plan_on_model(k);
        char got[200];
        std::snprintf(got, sizeof got, "usable %d, lanes %d, %d columns, %d blocks, %d register rows%s, teams of %d x %d",
                      p.usable, p.lanes, p.columns, p.blocks_per_column, p.register_rows, p.streamed ? " streamed" : "",
                      p.team_size, p.teams);
        const bool same = p.usable == k.usable &&
                          (!k.usable || (p.lanes == k.lanes && p.columns == k.columns &&
                                         p.blocks_per_column == k.blocks && p.register_rows == k.register_rows &&
                                         p.streamed == k.streamed && p.team_size == k.team_size && p.teams == k.teams));
        std::printf("%s: %s\n", label, got);
        expect(tally, same, label, "not the plan the rules give");
        expect(tally, !plan_on_model(k, true).usable, label, "a plan on a device that holds no instance");
    }
}

}  // namespace

int main() {
    Tally tally;
    std::mt19937 rng(20261202);
    // Rows a thread takes: rows a block / (256 / lanes).  Half and bfloat16
    // hold 8 channels a vector, float 4.
    const std::vector<Case> cases = {
        // training: one and two register rows, flat folds of 64-byte columns
        {4, 64, 4, 4, DType::f16, false, 4, 1, 1, 1},
        {4, 64, 8, 8, DType::f32, false, 4, 3, 2, 3, true},
        {2, 32, 16, 16, DType::bf16, false, 4, 2, 4, 2},
        // training: 8 register rows, then streamed past them; a tree of teams
        {2, 8, 32, 32, DType::f16, false, 1, 1, 8, 1},
        {3, 16, 32, 32, DType::f32, false, 4, 2, 8, 2},
        {2, 8, 40, 40, DType::bf16, false, 1, 3, 8, 2},
        // training: deviations whose float squares overflow (the sums again in double)
        {2, 16, 8, 8, DType::f32, false, 2, 2, 2, 2, false, 2e19},
        // backward (at least 256 rows, as planned): 1, 2, 4, 6 and 8 register
        // rows, streamed past 4; flat folds and trees of teams; 128-byte columns
        {4, 64, 8, 8, DType::f16, true, 4, 4, 1, 4},
        {4, 32, 8, 8, DType::f32, true, 8, 4, 2, 2, true},
        {2, 16, 24, 24, DType::bf16, true, 2, 2, 4, 2},
        {2, 8, 35, 35, DType::f16, true, 1, 2, 6, 2},
        {2, 8, 28, 28, DType::f32, true, 2, 3, 6, 3},
        {2, 8, 32, 32, DType::bf16, true, 1, 1, 8, 1},
        {4, 8, 30, 30, DType::f16, true, 1, 3, 4, 2},
        {2, 16, 36, 36, DType::f32, true, 4, 3, 4, 2, true},
        // in place (y is x, dx is dy), streamed rows read again after others' writes
        {3, 16, 32, 32, DType::f16, false, 2, 2, 8, 2, false, 1.0, true},
        {4, 8, 30, 30, DType::bf16, true, 1, 3, 4, 2, false, 1.0, true},
    };
    for (const Case& k : cases) {
        if (k.backward) {
            check_backward(k, true, tally, rng);
            check_backward(k, false, tally, rng);
        } else {
            check_training(k, tally, rng);
        }
    }
    check_plans(tally);
    return tally.finish();
}
