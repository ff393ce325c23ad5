// Runs gn_persistent's backward kernel (native/gpu/gn_persistent_backward.h)
// on the host emulator (emulator.hpp; the grid as one cluster, its barrier
// the cluster's: gpu/grid_barrier.h here), with the walk of the real
// planner (plan_gn_persistent_backward) on a small device model whose
// blocks hold some slots in registers, some in shared memory and stream the
// rest, and checks dx, dweight and dbias against float64 under the
// tolerance table: float32, float16 and bfloat16, NCHW (blocks inside one
// group, blocks across two, several slices a block, planes shorter than a
// block, a last block cut short) and NHWC (a group over several vectors, two
// groups in one vector, rows of a count of vectors that is no power of two,
// several samples), with and without swish, with and without weights (the
// smaller shapes); dx starts as NaN, nothing past it is written, in place
// (dx == dy, dx == x) gives the same bits; and the planner refuses what
// the kernel cannot serve.
//
//   gn_persistent_backward_check    exit status 0 when every case passes
#include "gpu/hip_compat.h"  // the emulation stand-in (found first)

#include "emulator.hpp"

#include "gpu/gn_persistent.hpp"

namespace mbn {
namespace gpu {
namespace {
alignas(16) float4 gn_persistent_backward_shared[(96 * 1024) / sizeof(float4)];
}  // namespace
}  // namespace gpu
}  // namespace mbn

#include "gpu/gn_persistent_backward.h"

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
constexpr double kEpsilon = 1e-5;

struct Case {
    GroupShape shape;
    DType dtype;
    bool channels_last;
    bool swish;
    bool affine;  // false: no weight (1) and no dweight / dbias
    int multiprocessors;
};

// The device model: `multiprocessors` blocks at most, each with room for a
// few shared slots of 512 threads beside its sums, terms and parameters.
DeviceShape device_model(int multiprocessors) {
    DeviceShape d;
    d.wave_size = EMU_WAVE_SIZE;
    d.multiprocessors = multiprocessors;
    d.shared_bytes_per_block = 96 * 1024;
    d.l2_bytes = 1 << 30;
    return d;
}

template <typename T>
void launch(const GnPersistentWalk& walk, const void* x, const void* dy, void* dx,
            const GnPersistentBackwardArgs<float>& a, bool swish) {
    emu::register_shared(gn_persistent_backward_shared, sizeof gn_persistent_backward_shared);
    auto run = [&](auto kernel) {
        emu::run_grid(walk.blocks, walk.threads, walk.blocks, walk.shared_bytes, [&] {
            kernel(static_cast<const T*>(x), static_cast<const T*>(dy), static_cast<T*>(dx), a);
        });
    };
    if (walk.channels_inner)
        swish ? run(gn_persistent_backward<T, float, true, true>) : run(gn_persistent_backward<T, float, true, false>);
    else
        swish ? run(gn_persistent_backward<T, float, false, true>)
              : run(gn_persistent_backward<T, float, false, false>);
}

void launch_typed(DType t, const GnPersistentWalk& walk, const void* x, const void* dy, void* dx,
                  const GnPersistentBackwardArgs<float>& a, bool swish) {
    switch (t) {
        case DType::f32: launch<float>(walk, x, dy, dx, a, swish); break;
        case DType::f16: launch<__half>(walk, x, dy, dx, a, swish); break;
        case DType::bf16: launch<mbn_bfloat16>(walk, x, dy, dx, a, swish); break;
        case DType::f64: break;
    }
}

std::string describe(const Case& k) {
    const Lengths& len = k.shape.len;
    char label[200];
    std::snprintf(label, sizeof label, "%lldx%lldx%lldx%lld G%lld %s %s%s%s on %d", static_cast<long long>(len[kN]),
                  static_cast<long long>(len[kC]), static_cast<long long>(len[kH]), static_cast<long long>(len[kW]),
                  static_cast<long long>(k.shape.groups), dtype_name(k.dtype), k.channels_last ? "NHWC" : "NCHW",
                  k.swish ? " swish" : "", k.affine ? "" : " no weights", k.multiprocessors);
    return label;
}

void run_case(const Case& k, std::mt19937_64& rng) {
    const Lengths& len = k.shape.len;
    const std::int64_t C = len[kC], G = k.shape.groups;
    const std::string label = describe(k);
    Tensor x(k.dtype, len, k.channels_last), dy(k.dtype, len, k.channels_last);
    fill_backward_inputs(x, dy, rng);
    std::uniform_real_distribution<double> uniform;
    Small weight(DType::f32, 1, C), bias(DType::f32, 1, C);
    for (std::int64_t c = 0; c < C; ++c) {
        weight.set(c, k.affine ? 0.5 + uniform(rng) : 1.0);
        bias.set(c, k.affine ? uniform(rng) - 0.5 : 0.0);
    }
    SavedStatistics saved = saved_statistics(x, G, kEpsilon);
    Small& mean = saved.mean;
    Small& rstd = saved.rstd;
    const GnBackwardReference ref = gn_backward_reference(
        x, dy, mean, rstd, G, [&](std::int64_t c) { return weight.get(c); }, [&](std::int64_t c) { return bias.get(c); },
        k.swish, kBeta);

    Tensor dx(k.dtype, len, k.channels_last);
    Small dweight(DType::f32, 1, C), dbias(DType::f32, 1, C);
    GnBackward p;
    p.shape.len = len;
    p.shape.groups = G;
    p.x = x.arg();
    p.dy = dy.arg();
    p.dx = dx.arg();
    for (TensorArg* t : {&p.x, &p.dy, &p.dx})
        t->order = k.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
    p.affine = k.affine;
    p.activation = k.swish ? Activation::swish : Activation::none;
    p.swish_beta = kBeta;
    GnPersistentWalk walk{};
    if (const char* why =
            plan_gn_persistent_backward(p, device_model(k.multiprocessors), PlanRule::wherever_it_fits, walk)) {
        tally.fail(label + ": not planned: " + why);
        return;
    }

    std::vector<double> scratch(gn_persistent_backward_scratch_bytes(walk) / sizeof(double), NAN);
    BarrierCounter counter = 0;
    GnPersistentBackwardArgs<float> a{};
    a.walk = walk;
    if (k.affine) {
        a.weight = static_cast<const float*>(weight.arg().data);
        a.weight_stride = 1;
        a.dweight = static_cast<float*>(dweight.arg().data);
        a.dbias = static_cast<float*>(dbias.arg().data);
        a.dweight_stride = a.dbias_stride = 1;
        if (k.swish) {
            a.bias = static_cast<const float*>(bias.arg().data);
            a.bias_stride = 1;
        }
    }
    a.mean = GnStatTensor{mean.storage.data(), false, G, 1};
    a.rstd = GnStatTensor{rstd.storage.data(), false, G, 1};
    a.swish_beta = kBeta;
    a.sums = scratch.data();
    a.totals = reinterpret_cast<double*>(reinterpret_cast<char*>(scratch.data()) +
                                        gn_persistent_backward_sums_scratch_bytes(walk));
    a.barrier = &counter;
    for (std::int64_t c = 0; c < C; ++c) dweight.set(c, NAN), dbias.set(c, NAN);
    dx.fill_nan();
    launch_typed(k.dtype, walk, x.data(), dy.data(), dx.data(), a, k.swish);
    const Tolerance tol = tolerance(k.dtype), ptol = tolerance(DType::f32);
    tally.checks += 2;
    if (!compare(label, "dx", dx.values(), ref.dx, tol.elementwise)) tally.fail(label + ": dx");
    if (!dx.slack_intact()) tally.fail(label + ": wrote outside dx");
    std::vector<double> got_dw(C), got_db(C);
    for (std::int64_t c = 0; c < C; ++c) got_dw[c] = dweight.get(c), got_db[c] = dbias.get(c);
    if (k.affine) {
        tally.checks += 2;
        if (!compare(label, "dweight", got_dw, ref.dweight, ptol.reduction)) tally.fail(label + ": dweight");
        if (!compare(label, "dbias", got_db, ref.dbias, ptol.reduction)) tally.fail(label + ": dbias");
    }
    // In place (dx over dy, then over x): the same bits (so reruns too).
    const std::size_t bytes = static_cast<std::size_t>(dx.count()) * dtype_size(k.dtype);
    Tensor over_dy = dy;
    launch_typed(k.dtype, walk, x.data(), over_dy.data(), over_dy.data(), a, k.swish);
    Tensor over_x = x;
    launch_typed(k.dtype, walk, over_x.data(), dy.data(), over_x.data(), a, k.swish);
    tally.checks += 2;
    if (std::memcmp(over_dy.data(), dx.data(), bytes) != 0) tally.fail(label + ": in place over dy differs");
    if (std::memcmp(over_x.data(), dx.data(), bytes) != 0) tally.fail(label + ": in place over x differs");
    const int streamed = walk.slots -
                         gn_persistent_backward_register_slots(k.channels_last, k.swish) -
                         walk.shared_slots;
    std::printf("done %s: %d blocks x %d threads, %d slots (%d shared, %d streamed)%s\n", label.c_str(), walk.blocks,
                walk.threads, walk.slots, walk.shared_slots, streamed > 0 ? streamed : 0,
                walk.channels_inner ? "" : (", " + std::to_string(walk.block_slices) + " slices a block").c_str());
}

}  // namespace

int main() {
    std::mt19937_64 rng(37);
    struct Shape {
        GroupShape shape;
        bool channels_last;
        int multiprocessors;
        bool once = false;  // a large grid: only half, with weights, without swish
    };
    const Shape shapes[] = {
        // NCHW: each block inside one group and one slice, slots in registers, shared and streamed.
        {{{1, 6, 1, 192, 192}, 3}, false, 3},
        // NCHW: blocks across two groups and several slices, a last block short.
        {{{1, 8, 1, 256, 128}, 2}, false, 3},
        // NCHW: planes shorter than a block (several slices a slot), two samples.
        {{{2, 16, 1, 16, 32}, 2}, false, 5},
        // NCHW: groups of more channels than a block's threads (the merge's
        // threads take several), shares across two of them.
        {{{1, 1040, 1, 8, 16}, 2}, false, 80, true},
        // NHWC: a group spans one vector (half) or two (float), rows of 8 / 16 vectors.
        {{{1, 64, 1, 96, 96}, 8}, true, 3},
        // NHWC: two groups in one half vector, two samples.
        {{{2, 32, 1, 64, 64}, 8}, true, 3},
        // NHWC: two samples of two blocks each.
        {{{2, 32, 1, 64, 64}, 8}, true, 5},
        // NHWC: rows of 6 (float) or 3 (half) vectors: blocks of 480 / 384 threads.
        {{{1, 24, 1, 64, 64}, 3}, true, 3},
    };
    const struct {
        bool swish, affine;
    } outputs[] = {{false, true}, {true, true}, {false, false}};
    for (DType t : {DType::f32, DType::f16, DType::bf16})
        for (const auto& o : outputs)
            for (const Shape& s : shapes) {
                if (s.channels_last && 16 / static_cast<std::int64_t>(dtype_size(t)) >
                                           2 * (s.shape.len[kC] / s.shape.groups))
                    continue;  // more than two groups in a vector: refused (below)
                if (!o.affine && s.shape.len[kW] > 64) continue;  // without weights: the smaller shapes
                if (s.once && (t != DType::f16 || o.swish || !o.affine)) continue;
                run_case(Case{s.shape, t, s.channels_last, o.swish, o.affine, s.multiprocessors}, rng);
            }
    // Refused: more than two groups in a half vector, planes that are not
    // whole vectors, float64, small float32 groups, planes too short for a
    // block's share.
    const struct {
        GroupShape shape;
        DType dtype;
        bool channels_last;
    } refused[] = {{{{1, 32, 1, 16, 16}, 16}, DType::f16, true},
                   {{{1, 8, 1, 5, 5}, 2}, DType::f16, false},
                   {{{1, 8, 1, 16, 16}, 2}, DType::f64, false},
                   {{{1, 8, 1, 4, 4}, 4}, DType::f32, false},
                   {{{1, 1024, 1, 8, 8}, 1}, DType::f16, false}};
    for (const auto& r : refused) {
        Tensor x(r.dtype, r.shape.len, r.channels_last);
        GnBackward p;
        p.shape.len = r.shape.len;
        p.shape.groups = r.shape.groups;
        p.x = p.dy = p.dx = x.arg();
        const MemoryOrder order = r.channels_last ? MemoryOrder::packed_nhwc : MemoryOrder::packed_nchw;
        p.x.order = p.dy.order = p.dx.order = order;
        GnPersistentWalk walk{};
        tally.checks += 1;
        if (const char* why = plan_gn_persistent_backward(p, device_model(3), PlanRule::wherever_it_fits, walk))
            std::printf("refused %s: %s\n", dtype_name(r.dtype), why);
        else
            tally.fail(std::string("planned what it cannot serve: ") + dtype_name(r.dtype));
    }
    return tally.finish();
}
