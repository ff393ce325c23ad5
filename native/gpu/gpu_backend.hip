// The GPU backend object: device facts, the stream, the scratch workspace,
// the counter buffer and profiling events of one handle.  The kernels live in
// bn_*.hip and gn_*.hip.
//
// Graph capture: an op never allocates or waits on the host, except when its
// problem needs more scratch or counters than any earlier call on this handle
// (then they grow before the first launch, which is not capturable).  The
// workspace starts at kInitialScratchBytes, enough for every spatial problem
// with up to ~100k channels and per-activation problems with ~100k features;
// the counters (group norm's cross-block hand-overs, gn_arrival.h) at
// kInitialCounters, enough for 65536 groups and channels per call.
#include "common/backend.hpp"
#include "gpu/bn_algorithm.hpp"
#include "gpu/bn_dense_inference.hpp"
#include "gpu/bn_launch.hpp"
#include "gpu/gn_launch.hpp"
#include "gpu/hip_compat.h"

#include <algorithm>
#include <cstdint>
#include <memory>

namespace mbn {
namespace gpu {

// The split-phase (data-parallel) ops, in bn_split_phase.hip.
void run_local_statistics(const BnLocalStatistics& p, const LaunchTarget& target);
void run_merge_statistics(const BnMergeStatistics& p, const LaunchTarget& target);
void run_split_normalize(const BnNormalize& p, const LaunchTarget& target);
void run_backward_reduce(const BnBackwardReduce& p, const LaunchTarget& target);
void run_backward_elementwise(const BnBackwardElementwise& p, const LaunchTarget& target);

namespace {

// The most shared memory a block may ask for (beyond the default 48 KB on NVIDIA).
#if MBN_GPU_CUDA
constexpr auto kSharedBytesPerBlockAttribute = cudaDevAttrMaxSharedMemoryPerBlockOptin;
#else
constexpr auto kSharedBytesPerBlockAttribute = hipDeviceAttributeMaxSharedMemoryPerBlock;
#endif

constexpr std::size_t kInitialScratchBytes = std::size_t(8) << 20;
constexpr std::int64_t kInitialCounters = std::int64_t(1) << 16;

// True when kernels may dereference `data`: device, managed or registered
// (pinned) host memory.  Pageable host memory is not.
bool device_can_access(const void* data) {
    hipPointerAttribute_t attributes{};
    const hipError_t status = hipPointerGetAttributes(&attributes, data);
    if (status != hipSuccess) {
        (void)hipGetLastError();  // unregistered pointers report an error on older runtimes
        return false;
    }
#if MBN_GPU_CUDA
    return attributes.type != cudaMemoryTypeUnregistered;
#elif HIP_VERSION_MAJOR >= 6
    return attributes.type != hipMemoryTypeUnregistered;
#else
    (void)attributes;
    return true;
#endif
}

// Makes `device` current for its scope, then restores the previous one: the
// choice of algorithm asks the current device too (occupancy queries).
class DeviceScope {
public:
    explicit DeviceScope(int device) : device_(device) {
        check_runtime(hipGetDevice(&previous_), "hipGetDevice");
        if (previous_ != device_) check_runtime(hipSetDevice(device_), "hipSetDevice");
    }
    ~DeviceScope() {
        if (previous_ != device_) (void)hipSetDevice(previous_);
    }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int device_;
    int previous_ = 0;
};

class GpuBackend final : public Backend {
public:
    GpuBackend(int device, const DeviceShape& shape, void* stream) : device_(device), shape_(shape) {
        stream_ = stream;
        check_runtime(hipEventCreate(&start_), "hipEventCreate");
        check_runtime(hipEventCreate(&stop_), "hipEventCreate");
        grow_scratch(kInitialScratchBytes);
        grow_counters(kInitialCounters);
    }

    ~GpuBackend() override {
        if (scratch_ != nullptr) (void)hipFree(scratch_);
        if (counters_ != nullptr) (void)hipFree(counters_);
        (void)hipEventDestroy(start_);
        (void)hipEventDestroy(stop_);
    }

    BackendKind kind() const override { return BackendKind::gpu; }
    const char* name() const override { return MBN_GPU_CUDA ? "gpu (CUDA)" : "gpu (HIP)"; }

    // Only the profiling path waits: on the stop event of the last op.
    float kernel_time_ms() const override {
        if (!profiling_ || !timed_) return last_time_ms_;
        float ms = 0.0f;
        check_runtime(hipEventSynchronize(stop_), "hipEventSynchronize");
        check_runtime(hipEventElapsedTime(&ms, start_, stop_), "hipEventElapsedTime");
        return ms;
    }

    void check_accessible(const void* data, const char* what) const override {
        require(device_can_access(data), miopenStatusBadParm, what,
                " is not device memory (a host pointer was given to a GPU handle)");
    }

    // Each op runs the algorithm bn_algorithm.hpp chooses for it.
    void bn_forward_training(const BnForwardTraining& p) override {
        const DeviceScope on(device_);
        const BnChoice c = choose_algorithm(p, shape_);
        run(c.scratch_bytes, c.counters, [&](const LaunchTarget& target) {
            switch (c.algorithm) {
                case Algorithm::nhwc_columns: run_nhwc_columns(p, c.columns, target); return;
                case Algorithm::wave_tiles: run_wave_tiles(p, c.waves, target); return;
                case Algorithm::channel_tiles: run_channel_tiles(p, c.tiles, target); return;
                case Algorithm::resident: run_resident(p, c.resident, target); return;
                case Algorithm::single_launch: run_forward_training(p, c.layout, true, target); return;
                case Algorithm::multi_pass: run_forward_training(p, c.layout, false, target); return;
                default: unexpected(c.algorithm);
            }
        });
    }

    void bn_forward_inference(const BnForwardInference& p) override {
        const DeviceScope on(device_);
        const BnChoice c = choose_algorithm(p, shape_);
        run(c.scratch_bytes, c.counters, [&](const LaunchTarget& target) {
            switch (c.algorithm) {
                case Algorithm::dense_inference: run_dense_inference(p, shape_, target); return;
                case Algorithm::nest_walk: run_forward_inference(p, c.layout, target); return;
                default: unexpected(c.algorithm);
            }
        });
    }

    void bn_backward(const BnBackward& p) override {
        const DeviceScope on(device_);
        const BnChoice c = choose_algorithm(p, shape_);
        run(c.scratch_bytes, c.counters, [&](const LaunchTarget& target) {
            switch (c.algorithm) {
                case Algorithm::nhwc_columns: run_nhwc_columns(p, c.columns, target); return;
                case Algorithm::wave_tiles: run_wave_tiles(p, c.waves, target); return;
                case Algorithm::channel_tiles: run_channel_tiles(p, c.tiles, target); return;
                case Algorithm::resident: run_resident(p, c.resident, target); return;
                case Algorithm::single_launch: run_backward(p, c.layout, true, target); return;
                case Algorithm::multi_pass: run_backward(p, c.layout, false, target); return;
                default: unexpected(c.algorithm);
            }
        });
    }

    void bn_local_statistics(const BnLocalStatistics& p) override {
        run(0, 0, [&](const LaunchTarget& target) { run_local_statistics(p, target); });
    }
    void bn_merge_statistics(const BnMergeStatistics& p) override {
        run(0, 0, [&](const LaunchTarget& target) { run_merge_statistics(p, target); });
    }
    void bn_normalize(const BnNormalize& p) override {
        run(0, 0, [&](const LaunchTarget& target) { run_split_normalize(p, target); });
    }
    void bn_backward_reduce(const BnBackwardReduce& p) override {
        run(0, 0, [&](const LaunchTarget& target) { run_backward_reduce(p, target); });
    }
    void bn_backward_elementwise(const BnBackwardElementwise& p) override {
        run(0, 0, [&](const LaunchTarget& target) { run_backward_elementwise(p, target); });
    }

    void gn_forward(const GnForward& p) override {
        const DeviceScope on(device_);
        const GnForwardChoice c = choose_algorithm(p, shape_);
        run(c.plan.needs.bytes, c.plan.needs.counters, [&](const LaunchTarget& target) {
            switch (c.algorithm) {
                case Algorithm::gn_on_chip: run_gn_tile_forward(p, c.plan.tiles, target); return;
                case Algorithm::gn_slices: run_gn_forward_slices(p, c.plan.slices, target); return;
                case Algorithm::gn_chunks: run_gn_forward(p, c.plan, target); return;
                case Algorithm::gn_persistent: run_gn_forward_persistent(p, c.plan.persistent, c.plan.rounds, target); return;
                default: unexpected(c.algorithm);
            }
        });
    }

    void gn_backward(const GnBackward& p) override {
        const DeviceScope on(device_);
        const GnBackwardChoice c = choose_algorithm(p, shape_);
        run(c.plan.needs.bytes, c.plan.needs.counters, [&](const LaunchTarget& target) {
            switch (c.algorithm) {
                case Algorithm::gn_on_chip: run_gn_tile_backward(p, c.plan.tiles, target); return;
                case Algorithm::gn_slices: run_gn_backward(p, c.plan, target); return;
                case Algorithm::gn_persistent: run_gn_backward_persistent(p, c.plan.persistent, target); return;
                default: unexpected(c.algorithm);
            }
        });
    }

private:
    [[noreturn]] static void unexpected(Algorithm a) {
        fail(miopenStatusInternalError, "GPU backend: the algorithm ", algorithm_name(a), " has no launch here");
    }

    // Launches `op` on the handle's stream on this backend's device, with
    // enough scratch and counters, between the profiling events when
    // profiling is on.
    template <typename Op>
    void run(std::size_t bytes, std::int64_t counters, Op&& op) {
        const DeviceScope on(device_);
        grow_scratch(bytes);
        grow_counters(counters);

        const hipStream_t stream = static_cast<hipStream_t>(stream_);
        if (profiling_) check_runtime(hipEventRecord(start_, stream), "hipEventRecord");
        op(LaunchTarget{stream, scratch_, counters_, shape_.dependent_launches});
        if (profiling_) {
            check_runtime(hipEventRecord(stop_, stream), "hipEventRecord");
            timed_ = true;
        }
    }

    // Grows (never shrinks) the workspace.  The old buffer may still be in
    // use by queued kernels: hipFree waits for the device first.
    void grow_scratch(std::size_t bytes) {
        if (bytes <= scratch_bytes_) return;
        const std::size_t size = std::max(bytes + bytes / 2, kInitialScratchBytes);
        if (scratch_ != nullptr) {
            check_runtime(hipFree(scratch_), "hipFree");
            scratch_ = nullptr;
            scratch_bytes_ = 0;
        }
        void* fresh = nullptr;
        if (hipMalloc(&fresh, size) != hipSuccess) {
            (void)hipGetLastError();
            fail(miopenStatusAllocFailed, "cannot allocate ", size, " bytes of GPU scratch memory");
        }
        scratch_ = fresh;
        scratch_bytes_ = size;
    }

    // Grows (never shrinks) the counter buffer, zeroed before any kernel
    // uses it; kernels leave every counter at zero.
    void grow_counters(std::int64_t count) {
        if (count <= counter_count_) return;
        const std::int64_t size = std::max(count + count / 2, kInitialCounters);
        if (counters_ != nullptr) {
            check_runtime(hipFree(counters_), "hipFree");
            counters_ = nullptr;
            counter_count_ = 0;
        }
        const std::size_t bytes = static_cast<std::size_t>(size) * sizeof(unsigned long long);
        void* fresh = nullptr;
        if (hipMalloc(&fresh, bytes) != hipSuccess) {
            (void)hipGetLastError();
            fail(miopenStatusAllocFailed, "cannot allocate ", bytes, " bytes of GPU counters");
        }
        const hipStream_t stream = static_cast<hipStream_t>(stream_);
        hipError_t status = hipMemsetAsync(fresh, 0, bytes, stream);
        if (status == hipSuccess) status = hipStreamSynchronize(stream);
        if (status != hipSuccess) {
            (void)hipFree(fresh);
            check_runtime(status, "zeroing the GPU counters");
        }
        counters_ = static_cast<unsigned long long*>(fresh);
        counter_count_ = size;
    }

    int device_;
    DeviceShape shape_;
    void* scratch_ = nullptr;
    std::size_t scratch_bytes_ = 0;
    unsigned long long* counters_ = nullptr;
    std::int64_t counter_count_ = 0;
    hipEvent_t start_ = nullptr;
    hipEvent_t stop_ = nullptr;
    bool timed_ = false;
};

}  // namespace
}  // namespace gpu

std::unique_ptr<Backend> make_gpu_backend(void* stream) {
    int count = 0;
    if (hipGetDeviceCount(&count) != hipSuccess || count < 1) {
        (void)hipGetLastError();
        return nullptr;
    }
    int device = 0;
    gpu::DeviceShape shape;
    if (hipGetDevice(&device) != hipSuccess ||
        hipDeviceGetAttribute(&shape.multiprocessors, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess ||
        hipDeviceGetAttribute(&shape.wave_size, hipDeviceAttributeWarpSize, device) != hipSuccess ||
        hipDeviceGetAttribute(&shape.shared_bytes_per_block, gpu::kSharedBytesPerBlockAttribute, device) != hipSuccess) {
        (void)hipGetLastError();
        return nullptr;
    }
    // Optional: a device that does not say keeps 0, and the L2-bound plans stay off.
    if (hipDeviceGetAttribute(&shape.l2_bytes, hipDeviceAttributeL2CacheSize, device) != hipSuccess) {
        (void)hipGetLastError();
        shape.l2_bytes = 0;
    }
#if MBN_GPU_CUDA
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess)
        shape.dependent_launches = major >= 9;
    else
        (void)cudaGetLastError();
#endif
    gpu::measure_gn_tile_clusters(device, shape);
    return std::make_unique<gpu::GpuBackend>(device, shape, stream);
}

}  // namespace mbn
