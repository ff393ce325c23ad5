// The object behind miopenHandle_t: one backend instance, chosen at creation.
#pragma once

#include "common/backend.hpp"

#include <memory>
#include <mutex>

struct miopenHandle {
    std::unique_ptr<mbn::Backend> backend;
    // Calls through one handle are serialized, so threads may share a handle
    // (MIOpen leaves that undefined; we make it safe).
    std::mutex call_mutex;
    // Kept for miopenGetTuningPolicy; nothing here is tuned.
    miopenTuningPolicy_t tuning_policy = miopenTuningPolicyNone;
};

namespace mbn {

// The handle behind an argument, or BadParm when it is NULL.
miopenHandle& require_handle(miopenHandle* handle);

// Runs `op` on the handle's backend under its lock.
template <typename Op>
void dispatch(miopenHandle& handle, Op&& op) {
    std::lock_guard<std::mutex> lock(handle.call_mutex);
    op(*handle.backend);
}

}  // namespace mbn
