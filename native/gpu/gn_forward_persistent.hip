// Launch of gn_persistent (gn_persistent.hpp; the kernel is
// gn_persistent_forward.h): one launch, every block resident.
#include "gpu/gn_launch.hpp"
#include "gpu/gn_persistent_forward.h"
#include "gpu/type_dispatch.hpp"

namespace mbn {
namespace gpu {
namespace {

// Calls body(kernel, TypeTag<T>, TypeTag<P>) with the call's instance of gn_persistent_forward.
template <typename Body>
void with_persistent_kernel(const GnForward& p, const GnPersistentWalk& walk, Body&& body) {
    with_element_type(p.x.dtype, [&](auto x_tag) {
        using T = typename decltype(x_tag)::type;
        if constexpr (sizeof(T) == 8) {
            fail(miopenStatusInternalError, "GPU backend: gn_persistent has no float64 kernel");
        } else {
            const DType param_dtype = p.affine ? p.weight.dtype : DType::f32;
            with_parameter_type<T>(param_dtype, [&](auto p_tag) {
                using P = typename decltype(p_tag)::type;
                const bool swish = p.activation == Activation::swish;
                if (walk.channels_inner)
                    swish ? body(gn_persistent_forward<T, P, true, true>, x_tag, p_tag)
                          : body(gn_persistent_forward<T, P, true, false>, x_tag, p_tag);
                else
                    swish ? body(gn_persistent_forward<T, P, false, true>, x_tag, p_tag)
                          : body(gn_persistent_forward<T, P, false, false>, x_tag, p_tag);
            });
        }
    });
}

// One round's launch (plan_gn_persistent_rounds), or the whole call's.
void run_round(const GnForward& p, const GnPersistentWalk& walk, const LaunchTarget& target) {
    with_persistent_kernel(p, walk, [&](auto kernel, auto x_tag, auto p_tag) {
        using T = typename decltype(x_tag)::type;
        using P = typename decltype(p_tag)::type;
        GnPersistentArgs<P> a{};
        a.walk = walk;
        if (p.affine) {
            a.weight = static_cast<const P*>(p.weight.data);
            a.bias = static_cast<const P*>(p.bias.data);
            a.weight_stride = p.weight.stride[kC];
            a.bias_stride = p.bias.stride[kC];
        }
        a.mean = stat_tensor(p.mean);
        a.rstd = stat_tensor(p.rstd);
        a.epsilon = p.epsilon;
        a.swish_beta = p.swish_beta;
        a.sums = static_cast<double*>(target.scratch);
        char* scratch = static_cast<char*>(target.scratch);
        a.stats = reinterpret_cast<GnGroupStats*>(scratch + gn_persistent_sums_scratch_bytes(walk));
        a.barrier = target.counters;
        kernel<<<dim3(static_cast<unsigned>(walk.blocks)), dim3(static_cast<unsigned>(walk.threads)), walk.shared_bytes,
                 target.stream>>>(static_cast<const T*>(p.x.data), static_cast<T*>(p.y.data), a);
        check_launch("gn_persistent_forward");
    });
}

}  // namespace

bool gn_persistent_resident(const GnForward& p, const GnPersistentWalk& walk, const DeviceShape& device) {
    int per_multiprocessor = 0;
    with_persistent_kernel(p, walk, [&](auto kernel, auto, auto) {
        per_multiprocessor = resident_blocks_of(kernel, walk);
    });
    return static_cast<std::int64_t>(per_multiprocessor) * device.multiprocessors >= walk.blocks;
}

// Round by round: the launches share the scratch and the barrier counter,
// which each leaves as it found them.
void run_gn_forward_persistent(const GnForward& whole, const GnPersistentWalk& walk, int rounds,
                               const LaunchTarget& target) {
    for (int r = 0; r < rounds; ++r) run_round(gn_persistent_round(whole, rounds, r), walk, target);
}

}  // namespace gpu
}  // namespace mbn
