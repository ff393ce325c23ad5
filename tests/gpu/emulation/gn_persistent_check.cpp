// Runs gn_persistent's kernel (native/gpu/gn_persistent_forward.h) on the
// host emulator (emulator.hpp; the grid as one cluster, its barrier the
// cluster's: gpu/grid_barrier.h here), with the walk of the real planner
// (plan_gn_persistent) on a small device model whose blocks hold some
// slots in registers, some in shared memory and stream the rest, and
// checks y, mean and rstd against float64 under the tolerance table:
// float32, float16 and bfloat16, NCHW (blocks inside one group, blocks
// across two, a last block cut short) and NHWC (a group over several
// vectors, two groups in one vector, rows of a count of vectors that is no
// power of two, several samples), with and without swish, with and without
// weights; y starts as NaN, nothing past y is written, and in place (y == x)
// gives the same bits; NCHW forwards in rounds (plan_gn_persistent_rounds: on
// a model with a small L2, a launch per half of a sample's groups, or per
// sample; a launch per sample where a block's share of the whole x would
// pass a group); and the planner refuses what the kernel cannot serve.
//
//   gn_persistent_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"

#include "gpu/gn_persistent.hpp"

namespace mbn {
namespace gpu {
namespace {
alignas(16) float4 gn_persistent_shared[(96 * 1024) / sizeof(float4)];
}  // namespace
}  // namespace gpu
}  // namespace mbn

#include "gpu/gn_persistent_forward.h"

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
    GroupShape shape;
    DType dtype;
    bool channels_last;
    bool swish;
    bool affine;  // false: no weight and bias (1 and 0)
    int multiprocessors;
    std::int64_t l2_bytes;  // the model's L2 (0: 1 GB); small enough, the NCHW forward runs in rounds
    bool rounds;            // it must run in rounds (past half the L2, or shares past a group)
};

// The device model: `multiprocessors` blocks at most, each with room for
// eight shared slots of 512 threads beside its sums and statistics.
DeviceShape device_model(int multiprocessors, std::int64_t l2_bytes = 1 << 30) {
    DeviceShape d;
    d.wave_size = EMU_WAVE_SIZE;
    d.multiprocessors = multiprocessors;
    d.shared_bytes_per_block = 80 * 1024;
    d.l2_bytes = l2_bytes;
    return d;
}

template <typename T>
void launch(const GnPersistentWalk& walk, const void* x, void* y, GnPersistentArgs<float> a, bool swish) {
    emu::register_shared(gn_persistent_shared, sizeof gn_persistent_shared);
    auto run = [&](auto kernel) {
        emu::run_grid(walk.blocks, walk.threads, walk.blocks, walk.shared_bytes,
                      [&] { kernel(static_cast<const T*>(x), static_cast<T*>(y), a); });
    };
    if (walk.channels_inner)
        swish ? run(gn_persistent_forward<T, float, true, true>) : run(gn_persistent_forward<T, float, true, false>);
    else
        swish ? run(gn_persistent_forward<T, float, false, true>) : run(gn_persistent_forward<T, float, false, false>);
}

void launch_typed(DType t, const GnPersistentWalk& walk, const void* x, void* y, const GnPersistentArgs<float>& a,
                  bool swish) {
    switch (t) {
        case DType::f32: launch<float>(walk, x, y, a, swish); break;
        case DType::f16: launch<__half>(walk, x, y, a, swish); break;
        case DType::bf16: launch<mbn_bfloat16>(walk, x, y, a, swish); break;
        case DType::f64: break;
    }
}

void run_case(const Case& k, std::mt19937_64& rng) {
    const Lengths& len = k.shape.len;
    const std::int64_t N = len[kN], C = len[kC], G = k.shape.groups;
    const std::int64_t S = len[kD] * len[kH] * len[kW], Cg = C / G;
    char label[192];
    std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld G%lld %s %s%s on %d%s", static_cast<long long>(N),
                  static_cast<long long>(C), static_cast<long long>(len[kH]), static_cast<long long>(len[kW]),
                  static_cast<long long>(G), dtype_name(k.dtype), k.channels_last ? "NHWC" : "NCHW",
                  k.swish ? (k.affine ? " swish" : " swish, no weights") : "", k.multiprocessors,
                  k.l2_bytes > 0 ? ", small L2" : "");
    Tensor x(k.dtype, len, k.channels_last), y(k.dtype, len, k.channels_last);
    std::normal_distribution<double> normal;
    std::uniform_real_distribution<double> uniform;
    // Each group off centre (its mean well away from zero, as the shift
    // is there for), weights and biases per channel.
    std::vector<double> weight(static_cast<std::size_t>(C)), bias(static_cast<std::size_t>(C));
    for (std::int64_t c = 0; c < C; ++c) {
        weight[c] = k.affine ? 0.5 + uniform(rng) : 1.0;
        bias[c] = k.affine ? uniform(rng) - 0.5 : 0.0;
    }
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t g = 0; g < G; ++g) {
            const double centre = 8.0 * uniform(rng) - 4.0, spread = 0.5 + uniform(rng);
            for (std::int64_t c = g * Cg; c < (g + 1) * Cg; ++c)
                for (std::int64_t s = 0; s < S; ++s) x.set(n, c, s, centre + spread * normal(rng));
        }
    Small w(DType::f32, 1, C), b(DType::f32, 1, C), mean(DType::f32, N, G), rstd(DType::f32, N, G);
    for (std::int64_t c = 0; c < C; ++c) {
        w.set(c, weight[c]);
        b.set(c, bias[c]);
    }

    GnForward p;
    p.shape.len = len;
    p.shape.groups = G;
    p.x = x.arg();
    p.y = y.arg();
    for (TensorArg* t : {&p.x, &p.y}) t->order = k.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
    p.weight = w.arg();
    p.bias = b.arg();
    p.mean = mean.arg();
    p.rstd = rstd.arg();
    p.activation = k.swish ? Activation::swish : Activation::none;
    p.swish_beta = kBeta;
    GnPersistentWalk walk{};
    int rounds = 0;
    const DeviceShape device = k.l2_bytes > 0 ? device_model(k.multiprocessors, k.l2_bytes)
                                              : device_model(k.multiprocessors);
    if (const char* why = plan_gn_persistent_rounds(p, device, PlanRule::wherever_it_fits, walk, rounds)) {
        tally.fail(std::string(label) + ": not planned: " + why);
        return;
    }
    tally.checks += 1;
    if (k.rounds != (rounds > 1)) tally.fail(std::string(label) + ": rounds " + std::to_string(rounds));

    // float64 reference.
    const GroupStatistics stats = group_statistics(x, G, 1e-5);
    const std::vector<double>& group_mean = stats.mean;
    const std::vector<double>& group_rstd = stats.rstd;
    std::vector<double> expected;
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t c = 0; c < C; ++c) {
            const std::int64_t f = n * G + c / Cg;
            for (std::int64_t s = 0; s < S; ++s) {
                const double z = (x.get(n, c, s) - group_mean[f]) * group_rstd[f] * weight[c] + bias[c];
                expected.push_back(k.swish ? swish(z, kBeta) : z);
            }
        }

    std::vector<double> sums(gn_persistent_scratch_bytes(walk) / sizeof(double), NAN);
    BarrierCounter counter = 0;
    GnPersistentArgs<float> a{};
    a.walk = walk;
    a.weight_stride = 1;
    a.bias_stride = 1;
    a.epsilon = 1e-5;
    a.swish_beta = kBeta;
    a.sums = sums.data();
    char* scratch = reinterpret_cast<char*>(sums.data());
    a.stats = reinterpret_cast<GnGroupStats*>(scratch + gn_persistent_sums_scratch_bytes(walk));
    a.barrier = &counter;
    for (std::int64_t i = 0; i < N * G; ++i) {
        mean.set(i, NAN);
        rstd.set(i, NAN);
    }
    y.fill_nan();
    // Round by round, as run_gn_forward_persistent launches them.
    auto run = [&](void* from, void* to) {
        for (int r = 0; r < rounds; ++r) {
            GnForward whole = p;
            whole.x.data = from;
            whole.y.data = to;
            const GnForward q = gn_persistent_round(whole, rounds, r);
            a.weight = k.affine ? static_cast<const float*>(q.weight.data) : nullptr;
            a.bias = k.affine ? static_cast<const float*>(q.bias.data) : nullptr;
            a.mean = GnStatTensor{q.mean.data, false, q.mean.stride[kN], q.mean.stride[kC]};
            a.rstd = GnStatTensor{q.rstd.data, false, q.rstd.stride[kN], q.rstd.stride[kC]};
            launch_typed(k.dtype, walk, q.x.data, q.y.data, a, k.swish);
        }
    };
    run(x.data(), y.data());
    std::vector<double> got_mean, got_rstd;
    for (std::int64_t i = 0; i < N * G; ++i) {
        got_mean.push_back(mean.get(i));
        got_rstd.push_back(rstd.get(i));
    }
    const Tolerance tol = tolerance(k.dtype);
    tally.checks += 5;
    if (!compare(label, "y", y.values(), expected, tol.elementwise)) tally.fail(std::string(label) + ": y");
    if (!compare(label, "mean", got_mean, group_mean, tol.reduction)) tally.fail(std::string(label) + ": mean");
    if (!compare(label, "rstd", got_rstd, group_rstd, tol.reduction)) tally.fail(std::string(label) + ": rstd");
    if (!y.slack_intact()) tally.fail(std::string(label) + ": wrote outside y");
    // In place: the same bits.
    Tensor z = x;
    run(z.data(), z.data());
    if (std::memcmp(z.data(), y.data(), static_cast<std::size_t>(y.count()) * dtype_size(k.dtype)) != 0)
        tally.fail(std::string(label) + ": in place differs");
    const int streamed =
        walk.slots - gn_persistent_forward_register_slots(walk.channels_inner) - walk.shared_slots;
    std::printf("done %s: %d round(s) of %d blocks x %d threads, %d slots (%d shared, %d streamed)\n", label,
                rounds, walk.blocks, walk.threads, walk.slots, walk.shared_slots, streamed > 0 ? streamed : 0);
}

}  // namespace

int main() {
    std::mt19937_64 rng(32);
    struct Shape {
        GroupShape shape;
        bool channels_last;
        int multiprocessors;
        std::int64_t l2_bytes = 0;  // a float's; a 16-bit type's model has half
        bool rounds = false;
    };
    const Shape shapes[] = {
        // NCHW: each block inside one group, slots in registers, shared and streamed.
        {{{1, 6, 1, 192, 192}, 3}, false, 3},
        // NCHW: blocks across two groups (shared and streamed slots), a last block short.
        {{{1, 4, 1, 512, 256}, 2}, false, 3},
        // NCHW: several samples, blocks across groups of two samples.
        {{{2, 4, 1, 64, 96}, 2}, false, 5},
        // NHWC: a group spans one vector (half) or two (float), rows of 8 / 16 vectors.
        {{{1, 64, 1, 96, 96}, 8}, true, 3},
        // NHWC: two groups in one half vector, two samples.
        {{{2, 32, 1, 64, 64}, 8}, true, 3},
        // NHWC: rows of 6 (float) or 3 (half) vectors: blocks of 480 / 384 threads.
        {{{1, 24, 1, 64, 64}, 3}, true, 3},
        // NCHW in rounds: halves of the one sample's groups, then one sample a round.
        {{{1, 8, 1, 128, 256}, 2}, false, 2, 256 * 1024, true},
        {{{2, 4, 1, 128, 256}, 1}, false, 2, 256 * 1024, true},
        // NCHW in rounds of a sample: a block's share of the whole x would pass a group.
        {{{4, 4, 1, 64, 128}, 2}, false, 2, 0, true},
    };
    const struct {
        bool swish, affine;
    } outputs[] = {{false, true}, {true, true}, {true, false}};
    for (DType t : {DType::f32, DType::f16, DType::bf16})
        for (const auto& o : outputs)
            for (const Shape& s : shapes) {
                if (s.channels_last && 16 / static_cast<std::int64_t>(dtype_size(t)) >
                                           2 * (s.shape.len[kC] / s.shape.groups))
                    continue;  // more than two groups in a vector: refused (below)
                run_case(Case{s.shape, t, s.channels_last, o.swish, o.affine, s.multiprocessors,
                              s.l2_bytes * static_cast<std::int64_t>(dtype_size(t)) / 4, s.rounds},
                         rng);
            }
    // Refused: more than two groups in a half vector, planes that are not
    // whole vectors, float64.
    const struct {
        GroupShape shape;
        DType dtype;
        bool channels_last;
    } refused[] = {{{{1, 32, 1, 16, 16}, 16}, DType::f16, true},
                   {{{1, 8, 1, 5, 5}, 2}, DType::f16, false},
                   {{{1, 8, 1, 16, 16}, 2}, DType::f64, false}};
    for (const auto& r : refused) {
        Tensor x(r.dtype, r.shape.len, r.channels_last);
        GnForward p;
        p.shape.len = r.shape.len;
        p.shape.groups = r.shape.groups;
        p.x = p.y = x.arg();
        const MemoryOrder order = r.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
        p.x.order = p.y.order = order;
        GnPersistentWalk walk{};
        tally.checks += 1;
        if (const char* why = plan_gn_persistent(p, device_model(3), PlanRule::wherever_it_fits, walk))
            std::printf("refused %s: %s\n", dtype_name(r.dtype), why);
        else
            tally.fail(std::string("planned what it cannot serve: ") + dtype_name(r.dtype));
    }
    return tally.finish();
}
