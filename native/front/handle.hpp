// The object behind miopenHandle_t: one backend instance, chosen at creation.
#pragma once

#include "common/backend.hpp"

#include <memory>
#include <mutex>
#include <shared_mutex>

#include <sys/types.h>

struct miopenHandle {
    std::unique_ptr<mbn::Backend> backend;
    // Calls through one handle are serialized, so threads may share a handle
    // (MIOpen leaves that undefined; we make it safe).
    std::mutex call_mutex;
    // Held shared by each call from the moment it finds the handle live until
    // it returns; miopenDestroy, once the handle is no longer live, takes it
    // alone, so it waits for the calls in flight before freeing anything.
    std::shared_mutex in_flight;
    // The process that created the handle: a GPU runtime does not survive
    // fork(), so a GPU handle is refused in a forked child.
    pid_t creator = 0;
    // Kept for miopenGetTuningPolicy; nothing here is tuned.
    miopenTuningPolicy_t tuning_policy = miopenTuningPolicyNone;
};

namespace mbn {

// A call's use of a handle: the handle stays alive (miopenDestroy waits)
// until the HandleUse ends.
class HandleUse {
public:
    HandleUse(miopenHandle& handle, std::shared_lock<std::shared_mutex> in_flight)
        : handle_(handle), in_flight_(std::move(in_flight)) {}
    miopenHandle& handle() const { return handle_; }
    Backend& backend() const { return *handle_.backend; }

private:
    miopenHandle& handle_;
    std::shared_lock<std::shared_mutex> in_flight_;
};

// The handle behind an argument for the length of a call, or BadParm when it
// is NULL, not live (destroyed, or never created), or a GPU handle from the
// process this one was forked from.
HandleUse use_handle(miopenHandle* handle);

// Runs `op` on the handle's backend under its lock.
template <typename Op>
void dispatch(const HandleUse& use, Op&& op) {
    std::lock_guard<std::mutex> lock(use.handle().call_mutex);
    op(use.backend());
}

}  // namespace mbn
