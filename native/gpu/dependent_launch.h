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

#include <atomic>

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

// Host side (not in the emulator's builds, which run kernels themselves).
#if !defined(MBN_EMULATION)
#if MBN_GPU_CUDA
// Whether the current device takes programmatic dependent launches (compute
// capability 9.0 and later), asked once per device.
inline bool dependent_launches() {
    constexpr int kDevices = 64;
    static std::atomic<int> known[kDevices];  // 0 unknown, 1 no, 2 yes
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return false;
    const bool cached = device >= 0 && device < kDevices;
    if (cached && known[device].load() != 0) return known[device].load() == 2;
    int major = 0;
    const bool yes = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                     major >= 9;
    if (cached) known[device].store(yes ? 2 : 1);
    return yes;
}
#endif

// Host side: `kernel` behind this call's previous kernel in `stream`.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t shared, hipStream_t stream,
                      const char* name, Args... args) {
#if MBN_GPU_CUDA
    if (dependent_launches()) {
        cudaLaunchAttribute attribute{};
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
        const cudaLaunchConfig_t config = config_with(grid, block, shared, stream, attribute);
        check_runtime(cudaLaunchKernelEx(&config, kernel, args...), name);
        return;
    }
#endif
    kernel<<<grid, block, shared, stream>>>(args...);
    check_launch(name);
}
#endif  // !MBN_EMULATION

}  // namespace gpu
}  // namespace mbn
