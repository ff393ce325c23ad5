// A kernel launched right behind another of the same call, on Hopper and
// later as a programmatic dependent launch: the runtime may start its
// blocks while the kernel before it drains, saving the gap between two
// launches (about a microsecond each on the latency-bound two- and
// three-launch paths).  The dependent kernel calls wait_for_prior_kernel()
// before it reads anything the kernel before it wrote, or writes anything
// that kernel reads; without the launch attribute (other targets, HIP) the
// wait costs nothing.  Only for a kernel whose predecessor in the stream is
// this call's own: the first kernel of a call launches plainly, behind
// whatever the caller queued.
#pragma once

#include "gpu/hip_compat.h"
#include "gpu/launch.hpp"
#include "gpu/launch_config.h"

namespace mbn {
namespace gpu {

// Device side: returns once the kernel before has finished and its writes
// are visible (griddepcontrol.wait; at once where there is no dependency).
__device__ __forceinline__ void wait_for_prior_kernel() {
#if MBN_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(MBN_EMULATION)
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Device side, in the kernel before a dependent one: its blocks may start
// once every block of this kernel has called this or finished (they still
// wait for all of it to finish before they read: wait_for_prior_kernel).
// Called first thing, so that the dependent kernel's launch overlaps this
// one's last wave.
__device__ __forceinline__ void allow_dependent_launch() {
#if MBN_GPU_CUDA && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(MBN_EMULATION)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Host side (not in the emulator's builds, which run kernels themselves):
// `kernel` behind this call's previous kernel in target.stream, as a
// dependent launch where the device takes them (asked once, with the
// handle's other device facts: DeviceShape::dependent_launches).
#if !defined(MBN_EMULATION)
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared,
                      const LaunchTarget& target, const char* name, Args... args) {
#if MBN_GPU_CUDA
    if (target.dependent_launches) {
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        const cudaLaunchConfig_t config = config_with(grid, block, shared, target.stream, attribute);
        check_runtime(cudaLaunchKernelEx(&config, kernel, args...), name);
        return;
    }
#endif
    kernel<<<grid, block, shared, target.stream>>>(args...);
    check_launch(name);
}
#endif  // !MBN_EMULATION

}  // namespace gpu
}  // namespace mbn
