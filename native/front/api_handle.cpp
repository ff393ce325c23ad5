// Handle, stream, profiling and version entry points.
#include "api_guard.hpp"
#include "handle.hpp"
#include "live_objects.hpp"
#include "logging.hpp"

#include <atomic>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

namespace mbn {

#ifdef MIOPEN_BN_HAS_GPU
namespace {

// The process that first started a GPU runtime (0: none yet).  A forked
// child inherits the value but not a usable runtime.
std::atomic<pid_t> gpu_runtime_process{0};

bool gpu_runtime_of_a_parent() {
    const pid_t started = gpu_runtime_process.load(std::memory_order_relaxed);
    return started != 0 && started != getpid();
}

}  // namespace
#endif

HandleUse use_handle(miopenHandle* handle) {
    require(handle != nullptr, miopenStatusBadParm, "handle is NULL");
    std::shared_lock<std::shared_mutex> in_flight;
    {
        const auto live = lock_if_live(ObjectKind::handle, handle);
        require(live.owns_lock(), miopenStatusBadParm, "handle (", static_cast<const void*>(handle),
                ") is not a live handle (destroyed, or not made by miopenCreate)");
        // Taken while the handle is surely live: miopenDestroy makes it not
        // live first, then waits for this lock.
        in_flight = std::shared_lock<std::shared_mutex>(handle->in_flight);
    }
    require(handle->backend->kind() != BackendKind::gpu || handle->creator == getpid(), miopenStatusBadParm,
            "handle (", static_cast<const void*>(handle), ") is a GPU handle of process ", handle->creator,
            ", and this process was forked from it: a GPU runtime cannot be used after fork() (create GPU "
            "handles in the child, or start worker processes with 'spawn')");
    return HandleUse(*handle, std::move(in_flight));
}

namespace {

// MIOPEN_BN_BACKEND=cpu|gpu overrides the automatic choice.
miopenBNBackend_t backend_from_environment() {
    const char* value = std::getenv("MIOPEN_BN_BACKEND");
    if (value == nullptr || *value == '\0' || std::strcmp(value, "auto") == 0) return miopenBNBackendAuto;
    if (std::strcmp(value, "cpu") == 0) return miopenBNBackendCPU;
    if (std::strcmp(value, "gpu") == 0) return miopenBNBackendGPU;
    fail(miopenStatusBadParm, "MIOPEN_BN_BACKEND='", value, "' (expected cpu, gpu or auto)");
}

std::unique_ptr<Backend> try_gpu_backend(void* stream) {
#ifdef MIOPEN_BN_HAS_GPU
    if (gpu_runtime_of_a_parent()) {
        log_warning("miopenCreate", concat("no GPU handle in this process: it was forked from process ",
                                           gpu_runtime_process.load(), ", which had started the GPU runtime"));
        return nullptr;
    }
    pid_t none = 0;
    gpu_runtime_process.compare_exchange_strong(none, getpid());
    return make_gpu_backend(stream);
#else
    (void)stream;
    return nullptr;
#endif
}

std::unique_ptr<Backend> make_backend(miopenBNBackend_t wanted, void* stream) {
    switch (wanted) {
        case miopenBNBackendCPU: break;
        case miopenBNBackendGPU: {
            auto gpu = try_gpu_backend(stream);
            require(gpu != nullptr, miopenStatusBadParm,
                    miopenBNHasGpuSupport() ? "no usable GPU device was found"
                                            : "this library was built without a GPU backend");
            return gpu;
        }
        case miopenBNBackendAuto:
            if (auto gpu = try_gpu_backend(stream)) return gpu;
            break;
        default:
            fail(miopenStatusBadParm, "unknown backend ", static_cast<int>(wanted));
    }
    auto cpu = make_cpu_backend();
    cpu->set_stream(stream);
    return cpu;
}

void create(miopenHandle_t* handle, miopenBNBackend_t wanted, void* stream) {
    require(handle != nullptr, miopenStatusBadParm, "handle is NULL");
    if (wanted == miopenBNBackendAuto) wanted = backend_from_environment();
    auto created = std::make_unique<miopenHandle>();
    created->backend = make_backend(wanted, stream);
    created->creator = getpid();
    log_info("miopenCreate", concat("created a handle on the ", created->backend->name(), " backend"));
    add_live(ObjectKind::handle, created.get());
    *handle = created.release();
}

}  // namespace
}  // namespace mbn

extern "C" {

miopenStatus_t miopenGetVersion(size_t* major, size_t* minor, size_t* patch) {
    return mbn::api_call(__func__, [&](const char* fn) {
        if (major) *major = MIOPEN_BN_MIOPEN_API_VERSION_MAJOR;
        if (minor) *minor = MIOPEN_BN_MIOPEN_API_VERSION_MINOR;
        if (patch) *patch = MIOPEN_BN_MIOPEN_API_VERSION_PATCH;
    });
}

miopenStatus_t miopenBNGetLibraryVersion(size_t* major, size_t* minor, size_t* patch) {
    return mbn::api_call(__func__, [&](const char* fn) {
        if (major) *major = MIOPEN_BN_VERSION_MAJOR;
        if (minor) *minor = MIOPEN_BN_VERSION_MINOR;
        if (patch) *patch = MIOPEN_BN_VERSION_PATCH;
    });
}

int miopenBNHasGpuSupport(void) {
#ifdef MIOPEN_BN_HAS_GPU
    return 1;
#else
    return 0;
#endif
}

miopenStatus_t miopenCreate(miopenHandle_t* handle) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle);
        mbn::create(handle, miopenBNBackendAuto, nullptr);
    });
}

miopenStatus_t miopenCreateWithStream(miopenHandle_t* handle, miopenAcceleratorQueue_t stream) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, stream);
        mbn::create(handle, miopenBNBackendAuto, stream);
    });
}

miopenStatus_t miopenBNCreateWithBackend(miopenHandle_t* handle, miopenBNBackend_t backend) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, backend);
        mbn::require(backend == miopenBNBackendAuto || backend == miopenBNBackendCPU ||
                         backend == miopenBNBackendGPU,
                     miopenStatusBadParm, "unknown backend ", static_cast<int>(backend));
        mbn::create(handle, backend, nullptr);
    });
}

miopenStatus_t miopenBNGetBackend(miopenHandle_t handle, miopenBNBackend_t* backend) {
    return mbn::api_call(__func__, [&](const char* fn) {
        const auto h = mbn::use_handle(handle);
        mbn::require(backend != nullptr, miopenStatusBadParm, "backend is NULL");
        *backend = h.backend().kind() == mbn::BackendKind::gpu ? miopenBNBackendGPU : miopenBNBackendCPU;
    });
}

miopenStatus_t miopenDestroy(miopenHandle_t handle) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle);
        if (handle == nullptr) return;
        mbn::require(mbn::remove_live(mbn::ObjectKind::handle, handle), miopenStatusBadParm, "handle (",
                     static_cast<const void*>(handle), ") is not a live handle (destroyed already?)");
        // No call can start on it now; wait for those in flight.
        handle->in_flight.lock();
        handle->in_flight.unlock();
        // A forked child must not touch its parent's GPU runtime: the
        // backend's resources are left as they are.
        if (handle->backend->kind() == mbn::BackendKind::gpu && handle->creator != getpid())
            (void)handle->backend.release();
        delete handle;
    });
}

miopenStatus_t miopenSetStream(miopenHandle_t handle, miopenAcceleratorQueue_t streamID) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, streamID);
        const auto h = mbn::use_handle(handle);
        mbn::dispatch(h, [&](mbn::Backend& b) { b.set_stream(streamID); });
    });
}

miopenStatus_t miopenSetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t newValue) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, newValue);
        const auto h = mbn::use_handle(handle);
        const int value = static_cast<int>(newValue);
        mbn::require(value >= miopenTuningPolicyNone && value <= miopenTuningPolicyDbClean, miopenStatusBadParm,
                     "tuning policy ", value, " is not a miopenTuningPolicy_t (1 to 5)");
        mbn::dispatch(h, [&](mbn::Backend&) { h.handle().tuning_policy = newValue; });
    });
}

miopenStatus_t miopenGetTuningPolicy(miopenHandle_t handle, miopenTuningPolicy_t* value) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, value);
        const auto h = mbn::use_handle(handle);
        mbn::require(value != nullptr, miopenStatusBadParm, "value is NULL");
        mbn::dispatch(h, [&](mbn::Backend&) { *value = h.handle().tuning_policy; });
    });
}

miopenStatus_t miopenGetStream(miopenHandle_t handle, miopenAcceleratorQueue_t* streamID) {
    return mbn::api_call(__func__, [&](const char* fn) {
        const auto h = mbn::use_handle(handle);
        mbn::require(streamID != nullptr, miopenStatusBadParm, "streamID is NULL");
        *streamID = static_cast<miopenAcceleratorQueue_t>(h.backend().stream());
    });
}

miopenStatus_t miopenEnableProfiling(miopenHandle_t handle, bool enable) {
    return mbn::api_call(__func__, [&](const char* fn) {
        MBN_LOG_CALL(fn, handle, enable);
        const auto h = mbn::use_handle(handle);
        mbn::dispatch(h, [&](mbn::Backend& b) { b.set_profiling(enable); });
    });
}

miopenStatus_t miopenGetKernelTime(miopenHandle_t handle, float* time) {
    return mbn::api_call(__func__, [&](const char* fn) {
        const auto h = mbn::use_handle(handle);
        mbn::require(time != nullptr, miopenStatusBadParm, "time is NULL");
        mbn::dispatch(h, [&](mbn::Backend& b) { *time = b.kernel_time_ms(); });
    });
}

}  // extern "C"
