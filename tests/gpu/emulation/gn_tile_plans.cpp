// What the on-chip group-norm planner (gn_tile_planner.cpp) picks for the
// large UNet planes on an H200 model (132 multiprocessors, clusters up to 8
// with the H100's resident counts, a 50 MB L2), forward and backward: the
// register-only plan it would take without streaming (the same device with
// no L2 to stream through) beside the plan it takes, with the rounds of
// clusters each runs in (the backward's by the resident clusters of its
// form).  Checks that the streamed plans run in one round, within their
// slot and L2 bounds, that every plan that ran in one round without
// streaming is unchanged, and which backward plans yield to the persistent
// backward.  Host only (no kernel runs).
//
//   gn_tile_plans            exit status 0 when every check holds
#include "common/group_norm_problem.hpp"
#include "gpu/gn_tile_planner.hpp"
#include "hopper_device.hpp"

#include <cstdint>
#include <cstdio>

using namespace mbn;
using namespace mbn::gpu;

namespace {

int failures = 0;

DeviceShape h200(std::int64_t l2_bytes) {
    DeviceShape d = hopper_device();
    d.l2_bytes = static_cast<int>(l2_bytes);
    return d;
}

TensorArg tensor(DType t, const Lengths& len, bool channels_last) {
    TensorArg a;
    alignas(16) static unsigned char somewhere[16];
    a.data = somewhere;
    a.dtype = t;
    a.len = len;
    if (channels_last) {
        a.stride[kC] = 1;
        a.stride[kW] = len[kC];
        a.stride[kH] = a.stride[kW] * len[kW];
        a.stride[kD] = a.stride[kH] * len[kH];
        a.stride[kN] = a.stride[kD] * len[kD];
    } else {
        a.stride[kW] = 1;
        a.stride[kH] = len[kW];
        a.stride[kD] = a.stride[kH] * len[kH];
        a.stride[kC] = a.stride[kD] * len[kD];
        a.stride[kN] = a.stride[kC] * len[kC];
    }
    a.order = MemoryOrder::strided;
    return a;
}

std::int64_t rounds(const GnTileWalk& w, const DeviceShape& d) {
    const std::int64_t resident = d.resident_clusters(w.cluster, w.backward_blocks);
    return resident > 0 ? (w.tiles() + resident - 1) / resident : -1;
}

// The most slots a thread holds (registers and streamed).
int slots(const GnTileWalk& w) {
    const std::int64_t rows = w.channels_inner ? (w.rows + w.cluster - 1) / w.cluster : w.rows;
    return static_cast<int>((rows + w.row_threads - 1) / w.row_threads);
}

void print(const char* what, const char* why, const GnTileWalk& w, const DeviceShape& d) {
    if (why != nullptr) {
        std::printf("    %-9s none: %s\n", what, why);
        return;
    }
    std::printf("    %-9s cluster %d, %d threads (%d x %d), %d slots (%d streamed), %lld tiles, %lld round(s)", what,
                w.cluster, w.threads, w.columns, w.row_threads, slots(w), w.streamed,
                static_cast<long long>(w.tiles()), static_cast<long long>(rounds(w, d)));
    if (w.backward_blocks > 0) std::printf(", %d block(s)/SM", w.backward_blocks);
    std::printf("\n");
}

bool same_launch(const GnTileWalk& a, const GnTileWalk& b) {
    return a.tiles() == b.tiles() && a.tile_groups == b.tile_groups && a.cluster == b.cluster &&
           a.threads == b.threads && a.columns == b.columns && a.row_threads == b.row_threads &&
           a.shared_bytes == b.shared_bytes && a.streamed == b.streamed && a.backward_blocks == b.backward_blocks &&
           a.exact == b.exact;
}

void check(bool ok, const char* text, const char* shape) {
    if (ok) return;
    ++failures;
    std::printf("FAIL %s: %s\n", shape, text);
}

}  // namespace

int main() {
    const DeviceShape device = h200(50ll << 20);
    const DeviceShape no_stream = h200(1);  // no L2 to stream through: the register-only plan
    const Lengths planes[] = {{2, 1280, 1, 64, 64}, {1, 1280, 1, 64, 64}, {2, 640, 1, 64, 64}, {1, 512, 1, 64, 64},
                              {2, 640, 1, 32, 32},  {1, 320, 1, 64, 64},  {2, 320, 1, 64, 64}, {1, 320, 1, 128, 128},
                              {2, 1280, 1, 32, 32}};
    for (DType t : {DType::f16, DType::f32})
        for (const Lengths& len : planes)
            for (bool last : {false, true}) {
                char shape[120];
                std::snprintf(shape, sizeof shape, "%lldx%lldx%lldx%lld %s %s", static_cast<long long>(len[kN]),
                              static_cast<long long>(len[kC]), static_cast<long long>(len[kH]),
                              static_cast<long long>(len[kW]), t == DType::f16 ? "fp16" : "fp32",
                              last ? "NHWC" : "NCHW");
                GnShape s;
                s.len = len;
                s.groups = 32;
                const TensorArg x = tensor(t, len, last), y = tensor(t, len, last), dy = tensor(t, len, last);
                std::printf("%s (x %.1f MB)\n", shape,
                            static_cast<double>(x.element_count()) * (t == DType::f16 ? 2 : 4) / (1 << 20));
                for (bool backward : {false, true}) {
                    GnTileWalk before{}, after{};
                    const char* why_before = backward ? plan_gn_tiles(s, {&x, &dy, &y}, true, no_stream, before)
                                                      : plan_gn_tiles(s, {&x, &y}, false, no_stream, before);
                    const char* why_after = backward ? plan_gn_tiles(s, {&x, &dy, &y}, true, device, after)
                                                     : plan_gn_tiles(s, {&x, &y}, false, device, after);
                    std::printf("  %s\n", backward ? "backward" : "forward");
                    print("register:", why_before, before, device);
                    print("now:", why_after, after, device);
                    if (why_after != nullptr) continue;
                    const int most = backward ? kGnTileBackwardStreamSlots : kGnTileStreamSlots;
                    const int in_registers = backward ? kGnTileBackwardStreamRegisterSlots : kGnTileStreamRegisterSlots;
                    const int tensors = backward ? 2 : 1;
                    if (after.streamed > 0) {
                        check(rounds(after, device) == 1, "the streamed plan takes more than one round", shape);
                        check(slots(after) <= most, "more slots than the bound", shape);
                        check(slots(after) == in_registers + after.streamed,
                              "slots other than the registers' and the streamed", shape);
                        check(why_before != nullptr || rounds(before, device) > 1,
                              "streams where the registers took one round", shape);
                        const bool wide = after.backward_blocks == 1 && after.threads <= kGnTileBackwardWideThreads;
                        const bool narrow = after.backward_blocks == kGnTileBackwardStreamBlocks &&
                                            after.threads <= kGnTileBackwardThreads;
                        check(!backward || wide || narrow, "the streamed backward in neither of its forms", shape);
                        // The streamed bytes (an upper bound: every thread's
                        // part as long as the longest) within half the L2.
                        const std::int64_t rows = after.channels_inner
                                                      ? (after.rows + after.cluster - 1) / after.cluster
                                                      : after.rows;
                        const std::int64_t vectors = after.channels_inner
                                                         ? after.vectors
                                                         : (after.vectors + after.cluster - 1) / after.cluster;
                        const std::int64_t streamed_rows =
                            rows - static_cast<std::int64_t>(in_registers) * after.row_threads;
                        check(after.tiles() * after.cluster * streamed_rows * vectors * 16 * tensors <=
                                  device.l2_bytes / 2,
                              "streamed bytes past half the L2", shape);
                    } else {
                        check(why_before == nullptr && same_launch(before, after),
                              "a register-only plan changed", shape);
                    }
                }
            }
    // The backward's tiles yield to the persistent backward
    // (bn_algorithm.hip) where they run long, channels inner in three rounds
    // or more, and where they spread thin, positions inner in the streamed
    // two-block form; not the other positions-inner plans (several rounds,
    // the wide streamed form), not the streamed one-round plans channels inner.
    struct YieldCase {
        Lengths len;
        DType type;
        bool channels_last, yields;
    };
    const YieldCase yield_cases[] = {{{2, 1280, 1, 64, 64}, DType::f16, true, true},
                                     {{2, 640, 1, 64, 64}, DType::f32, true, true},
                                     {{2, 1280, 1, 64, 64}, DType::f16, false, false},
                                     {{1, 1280, 1, 64, 64}, DType::f16, false, true},
                                     {{2, 640, 1, 64, 64}, DType::f16, false, false},
                                     {{2, 320, 1, 64, 64}, DType::f16, true, false}};
    for (const YieldCase& k : yield_cases) {
        GnShape s;
        s.len = k.len;
        s.groups = 32;
        const TensorArg x = tensor(k.type, k.len, k.channels_last), y = tensor(k.type, k.len, k.channels_last),
                        dy = tensor(k.type, k.len, k.channels_last);
        GnTileWalk w{};
        char shape[120];
        std::snprintf(shape, sizeof shape, "backward %lldx%lldx%lldx%lld %s", static_cast<long long>(k.len[kN]),
                      static_cast<long long>(k.len[kC]), static_cast<long long>(k.len[kH]),
                      static_cast<long long>(k.len[kW]), k.channels_last ? "NHWC" : "NCHW");
        const char* why = plan_gn_tiles(s, {&x, &dy, &y}, true, device, w);
        check(why == nullptr, "the tiles refuse it", shape);
        if (why != nullptr) continue;
        const bool yields = gn_backward_tiles_yield(w, device);
        std::printf("%s: %lld round(s), %s\n", shape, static_cast<long long>(rounds(w, device)),
                    yields ? "yields to the persistent backward" : "the tiles keep it");
        check(yields == k.yields, k.yields ? "should yield" : "should not yield", shape);
    }
    std::printf("%d failure(s)\n", failures);
    return failures == 0 ? 0 : 1;
}
