// The elementwise normalize launch over a feature layout, from the
// per-feature factors in the scratch (feature_scratch.hpp):
//     y = alpha * epilogue(((x - shift) - mean_offset) * coef0 + coef1) + beta * y_prior
// Its instances are made where their epilogue is known: the identity and
// group norm's swish by run_normalize (feature_passes.hip), batch norm's
// fused activations by its forward (bn_forward.hip).
#pragma once

#include "common/problem.hpp"
#include "gpu/dependent_launch.h"
#include "gpu/feature_layout.hpp"
#include "gpu/feature_phases.h"
#include "gpu/feature_scratch.hpp"
#include "gpu/feature_share.h"
#include "gpu/launch.hpp"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {

// VR elements per position of one feature, or one element of each of VF
// consecutive features (feature_layout.hpp); the access is V = VR * VF wide.
template <typename T, int Rank, int VR, int VF, typename Epilogue>
__global__ void __launch_bounds__(kBlockThreads, (linear_walk_min_blocks<acc_t<T>, Rank>()))
    feature_normalize(const T* x, T* y, FeatureLayout layout, FeatureArrays scratch, float alpha, float beta,
                      Epilogue epilogue) {
    using A = acc_t<T>;
    const ThreadShare share = thread_share<VF>(layout, second_pass_place());
    if (!share.active) return;
    wait_for_prior_kernel();  // the factors (a dependent launch on the linear walk)
    A shift[VF], mean_offset[VF], factor[VF], bias[VF];
#pragma unroll
    for (int j = 0; j < VF; ++j) {
        const std::int64_t f = share.feature0 + j;
        shift[j] = static_cast<A>(scratch.shift[f]);
        mean_offset[j] = static_cast<A>(scratch.mean_offset[f]);
        factor[j] = static_cast<A>(scratch.coef0[f]);
        bias[j] = static_cast<A>(scratch.coef1[f]);
    }
    normalize_share<T, Rank, VR, VF>(x, y, layout, share, shift, mean_offset, factor, bias, alpha, beta, epilogue);
}

// feature_normalize over the coefficients in the scratch, with the epilogue
// make(TypeTag<A>{}) returns for accumulation type A; Fused (batch norm's
// activation) picks the walks instantiated (with_walk_shape_for), Linear
// the linear walk for packed layouts (PackedWalk, feature_passes.hpp), the
// group-norm slices' last launch, a dependent launch (dependent_launch.h).
template <bool Fused, bool Linear = false, typename MakeEpilogue>
void launch_feature_normalize(const TensorArg& x, const TensorArg& y, const FeatureLayout& layout, const Blend& out,
                              const LaunchTarget& target, MakeEpilogue&& make) {
    static_assert(!(Fused && Linear), "no linear walk for the fused activations");
    const FeatureArrays scratch = carve_scratch(target.scratch, layout);
    with_element_type(x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        auto launch = [&](auto rank, auto vr, auto vf) {
            auto epilogue = make(TypeTag<acc_t<T>>{});
            auto kernel =
                feature_normalize<T, decltype(rank)::value, decltype(vr)::value, decltype(vf)::value, decltype(epilogue)>;
            const T* from = static_cast<const T*>(x.data);
            T* to = static_cast<T*>(y.data);
            if constexpr (Linear) {
                // Group norm's slices: right behind their terms kernel.
                launch_dependent(kernel, walk_grid(layout), walk_block(layout), 0, target, "feature_normalize",
                                 from, to, layout, scratch, out.alpha, out.beta, epilogue);
            } else {
                kernel<<<walk_grid(layout), walk_block(layout), 0, target.stream>>>(from, to, layout, scratch, out.alpha,
                                                                                    out.beta, epilogue);
                check_launch("feature_normalize");
            }
        };
        if constexpr (Linear)
            with_linear_walk_shape_of<T>(layout, launch);
        else
            with_walk_shape_for<Fused, T>(layout, launch);
    });
}

}  // namespace gpu
}  // namespace mbn
