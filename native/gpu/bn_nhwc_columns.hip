// Spatial batch-norm training and backward on packed NHWC tensors, one team
// of blocks per channel column (bn_nhwc_columns.hpp): the runtime's
// occupancy for the plan (bn_nhwc_columns_plan.h) and the launch of the
// kernel (bn_nhwc_columns_kernel.h).
#include "gpu/bn_nhwc_columns.hpp"

#include "gpu/bn_nhwc_columns_kernel.h"
#include "gpu/bn_nhwc_columns_plan.h"
#include "gpu/type_dispatch.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace mbn {
namespace gpu {
namespace {

template <typename Body>
void with_column_type(DType dtype, Body&& body) {
    switch (dtype) {
        case DType::f16: body(TypeTag<__half>{}); return;
        case DType::bf16: body(TypeTag<mbn_bfloat16>{}); return;
        default: body(TypeTag<float>{}); return;
    }
}

// Calls body(std::integral_constant<int, K>{}) for the register rows K of
// one of the op's instances.
template <bool kBackward, typename Body>
void with_register_rows(int k, Body&& body) {
    switch (k) {
        case 1: body(std::integral_constant<int, 1>{}); return;
        case 2: body(std::integral_constant<int, 2>{}); return;
        case 4: body(std::integral_constant<int, 4>{}); return;
        case 6:
            if constexpr (kBackward) {
                body(std::integral_constant<int, 6>{});
                return;
            }
            break;
        default: break;
    }
    body(std::integral_constant<int, 8>{});
}

// Blocks of one kernel instance a multiprocessor holds, asked once per
// (instance, device): the query costs microseconds of host time.
template <typename T, bool kBackward, int K, bool kStream>
int blocks_per_multiprocessor() {
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices];
    int device = 0;
    check_runtime(hipGetDevice(&device), "hipGetDevice");
    const bool cached = device >= 0 && device < kDevices;
    if (cached && known[device].load() > 0) return known[device].load();
    int blocks = 0;
    check_runtime(
        hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bn_nhwc_columns<T, kBackward, K, kStream>, kThreads, 0),
        "hipOccupancyMaxActiveBlocksPerMultiprocessor");
    if (cached) known[device].store(blocks);
    return blocks;
}

// The runtime's occupancy of the op's instances, for the planner.
template <bool kBackward>
auto instance_occupancy(DType dtype) {
    return [dtype](int k, bool streamed) {
        int blocks = 0;
        with_column_type(dtype, [&](auto tag) {
            using T = typename decltype(tag)::type;
            with_register_rows<kBackward>(k, [&](auto kk) {
                constexpr int K = decltype(kk)::value;
                if constexpr (K == column_streamed_rows<kBackward>())
                    blocks = streamed ? blocks_per_multiprocessor<T, kBackward, K, true>()
                                      : blocks_per_multiprocessor<T, kBackward, K, false>();
                else
                    blocks = blocks_per_multiprocessor<T, kBackward, K, false>();
            });
        });
        return blocks;
    };
}

template <bool kBackward>
void launch(const ColumnArgs& a, const ColumnPlan& plan, DType dtype, const LaunchTarget& target) {
    const dim3 grid(static_cast<unsigned>(plan.blocks_per_column), static_cast<unsigned>(plan.columns));
    with_column_type(dtype, [&](auto tag) {
        using T = typename decltype(tag)::type;
        with_register_rows<kBackward>(plan.register_rows, [&](auto k) {
            constexpr int K = decltype(k)::value;
            if constexpr (K == column_streamed_rows<kBackward>()) {
                if (plan.streamed) {
                    bn_nhwc_columns<T, kBackward, K, true><<<grid, kThreads, 0, target.stream>>>(a);
                    return;
                }
            }
            bn_nhwc_columns<T, kBackward, K, false><<<grid, kThreads, 0, target.stream>>>(a);
        });
        check_launch("bn_nhwc_columns");
    });
}

}  // namespace

ColumnPlan plan_nhwc_columns(const BnForwardTraining& p, const DeviceShape& device, PlanRule rule) {
    if (!p.activation.identity()) return ColumnPlan{};
    return plan_columns<false>(p.geom, p.x, {&p.x, &p.y}, device, rule, instance_occupancy<false>(p.x.dtype));
}

ColumnPlan plan_nhwc_columns(const BnBackward& p, const DeviceShape& device, PlanRule rule) {
    if (!p.activation.identity()) return ColumnPlan{};
    return plan_columns<true>(p.geom, p.x, {&p.x, &p.dy, &p.dx}, device, rule, instance_occupancy<true>(p.x.dtype));
}

void run_nhwc_columns(const BnForwardTraining& p, const ColumnPlan& plan, const LaunchTarget& target) {
    ColumnArgs a = common_args(plan, p.geom, target);
    a.x = p.x.data;
    a.out = p.y.data;
    a.scale = channel_param(p.scale);
    a.bias = channel_param(p.bias);
    a.prev_mean = channel_param(p.prev_running_mean);
    a.prev_var = channel_param(p.prev_running_var);
    a.running_mean = channel_param(p.running_mean);
    a.running_var = channel_param(p.running_var);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.epsilon = p.epsilon;
    a.exp_avg_factor = p.exp_avg_factor;
    a.alpha = p.out.alpha;
    a.beta = p.out.beta;
    launch<false>(a, plan, p.x.dtype, target);
}

void run_nhwc_columns(const BnBackward& p, const ColumnPlan& plan, const LaunchTarget& target) {
    ColumnArgs a = common_args(plan, p.geom, target);
    a.x = p.x.data;
    a.dy = p.dy.data;
    a.out = p.dx.data;
    a.scale = channel_param(p.scale);
    a.saved_mean = channel_param(p.saved_mean);
    a.saved_inv_std = channel_param(p.saved_inv_std);
    a.dscale = channel_param(p.dscale);
    a.dbias = channel_param(p.dbias);
    a.epsilon = p.epsilon;
    a.alpha = p.data.alpha;
    a.beta = p.data.beta;
    a.param_alpha = p.param.alpha;
    a.param_beta = p.param.beta;
    a.saved = p.saved_mean.present();
    launch<true>(a, plan, p.x.dtype, target);
}

}  // namespace gpu
}  // namespace mbn
