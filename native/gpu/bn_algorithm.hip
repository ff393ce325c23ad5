// The GPU backend's choice of algorithm (bn_algorithm.hpp).  Each op has one
// order of candidates; the default takes the first whose plan serves the
// call by its own size rule, a forced algorithm is planned alone with no
// size rule (wherever it can serve the call).
#include "gpu/bn_algorithm.hpp"

#include "common/log_sink.hpp"
#include "gpu/bn_dense_inference.hpp"
#include "gpu/bn_fused.hpp"
#include "gpu/feature_scratch.hpp"
#include "gpu/gn_launch.hpp"
#include "gpu/gn_tile_planner.hpp"

namespace mbn {
namespace gpu {
namespace {

// The default order of each op.
constexpr Algorithm kTrainingOrder[] = {Algorithm::nhwc_columns, Algorithm::wave_tiles, Algorithm::channel_tiles, Algorithm::resident,
                                        Algorithm::single_launch, Algorithm::multi_pass};
constexpr Algorithm kInferenceOrder[] = {Algorithm::dense_inference, Algorithm::nest_walk};

// Why the default choice took an algorithm, for the log.
const char* default_reason(Algorithm a) {
    switch (a) {
        case Algorithm::dense_inference: return "packed data and float estimates, one elementwise pass";
        case Algorithm::nest_walk: return "strides, types or sizes the dense pass does not take";
        case Algorithm::nhwc_columns:
            return "packed NHWC from 1 MB and 1024 rows: each column of channels on its own blocks";
        case Algorithm::wave_tiles:
            return "each NCHW channel fits one wave's registers, or each NHWC tile of channels one block's";
        case Algorithm::channel_tiles:
            return "each channel tile fits the registers of a block or a cluster, or an NCHW channel's block or cluster "
                   "streams it through L2";
        case Algorithm::resident: return "the tensors fit the multiprocessors' shared memory, large enough for one launch";
        case Algorithm::single_launch: return "each block owns its features' whole reduction";
        case Algorithm::multi_pass: return "no one-launch algorithm takes the call";
        default: return "";
    }
}

// What a batch-norm algorithm takes, for the refusal of a forced one.
const char* requirement(Algorithm a) {
    switch (a) {
        case Algorithm::dense_inference:
            return "it takes spatial inference without a fused activation on packed NCHW/NHWC half, bfloat16 or "
                   "float x and y of one type and layout, 16-byte aligned, under 2^31 elements, with float estimates "
                   "(scale, bias, mean, variance) one per channel, packed";
        case Algorithm::nhwc_columns:
            return "it takes spatial calls without a fused activation on packed NHWC half, bfloat16 or float data "
                   "of one type, 16-byte aligned, C a multiple of the 16-byte vector, under 2^31 elements, at least "
                   "2 rows, and for backward at least 256 rows (dx in float)";
        case Algorithm::wave_tiles:
            return "it takes spatial calls without a fused activation on half, bfloat16 or float data of one "
                   "type and layout, under 2^31 elements, with float32 parameters: packed NCHW whose channels each "
                   "fit one wave's registers (a lane takes up to 8 positions of a plane, ceil(H*W / wave size) "
                   "rounded up to 1, 2, 4 or 8, in each of N samples, at most 16 values), or packed NHWC, 16-byte "
                   "aligned, C a multiple of the 16-byte vector, whose rows fit a block of 256 threads at 4 rows a "
                   "lane (N*D*H*W up to 1024, or 512 where a tile takes two vectors)";
        case Algorithm::channel_tiles:
            return "it takes spatial calls without a fused activation on packed NCHW, or packed NHWC with C a "
                   "multiple of the 16-byte vector, half, bfloat16 or float data of one type and layout, under "
                   "2^31 elements; NHWC tiles must fit the registers of a block or a cluster of blocks";
        case Algorithm::resident:
            return "it takes spatial calls without a fused activation on packed NCHW, or packed NHWC with C a "
                   "multiple of 4, half, bfloat16 or float data of one type and layout, 16-byte aligned, under "
                   "2^31 elements and 2048 channels, that fit the multiprocessors' shared memory";
        case Algorithm::single_launch:
            return "it takes calls whose layout gives each block its features' whole reduction; this one's "
                   "reduction is split over several blocks";
        default: return "";
    }
}

const char* order_name(MemoryOrder order) {
    switch (order) {
        case MemoryOrder::packed_nchw: return "packed NCHW";
        case MemoryOrder::packed_nhwc: return "packed NHWC";
        default: return "strided";
    }
}

std::string describe(const TensorArg& x, const char* mode, bool fused) {
    return concat("x ", dtype_name(x.dtype), " ", order_name(x.order), " ", x.len[kN], "x", x.len[kC], "x",
                  x.len[kD], "x", x.len[kH], "x", x.len[kW], ", ", mode, fused ? ", fused activation" : "");
}

const char* mode_name(const BnGeometry& geom) { return geom.mode == BnMode::spatial ? "spatial" : "per activation"; }

void log_choice(GpuOp op, Algorithm a, bool forced, const char* reason, const char* detail = nullptr) {
    if (!info_logging_enabled()) return;
    const std::string why = forced ? concat("forced by ", kAlgorithmVariable, reason != nullptr ? "; " : "",
                                            reason != nullptr ? reason : "")
                                   : std::string(reason);
    log_info("gpu", concat(op_name(op), ": algorithm ", algorithm_name(a), " (", why,
                           detail != nullptr ? concat("; not on chip: ", detail) : std::string(), ")"));
}

[[noreturn]] void refuse(GpuOp op, Algorithm a, const std::string& call, const std::string& why) {
    fail(miopenStatusNotImplemented, kAlgorithmVariable, "=", algorithm_name(a), " cannot serve this ", op_name(op),
         " (", call, "): ", why);
}

// Plans `a` for a training or backward call into `c`; true when it serves.
template <typename Problem>
bool plan_bn(Algorithm a, const Problem& p, const SlotTensors& t, const DeviceShape& device, PlanRule rule,
             BnChoice& c) {
    switch (a) {
        case Algorithm::nhwc_columns:
            c.columns = plan_nhwc_columns(p, device, rule);
            c.scratch_bytes = c.columns.scratch_bytes;
            c.counters = c.columns.counters;
            return c.columns.usable;
        case Algorithm::wave_tiles:
            c.waves = plan_wave_tiles(p, device, rule);
            return c.waves.usable;
        case Algorithm::channel_tiles:
            c.tiles = plan_channel_tiles(p, device, rule);
            return c.tiles.usable;
        case Algorithm::resident:
            c.resident = plan_resident(p, device, rule);
            c.scratch_bytes = c.resident.scratch_bytes;
            c.counters = c.resident.counters;
            return c.resident.usable;
        case Algorithm::single_launch:
        case Algorithm::multi_pass:
            if (c.layout.tiles == 0) c.layout = plan_layout(p.geom, t, device, p.activation.identity());
            c.scratch_bytes = scratch_bytes(c.layout);
            c.counters = 0;
            return a == Algorithm::multi_pass || single_launch_fits(c.layout);
        default: return false;
    }
}

template <typename Problem>
BnChoice choose_bn(const Problem& p, const SlotTensors& t, const DeviceShape& device, GpuOp op) {
    BnChoice c;
    const AlgorithmRequest request = requested_algorithm(op);
    if (request.forced) {
        if (!plan_bn(request.algorithm, p, t, device, PlanRule::wherever_it_fits, c))
            refuse(op, request.algorithm, describe(p.x, mode_name(p.geom), !p.activation.identity()),
                   requirement(request.algorithm));
        c.algorithm = request.algorithm;
        log_choice(op, c.algorithm, true, nullptr);
        return c;
    }
    for (Algorithm a : kTrainingOrder) {
        c.scratch_bytes = 0;
        c.counters = 0;
        if (!plan_bn(a, p, t, device, PlanRule::size_rule, c)) continue;
        // Where both serve, NHWC tiles on a small grid beat the columns
        // (bn_channel_tile.hip's plan()).
        const char* reason = default_reason(a);
        if (a == Algorithm::nhwc_columns && plan_bn(Algorithm::channel_tiles, p, t, device, PlanRule::size_rule, c) &&
            c.tiles.small_grid) {
            a = Algorithm::channel_tiles;
            c.scratch_bytes = 0;
            c.counters = 0;
            reason = "packed NHWC tiles on a small grid (clusters of at most 4 blocks on at most 2/3 of the "
                     "multiprocessors), ahead of the columns";
        }
        c.algorithm = a;
        log_choice(op, a, false, reason);
        return c;
    }
    fail(miopenStatusInternalError, "GPU backend: no algorithm serves this ", op_name(op));
}

const char* why_not_on_chip(const char* why) { return why != nullptr ? why : ""; }

}  // namespace

BnChoice choose_algorithm(const BnForwardTraining& p, const DeviceShape& device) {
    SlotTensors t;
    t.slot[kSlotX] = &p.x;
    t.slot[kSlotY] = &p.y;
    t.slot[kFwdScale] = &p.scale;
    t.slot[kFwdBias] = &p.bias;
    t.slot[kFwdMean] = &p.running_mean;
    t.slot[kFwdVar] = &p.running_var;
    t.slot[kFwdSavedMean] = &p.saved_mean;
    t.slot[kFwdSavedInvStd] = &p.saved_inv_std;
    t.slot[kFwdPrevMean] = &p.prev_running_mean;
    t.slot[kFwdPrevVar] = &p.prev_running_var;
    return choose_bn(p, t, device, kOpTraining);
}

BnChoice choose_algorithm(const BnBackward& p, const DeviceShape& device) {
    SlotTensors t;
    t.slot[kSlotX] = &p.x;
    t.slot[kSlotY] = &p.dy;
    t.slot[kSlotDx] = &p.dx;
    t.slot[kBwdScale] = &p.scale;
    t.slot[kBwdDscale] = &p.dscale;
    t.slot[kBwdDbias] = &p.dbias;
    t.slot[kBwdSavedMean] = &p.saved_mean;
    t.slot[kBwdSavedInvStd] = &p.saved_inv_std;
    t.slot[kBwdBias] = &p.bias;
    return choose_bn(p, t, device, kOpBackward);
}

BnChoice choose_algorithm(const BnForwardInference& p, const DeviceShape& device) {
    BnChoice c;
    const AlgorithmRequest request = requested_algorithm(kOpInference);
    for (Algorithm a : kInferenceOrder) {
        if (request.forced && a != request.algorithm) continue;
        if (a == Algorithm::dense_inference && !dense_inference_fits(p)) continue;
        if (a == Algorithm::nest_walk) {
            SlotTensors t;
            t.slot[kSlotX] = &p.x;
            t.slot[kSlotY] = &p.y;
            t.slot[kFwdScale] = &p.scale;
            t.slot[kFwdBias] = &p.bias;
            t.slot[kFwdMean] = &p.mean;
            t.slot[kFwdVar] = &p.var;
            c.layout = plan_layout(p.geom, t, device, p.activation.identity());
            c.scratch_bytes = scratch_bytes(c.layout);
        }
        c.algorithm = a;
        log_choice(kOpInference, a, request.forced, default_reason(a));
        return c;
    }
    refuse(kOpInference, request.algorithm, describe(p.x, mode_name(p.geom), !p.activation.identity()),
           requirement(request.algorithm));
}

GnForwardChoice choose_algorithm(const GnForward& p, const DeviceShape& device) {
    GnForwardChoice c;
    const AlgorithmRequest request = requested_algorithm(kOpGnForward);
    const bool any = !request.forced;
    const char* not_on_chip = nullptr;
    const auto choose_tiles = [&] {
        c.algorithm = Algorithm::gn_on_chip;
        log_choice(kOpGnForward, c.algorithm, request.forced, "the groups fit the registers of a block or a cluster");
        return c;
    };
    bool tiles_run_long = false;
    if (any || request.algorithm == Algorithm::gn_on_chip) {
        not_on_chip = plan_gn_forward_on_chip(p, device, c.plan);
        if (not_on_chip == nullptr) {
            tiles_run_long = gn_tiles_run_long(c.plan.tiles, device);
            if (!any || !tiles_run_long) return choose_tiles();
        }
        if (!any)
            refuse(kOpGnForward, request.algorithm, describe(p.x, "group norm", false),
                   concat("the on-chip group-norm kernels cannot take this problem: ", not_on_chip));
    }
    // Packed and too large for the tiles, or where the tiles would run long
    // and the persistent blocks are full: one persistent launch where the
    // grid holds x on chip and in L2.
    if (any || request.algorithm == Algorithm::gn_persistent) {
        const PlanRule rule = any ? PlanRule::size_rule : PlanRule::wherever_it_fits;
        const char* not_persistent = plan_gn_persistent_rounds(p, device, rule, c.plan.persistent, c.plan.rounds);
        if (not_persistent == nullptr && tiles_run_long && c.plan.persistent.threads < kGnPersistentFullThreads)
            not_persistent = "its blocks are not full";
        if (not_persistent == nullptr && !gn_persistent_resident(p, c.plan.persistent, device))
            not_persistent = "its blocks do not all fit the device at once";
        if (not_persistent == nullptr) {
            c.algorithm = Algorithm::gn_persistent;
            c.plan.needs = GnScratchNeeds{gn_persistent_scratch_bytes(c.plan.persistent), 1};
            log_choice(kOpGnForward, c.algorithm, request.forced,
                       c.plan.rounds > 1 ? "packed, x held by a resident grid in registers, shared memory and L2, "
                                           "a launch per run of groups"
                                         : "packed, x held by one resident grid in registers, shared memory and L2",
                       !any ? nullptr : tiles_run_long ? "the tiles would run long" : why_not_on_chip(not_on_chip));
            return c;
        }
        if (!any)
            refuse(kOpGnForward, request.algorithm, describe(p.x, "group norm", false),
                   concat("the persistent group-norm kernel cannot take this problem: ", not_persistent));
    }
    if (tiles_run_long) return choose_tiles();
    // Off chip: the slices where they read x better (the size rule), else the chunks.
    const bool slices_better = plan_gn_forward_walk(p, device, c.plan);
    const bool slices = any ? slices_better : request.algorithm == Algorithm::gn_slices;
    c.algorithm = slices ? Algorithm::gn_slices : Algorithm::gn_chunks;
    const char* reason = "channels innermost with short runs per group, or groups of many chunks";
    if (slices) {
        plan_gn_forward_slices(p, device, c.plan);
    } else {
        plan_gn_forward_chunks(c.plan);
        reason = "each group in one team's registers, one launch";
        if (c.plan.chunks.parts > 1) {
            c.plan.resident_blocks = gn_forward_chunk_residency(p, c.plan, device);
            reason = chunk_passes_resident(c.plan) ? "groups in chunks of several blocks, all resident: one launch"
                                                   : "groups in chunks too many to be resident: two launches";
        }
    }
    log_choice(kOpGnForward, c.algorithm, request.forced, reason, any ? why_not_on_chip(not_on_chip) : nullptr);
    return c;
}

GnBackwardChoice choose_algorithm(const GnBackward& p, const DeviceShape& device) {
    GnBackwardChoice c;
    const AlgorithmRequest request = requested_algorithm(kOpGnBackward);
    const bool any = !request.forced;
    const char* not_on_chip = nullptr;
    const auto choose_tiles = [&] {
        c.algorithm = Algorithm::gn_on_chip;
        log_choice(kOpGnBackward, c.algorithm, request.forced, "the groups fit the registers of a block or a cluster");
        return c;
    };
    bool tiles_yield = false;
    if (any || request.algorithm == Algorithm::gn_on_chip) {
        not_on_chip = plan_gn_backward_on_chip(p, device, c.plan);
        if (not_on_chip == nullptr) {
            tiles_yield = gn_backward_tiles_yield(c.plan.tiles, device);
            if (!any || !tiles_yield) return choose_tiles();
        }
        if (!any)
            refuse(kOpGnBackward, request.algorithm, describe(p.x, "group norm", false),
                   concat("the on-chip group-norm kernels cannot take this problem: ", not_on_chip));
    }
    // Packed and too large for the tiles, or where the tiles yield (run
    // long, or spread thin): one persistent launch where the grid holds x
    // and dy on chip and in L2.
    if (any || request.algorithm == Algorithm::gn_persistent) {
        const PlanRule rule = any ? PlanRule::size_rule : PlanRule::wherever_it_fits;
        const char* not_persistent = plan_gn_persistent_backward(p, device, rule, c.plan.persistent);
        if (not_persistent == nullptr && !gn_persistent_backward_resident(p, c.plan.persistent, device))
            not_persistent = "its blocks do not all fit the device at once";
        if (not_persistent == nullptr) {
            c.algorithm = Algorithm::gn_persistent;
            c.plan.needs = GnScratchNeeds{gn_persistent_backward_scratch_bytes(c.plan.persistent), 1};
            log_choice(kOpGnBackward, c.algorithm, request.forced,
                       "packed, x and dy held by one resident grid in registers, shared memory and L2",
                       !any           ? nullptr
                       : tiles_yield ? "the tiles would run long or spread thin"
                                     : why_not_on_chip(not_on_chip));
            return c;
        }
        if (!any)
            refuse(kOpGnBackward, request.algorithm, describe(p.x, "group norm", false),
                   concat("the persistent group-norm kernel cannot take this problem: ", not_persistent));
    }
    if (tiles_yield) return choose_tiles();
    c.algorithm = Algorithm::gn_slices;
    plan_gn_backward_slices(p, device, c.plan);
    log_choice(kOpGnBackward, c.algorithm, request.forced, "the slices take every problem",
               any ? why_not_on_chip(not_on_chip) : nullptr);
    return c;
}

}  // namespace gpu
}  // namespace mbn
